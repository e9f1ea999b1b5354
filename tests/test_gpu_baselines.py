"""The baselines on a real GPU: cuDNN's legacy API through ctypes against torch, the GEMM-phase
anchors, and CUDA-event timing. Skipped (with the reason) without torch or a CUDA device.

Run on the GPU machine: ``bash gpu/on_device.sh python -m pytest -q -m gpu tests/test_gpu_baselines.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)

from gpu.baselines import BmmGemmPhase, fp32_torch_flags, rel_err_torch, torch_conv2d  # noqa: E402
from gpu.cudnn_legacy import CudnnConv, CudnnError, best_ok, load  # noqa: E402
from gpu.runtime.timing import time_cuda  # noqa: E402
from megasim.workloads.problem import ConvProblem  # noqa: E402

N, C, K, H, W = 4, 32, 48, 14, 14


@pytest.fixture
def tensors():
    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.standard_normal((N, C, H, W), dtype=np.float32)).cuda()
    w = torch.from_numpy(rng.standard_normal((K, C, 3, 3), dtype=np.float32)).cuda()
    with torch.backends.cudnn.flags(enabled=False):
        ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    return x, w, ref


def test_loads_torchs_cudnn():
    lib = load()
    assert lib.version == torch.backends.cudnn.version()


def test_torch_conv2d_fp32(tensors):
    x, w, ref = tensors
    flags = fp32_torch_flags()
    assert flags["cudnn.allow_tf32"] is False and flags["cuda.matmul.allow_tf32"] is False
    assert rel_err_torch(torch_conv2d(x, w), ref) < 1e-5


@pytest.mark.parametrize("math_mode,tol", [("fp32", 1e-5), ("tf32", 1e-2)])
def test_cudnn_find_and_forward_match_torch(tensors, math_mode, tol):
    x, w, ref = tensors
    with CudnnConv(N, C, K, H, W, math=math_mode) as conv:
        assert conv.shape_y == (N, K, H, W)
        y = torch.full(conv.shape_y, float("nan"), device="cuda")
        found = conv.find(x, w, y)
        assert found and best_ok(found) is not None
        for res in found:
            if not res.ok:
                continue
            y.fill_(float("nan"))
            conv.forward(x, w, y, res.algo)
            torch.cuda.synchronize()
            assert rel_err_torch(y, ref) < tol, res
        if math_mode == "fp32":
            assert all(r.math_type == "FMA_MATH" for r in found if r.ok)


def test_cudnn_winograd_nonfused_by_name(tensors):
    x, w, ref = tensors
    with CudnnConv(N, C, K, H, W) as conv:
        y = torch.full(conv.shape_y, float("nan"), device="cuda")
        if conv.workspace_size("WINOGRAD_NONFUSED") is None:
            pytest.skip("WINOGRAD_NONFUSED not supported for this shape on this GPU")
        conv.forward(x, w, y, "WINOGRAD_NONFUSED")
        torch.cuda.synchronize()
        assert rel_err_torch(y, ref) < 1e-4


def test_cudnn_bad_tensor_raises(tensors):
    x, w, _ = tensors
    with CudnnConv(N, C, K, H, W) as conv:
        with pytest.raises(CudnnError, match="shape"):
            conv.forward(x[:1], w, torch.empty(conv.shape_y, device="cuda"), "IMPLICIT_GEMM")


def test_bmm_gemm_phase_and_timing():
    bmm = BmmGemmPhase(ConvProblem(2, 16, 24, 8, 8), np.random.default_rng(3), sets=2)
    assert bmm.rel_err() < 1e-5
    stats = time_cuda(bmm.run, warmup=2, repeats=5, rotate=2)
    assert stats.repeats == 5 and 0 < stats.min_ms <= stats.median_ms <= stats.max_ms and math.isfinite(stats.max_ms)
