"""The runs the calibration's probes share (``gpu.calibrate.measure`` and ``gpu.calibrate.occupancy``): a
calibration layer's non-fused schedule with workspaces of fresh inputs, its launches' task orders, one
kind's tasks alone in the traced megakernel, a megakernel launch over an empty map, and two tiny kernels
(an empty one with four array arguments, and a one-thread spin that keeps the GPU busy while the host
enqueues what is timed behind it)."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from gpu.runtime.fast_launch import FrozenLaunch


# --- kernels (module level, so the CUDA simulator could run them) ----------------------------------
@cuda.jit
def empty4(a, b, c, d):
    """Grid/block: any. Does nothing (launch cost probe)."""
    pass


@cuda.jit
def spin_kernel(out, iters):
    """One thread: a long dependent FMA chain (keeps the GPU busy while the host enqueues)."""
    x = out[0]
    for _ in range(iters):
        x = x * float32(0.9999999) + float32(1e-7)
    out[0] = x


def empty_megakernel_run(sm: int):
    """run() doing what ``PreparedSchedule.run`` does for one megakernel launch, on a map of 0 tasks:
    the counter and control reset, then the megakernel (``sm`` blocks), arguments packed once.
    ``run.threads`` is its block size."""
    from gpu.runtime import executor as ex
    from gpu.kernels.winograd import megakernel as mk
    from megasim.algorithms.winograd.lowering import WinogradConfig
    from megasim.workloads import parse_layer
    plan = ex.make_plan(parse_layer("N=1,C=8,K=8,H=8,W=8"), WinogradConfig())
    ws = ex.workspace(plan, cuda.to_device(np.zeros((1, 8, 8, 8), np.float32)),
                      cuda.to_device(np.zeros((8, 8, 3, 3), np.float32)))
    table = cuda.to_device(np.full((1, mk.TABLE_COLS), -1, np.int32))
    ctl = np.zeros(mk.CTL_SIZE, np.int32)
    ctl[mk.CTL_POLL_LIMIT] = 1 << 20
    d_ctl_init, d_ctl = cuda.to_device(ctl), cuda.to_device(ctl)
    cnt_init = cuda.to_device(plan.graph.counter_init.astype(np.int32))
    cnt = cuda.to_device(plan.graph.counter_init.astype(np.int32))
    threads = max(plan.config.transform_threads, plan.config.gemm_threads)
    restore = FrozenLaunch(mk.restore_kernel, -(-max(cnt.size, d_ctl.size) // mk.RESTORE_THREADS),
                           mk.RESTORE_THREADS, 0, (cnt, cnt_init, d_ctl, d_ctl_init))
    launch = FrozenLaunch(mk.kernels_for(plan.config.gemm_math, m=plan.config.m).megakernel,
                          sm, threads, plan.shared_bytes,
                          (table, d_ctl, cnt, cuda.to_device(plan.params), ws.x, ws.w, ws.U, ws.V, ws.M, ws.Y,
                           ex.no_trace(), *mk.launch_scalars(ctl)))

    def run():
        restore()
        launch()
    run.threads = threads
    return run


def random_workspaces(problem, wplan, rng: np.random.Generator, count: int = 3) -> list:
    """``count`` workspaces of ``wplan`` on fresh standard-normal NHWC inputs and filters of ``problem``."""
    from gpu.runtime import executor as ex
    wss = []
    for _ in range(count):
        x = rng.standard_normal((problem.n, problem.h, problem.w, problem.c), dtype=np.float32)
        w = rng.standard_normal((problem.k, problem.c, 3, 3), dtype=np.float32)
        wss.append(ex.workspace(wplan, cuda.to_device(x), cuda.to_device(w)))
    return wss


def nonfused_workspaces(name: str, plan_params: str, rng: np.random.Generator):
    """A calibration layer's non-fused schedule with 3 workspaces of fresh inputs, each run once
    through every launch, so that any launch timed alone finds its inputs (U, V, M) written.
    Returns (graph, schedule, wplan, workspaces)."""
    from gpu.runtime import executor as ex
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.plan import Plan, build
    from megasim.workloads import parse_layer
    problem = parse_layer(name)
    graph, schedule, plan = build(problem, Plan.parse("nonfused", plan_params))
    wplan = ex.make_plan(problem, plan.params.config, graph)
    wss = random_workspaces(problem, wplan, rng)
    full = PreparedSchedule(wplan, schedule, kernels="per_kind")
    for ws in wss:
        full.run(ws)
    cuda.synchronize()
    return graph, schedule, wplan, wss


def launch_orders(graph, schedule) -> dict[str, np.ndarray]:
    """Each launch of a non-fused schedule (one kind each): its kind's name -> its task order."""
    return {graph.kind_names[int(graph.kind[int(la.order[0])])]: np.asarray(la.order, np.int64)
            for la in schedule.launches}


def traced_alone(wplan, wss, order, name: str, style: str = "per_task", blocks_per_sm: int | None = None,
                 runs: int = 3) -> np.ndarray:
    """The megakernel running only the tasks of ``order`` (counters at zero: their parents ran before),
    traced: ``runs`` runs with the workspaces ``wss`` rotated, the last kept. Returns its trace as
    float64, a row per map position (gpu.kernels.winograd.megakernel.TRACE_COLS: claim, ready, end, sm, done)."""
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.schedule import Launch, Schedule
    one = Schedule(name, (Launch(np.asarray(order, np.int64), name, style, "ticket", blocks_per_sm),))
    prep = PreparedSchedule(wplan, one, kernels="megakernel", check=False, trace=True)
    prep.d_counters_init = cuda.to_device(np.zeros(wplan.graph.num_counters, np.int32))
    for i in range(runs):
        prep.run(wss[i % len(wss)])
    cuda.synchronize()
    prep.check()
    return prep.traces()[0].astype(np.float64)
