"""``conv2d``: a 3x3, stride-1 convolution by Winograd F(m x m, 3 x 3) on the GPU, fused (one
megakernel running a task map, the paper's design) or non-fused (four kernels), from the same
TaskGraph that megasim's simulator schedules.

    y = conv2d(x, w)                                   # NCHW float32 in, NKPQ float32 out
    y = conv2d(x, w, schedule="nonfused")
    y = conv2d(x, w, mapping=Algorithm1Params(d_ig=8, d_go=300, m=2), dispatch="blockidx")
    y = conv2d(x, w, style="persistent", blocks_per_sm=2)

NumPy arrays in give a NumPy array out; Numba device arrays in give a device array out. ``reference``
is the slow float64 NumPy oracle the tests compare against.

On device arrays, a call with a Plan form (no custom Schedule, style or dispatch) runs a cached
``gpu.prepared_conv.PreparedConv2d`` (built at the first call of a shape and configuration: no schedule,
task table or workspace work after it) and waits for it to check its error records; NCHW non-fused runs on
the NCHW transforms, fused NCHW transposes around the NHWC megakernel. The explicit-parameter API it is:
the model's choice per GPU and the no-synchronisation calls are ``gpu.prepared_conv.prepare_conv2d`` and
the PyTorch drop-in ``gpu.torch_conv.WinogradConv2d`` (docs/pytorch.md).

``conv2d`` lowers the problem (``lower_winograd``, cached), orders its tasks (the schedule, mapping and
execution style asked for) and runs that (graph, schedule) through the GPU executor
(``gpu.runtime.execute.PreparedRun``) and the Winograd kernel table (``gpu.runtime.winograd_kernels``):
the fused schedule's launches on the megakernel, the non-fused ones on the per-kind kernels.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np
from numba import cuda

from gpu.runtime import executor as ex
from gpu.runtime.execute import PreparedRun
from gpu.kernels.common import layout as lay
from gpu.errors import KernelInputError
from gpu.operands import is_device_array
from megasim.algorithms.winograd.lowering import (DEFAULT_TRANSFORM_PAIRS_PER_THREAD, GEMM_MATHS, WinogradConfig, DEFAULT_GEMM_MATH, default_tile, lower_winograd)
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES, direct_conv2d_reference
from megasim.algorithms.winograd.algorithm1 import Algorithm1Params, recommended_params
from megasim.schedule import Schedule
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.algorithms.winograd import winograd_nonfused
from megasim.schedule import DISPATCHES, STYLES
from megasim.plan import Plan
from megasim.plan import check_problem_size
from megasim.workloads.problem import ConvProblem

LAYOUTS = ("NCHW", "NHWC")
SCHEDULES = ("fused", "nonfused")


def reference(x: np.ndarray, w: np.ndarray, padding: int = 1, layout: str = "NCHW") -> np.ndarray:
    """Float64 direct convolution (the oracle): x in ``layout``, w (K, C, 3, 3); output in ``layout``."""
    x = np.asarray(x, np.float64)
    if layout == "NHWC":
        return direct_conv2d_reference(x.transpose(0, 3, 1, 2), w, padding).transpose(0, 2, 3, 1)
    return direct_conv2d_reference(x, w, padding)


@lru_cache(maxsize=32)
def _plan(problem: ConvProblem, cfg: WinogradConfig) -> ex.WinogradPlan:
    return ex.make_plan(problem, cfg, lower_winograd(problem, cfg))


def _runs_on(schedule: str) -> Plan:
    """The megasim Plan naming what the executor runs: algorithm winograd and the schedule, whose name
    picks the kernels (fused: the megakernel; nonfused: the per-kind kernels); the implementation
    config travels in the graph (``graph.meta``), the task maps in the Schedule."""
    return Plan(schedule, algorithm="winograd")


def _check_tensor(name: str, a, on_device: bool) -> None:
    if on_device != is_device_array(a):
        raise KernelInputError(f"x and w must both be NumPy arrays or both device arrays; {name} is not")
    if getattr(a, "ndim", None) != 4:
        raise KernelInputError(f"{name} must be 4-D, got shape {getattr(a, 'shape', None)}")
    if np.dtype(a.dtype) != np.float32:
        raise KernelInputError(f"{name} must be float32, got {np.dtype(a.dtype)}")
    if min(a.shape) < 1:
        raise KernelInputError(f"{name} has shape {tuple(a.shape)}: every dimension must be >= 1")
    if on_device and not (hasattr(a, "is_c_contiguous") and a.is_c_contiguous()):
        raise KernelInputError(f"device array {name} must be C-contiguous")


def _config(m, config, schedule: str, gemm_math, problem: ConvProblem) -> WinogradConfig:
    """``config``, or megasim's defaults for ``schedule`` (pairs per transform thread differ by schedule) and
    the layer (``default_tile``)."""
    if gemm_math is not None and gemm_math not in GEMM_MATHS:
        raise KernelInputError(f"gemm_math={gemm_math!r} is not allowed (allowed: {', '.join(GEMM_MATHS)})")
    if config is None:
        m = default_tile(problem) if m is None else m
        if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)) or m not in SUPPORTED_TILES:
            raise KernelInputError(f"m={m!r} is not allowed (allowed: {', '.join(map(str, SUPPORTED_TILES))})")
        return WinogradConfig(m=m, transform_pairs_per_thread=DEFAULT_TRANSFORM_PAIRS_PER_THREAD[schedule],
                              gemm_math=gemm_math or DEFAULT_GEMM_MATH)
    if not isinstance(config, WinogradConfig):
        raise KernelInputError(f"config must be a WinogradConfig, got {type(config).__name__}")
    if m is not None and m != config.m:
        raise KernelInputError(f"m={m!r} differs from config.m={config.m}; give one of them")
    if gemm_math is not None and gemm_math != config.gemm_math:
        raise KernelInputError(f"gemm_math={gemm_math!r} differs from config.gemm_math={config.gemm_math!r}; "
                               "give one of them")
    return config


def _schedule(plan: ex.WinogradPlan, schedule: str, mapping, style, dispatch, blocks_per_sm) -> Schedule:
    graph = plan.graph
    if schedule == "nonfused":
        if mapping is not None or style is not None or dispatch is not None or blocks_per_sm is not None:
            raise KernelInputError("mapping, style, dispatch and blocks_per_sm apply to schedule='fused' only")
        return winograd_nonfused(graph)
    if mapping is None:
        sched = algorithm1(graph, recommended_params(graph))
    elif isinstance(mapping, Algorithm1Params):
        sched = algorithm1(graph, mapping)
    elif isinstance(mapping, Schedule):
        sched = mapping              # checked by run_schedule
    else:
        raise KernelInputError(f"mapping must be None, an Algorithm1Params or a Schedule, got {type(mapping).__name__}")
    if style is not None or dispatch is not None or blocks_per_sm is not None:
        style = style or "per_task"
        dispatch = dispatch or "ticket"
        if style not in STYLES:
            raise KernelInputError(f"style={style!r} is not allowed (allowed: {', '.join(STYLES)})")
        if dispatch not in DISPATCHES:
            raise KernelInputError(f"dispatch={dispatch!r} is not allowed (allowed: {', '.join(DISPATCHES)})")
        if blocks_per_sm is not None and style != "persistent":
            raise KernelInputError(f"blocks_per_sm={blocks_per_sm!r} is not allowed with style={style!r}: it applies "
                                   f"to style='persistent' only")
        sched = sched.with_style(style, dispatch, blocks_per_sm)
    return sched


def _prepared(problem: ConvProblem, cfg: WinogradConfig, schedule: str, mapping, layout: str,
              plan: ex.WinogradPlan, poll_limit: int):
    """For device arrays, the cached ``gpu.prepared_conv.PreparedConv2d`` of this call (None where the config
    has no Plan form): a function (x, w) -> y that runs it, NCHW or NHWC, and raises a kernel error at once.
    NCHW runs the non-fused schedule on the NCHW transforms; the fused schedule on NCHW arrays transposes
    around the NHWC megakernel."""
    from gpu.prepared_conv import prepare_conv2d
    from megasim.algorithms.winograd.plugin import WinogradParams
    params = WinogradParams(tile=cfg.m, tiles_per_group=cfg.tiles_per_group, transform_threads=cfg.transform_threads,
                            transform_pairs_per_thread=cfg.transform_pairs_per_thread, gemm_k_tile=cfg.gemm_k_tile,
                            gemm_threads=cfg.gemm_threads, gemm_math=cfg.gemm_math)
    if params.config != cfg:
        return None
    if schedule == "fused":
        m = mapping if mapping is not None else recommended_params(plan.graph)
        params = replace(params, d_ig=m.d_ig, d_go=m.d_go, m=m.m)
    fused_nchw = schedule == "fused" and layout == "NCHW"
    conv = prepare_conv2d(problem, Plan(schedule, algorithm="winograd", params=params),
                          layout="NHWC" if fused_nchw else layout, poll_limit=poll_limit)

    def call(x, w):
        y = conv(lay.nchw_to_nhwc(x) if fused_nchw else x, w)
        conv.check()
        return lay.nhwc_to_nchw(y) if fused_nchw else y
    return call


def conv2d(x, w, *, schedule: str = "fused", mapping=None, layout: str = "NCHW", padding: int = 1,
           m: int | None = None, config: WinogradConfig | None = None, style: str | None = None,
           dispatch: str | None = None, blocks_per_sm: int | None = None, gemm_math: str | None = None,
           poll_limit: int = ex.DEFAULT_POLL_LIMIT):
    """Convolve x with w (K, C, 3, 3), stride 1, zero padding ``padding``, by Winograd F(m x m, 3x3).

    x is (N, C, H, W) for layout="NCHW" (output (N, K, P, Q)) or (N, H, W, C) for "NHWC" (output
    (N, P, Q, K)), P = H + 2*padding - 2. Both float32; both NumPy (NumPy out) or both Numba device
    arrays (device array out). ``schedule="fused"`` runs one megakernel over a task map: ``mapping``
    None (Algorithm 1 with ``megasim.mapping.recommended_params``: M = 8, D_IG and D_GO at 8x and 4x
    their smallest valid values; the H200 and H100 sweeps of experiments.benchmarks.winograd_bench measured it
    within 1-2% of each layer's best mapping (docs/findings.md), where the tightest parameters of ``default_params`` lose 14-21%), an
    Algorithm1Params, or any valid megasim
    Schedule (every launch runs with the megakernel); ``style`` ("per_task" or "persistent"),
    ``dispatch`` ("ticket" or "blockidx") and ``blocks_per_sm`` override the launches' execution
    style. ``schedule="nonfused"`` runs the four per-kind kernels. ``m`` (2, 4, 5, 6 or 7) defaults to config.m, or
    ``megasim.algorithms.winograd.lowering.default_tile`` of the layer (of 4, 5 and 6 the tile whose GEMM has the fewest
    multiplies).
    ``config`` None: megasim's defaults for the schedule (4 pairs per transform thread fused, 1 non-fused).
    ``gemm_math``: the GEMM's arithmetic, "fp32" (the FP32 pipe) or "3xtf32" (tensor cores, FP32-accurate
    by the 3xTF32 split); None: config.gemm_math (default "fp32").
    Raises KernelInputError (bad inputs), MappingError (bad mapping), MegakernelError (a kernel's
    dependency wait gave up after ``poll_limit`` polls).
    """
    if schedule not in SCHEDULES:
        raise KernelInputError(f"schedule={schedule!r} is not allowed (allowed: {', '.join(SCHEDULES)})")
    if layout not in LAYOUTS:
        raise KernelInputError(f"layout={layout!r} is not allowed (allowed: {', '.join(LAYOUTS)})")
    if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)) or padding < 0:
        raise KernelInputError(f"padding={padding!r} is not allowed: it must be an integer >= 0")
    on_device = is_device_array(x)
    if on_device:   # other libraries' device arrays (__cuda_array_interface__) become Numba's
        x = x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)
        w = w if hasattr(w, "copy_to_host") or not is_device_array(w) else cuda.as_cuda_array(w)
    else:
        x = np.asarray(x)
        w = w if is_device_array(w) else np.asarray(w)
    _check_tensor("x", x, on_device)
    _check_tensor("w", w, on_device)
    if tuple(w.shape[2:]) != (3, 3):
        raise KernelInputError(f"w must be (K, C, 3, 3), got shape {tuple(w.shape)}: only 3x3 filters are supported")
    n, c, h, wd = x.shape if layout == "NCHW" else (x.shape[0], x.shape[3], x.shape[1], x.shape[2])
    if w.shape[1] != c:
        raise KernelInputError(f"channels differ: x has C={c} ({layout}), w has C={w.shape[1]}")
    problem = ConvProblem(int(n), int(c), int(w.shape[0]), int(h), int(wd), padding=int(padding))
    check_problem_size(problem)     # the kernels index with 32-bit integers: refuse before allocating
    cfg = _config(m, config, schedule, gemm_math, problem)
    plan = _plan(problem, cfg)
    if on_device and (style, dispatch, blocks_per_sm) == (None,) * 3 and (
            mapping is None or (schedule == "fused" and isinstance(mapping, Algorithm1Params))):
        fast = _prepared(problem, cfg, schedule, mapping, layout, plan, poll_limit)
        if fast is not None:
            return fast(x, w)
    sched = _schedule(plan, schedule, mapping, style, dispatch, blocks_per_sm)

    if on_device:
        x_nhwc = lay.nchw_to_nhwc(x) if layout == "NCHW" else x
        d_w = w
    else:
        x_nhwc = cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1) if layout == "NCHW" else x))
        d_w = cuda.to_device(np.ascontiguousarray(w))
    run = PreparedRun(problem, _runs_on(schedule), plan.graph, sched, options={"poll_limit": poll_limit})
    ws = run.workspace(x_nhwc, d_w)
    run.run(ws)
    run.check()
    if on_device:
        return lay.nhwc_to_nchw(ws.Y) if layout == "NCHW" else ws.Y
    y = ws.Y.copy_to_host()
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)) if layout == "NCHW" else y
