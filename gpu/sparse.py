"""Sparse direct convolution on the GPU: ECR and PECR (Xu, Fan, Yu, Fu, "Accelerating convolutional
neural network by exploiting sparsity on GPUs", Sec. IV and V), their dense twins, and the unfused
convolution -> ReLU -> max-pool chain they are compared with.

    y = ecr_conv2d(x, w, stride=1, padding=1)                 # NCHW float32 in, NKPQ float32 out
    y = direct_conv2d(x, w, padding=1, k_tile=32)              # the same kernel without zero skipping
    z = pecr_conv2d_relu_maxpool(x, w, padding=1, pool=2, pool_stride=2)
    z = conv_relu_maxpool_unfused(x, w, padding=1, conv="ecr")  # three launches, same result
    launch = prepare("pecr", x_dev, w_dev, padding=1); launch.run()   # timing: enqueue only

ECR (extended and compressed row, Sec. IV): one thread per output pixel. Per chunk of input channels
the thread reads its convolution window from global memory, keeps only the nonzeros (value and
weight row) in its column of a shared-memory buffer, and multiplies each with the staged weights of
``k_tile`` filters held in shared memory, accumulating in registers. The compression happens inside
the kernel, in the same pass that loads the window: the host never preprocesses x. PECR
(pooling-pack ECR, Sec. V) fuses ReLU and max-pooling: one thread per pooled output compresses the
input patch covering its pool x pool convolution windows once, feeds each nonzero to every window
holding it, and writes max(0, max(window results)). ``direct_conv2d`` and
``direct_conv2d_relu_maxpool`` are the same kernels with the skipping compiled out (``SPARSE``
False), so a comparison isolates what skipping zeros buys.

Block shapes come from ``megasim.algorithms.sparse.tiling.choose_tiling`` (the contract shared with
megasim's model): 128 threads per block, grid (pixel tiles, filter tiles), channel chunks of
``c_chunk`` so that one chunk's window is at most 36 elements, ``k_tile`` filters per block chosen
from the problem and the GPU's SM count (forced with ``k_tile=``). The kernels are in
``gpu.kernels.sparse.kernels``; their docstrings give the per-thread work and shared-memory layout.

Every op is a megasim Plan (``OP_PLANS``: algorithm ``ecr``, ``direct``, ``pecr`` or ``direct_fused``;
the unfused chains are the pooled algorithms' ``unfused`` schedule) and runs the TaskGraph and
Schedule of ``megasim.plan.build(..., costed=False)`` (the plug-in's structure-only lowering: the
tasks, launches and accesses, without the model's zero-dependent counts) through the GPU executor (``gpu.runtime.execute``) and the sparse
kernel table (``gpu.runtime.sparse_kernels``), the same path ``megasim validate --algo`` measures.
``prepare`` lowers, checks and allocates once; ``SparseLaunch.run`` only enqueues.

Inputs: x (N, C, H, W) and w (K, C, R, S), both float32 (other dtypes are rejected, not converted),
both NumPy arrays (the result comes back as NumPy) or both device arrays (Numba's, or any
``__cuda_array_interface__`` array, C-contiguous; the result stays on the device). Bad inputs raise
``SparseError`` (a ``KernelInputError``, so a ``MegasimError``) with a one-line message.
``reference_conv2d`` / ``reference_conv_relu_maxpool`` are the float64 NumPy oracles.
"""

from __future__ import annotations

import numpy as np
from numba import config as numba_config
from numba import cuda
from numpy.lib.stride_tricks import sliding_window_view

from functools import lru_cache

from gpu.errors import KernelInputError
from gpu.operands import as_device, check_int, check_tensor, is_device_array
from gpu.runtime.execute import PreparedRun
from gpu.runtime.sparse_kernels import maxpool_launch, relu_launch
from megasim.algorithms.sparse.plugin import PooledSparseParams, SparseParams
from megasim.algorithms.sparse.tiling import PoolSpec, SparseTiling, choose_tiling, grid, pooled_hw
from megasim.errors import LoweringError
from megasim.plan import Plan, build, check_problem_size
from megasim.workloads.problem import ConvProblem

CONV_OPS = ("ecr", "direct")
FUSED_OPS = ("pecr", "direct_fused")
UNFUSED_OPS = ("unfused_ecr", "unfused_direct")
OPS = CONV_OPS + FUSED_OPS + UNFUSED_OPS
# op -> (megasim algorithm, schedule) it runs
OP_PLANS = {"ecr": ("ecr", "kernel"), "direct": ("direct", "kernel"), "pecr": ("pecr", "fused"),
            "direct_fused": ("direct_fused", "fused"), "unfused_ecr": ("pecr", "unfused"),
            "unfused_direct": ("direct_fused", "unfused")}
SIM_SM_COUNT = 132          # under the CUDA simulator (no device to ask): an H100 SXM's SM count


class SparseError(KernelInputError):
    """An input the sparse convolution kernels cannot take (shape, dtype, option value, tiling)."""


# --- float64 oracles -------------------------------------------------------------------------------

def reference_conv2d(x, w, stride: int = 1, padding: int = 0) -> np.ndarray:
    """Cross-correlation of x (N, C, H, W) with w (K, C, R, S) in float64 (PyTorch conv2d, no bias)."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    r, s = w.shape[2], w.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = sliding_window_view(xp, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]   # (N, C, P, Q, R, S)
    return np.einsum("ncpqrs,kcrs->nkpq", win, w, optimize=True)


def reference_maxpool2d(y, pool: int = 2, pool_stride: int = 2) -> np.ndarray:
    """Max-pool (floor mode, no padding) of y (N, K, P, Q) in float64."""
    y = np.asarray(y, np.float64)
    win = sliding_window_view(y, (pool, pool), axis=(2, 3))[:, :, ::pool_stride, ::pool_stride]
    return win.max(axis=(4, 5))


def reference_conv_relu_maxpool(x, w, stride: int = 1, padding: int = 0, pool: int = 2,
                                pool_stride: int = 2) -> np.ndarray:
    """Convolution, ReLU, then max-pool, in float64."""
    return reference_maxpool2d(np.maximum(reference_conv2d(x, w, stride, padding), 0.0), pool, pool_stride)


# --- input checks (gpu.operands holds the shared ones) ------------------------------------------------

def _sm_count(sm_count) -> int:
    if sm_count is not None:
        return check_int("sm_count", sm_count, 1, SparseError)
    if numba_config.ENABLE_CUDASIM:
        return SIM_SM_COUNT
    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)


def _problem(x, w, stride, padding) -> ConvProblem:
    stride = check_int("stride", stride, 1, SparseError)
    padding = check_int("padding", padding, 0, SparseError)
    n, c, h, wd = (int(v) for v in x.shape)
    k, cw, r, s = (int(v) for v in w.shape)
    if cw != c:
        raise SparseError(f"channels differ: x has C={c}, w has C={cw}")
    if r > h + 2 * padding or s > wd + 2 * padding:
        raise SparseError(f"filter {r}x{s} is larger than the padded input {h + 2 * padding}x{wd + 2 * padding} "
                          f"(empty output): R <= H+2*padding and S <= W+2*padding are allowed")
    problem = ConvProblem(n, c, k, h, wd, r, s, stride, padding)
    check_problem_size(problem)     # the kernels index with 32-bit integers: refuse before allocating
    return problem


def _pool(pool, pool_stride) -> PoolSpec:
    return PoolSpec(check_int("pool", pool, 1, SparseError),
                    check_int("pool_stride", pool_stride, 1, SparseError))


def _tiling(problem: ConvProblem, kind: str, sm_count, pool: PoolSpec | None, k_tile) -> SparseTiling:
    """The tiling of the convolution kernel; ``pool`` is checked against the convolution output, and
    passed on for the fused kinds only (the unfused chain's convolution is a plain conv kernel)."""
    try:
        if pool is not None:
            pooled_hw(problem, pool)
        return choose_tiling(problem, kind, _sm_count(sm_count), pool=pool if kind in FUSED_OPS else None,
                             k_tile=k_tile)
    except LoweringError as exc:
        raise SparseError(str(exc)) from exc


# --- prepared launches (through the executor) --------------------------------------------------------

def plan_of(op: str, pool: PoolSpec | None, k_tile: int) -> Plan:
    """The megasim Plan that ``op`` runs: its algorithm and schedule (the unfused chains are the pooled
    algorithms' ``unfused`` schedule) and the filter tile, with the pool for the pooled ops."""
    algorithm, schedule = OP_PLANS[op]
    if pool is None:
        return Plan(schedule, SparseParams(k_tile=k_tile), algorithm)
    return Plan(schedule, PooledSparseParams(k_tile=k_tile, pool_size=pool.size, pool_stride=pool.stride), algorithm)


@lru_cache(maxsize=32)
def _build(problem: ConvProblem, plan: Plan):
    """The plan's (graph, schedule) as the executor runs it: ``build(costed=False)``, the sparse
    plug-in's structure-only lowering (the same tasks, launches and accesses, the zero-dependent counts
    not made: they price the model's prediction, the kernels do not read them)."""
    graph, schedule, _ = build(problem, plan, costed=False)
    return graph, schedule


def _kernel_attrs(kernel, args) -> tuple[int | None, int | None, int | None]:
    """(registers per thread, static shared bytes, local bytes per thread) of the kernel compiled for
    ``args``; None under the simulator."""
    if numba_config.ENABLE_CUDASIM:
        return None, None, None
    compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    return int(compiled.regs_per_thread), int(compiled.shared_mem_per_block), int(compiled.local_mem_per_thread)


class SparseLaunch:
    """One sparse / direct operation with its device buffers allocated once (see ``prepare``).

    ``run()`` enqueues the kernel(s) on the default stream: no allocation, no host copy, no
    synchronisation. It runs ``graph`` / ``schedule`` (``plan``'s structure-only lowering) through the
    executor (``gpu.runtime.execute.PreparedRun``, the kernel table of ``gpu.runtime.sparse_kernels``).
    ``output`` is the device array the last kernel writes; ``tiling`` the SparseTiling of the
    convolution kernel; ``grid`` / ``block`` its launch shape; ``regs_per_thread``, ``shared_bytes``
    and ``local_bytes`` what the compiler reports for the convolution kernel (None under the
    simulator). ``config_shared_bytes`` is the static shared memory the kernel declares (from its own
    constants).
    """

    def __init__(self, op: str, x, w, problem: ConvProblem, tiling: SparseTiling, pool: PoolSpec | None) -> None:
        self.op, self.problem, self.tiling, self.pool = op, problem, tiling, pool
        self.x, self.w = x, w
        self.plan = plan_of(op, pool, tiling.k_tile)
        self.graph, self.schedule = _build(problem, self.plan)
        self.prepared = PreparedRun(problem, self.plan, self.graph, self.schedule)
        self.workspace = self.prepared.workspace(x, w)
        self.output = self.prepared.output(self.workspace)
        state = self.prepared.state
        assert state.tiling == tiling, (state.tiling, tiling)   # the graph's tiling is the op's
        self.kernel = state.kernel
        self.grid = grid(problem, tiling)
        self.block = tiling.pixels_per_block
        self._steps = tuple(self.prepared.steps(self.workspace))
        self.config_shared_bytes = self.kernel.shared_bytes
        self.regs_per_thread, self.shared_bytes, self.local_bytes = _kernel_attrs(self.kernel, self._steps[0][1])

    @property
    def launches(self) -> int:
        return len(self._steps)

    @property
    def steps(self) -> tuple:
        """The (configured kernel, args) of each launch, in order: conv (or fused), then ReLU and
        max-pool for the unfused chains; calling ``kernel(*args)`` enqueues that launch alone."""
        return self._steps

    def run(self) -> None:
        """Enqueue the kernel(s) on the default stream (asynchronous)."""
        for launch, args in self._steps:
            launch(*args)


def prepare(op: str, x, w, stride: int = 1, padding: int = 0, pool: int | None = None,
            pool_stride: int | None = None, *, k_tile: int | None = None, sm_count: int | None = None) -> SparseLaunch:
    """A SparseLaunch of ``op`` (one of OPS) on x and w (device arrays; NumPy arrays are uploaded
    once). ``pool`` / ``pool_stride`` (default 2 / 2) apply to the fused and unfused ops only. On a
    GPU the convolution kernel is compiled here, so ``regs_per_thread`` is known before the first run.
    The graph is lowered here (cached per problem and plan), structure only: the kernels' grid and
    launches do not depend on the map, only the model's costs do, which are not counted here.
    """
    if op not in OPS:
        raise SparseError(f"op={op!r} is not allowed (allowed: {', '.join(OPS)})")
    on_device = is_device_array(x)
    x = check_tensor("x", x, on_device, SparseError)
    w = check_tensor("w", w, on_device, SparseError)
    problem = _problem(x, w, stride, padding)
    if op in CONV_OPS:
        if pool is not None or pool_stride is not None:
            raise SparseError(f"op={op!r} takes no pool or pool_stride (they are for {', '.join(FUSED_OPS + UNFUSED_OPS)})")
        spec, kind = None, op
    else:
        spec = _pool(2 if pool is None else pool, 2 if pool_stride is None else pool_stride)
        kind = op if op in FUSED_OPS else op.removeprefix("unfused_")
    tiling = _tiling(problem, kind, sm_count, spec, k_tile)
    if not on_device:
        x = cuda.to_device(np.ascontiguousarray(x))
        w = cuda.to_device(np.ascontiguousarray(w))
    return SparseLaunch(op, x, w, problem, tiling, spec)


def _run(op, x, w, stride, padding, pool, pool_stride, k_tile, sm_count):
    on_device = is_device_array(x)
    launch = prepare(op, x, w, stride, padding, pool, pool_stride, k_tile=k_tile, sm_count=sm_count)
    launch.run()
    return launch.output if on_device else launch.output.copy_to_host()


# --- the public operations ---------------------------------------------------------------------------

def ecr_conv2d(x, w, stride: int = 1, padding: int = 0, *, k_tile: int | None = None, sm_count: int | None = None):
    """ECR sparse convolution (cross-correlation, no bias) of x (N, C, H, W) with w (K, C, R, S):
    (N, K, P, Q), P = (H + 2*padding - R) // stride + 1. ``k_tile`` forces the filter tile (32, 16, 8
    or 4); ``sm_count`` overrides the SM count the tiling is chosen for."""
    return _run("ecr", x, w, stride, padding, None, None, k_tile, sm_count)


def direct_conv2d(x, w, stride: int = 1, padding: int = 0, *, k_tile: int | None = None, sm_count: int | None = None):
    """The dense twin of ``ecr_conv2d``: the same kernel, every window element multiplied."""
    return _run("direct", x, w, stride, padding, None, None, k_tile, sm_count)


def pecr_conv2d_relu_maxpool(x, w, stride: int = 1, padding: int = 0, pool: int = 2, pool_stride: int = 2, *,
                             k_tile: int | None = None, sm_count: int | None = None):
    """PECR: convolution, ReLU and max-pool (``pool`` x ``pool`` window, step ``pool_stride``, floor mode,
    no padding) in one kernel: (N, K, (P - pool) // pool_stride + 1, (Q - pool) // pool_stride + 1).
    ``k_tile`` forces the filter tile (8, 4 or 2)."""
    return _run("pecr", x, w, stride, padding, pool, pool_stride, k_tile, sm_count)


def direct_conv2d_relu_maxpool(x, w, stride: int = 1, padding: int = 0, pool: int = 2, pool_stride: int = 2, *,
                               k_tile: int | None = None, sm_count: int | None = None):
    """The dense twin of ``pecr_conv2d_relu_maxpool`` (one kernel, every patch element multiplied)."""
    return _run("direct_fused", x, w, stride, padding, pool, pool_stride, k_tile, sm_count)


def conv_relu_maxpool_unfused(x, w, stride: int = 1, padding: int = 0, pool: int = 2, pool_stride: int = 2, *,
                              conv: str = "ecr", k_tile: int | None = None, sm_count: int | None = None):
    """Convolution (``conv`` = "ecr" or "direct"), then ``relu``, then ``maxpool2d``: three launches,
    two intermediate maps in global memory; the same result as the fused kernels."""
    if conv not in CONV_OPS:
        raise SparseError(f"conv={conv!r} is not allowed (allowed: {', '.join(CONV_OPS)})")
    return _run("unfused_" + conv, x, w, stride, padding, pool, pool_stride, k_tile, sm_count)


def _check_map(y):
    on_device = is_device_array(y)
    y = as_device(y) if on_device else np.asarray(y)
    if y.ndim != 4:
        raise SparseError(f"y must be 4-D (N, K, P, Q), got shape {tuple(y.shape)}")
    if np.dtype(y.dtype) != np.float32:
        raise SparseError(f"y must be float32, got {np.dtype(y.dtype)} (convert it first: no implicit casts)")
    if min(y.shape) < 1:
        raise SparseError(f"y has shape {tuple(y.shape)}: every dimension must be >= 1")
    if on_device and not y.is_c_contiguous():
        raise SparseError("device array y must be C-contiguous")
    return y, on_device


def relu(y):
    """max(y, 0) elementwise (one thread per element, 256 per block); a new array, y is not changed."""
    y, on_device = _check_map(y)
    d_y = y if on_device else cuda.to_device(np.ascontiguousarray(y))
    out = cuda.device_array(d_y.shape, np.float32)
    kernel, args = relu_launch(d_y, out)        # the relu entry of the sparse kernel table
    kernel(*args)
    return out if on_device else out.copy_to_host()


def maxpool2d(y, pool: int = 2, pool_stride: int = 2):
    """Max-pool of y (N, K, P, Q) (``pool`` x ``pool`` window, step ``pool_stride``, floor mode, no padding),
    one thread per output, 256 per block."""
    y, on_device = _check_map(y)
    spec = _pool(pool, pool_stride)
    p, q = int(y.shape[2]), int(y.shape[3])
    if spec.size > min(p, q):
        raise SparseError(f"pool={spec.size} is not allowed for a {p}x{q} map: it must be <= {min(p, q)}")
    po, qo = (p - spec.size) // spec.stride + 1, (q - spec.size) // spec.stride + 1
    d_y = y if on_device else cuda.to_device(np.ascontiguousarray(y))
    out = cuda.device_array((int(y.shape[0]), int(y.shape[1]), po, qo), np.float32)
    kernel, args = maxpool_launch(d_y, out, spec)   # the maxpool entry of the sparse kernel table
    kernel(*args)
    return out if on_device else out.copy_to_host()
