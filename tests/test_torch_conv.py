"""The PyTorch drop-in (gpu.torch_conv) and prepared convolutions (gpu.prepared_conv) under Numba's CUDA
simulator on tiny shapes: forward against float64, NCHW and channels_last inputs, bias, the fallback
for what the kernels do not run, convert() swapping only eligible convolutions and sharing parameters,
gradients equal to nn.Conv2d's, the model's choice cached and overridable, and bad calls refused in one
line. Skipped where torch does not import (on the GPU machine, with NUMBA_ENABLE_CUDASIM=0, the same
tests run on CUDA tensors)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
numba = pytest.importorskip("numba")
from numba import config  # noqa: E402

from gpu.errors import KernelInputError  # noqa: E402
from gpu.prepared_conv import choose_plan, prepare_conv2d  # noqa: E402
from gpu.torch_conv import WinogradConv2d, convert, count_convs, eligible  # noqa: E402
from megasim.algorithms.winograd.plugin import WinogradParams  # noqa: E402
from megasim.plan import Plan  # noqa: E402
from megasim.workloads.problem import ConvProblem  # noqa: E402

pytestmark = pytest.mark.cudasim
DEVICE = "cpu" if config.ENABLE_CUDASIM else "cuda"
SMALL = dict(tiles_per_group=2, gemm_k_tile=8, transform_threads=32, gemm_threads=32)


def _plan(schedule: str, tile: int) -> Plan:
    return Plan(schedule, algorithm="winograd", params=WinogradParams(tile=tile, **SMALL))


def _rel(a, b) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def _conv(c_in: int, c_out: int, padding: int = 1, bias: bool = True, **options) -> WinogradConv2d:
    torch.manual_seed(c_in * 100 + c_out)
    return WinogradConv2d(c_in, c_out, 3, padding=padding, bias=bias, **options).to(DEVICE)


@pytest.mark.parametrize("layout,schedule,tile", [("NCHW", "nonfused", 4), ("NHWC", "fused", 2), ("NHWC", "nonfused", 5)])
def test_forward_matches_float64(layout, schedule, tile):
    conv = _conv(3, 5, plan=_plan(schedule, tile))
    x = torch.randn(2, 3, 7, 9, device=DEVICE)
    if layout == "NHWC":
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        y = conv(x)
        ref = torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
    assert y.shape == ref.shape and _rel(y, ref) < 1e-4
    assert conv.prepared(x).layout == layout
    if layout == "NHWC":
        assert y.is_contiguous(memory_format=torch.channels_last)


def test_forward_on_whole_row_otrans_strips_matches_float64():
    """An output row of 33 floats (off the 32-byte sectors) in 9 tiles of F(4x4), 17 channels: the NCHW output
    transform takes whole-row strips (16 channels x 9 tiles, ``nchw._whole_rows``), the last chunk one channel;
    batch 1, fresh random input, against float64."""
    from gpu.kernels.winograd import nchw
    problem = ConvProblem(1, 3, 17, 7, 35, padding=0)
    assert nchw.otrans_launch(problem, 4)[3:] == (16, 9)
    conv = _conv(3, 17, padding=0, plan=_plan("nonfused", 4))
    x = torch.randn(1, 3, 7, 35, device=DEVICE)
    with torch.no_grad():
        y = conv(x)
        ref = torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double())
    assert y.shape == ref.shape == (1, 17, 5, 33) and _rel(y, ref) < 1e-4


def test_a_changed_filter_is_transformed_again():
    conv = _conv(3, 4, bias=False, plan=_plan("nonfused", 4))
    x = torch.randn(1, 3, 6, 7, device=DEVICE)
    with torch.no_grad():
        y1 = conv(x).clone()
        assert torch.equal(conv(x), y1)              # the same weight: the filter transform is skipped
        conv.weight.mul_(2.0)                        # in place: the version counter moves
        assert _rel(conv(x), 2 * y1) < 1e-6
        conv.weight = torch.nn.Parameter(-conv.weight)   # another tensor
        assert _rel(conv(x), -2 * y1) < 1e-6


def test_repeated_calls_agree_across_shapes_layouts_and_autograd():
    """On the GPU, a shape seen before takes forward's short path (one lookup, the raw launches): it must give
    what the first call gave, for interleaved shapes and layouts, with a bias, and hand over to autograd
    when the input needs a gradient."""
    conv = _conv(3, 5, plan=_plan("nonfused", 4))
    xs = [torch.randn(2, 3, 7, 9, device=DEVICE), torch.randn(1, 3, 5, 6, device=DEVICE),
          torch.randn(2, 3, 7, 9, device=DEVICE).contiguous(memory_format=torch.channels_last)]
    with torch.no_grad():
        refs = [torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1) for x in xs]
        firsts = [conv(x).clone() for x in xs]
        for _ in range(2):
            for x, ref, first in zip(xs, refs, firsts):
                y = conv(x)
                assert torch.equal(y, first) and _rel(y, ref) < 1e-4
    assert not config.ENABLE_CUDASIM or not conv._fast          # the simulator keeps the general path
    xg = xs[0].clone().requires_grad_()
    y = conv(xg)
    assert y.grad_fn is not None and _rel(y, refs[0]) < 1e-4
    y.sum().backward()
    assert xg.grad is not None and conv.weight.grad is not None


def test_fallback_for_what_the_kernels_do_not_run():
    conv = _conv(3, 4, plan=_plan("nonfused", 2))
    x = torch.randn(1, 3, 6, 6, device=DEVICE, dtype=torch.float64)
    assert conv.prepared(x) is None
    x32 = torch.randn(1, 3, 6, 8, device=DEVICE)[:, :, :, ::2]     # strided: neither layout
    assert conv.prepared(x32) is None
    with torch.no_grad():
        ref = torch.nn.functional.conv2d(x32, conv.weight, conv.bias, padding=1)
        assert torch.equal(conv(x32), ref)


def test_convert_swaps_only_eligible_convs_and_shares_parameters():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 4, 3, stride=2, padding=1),
                                torch.nn.Sequential(torch.nn.Conv2d(4, 6, 3, padding=1, bias=False)),
                                torch.nn.Conv2d(6, 2, 1), torch.nn.Conv2d(2, 2, 3, padding=1, groups=2)).to(DEVICE)
    weight = model[0].weight
    x = torch.randn(1, 3, 9, 7, device=DEVICE)
    with torch.no_grad():
        ref = model(x)
    convert(model, plan=_plan("nonfused", 2))
    assert count_convs(model) == (2, 5)
    assert isinstance(model[0], WinogradConv2d) and model[0].weight is weight
    assert not isinstance(model[2], WinogradConv2d) and not eligible(model[5])
    with torch.no_grad():
        assert _rel(model(x), ref) < 1e-4


def test_backward_is_torchs():
    conv = _conv(3, 4, plan=_plan("nonfused", 4))
    plain = torch.nn.Conv2d(3, 4, 3, padding=1).to(DEVICE)
    plain.load_state_dict(conv.state_dict())
    x = torch.randn(2, 3, 6, 7, device=DEVICE)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ga = torch.randn(2, 4, 6, 7, device=DEVICE)
    conv(xa).backward(ga)
    plain(xb).backward(ga)
    assert _rel(xa.grad, xb.grad) < 1e-5
    assert _rel(conv.weight.grad, plain.weight.grad) < 1e-5 and _rel(conv.bias.grad, plain.bias.grad) < 1e-6


def test_choice_is_the_models_cached_and_overridable(tmp_path):
    problem = ConvProblem(1, 8, 8, 12, 12)
    cache = tmp_path / "choices.json"
    choice = choose_plan(problem, cache_path=cache)
    assert choice.plan.schedule == "nonfused" and cache.exists()
    assert min(c.predicted_us for c in choice.candidates) == choice.predicted_us
    assert choose_plan(problem, cache_path=cache) == choice
    strict = choose_plan(problem, max_rel_err=5e-6, cache_path=cache)
    assert all(c.plan.params.tile in (2, 4, 5) for c in strict.candidates)
    assert "predicted" in choice.describe()
    conv = prepare_conv2d(problem, _plan("nonfused", 2))
    assert conv.choice is None and conv.plan.params.tile == 2


def test_a_fused_plan_without_a_mapping_runs_the_recommended_one():
    """As gpu.winograd.conv2d does (not build's tightest mapping); a mapping given is kept."""
    from dataclasses import replace

    from megasim.algorithms.winograd.algorithm1 import default_params, recommended_params
    from megasim.plan import build
    problem = ConvProblem(2, 8, 16, 12, 12)
    graph, _, tight = build(problem, _plan("fused", 2))
    rec = recommended_params(graph)
    assert (rec.d_ig, rec.d_go, rec.m) != (tight.params.d_ig, tight.params.d_go, tight.params.m)   # a real choice
    conv = prepare_conv2d(problem, _plan("fused", 2), layout="NHWC")
    assert (conv.plan.params.d_ig, conv.plan.params.d_go, conv.plan.params.m) == (rec.d_ig, rec.d_go, rec.m)
    low = default_params(graph, 1)
    given = _plan("fused", 2)
    given = replace(given, params=replace(given.params, d_ig=low.d_ig, d_go=low.d_go, m=1))
    conv = prepare_conv2d(problem, given, layout="NHWC")
    assert (conv.plan.params.d_ig, conv.plan.params.d_go, conv.plan.params.m) == (low.d_ig, low.d_go, 1)
    x = torch.randn(2, 8, 12, 12, device=DEVICE).contiguous(memory_format=torch.channels_last)
    w = torch.randn(16, 8, 3, 3, device=DEVICE)
    y = conv(x, w)
    ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    assert _rel(torch.as_tensor(y) if not isinstance(y, torch.Tensor) else y, ref) < 1e-5


def test_bad_calls_are_refused_in_one_line():
    problem = ConvProblem(1, 3, 4, 6, 6)
    conv = prepare_conv2d(problem, _plan("nonfused", 2))
    w = torch.randn(4, 3, 3, 3, device=DEVICE)
    with pytest.raises(KernelInputError, match="prepared for"):
        conv(torch.randn(1, 3, 6, 7, device=DEVICE), w)
    with pytest.raises(KernelInputError, match="float32"):
        conv(torch.randn(1, 3, 6, 6, device=DEVICE, dtype=torch.float64), w)
    with pytest.raises(KernelInputError, match="non-fused kernels only"):
        prepare_conv2d(problem, _plan("fused", 2), layout="NCHW")
    with pytest.raises(KernelInputError, match="plan must be"):
        prepare_conv2d(problem, "fused")
    with pytest.raises(ValueError, match="not eligible"):
        WinogradConv2d(3, 4, 3, stride=2, padding=1)


def test_an_input_of_other_channels_is_refused_naming_its_shape():
    conv = _conv(2, 3, plan=_plan("nonfused", 2))
    with pytest.raises(KernelInputError, match=r"x has shape \(1, 3, 6, 6\).*in_channels=2"), torch.no_grad():
        conv(torch.randn(1, 3, 6, 6, device=DEVICE))


@pytest.mark.parametrize("shape,padding", [((0, 2, 6, 6), 1), ((1, 2, 0, 6), 1), ((1, 0, 6, 6), 1), ((1, 2, 2, 2), 0),
                                           ((1, 2, 6, 0), 0)])
def test_empty_or_too_small_inputs_get_torchs_answer(shape, padding):
    """An empty input (torch: an empty output for N=0, its own error otherwise) and one smaller than the
    padded filter fall back to nn.Conv2d (before: WorkloadError 'layer: N=0')."""
    conv = _conv(2, 3, padding=padding, plan=_plan("nonfused", 2))
    x = torch.randn(*shape, device=DEVICE)
    assert conv.prepared(x) is None
    ref = torch.nn.Conv2d(2, 3, 3, padding=padding).to(DEVICE)
    ref.load_state_dict(conv.state_dict())
    with torch.no_grad():
        try:
            want = ref(x)
        except RuntimeError as err:
            with pytest.raises(RuntimeError, match="Kernel size|channels"):
                conv(x)
            assert "Kernel size" in str(err) or "channels" in str(err)
        else:
            got = conv(x)
            assert got.shape == want.shape == (0, 3, 6, 6)


@pytest.mark.parametrize("model", ["resnet", None, 3])
def test_convert_refuses_what_is_not_a_module(model):
    with pytest.raises(KernelInputError, match="is not allowed: give a torch.nn.Module"):
        convert(model)
