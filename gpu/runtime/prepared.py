"""Running one Schedule many times with its arrays uploaded once: the timing path of the executors.

``gpu.runtime.executor.run_schedule`` uploads the params, the dependency counters and each launch's task table
and control array on every call, and reads each megakernel launch's control array back (a host
synchronisation). Right for one call; for timing it would add megabytes of host-to-device copies
(vgg-1's megakernel table is ~5 MB) to a kernel time of a few milliseconds. ``PreparedSchedule``
uploads all of that once; ``run(ws)`` then only restores the counters and the control arrays from
device-side pristine copies (``megakernel.restore_kernel``, one small launch per megakernel launch) and launches the kernels,
exactly as ``run_launch_megakernel`` / ``run_launch_per_kind`` do (same grids, blocks, shared
memory, arguments), each with its arguments packed once per workspace (``gpu.runtime.fast_launch``: Numba's
per-launch argument handling cost the megakernel ~0.3 ms of host time per launch). ``check()`` reads the control arrays afterwards and raises MegakernelError as
the executor does.

This mirrors executor internals (``task_table``, ``persistent_blocks``, the kernels' signatures) as
of the commit it was written against; experiments/benchmarks/winograd_bench.py compares its output with
``gpu.winograd.conv2d``'s on the same inputs, so a drift shows as a correctness failure.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from gpu.runtime import executor as ex
from gpu.kernels.winograd import megakernel as mk
from gpu.kernels.winograd import device as dev
from gpu.errors import KernelInputError, MegakernelError
from gpu.runtime.fast_launch import FrozenLaunch
from megasim.schedule import Launch, Schedule, check_valid
from megasim.algorithms.winograd import winograd_nonfused


class _PreparedLaunch:
    def __init__(self, plan: ex.WinogradPlan, launch: Launch, kernels: str, poll_limit: int,
                 trace: bool = False, ready_fields: dict[int, int] | None = None, specialise: bool = False) -> None:
        self.launch = launch
        order = np.asarray(launch.order, np.int64)
        self.size = int(order.size)
        self.d_table = cuda.to_device(ex.task_table(plan.graph, order)) if self.size else None
        self.kind = None
        self.d_ctl = self.d_ctl_init = None
        if kernels == "megakernel":
            ctl, self.grid, self.threads = ex.megakernel_launch(plan, launch, self.size, poll_limit, ready_fields)
            self.kernel = mk.megakernel_for(ctl, plan.config.gemm_math, plan.config, specialise)
            if trace:
                ctl[mk.CTL_TRACE] = 1
                self.d_trace = cuda.to_device(np.zeros((max(1, self.size), mk.TRACE_COLS), np.int64))
            else:
                self.d_trace = ex.no_trace()
            self.scalars = mk.launch_scalars(ctl)
            self.d_ctl_init = cuda.to_device(ctl)
            self.d_ctl = cuda.to_device(ctl)
        elif self.size:
            kinds = np.unique(plan.graph.kind[order])
            if kinds.size != 1:
                raise KernelInputError(f"launch {launch.name!r} mixes task kinds; only the megakernel runs such launches")
            self.kind = int(kinds[0])


class PreparedSchedule:
    """One plan's Schedule, ready to run repeatedly on any Workspace of that plan.

    ``kernels``: "megakernel" or "per_kind" (as ``run_schedule``). ``check=False`` skips the host-side
    validity check, e.g. for a schedule holding only the GEMM launch of a non-fused pipeline (its
    per-kind kernels do not wait on counters, so it reads whatever U and V hold). ``specialise``: as
    ``run_schedule``'s (the specialised megakernel build where the config is its implementation).
    """

    def __init__(self, plan: ex.WinogradPlan, schedule: Schedule, *, kernels: str = "megakernel",
                 poll_limit: int = ex.DEFAULT_POLL_LIMIT, check: bool = True, trace: bool = False,
                 specialise: bool = False) -> None:
        if kernels not in ex.KERNEL_STYLES:
            raise KernelInputError(f"kernels={kernels!r} is not allowed (allowed: {', '.join(ex.KERNEL_STYLES)})")
        if check:
            check_valid(plan.graph, schedule)
        self.plan, self.schedule, self.kernels = plan, schedule, kernels
        self.d_prm = cuda.to_device(plan.params)
        if kernels == "megakernel":
            init, ready_fields = ex.counters_for(plan, schedule)
            self.d_counters_init = cuda.to_device(init)
            self.d_counters = cuda.to_device(init)
        else:
            self.d_counters_init = self.d_counters = None
            ready_fields = [None] * len(schedule.launches)
        self.launches = [_PreparedLaunch(plan, l, kernels, poll_limit, trace, f, specialise)
                         for l, f in zip(schedule.launches, ready_fields)]
        self._frozen: dict[int, tuple] = {}   # id(workspace) -> (workspace, per-launch FrozenLaunch)

    def _restore(self, pl: _PreparedLaunch, first: bool) -> FrozenLaunch:
        """The reset before megakernel launch ``pl``: its control array, and the counters before the first."""
        a, a0 = (self.d_counters, self.d_counters_init) if first else (pl.d_ctl, pl.d_ctl_init)
        size = max(a.size, pl.d_ctl.size)
        return FrozenLaunch(mk.restore_kernel, -(-size // mk.RESTORE_THREADS), mk.RESTORE_THREADS, 0,
                            (a, a0, pl.d_ctl, pl.d_ctl_init))

    def _launchers(self, pl: _PreparedLaunch, ws: ex.Workspace) -> FrozenLaunch:
        """The launch of ``pl`` on workspace ``ws``, its arguments packed once (gpu.runtime.fast_launch)."""
        plan = self.plan
        if self.kernels == "megakernel":
            return FrozenLaunch(pl.kernel, pl.grid, pl.threads, plan.shared_bytes,
                                (pl.d_table, pl.d_ctl, self.d_counters, self.d_prm, ws.x, ws.w, ws.U, ws.V, ws.M,
                                 ws.Y, pl.d_trace, *pl.scalars))
        kernel, threads, shared, args_of = ex.per_kind_kernel(plan, pl.kind, pl.d_table, self.d_prm)
        return FrozenLaunch(kernel, pl.size, threads, shared, args_of(ws))

    def run(self, ws: ex.Workspace) -> None:
        """Enqueue the whole schedule on the default stream (no host synchronisation). The first run on
        a workspace packs each launch's arguments (gpu.runtime.fast_launch); later runs reuse them."""
        entry = self._frozen.get(id(ws))
        if entry is None or entry[0] is not ws:
            steps, first = [], True
            for pl in self.launches:
                if not pl.size:
                    continue
                if pl.d_ctl is not None:   # megakernel: restore counters (first launch) and control array
                    steps.append(self._restore(pl, first))
                    first = False
                steps.append(self._launchers(pl, ws))
            entry = (ws, steps)
            self._frozen[id(ws)] = entry
        for step in entry[1]:
            step()

    def traces(self) -> list[np.ndarray]:
        """Per megakernel launch, the recorded (claim_ns, ready_ns, end_ns, sm) of each map position
        (PreparedSchedule(..., trace=True); synchronises)."""
        return [pl.d_trace.copy_to_host() for pl in self.launches if pl.size and self.kernels == "megakernel"]

    def check(self) -> None:
        """Raise MegakernelError if the last run's megakernel launches reported an error (synchronises)."""
        for pl in self.launches:
            if pl.d_ctl is None:
                continue
            ctl = pl.d_ctl.copy_to_host()
            if int(ctl[mk.CTL_ERR_CODE]) != mk.ERR_NONE:
                raise_error = getattr(ex, "_raise_kernel_error", None)
                if raise_error is not None:
                    raise_error(self.plan, ctl, pl.launch.name)
                raise MegakernelError(f"launch {pl.launch.name!r}: kernel reported error code {int(ctl[mk.CTL_ERR_CODE])}")


def gemm_only(graph) -> Schedule:
    """The GEMM launch of the non-fused pipeline alone (run it with kernels="per_kind", check=False)."""
    launches = [l for l in winograd_nonfused(graph).launches if np.all(graph.kind[np.asarray(l.order)] == dev.GEMM)]
    if len(launches) != 1:
        raise KernelInputError("the non-fused schedule of this graph has no single GEMM launch")
    return Schedule("gemm_only", (launches[0],), {})
