"""im2win convolution on the GPU (Lu et al., "Im2win: an efficient convolution paradigm on GPU",
Euro-Par 2023): the window transform, then the tiled GEMM-view convolution of its Alg. 3, or a variant of
its ablation.

    y = conv2d(x, w, stride=1, padding=0)                       # NCHW float32 in, NKPQ float32 out
    y = conv2d(x, w, stride=2, variant="no_prefetch", m_b=64)   # a variant, another tile
    launch = prepare(x_dev, w_dev, stride=4); launch.run()      # timing: enqueue only
    launch.extra_bytes                                           # the im2win tensor's bytes
    y = conv2d(x, w, padding=1, math="3xtf32")                  # the micro-kernel on tensor cores (3xTF32)

Variants (``VARIANTS``): ``optimized`` (Alg. 3: block tile m_b x n_b stepping k_b, double-buffered shared
memory, m_t x n_t register tile with an outer-product micro-kernel, 128-bit fragment loads, the next
step's loads issued before this step's multiply-adds), ``basic`` (Alg. 2: 32 x 32 threads, one output
each, straight from global memory), ``no_microkernel`` (1 x 1 register tiles; default tile 32 x 32),
``no_vector`` (32-bit fragment loads), ``no_prefetch`` (one stage buffer). Default tile (no tile
argument): ``m_b`` by ``megasim.algorithms.im2win.tiling.default_m_b`` (64),
``n_b = 128, k_b = 16, m_t = n_t = 8``, registers capped by ``register_cap`` (168 at its 128 threads:
three blocks per SM). Layouts and grids are
``megasim.algorithms.im2win.tiling``'s (the model's contract); the kernels are in
``gpu.kernels.im2win``. ``math="3xtf32"`` runs the same kernel's micro-kernel on TF32 tensor cores by
the 3xTF32 split (each FP32 operand = big + small TF32 part, three m16n8k8 MMAs per product: FP32
accuracy, not TF32's; ``gpu.kernels.im2win.conv``), same tile, grid and staging; the default
tile then is ``MATH_DEFAULT_TILES["3xtf32"]``. Every op is a megasim Plan of the ``im2win`` algorithm and runs its TaskGraph
and Schedule (``megasim.plan.build``) through the GPU executor and the table of
``gpu.runtime.im2win_kernels``, the path ``megasim validate --algo im2win`` measures.

Inputs: x (N, C, H, W) and w (K, C, R, S), float32 (other dtypes are rejected, not converted), both
NumPy arrays (the result comes back as NumPy) or both device arrays (C-contiguous; the result stays on
the device). Bad inputs raise ``Im2winError`` (a ``KernelInputError``) with a one-line message.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import config as numba_config
from numba import cuda

from gpu.errors import KernelInputError
from gpu.operands import check_int, check_tensor, is_device_array
from gpu.runtime.execute import PreparedRun
from megasim.algorithms.im2win import Im2winParams
from megasim.algorithms.im2win.lowering import footprint_bytes
from megasim.algorithms.im2win.tiling import MATHS, NO_MICROKERNEL_TILE, STAGINGS, VARIANTS, default_m_b
from megasim.errors import MegasimError
from megasim.plan import Plan, build, check_problem_size
from megasim.workloads.problem import ConvProblem

DEFAULT_TILES = {"no_microkernel": NO_MICROKERNEL_TILE}
# The 3xTF32 build's default tile (the thread tile m_t x n_t only sets the threads there: m_b*n_b/(m_t*n_t)):
# 4 warps of 64 x 32 outputs. experiments/studies/im2win_tc (H200, im2win/conv1, 5, 8, 11 at batch 128, operands
# staged in fragment order, 2cb156f): 64 x 64, 8 warps at 64 x 128, cp.async, register caps all within 3% of it
# (64 x 64 1.9% ahead over the four but 1.06x slower on conv8); 128 x 64 wastes half its filter tile on the
# 64-filter layers (conv3, 4, 7, 9)
MATH_DEFAULT_TILES = {"fp32": {}, "3xtf32": {"m_b": 64, "n_b": 128, "k_b": 16, "m_t": 8, "n_t": 8}}
TILE_KEYS = ("m_b", "n_b", "k_b", "m_t", "n_t")


class Im2winError(KernelInputError):
    """A bad input to the im2win ops (one line naming the value and what is allowed)."""


def _problem(x, w, stride, padding) -> ConvProblem:
    stride = check_int("stride", stride, 1, Im2winError)
    padding = check_int("padding", padding, 0, Im2winError)
    n, c, h, wd = (int(v) for v in x.shape)
    k, cw, r, s = (int(v) for v in w.shape)
    if cw != c:
        raise Im2winError(f"channels differ: x has C={c}, w has C={cw}")
    if r > h + 2 * padding or s > wd + 2 * padding:
        raise Im2winError(f"filter {r}x{s} is larger than the padded input {h + 2 * padding}x{wd + 2 * padding} "
                          f"(empty output): R <= H+2*padding and S <= W+2*padding are allowed")
    problem = ConvProblem(n, c, k, h, wd, r, s, stride, padding)
    try:
        check_problem_size(problem)
    except MegasimError as exc:
        raise Im2winError(str(exc)) from None
    window = footprint_bytes(problem, "im2win")["window"] // 4
    if window > 2 ** 31 - 1:
        raise Im2winError(f"the im2win tensor of this problem has {window:,} elements: at most 2**31 - 1 are "
                          f"allowed (the kernels' 32-bit indices); use a smaller batch")
    return problem


def _sm_count() -> int | None:
    """The current device's SM count (None under the CUDA simulator, which has none)."""
    return getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", None)


def params_of(variant: str = "optimized", **tiles) -> Im2winParams:
    """The Im2winParams of a variant, its default tile (``DEFAULT_TILES``) overridden by ``tiles`` (None: default)."""
    if variant not in VARIANTS:
        raise Im2winError(f"variant={variant!r} is not allowed (allowed: {', '.join(VARIANTS)})")
    given = {k: v for k, v in tiles.items() if v is not None}
    try:
        return Im2winParams(**{**DEFAULT_TILES.get(variant, {}), **given, "variant": variant})
    except MegasimError as exc:
        raise Im2winError(str(exc).replace("--param ", "")) from None


@lru_cache(maxsize=32)
def _build(problem: ConvProblem, plan: Plan):
    return build(problem, plan)


class Im2winLaunch:
    """One im2win convolution with its device buffers allocated once (see ``prepare``).

    ``run()`` enqueues the transform and the convolution on the default stream: no allocation, no host
    copy, no synchronisation. ``output`` is the device array the convolution writes; ``window`` the
    im2win tensor; ``extra_bytes`` its size (the footprint beyond input, filter and output);
    ``regs_per_thread`` and ``shared_bytes`` what the compiler reports for the conv kernel (None under
    the simulator)."""

    def __init__(self, x, w, problem: ConvProblem, params: Im2winParams, max_registers: int | None = None,
                 staging: str | None = None, unroll: bool | None = None) -> None:
        self.graph, self.schedule, self.plan = _build(problem, Plan("kernel", params, "im2win"))
        self.problem, self.params = problem, self.plan.params
        options = {k: v for k, v in (("max_registers", max_registers), ("staging", staging),
                                     ("unroll", unroll)) if v is not None}
        self.prepared = PreparedRun(problem, self.plan, self.graph, self.schedule, options=options)
        self.workspace = self.prepared.workspace(x, w)
        self.output = self.prepared.output(self.workspace)
        self.window = self.workspace.window
        self.extra_bytes = int(self.window.size) * 4
        self.kernel = self.prepared.state.kernel
        self._steps = tuple(self.prepared.steps(self.workspace))
        self.regs_per_thread = self.shared_bytes = None
        if not numba_config.ENABLE_CUDASIM:
            fn, args = self._steps[-1]
            compiled = self.kernel.compile(tuple(self.kernel.typeof_pyval(a) for a in args))
            self.regs_per_thread = int(compiled.regs_per_thread)
            self.shared_bytes = int(compiled.shared_mem_per_block)

    @property
    def steps(self) -> tuple:
        """(configured kernel, args) of the transform, then of the convolution."""
        return self._steps

    def run(self) -> None:
        for launch, args in self._steps:
            launch(*args)


def prepare(x, w, stride: int = 1, padding: int = 0, *, variant: str = "optimized", m_b: int | None = None,
            n_b: int | None = None, k_b: int | None = None, m_t: int | None = None,
            n_t: int | None = None, max_registers: int | None = None, staging: str | None = None,
            unroll: bool | None = None, math: str = "fp32") -> Im2winLaunch:
    """An Im2winLaunch on x and w (device arrays; NumPy arrays are uploaded once). ``max_registers``: a cap
    on the conv kernel's registers per thread (None: ``register_cap``'s rule, room for at least two blocks
    and 12 warps per SM; 255: no cap). ``staging``: "registers" or "async" (None: ``DEFAULT_STAGING``). ``unroll``: the
    micro-kernel's K loop written out (None: True; False: the rolled loop). ``math``: "fp32" (the FP32
    pipe) or "3xtf32" (TF32 tensor cores, FP32-accurate; variant "optimized" only; tiles not given come
    from ``MATH_DEFAULT_TILES``): the plan's parameter ``math``, so the model prices what runs."""
    on_device = is_device_array(x)
    x = check_tensor("x", x, on_device, Im2winError)
    w = check_tensor("w", w, on_device, Im2winError)
    problem = _problem(x, w, stride, padding)
    if math not in MATHS:
        raise Im2winError(f"math={math!r} is not allowed (allowed: {', '.join(MATHS)})")
    if math != "fp32":
        if variant != "optimized":
            raise Im2winError(f"math={math!r} with variant={variant!r} is not allowed: the tensor-core micro-kernel "
                              f"is a build of the optimized kernel only")
        given = dict(m_b=m_b, n_b=n_b, k_b=k_b, m_t=m_t, n_t=n_t)
        m_b, n_b, k_b, m_t, n_t = (MATH_DEFAULT_TILES[math][k] if v is None else v for k, v in given.items())
    if m_b is None and variant != "basic":     # the rule on this device's SM count
        m_b = default_m_b(problem, variant, _sm_count())
    params = params_of(variant, m_b=m_b, n_b=n_b, k_b=k_b, m_t=m_t, n_t=n_t, math=math)
    if max_registers is not None and (isinstance(max_registers, bool) or not isinstance(max_registers, int)
                                      or not 32 <= max_registers <= 255):
        raise Im2winError(f"max_registers={max_registers!r} is not allowed: None or an integer from 32 to 255")
    if staging is not None and staging not in STAGINGS:
        raise Im2winError(f"staging={staging!r} is not allowed (allowed: {', '.join(STAGINGS)})")
    if unroll is not None and not isinstance(unroll, bool):
        raise Im2winError(f"unroll={unroll!r} is not allowed: None, True or False")
    if not on_device:
        x = cuda.to_device(np.ascontiguousarray(x))
        w = cuda.to_device(np.ascontiguousarray(w))
    try:
        return Im2winLaunch(x, w, problem, params, max_registers, staging, unroll)
    except KernelInputError as exc:
        if isinstance(exc, Im2winError):
            raise
        raise Im2winError(str(exc)) from None


def conv2d(x, w, stride: int = 1, padding: int = 0, *, variant: str = "optimized", m_b: int | None = None,
           n_b: int | None = None, k_b: int | None = None, m_t: int | None = None, n_t: int | None = None,
           math: str = "fp32"):
    """The convolution of x (N, C, H, W) with w (K, C, R, S), NCHW float32 (module docstring)."""
    on_device = is_device_array(x)
    launch = prepare(x, w, stride, padding, variant=variant, m_b=m_b, n_b=n_b, k_b=k_b, m_t=m_t, n_t=n_t, math=math)
    launch.run()
    return launch.output if on_device else launch.output.copy_to_host()
