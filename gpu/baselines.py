"""The baselines the Winograd executors are measured against, and the GEMM-phase anchor.

- ``torch_conv2d(x, w)``: PyTorch's conv2d as a user gets it with TF32 off (cuDNN on, its default
  heuristics, ``cudnn.benchmark`` False).
- ``CudnnConv`` (from ``gpu.cudnn_legacy``): cuDNN's legacy API by algorithm name, FP32 (FMA math)
  or TF32-allowed (DEFAULT math), with cuDNN's own Find timing.
- ``gemm_phase_shape`` / ``BmmGemmPhase``: the 36 batched GEMMs of Winograd F(4x4, 3x3) for a layer,
  run by cuBLAS through ``torch.bmm`` (TF32 off): (alpha^2, tiles, C) @ (alpha^2, C, K), tiles =
  N ceil(P/4) ceil(Q/4). Its time is what a Winograd convolution's GEMM phase costs with a tuned
  library GEMM, the anchor for our own GEMM phase.
- ``OurGemmPhase``: our GEMM phase alone: the GEMM launch of the non-fused schedule, run by
  ``gpu.kernels.winograd.megakernel.gemm_kernel`` through ``gpu.runtime.prepared`` (the executor has no public "GEMM launch
  only" entry point; ``gpu.runtime.executor.run_launch_per_kind`` would re-upload the task table per call).

torch and numba are imported lazily, so the pure parts (shapes, flops) import and test on any CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu.cudnn_legacy import AlgoResult, CudnnConv, CudnnError, best_ok  # noqa: F401  (re-exported)
from megasim.errors import MegasimError
from megasim.workloads.problem import ConvProblem


class BaselineError(MegasimError):
    """A baseline could not run (no torch, no GPU, unsupported problem)."""


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise BaselineError("the baselines need PyTorch with CUDA") from exc
    if not torch.cuda.is_available():
        raise BaselineError("the baselines need a CUDA device; torch.cuda.is_available() is False")
    return torch


def fp32_torch_flags() -> dict[str, bool]:
    """Set torch to strict FP32 (no TF32 in cuDNN or cuBLAS, cudnn.benchmark off, cuDNN on) and
    return the flags as set, for the metadata."""
    torch = _torch()
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    return {"cudnn.enabled": True, "cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False,
            "cudnn.benchmark": False, "float32_matmul_precision": torch.get_float32_matmul_precision()}


def torch_conv2d(x, w, padding: int = 1):
    """PyTorch conv2d, stride 1, TF32 off, default algorithm choice (cudnn.benchmark False)."""
    torch = _torch()
    fp32_torch_flags()
    return torch.nn.functional.conv2d(x, w, padding=padding)


# -- the GEMM phase ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmPhaseShape:
    """The batched GEMMs of Winograd F(m x m, 3x3): ``batch`` products of (rows x inner) @ (inner x cols)."""

    batch: int      # alpha^2 = (m + 2)^2: 36 for m = 4
    rows: int       # tiles = N ceil(P/m) ceil(Q/m)
    inner: int      # C
    cols: int       # K

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.rows * self.inner * self.cols

    @property
    def bytes(self) -> int:
        """Float32 bytes of the operands read once and the result written once."""
        return 4 * self.batch * (self.rows * self.inner + self.inner * self.cols + self.rows * self.cols)


def gemm_phase_shape(problem: ConvProblem, m: int = 4) -> GemmPhaseShape:
    if (problem.r, problem.s) != (3, 3) or problem.stride != 1:
        raise BaselineError(f"{problem.name or 'layer'}: the Winograd GEMM phase needs a 3x3 stride-1 convolution")
    if m < 1:
        raise BaselineError(f"m={m!r} is not allowed: it must be a positive integer")
    tiles = problem.n * (-(-problem.out_h // m)) * (-(-problem.out_w // m))
    return GemmPhaseShape((m + 2) ** 2, tiles, problem.c, problem.k)


def rel_err_torch(y, ref) -> float:
    """||y - ref|| / ||ref|| in float64 on the device (NaN if y holds a NaN, inf if ref is zero)."""
    torch = _torch()
    diff = torch.linalg.vector_norm(y.to(torch.float64) - ref)
    return float(diff / torch.linalg.vector_norm(ref))


class BmmGemmPhase:
    """cuBLAS FP32 (TF32 off) on the GEMM phase's shapes: ``run(i)`` = bmm of operand set i.

    Operands are fresh normal float32 from ``rng`` (a numpy Generator), ``sets`` of them for rotation;
    ``rel_err()`` compares set 0's product with a float64 bmm on the device.
    """

    def __init__(self, problem: ConvProblem, rng, *, sets: int = 3, m: int = 4) -> None:
        torch = _torch()
        fp32_torch_flags()
        import numpy as np
        self.shape = sh = gemm_phase_shape(problem, m)
        self.a = [torch.from_numpy(rng.standard_normal((sh.batch, sh.rows, sh.inner), dtype=np.float32)).cuda()
                  for _ in range(sets)]
        self.b = [torch.from_numpy(rng.standard_normal((sh.batch, sh.inner, sh.cols), dtype=np.float32)).cuda()
                  for _ in range(sets)]
        self.out = [torch.empty((sh.batch, sh.rows, sh.cols), dtype=torch.float32, device="cuda") for _ in range(sets)]
        self._torch = torch

    def run(self, i: int = 0) -> None:
        self._torch.bmm(self.a[i], self.b[i], out=self.out[i])

    def rel_err(self) -> float:
        torch = self._torch
        self.out[0].fill_(float("nan"))
        self.run(0)
        ref = torch.bmm(self.a[0].double(), self.b[0].double())
        return rel_err_torch(self.out[0], ref)


class OurGemmPhase:
    """Our GEMM phase alone, on the workspace of a full non-fused run (so U and V hold real data).

    ``run(i)`` enqueues the non-fused schedule's GEMM launch (``gemm_kernel``, one block per GEMM task)
    on workspace i; ``rel_err()`` compares M of workspace 0 with a float64 bmm of its V and U.
    ``workspaces`` are ``gpu.runtime.executor.Workspace``s of ``plan`` whose x and w are filled.
    """

    def __init__(self, plan, workspaces: list) -> None:
        from gpu.runtime.prepared import PreparedSchedule, gemm_only
        from megasim.algorithms.winograd import winograd_nonfused
        self._torch = _torch()
        self.plan = plan
        self.workspaces = workspaces
        full = PreparedSchedule(plan, winograd_nonfused(plan.graph), kernels="per_kind")
        for ws in workspaces:
            full.run(ws)           # fills U, V (and M, Y) of every workspace
        self.gemm = PreparedSchedule(plan, gemm_only(plan.graph), kernels="per_kind", check=False)
        self.shape = gemm_phase_shape(plan.problem, plan.config.m)

    def run(self, i: int = 0) -> None:
        self.gemm.run(self.workspaces[i])

    def rel_err(self) -> float:
        torch = self._torch
        ws = self.workspaces[0]
        M = torch.as_tensor(ws.M, device="cuda")
        M.fill_(float("nan"))
        self.run(0)
        V = torch.as_tensor(ws.V, device="cuda").double()
        U = torch.as_tensor(ws.U, device="cuda").double()
        return rel_err_torch(M, torch.bmm(V, U))


# -- one-call forms (the names the benchmark issue uses) -------------------------------------------------

def cublas_bmm_gemm_phase(problem: ConvProblem, rng, *, sets: int = 3, warmup: int = 5, repeats: int = 30):
    """cuBLAS FP32 (TF32 off) time of the layer's 36 Winograd GEMMs: (TimingStats, rel_err, GemmPhaseShape)."""
    from gpu.runtime.timing import time_cuda
    bmm = BmmGemmPhase(problem, rng, sets=sets)
    err = bmm.rel_err()
    return time_cuda(bmm.run, warmup=warmup, repeats=repeats, rotate=sets), err, bmm.shape


def our_gemm_phase_ms(plan, workspaces: list, *, warmup: int = 5, repeats: int = 30):
    """OUR GEMM PHASE: time of the non-fused schedule's GEMM launch alone (``gpu.kernels.winograd.megakernel.gemm_kernel``,
    launched as ``gpu.runtime.executor.run_launch_per_kind`` does, tables uploaded once by ``gpu.runtime.prepared``),
    rotating over ``workspaces`` (``gpu.runtime.executor.workspace(plan, x_nhwc, w)`` with x and w filled).
    Returns (TimingStats, rel_err of M against a float64 V @ U)."""
    from gpu.runtime.timing import time_cuda
    ours = OurGemmPhase(plan, workspaces)
    err = ours.rel_err()
    return time_cuda(ours.run, warmup=warmup, repeats=repeats, rotate=len(workspaces)), err
