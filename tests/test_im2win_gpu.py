"""The im2win kernels of gpu.kernels.im2win and the gpu.im2win op against float64 NumPy oracles.

Runs on Numba's CUDA simulator (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1 unless it is set, e.g. to 0,
in which case the same tests run on the GPU). The simulator runs one block at a time with one OS thread
per CUDA thread, so the kernel-level tests build the tiled kernel with tiny tiles (4 to 16 threads) and
the basic kernel with 4 x 4 threads; the op-level tests run the plan's real layouts once each. Every
shape is awkward: filters and pixels not multiples of any tile, C_in 1 and 3, strides 1-4, filters
1x1 to 11x11, padding 0-3, batch 1. Inputs are fresh standard normal draws; outputs start as NaN, so an
element a kernel fails to write fails the comparison.
"""

from __future__ import annotations


import numpy as np
import pytest

from megasim.workloads.problem import ConvProblem

numba = pytest.importorskip("numba")
from numba import cuda

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) nor a CUDA GPU is available",
                allow_module_level=True)

from gpu import im2win
from gpu.kernels.im2win.conv import (conv_blocks, conv_offsets, conv_params, identity_prologue, make_basic_kernel,
                                     make_conv_kernel, reference_conv_from_im2win)
from gpu.kernels.im2win.transform import (division_magic, reference_im2win, transform_kernel, transform_magic,
                                          transform_params)
from gpu.runtime import im2win_kernels
from gpu.sparse import reference_conv2d
from megasim.algorithms.im2win.tiling import TRANSFORM_THREADS, im2win_shape, transform_blocks
from tests.conv_checks import nan_device as _nan  # noqa: E402
from tests.conv_checks import normwise_rel_err as _rel_err  # noqa: E402
from tests.conv_checks import random_conv_inputs as _inputs  # noqa: E402

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]
TOL = 1e-4

# (N, C, K, H, W, R, S, stride, padding): C_out and N*P*Q not multiples of any tile below
SHAPES = [ConvProblem(1, 1, 5, 7, 6, 1, 1, 1, 0),       # 1x1, C_in = 1
          ConvProblem(1, 3, 7, 9, 8, 3, 3, 2, 1),       # C_in = 3, stride 2
          ConvProblem(1, 3, 5, 9, 9, 11, 11, 4, 3),     # 11x11, stride 4, padding 3
          ConvProblem(1, 2, 9, 8, 7, 5, 2, 3, 2),       # rectangular filter, stride 3
          ConvProblem(1, 1, 3, 10, 9, 7, 7, 1, 0),      # 7x7
          ConvProblem(2, 3, 17, 9, 9, 3, 3, 1, 1)]      # interior tiles (the untested loads), C*R*S = 27, 2 images
# (m_b, n_b, k_b, m_t, n_t, vector, prefetch, staging): Alg. 3 and its ablation at simulator size; the
# cp.async ring at 2 and 3 stages; "inexact" stages fewer rows than threads x loads (the row tests)
LAYOUTS = {"optimized": (8, 8, 4, 4, 4, True, True, "registers"),
           "optimized_8x8": (16, 16, 4, 8, 8, True, True, "registers"),
           "no_vector": (8, 8, 4, 4, 4, False, True, "registers"),
           "no_prefetch": (8, 8, 4, 4, 4, True, False, "registers"),
           "no_microkernel": (4, 4, 4, 1, 1, True, True, "registers"),
           "scalar_2x2": (8, 4, 2, 2, 2, True, True, "registers"),
           "inexact": (12, 4, 4, 4, 1, True, True, "registers"),
           "async2": (8, 8, 4, 4, 4, True, True, "async2"), "async3": (16, 16, 4, 8, 8, True, True, "async3"),
           "async_inexact": (12, 4, 4, 4, 1, True, True, "async3")}


def _build(layout, **kw):
    m_b, n_b, k_b, m_t, n_t, vector, prefetch, staging = LAYOUTS[layout]
    extra = dict(staging="async", stages=int(staging[-1])) if staging.startswith("async") else {}
    return make_conv_kernel(m_b, n_b, k_b, m_t, n_t, vector=vector, prefetch=prefetch, **extra, **kw), m_b, n_b, k_b


@pytest.fixture(autouse=True)
def _nan_filled_outputs(monkeypatch):
    """The op's workspaces (J and y) start as NaN, not as whatever the allocator hands out."""
    monkeypatch.setattr(im2win_kernels.cuda, "device_array", lambda shape, dtype=np.float32: _nan(shape))


def _window(p: ConvProblem, x: np.ndarray):
    J = _nan(im2win_shape(p))
    transform_kernel[transform_blocks(p), TRANSFORM_THREADS](cuda.to_device(x), J, cuda.to_device(transform_params(p)),
                                                             cuda.to_device(transform_magic(p)))
    return J


@pytest.mark.parametrize("p", SHAPES, ids=lambda p: p.spec_string())
def test_transform_writes_every_element_of_the_im2win_tensor(p):
    x, _ = _inputs(p, 1)
    J = _window(p, x).copy_to_host()
    assert np.array_equal(J, reference_im2win(x, p.r, p.stride, p.padding))    # padding zeros included


def test_transform_over_several_blocks_and_images():
    p = ConvProblem(2, 3, 1, 21, 20, 3, 3, 1, 1)        # J of 2*3*21*66 elements: three blocks, the last partial
    assert transform_blocks(p) == 3
    x, _ = _inputs(p, 2)
    assert np.array_equal(_window(p, x).copy_to_host(), reference_im2win(x, p.r, p.stride, p.padding))


def test_division_magic_divides_every_31_bit_index():
    rng = np.random.default_rng(4)
    n = np.concatenate([rng.integers(0, 2 ** 31, 100_000), np.arange(4096), 2 ** 31 - 1 - np.arange(4096)]).astype(np.uint64)
    for d in (1, 2, 3, 7, 11, 21, 25, 54, 1568, 2497, 2 ** 20 + 7, 2 ** 31 - 1):
        m, shift = division_magic(d)
        assert np.array_equal((n * np.uint64(m)) >> np.uint64(shift), n // np.uint64(d)), d


def test_reference_conv_from_im2win_is_the_convolution():
    p = SHAPES[3]
    x, w = _inputs(p, 3)
    J = reference_im2win(x, p.r, p.stride, p.padding)
    assert _rel_err(reference_conv_from_im2win(J, w, p.stride, p.out_w), reference_conv2d(x, w, p.stride, p.padding)) < 1e-12


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
@pytest.mark.parametrize("p", SHAPES, ids=lambda p: p.spec_string())
def test_tiled_kernel_variants_match_float64(p, layout):
    kernel, m_b, n_b, k_b = _build(layout)
    x, w = _inputs(p, 10 + SHAPES.index(p))
    J = _window(p, x)
    y = _nan((p.n, p.k, p.out_h, p.out_w))
    kernel[conv_blocks(p, m_b, n_b), kernel.threads](J, cuda.to_device(w), y, cuda.to_device(conv_params(p, m_b)),
                                                     cuda.to_device(conv_offsets(p, k_b)))
    assert _rel_err(y.copy_to_host(), reference_conv2d(x, w, p.stride, p.padding)) <= TOL


@pytest.mark.parametrize("p", [SHAPES[1], SHAPES[5]], ids=lambda p: p.spec_string())
def test_rolled_micro_kernel_matches_float64(p):
    """unroll=False (the K loop rolled, for comparison) on a P*Q multiple of 4 (128-bit output stores) and not."""
    kernel, m_b, n_b, k_b = _build("optimized_8x8", unroll=False)
    x, w = _inputs(p, 70 + SHAPES.index(p))
    y = _nan((p.n, p.k, p.out_h, p.out_w))
    kernel[conv_blocks(p, m_b, n_b), kernel.threads](_window(p, x), cuda.to_device(w), y,
                                                     cuda.to_device(conv_params(p, m_b)),
                                                     cuda.to_device(conv_offsets(p, k_b)))
    assert _rel_err(y.copy_to_host(), reference_conv2d(x, w, p.stride, p.padding)) <= TOL


@pytest.mark.parametrize("p", SHAPES, ids=lambda p: p.spec_string())
def test_basic_kernel_matches_float64(p):
    kernel = make_basic_kernel(4)
    x, w = _inputs(p, 20 + SHAPES.index(p))
    y = _nan((p.n, p.k, p.out_h, p.out_w))
    kernel[conv_blocks(p, 4, 4), kernel.threads](_window(p, x), cuda.to_device(w), y, cuda.to_device(conv_params(p, 4)))
    assert _rel_err(y.copy_to_host(), reference_conv2d(x, w, p.stride, p.padding)) <= TOL


def test_epilogue_hook_transforms_every_stored_output():
    p = SHAPES[1]

    @cuda.jit(device=True)
    def shifted(value, m):
        return value + m

    kernel = make_conv_kernel(8, 8, 4, 4, 4, epilogue=shifted)
    x, w = _inputs(p, 5)
    y = _nan((p.n, p.k, p.out_h, p.out_w))
    kernel[conv_blocks(p, 8, 8), kernel.threads](_window(p, x), cuda.to_device(w), y, cuda.to_device(conv_params(p, 8)),
                                                 cuda.to_device(conv_offsets(p, 4)))
    ref = reference_conv2d(x, w, p.stride, p.padding) + np.arange(p.k)[None, :, None, None]
    assert _rel_err(y.copy_to_host(), ref) <= TOL


@pytest.mark.parametrize("variant,tiles", [("optimized", dict(m_b=32, n_b=32, m_t=4, n_t=4, max_registers=128)),
                                           ("no_vector", dict(m_b=32, n_b=32, m_t=4, n_t=4, k_b=16)),
                                           ("no_prefetch", dict(m_b=32, n_b=32, m_t=4, n_t=4)),
                                           ("no_microkernel", dict(m_b=32, n_b=32)),
                                           ("basic", {})])
def test_op_runs_every_variant_through_the_kernel_table(variant, tiles):
    p = ConvProblem(1, 3, 33, 7, 8, 3, 2, 2, 1)       # 33 filters: two filter tiles of 32, the second of 1
    x, w = _inputs(p, 30 + len(variant))
    launch = im2win.prepare(x, w, p.stride, p.padding, variant=variant, **tiles)
    assert launch.extra_bytes == 4 * int(np.prod(im2win_shape(p)))
    launch.run()
    assert _rel_err(launch.output.copy_to_host(), reference_conv2d(x, w, p.stride, p.padding)) <= TOL


def test_op_on_device_arrays_stays_on_the_device():
    p = SHAPES[0]
    x, w = _inputs(p, 40)
    y = im2win.conv2d(cuda.to_device(x), cuda.to_device(w), m_b=32, n_b=32, m_t=4, n_t=4)
    assert hasattr(y, "copy_to_host")
    assert _rel_err(y.copy_to_host(), reference_conv2d(x, w)) <= TOL


@pytest.mark.parametrize("kwargs,needle", [
    (dict(x=np.zeros((1, 2, 5, 5), np.float64)), "x must be float32"),
    (dict(w=np.zeros((3, 1, 3, 3), np.float32)), "channels differ: x has C=2, w has C=1"),
    (dict(w=np.zeros((3, 2, 9, 9), np.float32)), "filter 9x9 is larger than the padded input 5x5"),
    (dict(stride=0), "stride=0 is not allowed"),
    (dict(padding=-1), "padding=-1 is not allowed"),
    (dict(variant="fast"), "variant='fast' is not allowed"),
    (dict(variant="no_microkernel", m_t=8), "one output per thread"),
    (dict(m_b=48), "m_b=48 is not allowed (allowed: 32, 64, 128)"),
    (dict(x=np.zeros((2, 5, 5), np.float32)), "x must be 4-D")])
def test_bad_inputs_give_one_line_errors(kwargs, needle):
    args = dict(x=np.ones((1, 2, 5, 5), np.float32), w=np.ones((3, 2, 3, 3), np.float32))
    args.update(kwargs)
    x, w = args.pop("x"), args.pop("w")
    with pytest.raises(im2win.Im2winError) as err:
        im2win.conv2d(x, w, **args)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_kernel_factory_refuses_a_layout_it_cannot_tile():
    from gpu.errors import KernelInputError
    with pytest.raises(KernelInputError, match="m_b must be a multiple of m_t"):
        make_conv_kernel(12, 8, 4, 8, 4)
    with pytest.raises(KernelInputError, match="a multiple of k_b"):
        make_conv_kernel(8, 8, 3, 4, 4)
    with pytest.raises(KernelInputError, match="max_registers=300 is not allowed"):
        make_conv_kernel(8, 8, 4, 4, 4, max_registers=300)
    with pytest.raises(KernelInputError, match="staging='tma' is not allowed"):
        make_conv_kernel(8, 8, 4, 4, 4, staging="tma")
    with pytest.raises(KernelInputError, match="no prologue"):
        make_conv_kernel(8, 8, 4, 4, 4, staging="async", prologue=identity_prologue)


@pytest.mark.parametrize("staging", ["registers", "async"])
def test_op_default_tile_and_staging(staging):
    """No tile given: the rule's tile (m_b 64 for at most 64 filters), through the kernel table."""
    p = ConvProblem(1, 2, 33, 6, 7, 3, 3, 1, 1)
    x, w = _inputs(p, 60)
    launch = im2win.prepare(x, w, p.stride, p.padding, staging=staging)
    assert launch.params.m_b == 64 and launch.kernel.layout["staging"] == staging
    launch.run()
    assert _rel_err(launch.output.copy_to_host(), reference_conv2d(x, w, p.stride, p.padding)) <= TOL


@pytest.mark.parametrize("p", SHAPES[1:3], ids=lambda p: p.spec_string())
def test_naive_direct_baseline_matches_float64(p):
    from gpu.kernels.im2win.direct import DIRECT_THREADS, direct_blocks, direct_kernel, direct_params
    x, w = _inputs(p, 50 + SHAPES.index(p))
    y = _nan((p.n, p.k, p.out_h, p.out_w))
    direct_kernel[direct_blocks(p), DIRECT_THREADS](cuda.to_device(x), cuda.to_device(w), y,
                                                     cuda.to_device(direct_params(p)))
    assert _rel_err(y.copy_to_host(), reference_conv2d(x, w, p.stride, p.padding)) <= TOL
