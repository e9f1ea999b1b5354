"""The Winograd kernel table: ftrans, itrans, gemm, otrans -> the four non-fused kernels; any mix -> the
megakernel, which runs every launch of the ``fused`` and ``naive`` schedules.

The run's state (``WinogradState``) is the ``gpu.runtime.executor.WinogradPlan`` of the graph (its
implementation config read from ``graph.meta["config"]``, so the kernels run what was lowered), the
packed parameters and, when a launch runs on the megakernel, the dependency counters and ready lists
of the schedule (``executor.counters_for``) with a pristine device copy. A non-fused launch uploads its
task table (block b runs map position b, so any order of its one kind runs; the kernels do not wait on
counters, ``check_valid`` orders the launches). A megakernel launch uploads its task table and control
array; its first step restores the control array (and, before the schedule's first megakernel launch,
the counters) from the pristine copies (``megakernel.restore_kernel``), as ``PreparedSchedule`` does,
so a run can be repeated. Launches are ``FrozenLaunch``es: arguments packed once per workspace.
Inputs: x NHWC, w KCRS; the output is the workspace's Y (N, P, Q, K).

Run option ``layout="NCHW"``: x is (N, C, H, W) and Y (N, K, P, Q). The itrans and otrans launches then
run on the shared-memory NCHW transforms (``gpu.kernels.winograd.nchw``), which take a whole kind in one
launch (the non-fused schedule's launches); a megakernel launch is refused (its transforms read NHWC). An
otrans launch of more than 48 KiB of dynamic shared memory (``nchw.otrans_launch``'s whole-row strips) opts
its kernel in to that size when the launch is built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import config, cuda

from gpu.errors import KernelInputError
from gpu.kernels.common.random_fill import device_normal
from gpu.kernels.winograd import device as dev
from gpu.kernels.winograd import megakernel as mk
from gpu.kernels.winograd import nchw
from gpu.runtime import executor as ex
from gpu.runtime.fast_launch import FrozenLaunch
from gpu.runtime.prepared import _PreparedLaunch
from gpu.runtime.table import KernelTable, KindKernel, register_kernels
from megasim.algorithms.winograd.lowering import KINDS, WinogradConfig

OPTIONS = ("poll_limit", "specialise", "layout")
LAYOUTS = ("NHWC", "NCHW")


@dataclass(frozen=True, eq=False)
class WinogradState:
    plan: ex.WinogradPlan
    d_prm: object
    d_counters: object | None           # the run's counters and ready lists (None: no megakernel launch)
    d_counters_init: object | None      # their pristine copy
    ready_fields: tuple                 # per launch: counters_for's control fields (or None)
    first_megakernel: int | None        # index of the first non-empty megakernel launch
    poll_limit: int
    specialise: bool
    layout: str = "NHWC"


def _state(problem, plan, graph, schedule, on_megakernel, options) -> WinogradState:
    config = graph.meta.get("config") if isinstance(graph.meta, dict) else None
    if config is None:
        raise KernelInputError("the Winograd kernels run graphs of lower_winograd (their meta names the config)")
    layout = options.get("layout", "NHWC")
    if layout not in LAYOUTS:
        raise KernelInputError(f"layout={layout!r} is not allowed (allowed: {', '.join(LAYOUTS)})")
    if layout == "NCHW" and any(on_megakernel):
        raise KernelInputError("layout='NCHW' runs the non-fused kernels only (the megakernel's transforms read "
                               "NHWC): use schedule 'nonfused', or layout 'NHWC'")
    wplan = ex.make_plan(problem, WinogradConfig(**config), graph)
    d_counters = d_init = None
    ready: tuple = (None,) * len(schedule.launches)
    if any(on_megakernel):
        counters, fields = ex.counters_for(wplan, schedule)
        d_init, d_counters = cuda.to_device(counters), cuda.to_device(counters)
        ready = tuple(fields)
    first = next((i for i, (launch, m) in enumerate(zip(schedule.launches, on_megakernel))
                  if m and len(launch.order)), None)
    return WinogradState(wplan, cuda.to_device(wplan.params), d_counters, d_init, ready, first,
                         options.get("poll_limit", ex.DEFAULT_POLL_LIMIT), bool(options.get("specialise", False)),
                         layout)


class _KindLaunch:
    """A single-kind launch on that kind's non-fused kernel (block b runs map position b)."""

    def __init__(self, state: WinogradState, launch, kind: int) -> None:
        order = np.asarray(launch.order, np.int64)
        self.state, self.kind, self.size = state, kind, int(order.size)
        self.nchw = state.layout == "NCHW" and kind in (dev.ITRANS, dev.OTRANS)
        if self.nchw and self.size:
            everything = np.flatnonzero(state.plan.graph.kind == kind)
            if self.size != everything.size:
                raise KernelInputError(f"launch {launch.name!r} holds {self.size} of the {everything.size} "
                                       f"{KINDS[kind]} tasks: the NCHW transforms run all of a kind in one launch")
        self.d_table = cuda.to_device(ex.task_table(state.plan.graph, order)) if self.size and not self.nchw else None

    def steps(self, ws) -> list:
        if not self.size:
            return []
        if self.nchw:
            return [(_nchw_launch(self.state, self.kind, ws), ())]
        kernel, threads, shared, args_of = ex.per_kind_kernel(self.state.plan, self.kind, self.d_table,
                                                              self.state.d_prm)
        return [(FrozenLaunch(kernel, self.size, threads, shared, args_of(ws)), ())]

    def check(self) -> None:
        return None


class _MegakernelLaunch:
    """A launch of any mix of kinds on the megakernel (the dispatch and style its Launch names)."""

    def __init__(self, state: WinogradState, launch, index: int) -> None:
        self.state, self.first = state, index == state.first_megakernel
        self.pl = _PreparedLaunch(state.plan, launch, "megakernel", state.poll_limit, False,
                                  state.ready_fields[index], state.specialise)

    def steps(self, ws) -> list:
        pl, st = self.pl, self.state
        if not pl.size:
            return []
        a, a0 = (st.d_counters, st.d_counters_init) if self.first else (pl.d_ctl, pl.d_ctl_init)
        size = max(a.size, pl.d_ctl.size)
        restore = FrozenLaunch(mk.restore_kernel, -(-size // mk.RESTORE_THREADS), mk.RESTORE_THREADS, 0,
                               (a, a0, pl.d_ctl, pl.d_ctl_init))
        launch = FrozenLaunch(pl.kernel, pl.grid, pl.threads, st.plan.shared_bytes,
                              (pl.d_table, pl.d_ctl, st.d_counters, st.d_prm, ws.x, ws.w, ws.U, ws.V, ws.M, ws.Y,
                               pl.d_trace, *pl.scalars))
        return [(restore, ()), (launch, ())]

    def check(self) -> None:
        if self.pl.size:
            ex._raise_kernel_error(self.state.plan, self.pl.d_ctl.copy_to_host(), self.pl.launch.name)


def _nchw_launch(state: WinogradState, kind: int, ws) -> FrozenLaunch:
    """The NCHW itrans (x -> V) or otrans (M -> Y) launch of ``state``'s problem on workspace ``ws``."""
    plan = state.plan
    p, m = plan.problem, plan.config.m
    itrans, otrans = nchw.nchw_kernels_for(m)
    if kind == dev.ITRANS:
        blocks, threads, shared, chunk, tx = nchw.itrans_launch(p, m)
        return FrozenLaunch(itrans, blocks, threads, shared, (state.d_prm, ws.x, ws.V, chunk, tx))
    blocks, threads, shared, chunk, tx = nchw.otrans_launch(p, m)
    launch = FrozenLaunch(otrans, blocks, threads, shared, (state.d_prm, ws.M, ws.Y, chunk, tx))
    if shared > nchw.MAX_SHARED_BYTES:
        _allow_dynamic_shared(otrans, shared)
    return launch


def _allow_dynamic_shared(dispatcher, nbytes: int) -> None:
    """Let every compiled overload of ``dispatcher`` launch with ``nbytes`` of dynamic shared memory (above
    48 KiB a kernel needs CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES set; the NCHW otrans kernel's
    whole-row launch, ``nchw._whole_rows``, takes up to about 50 KiB). Nothing to do under the simulator."""
    if config.ENABLE_CUDASIM:
        return
    from numba.cuda.cudadrv.driver import binding, driver
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    for kernel in dispatcher.overloads.values():
        cufunc = kernel._codelibrary.get_cufunc()
        driver.cuKernelSetAttribute(attr, int(nbytes), cufunc.handle, cufunc.device.id)


def _workspace(state: WinogradState, x, w):
    if state.layout == "NCHW":
        p = state.plan.problem
        return ex.workspace(state.plan, x, w, cuda.device_array((p.n, p.k, p.out_h, p.out_w), np.float32))
    return ex.workspace(state.plan, x, w)


def _kind_kernel(kind: int) -> KindKernel:
    name = f"{KINDS[kind]}_kernel"

    def prepare(state, launch, index):
        return _KindLaunch(state, launch, kind)
    return KindKernel(name, prepare)


def _inputs(problem, plan, index: int):
    """Standard-normal device x (N, H, W, C) and w (K, C, 3, 3), drawn on the device, seeded by the set index."""
    return (device_normal((problem.n, problem.h, problem.w, problem.c), 1100 + 2 * index),
            device_normal((problem.k, problem.c, 3, 3), 1101 + 2 * index))


WINOGRAD_KERNELS = register_kernels(KernelTable(
    algorithm="winograd",
    kinds={name: _kind_kernel(k) for k, name in enumerate(KINDS)},
    state=_state,
    workspace=_workspace,
    output=lambda ws: ws.Y,
    inputs=_inputs,
    input_layout="NHWC",
    megakernel=KindKernel("megakernel", _MegakernelLaunch),
    megakernel_schedules=("fused", "naive"),
    options=OPTIONS,
))
