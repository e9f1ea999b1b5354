"""Host side of the Winograd kernels: packs a TaskGraph and a Schedule into the kernels' arrays,
launches them, and turns a kernel's error record into a ``MegakernelError``.

The one executor of every algorithm is ``gpu.runtime.execute`` (through the kernel tables of
``gpu.runtime.table``); Winograd's table (``gpu.runtime.winograd_kernels``) is built from the pieces
here (``make_plan``, ``task_table``, ``counters_for``, ``per_kind_kernel``, ``megakernel_launch``).
``run_schedule`` below is the Winograd-only path the calibration, probes and diagnostics call with
``kernels=`` and ``specialise=``.

``WinogradPlan`` holds what every launch of one problem shares (graph, params, block size, shared
memory); ``run_schedule`` runs one Schedule on device tensors. Each Launch of the schedule runs
either with the megakernel (any mix of kinds; per-task ticket, blockidx or ready-queue dispatch, or a
persistent grid) or, with ``kernels="per_kind"``, with the non-fused kernel of its one kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda

from gpu.errors import KernelInputError, MegakernelError
from gpu.kernels.winograd import megakernel as mk
from gpu.kernels.winograd import device as dev
from megasim.algorithms.winograd.lowering import KINDS, WinogradConfig, WinogradShape, lower_winograd, winograd_shape
from megasim.schedule import Schedule, check_valid
from megasim.ready import ready_lists
from megasim.ready import root_mask
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

DEFAULT_POLL_LIMIT = 1 << 24   # polls before a dependency wait gives up (seconds on a GPU)
KERNEL_STYLES = ("megakernel", "per_kind")


@dataclass(frozen=True, eq=False)
class WinogradPlan:
    problem: ConvProblem
    config: WinogradConfig
    graph: TaskGraph
    shape: WinogradShape
    params: np.ndarray          # int32 (NUM_PARAMS,)
    shared_bytes: int           # dynamic shared memory of a GEMM (and so of a megakernel block)

    @property
    def alpha2(self) -> int:
        return self.config.alpha ** 2


def pack_params(problem: ConvProblem, cfg: WinogradConfig, sh: WinogradShape) -> np.ndarray:
    prm = np.zeros(dev.NUM_PARAMS, np.int32)
    values = {
        dev.P_N: problem.n, dev.P_H: problem.h, dev.P_W: problem.w, dev.P_C: problem.c, dev.P_K: problem.k,
        dev.P_P: problem.out_h, dev.P_Q: problem.out_w, dev.P_PAD: problem.padding, dev.P_M: cfg.m,
        dev.P_T: cfg.tiles_per_group, dev.P_TILES: sh.tiles, dev.P_TILES_Y: sh.tiles_y, dev.P_TILES_X: sh.tiles_x,
        dev.P_KTILES: sh.k_tiles, dev.P_GK: cfg.gemm_k_tile, dev.P_KSTEP: cfg.gemm_k_step,
        dev.P_TTHR: cfg.transform_threads, dev.P_GTHR: cfg.gemm_threads,
        dev.P_TPAIRS: cfg.transform_pairs_per_thread,
    }
    for i, v in values.items():
        prm[i] = v
    return prm


def make_plan(problem: ConvProblem, cfg: WinogradConfig, graph: TaskGraph | None = None) -> WinogradPlan:
    """The plan of a problem; ``graph`` must be ``lower_winograd(problem, cfg)`` when given."""
    sh = winograd_shape(problem, cfg)
    # (the kernels' flat indices, int32 in the t = 64 GEMM path, stay below 2^31)
    if cfg.alpha ** 2 * max(sh.tiles * problem.c, sh.tiles * problem.k, problem.c * problem.k) >= 2 ** 31:
        raise KernelInputError(f"{problem.spec_string()}: the transformed tensors would hold 2^31 or more "
                               "elements; split the batch (or the channels)")
    graph = graph if graph is not None else lower_winograd(problem, cfg)
    if graph.kind_names != KINDS or graph.wait_counters.shape[1] > 2 or graph.signal_counters.shape[1] > 1:
        raise KernelInputError("the megakernel runs Winograd TaskGraphs (kinds ftrans, itrans, gemm, otrans; "
                               "at most 2 waits and 1 signal per task)")
    smem = dev.gemm_shared_bytes(cfg.tiles_per_group, cfg.gemm_k_tile, cfg.gemm_k_step, cfg.gemm_threads,
                                 cfg.gemm_math)
    if smem > 48 * 1024:
        raise KernelInputError(f"GEMM staging needs {smem} bytes of shared memory; at most 49152 are allowed "
                               "(lower tiles_per_group, gemm_k_tile or gemm_k_step)")
    return WinogradPlan(problem, cfg, graph, sh, pack_params(problem, cfg, sh), smem)


def task_table(graph: TaskGraph, order: np.ndarray) -> np.ndarray:
    """The int32 (len(order), TABLE_COLS) task table of a map, row = map position."""
    order = np.asarray(order, np.int64)
    table = np.full((order.size, mk.TABLE_COLS), -1, np.int32)
    table[:, mk.T_KIND] = graph.kind[order]
    table[:, mk.T_GROUP] = graph.group[order]
    table[:, mk.T_INDEX] = graph.index_in_group[order]
    nw = graph.wait_counters.shape[1]
    table[:, mk.T_WAIT0:mk.T_WAIT0 + nw] = graph.wait_counters[order]
    table[:, mk.T_SIGNAL] = graph.signal_counters[order, 0]
    table[:, mk.T_TASK] = order
    table[:, mk.T_ROOT] = root_mask(graph, order)
    return table


def counters_for(plan: WinogradPlan, schedule: Schedule) -> tuple[np.ndarray, list[dict[int, int] | None]]:
    """The int32 array a run of ``schedule`` starts ``counters`` from, and per launch the control-array
    fields of its ready-queue lists (None for a launch with another dispatch).

    The array is the graph's dependency counters followed, for each launch with ``dispatch="ready"``,
    by its ``megasim.mapping.ReadyLists`` (roots, the counters' wait groups, the groups' map positions),
    its wait groups' pending counts and its queue (one slot per task: the launch's first
    ``ready_window`` roots, default one per SM, then -1 = not yet written), after the queue's head,
    tail and root ticket (a 128-byte line each): the state the megakernel changes is reset with the
    counters, once per run of the schedule."""
    parts = [plan.graph.counter_init.astype(np.int32)]
    offset = parts[0].size
    fields: list[dict[int, int] | None] = []
    for launch in schedule.launches:
        if launch.dispatch != "ready":
            fields.append(None)
            continue
        rl = ready_lists(plan.graph, launch.order)
        window = min(launch.ready_window or sm_count(), rl.roots.size)
        queue = np.full(len(launch.order), -1, np.int32)
        queue[:window] = rl.roots[:window]
        sections = ((mk.CTL_R_ROOTS, rl.roots), (mk.CTL_R_CPTR, rl.counter_ptr), (mk.CTL_R_CGROUPS, rl.counter_groups),
                    (mk.CTL_R_GPTR, rl.group_ptr), (mk.CTL_R_GPOS, rl.group_positions),
                    (mk.CTL_R_PEND, rl.group_pending), (mk.CTL_R_QUEUE, queue))
        pad = -offset % mk.LINE_INTS                         # head, tail, root ticket: a 128-byte line each
        lines = np.zeros(pad + 3 * mk.LINE_INTS, np.int32)
        lines[pad + mk.LINE_INTS] = window                   # tail
        lines[pad + 2 * mk.LINE_INTS] = window               # root ticket
        parts.append(lines)
        f = {mk.CTL_NROOTS: int(rl.roots.size), mk.CTL_R_HEAD: offset + pad}
        offset += lines.size
        for key, arr in sections:
            f[key] = offset
            parts.append(np.asarray(arr, np.int32))
            offset += arr.size
        fields.append(f)
    if offset >= 2 ** 31:
        raise KernelInputError(f"the schedule's counters and ready lists need {offset} int32 entries; at most 2^31 - 1 "
                               "are allowed")
    return np.concatenate(parts), fields


def sm_count() -> int:
    """Streaming multiprocessors of the current device (1 under the CUDA simulator)."""
    return int(getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1) or 1)


def persistent_blocks(plan: WinogradPlan, threads: int, blocks_per_sm: int | None) -> int:
    """Grid size of a persistent launch: blocks_per_sm per SM, or as many as fit by threads and
    shared memory (an occupancy estimate, 2048 threads and 228 KiB shared per SM, at most 32)."""
    if blocks_per_sm is None:
        by_threads = 2048 // threads
        by_smem = (228 * 1024) // max(plan.shared_bytes + 1024, 1)
        blocks_per_sm = max(1, min(by_threads, by_smem, 32))
    return blocks_per_sm * sm_count()


@dataclass
class Workspace:
    """Device tensors of one run (see ``gpu.kernels.winograd.device`` for the layouts)."""

    x: object
    w: object
    U: object
    V: object
    M: object
    Y: object


def workspace(plan: WinogradPlan, x_nhwc, w_kcrs, y_nhwk=None) -> Workspace:
    p, sh, a2 = plan.problem, plan.shape, plan.alpha2
    U = cuda.device_array((a2, p.c, p.k), np.float32)
    V = cuda.device_array((a2, sh.tiles, p.c), np.float32)
    M = cuda.device_array((a2, sh.tiles, p.k), np.float32)
    Y = y_nhwk if y_nhwk is not None else cuda.device_array((p.n, p.out_h, p.out_w, p.k), np.float32)
    return Workspace(x_nhwc, w_kcrs, U, V, M, Y)


def _raise_kernel_error(plan: WinogradPlan, ctl: np.ndarray, launch_name: str) -> None:
    code = int(ctl[mk.CTL_ERR_CODE])
    if code == mk.ERR_NONE:
        return
    if code == mk.ERR_READY_TIMEOUT:
        raise MegakernelError(
            f"launch {launch_name!r}: ready-queue slot {int(ctl[mk.CTL_ERR_COUNTER])} was still empty after "
            f"{int(ctl[mk.CTL_POLL_LIMIT])} polls (queue tail {int(ctl[mk.CTL_ERR_VALUE])}, "
            f"{int(ctl[mk.CTL_NTASKS])} tasks): a task never became runnable")
    if code != mk.ERR_WAIT_TIMEOUT:
        raise MegakernelError(f"launch {launch_name!r}: kernel reported unknown error code {code}")
    g = plan.graph
    task = int(ctl[mk.CTL_ERR_TASK])
    raise MegakernelError(
        f"launch {launch_name!r}: task {task} ({g.kind_names[g.kind[task]]}, group {g.group[task]}, "
        f"index {g.index_in_group[task]}) at map position {int(ctl[mk.CTL_ERR_POS])} gave up after "
        f"{int(ctl[mk.CTL_POLL_LIMIT])} polls of counter {int(ctl[mk.CTL_ERR_COUNTER])} (still "
        f"{int(ctl[mk.CTL_ERR_VALUE])}): a parent comes later in the map or never ran")


def no_trace():
    """The one-row trace array a megakernel launch gets when it records nothing."""
    return cuda.to_device(np.zeros((1, mk.TRACE_COLS), np.int64))


def megakernel_launch(plan: WinogradPlan, launch, size: int, poll_limit: int,
                      ready_fields: dict[int, int] | None = None) -> tuple[np.ndarray, int, int]:
    """The control array (host copy), grid and block size of one megakernel launch of `size` tasks;
    ``ready_fields``: the launch's entry of ``counters_for`` (required for dispatch="ready")."""
    if launch.style == "persistent" and launch.dispatch == "blockidx":
        raise KernelInputError(f"launch {launch.name!r}: persistent launches claim tasks by ticket; "
                               "dispatch='blockidx' is not allowed with style='persistent'")
    if isinstance(poll_limit, bool) or not isinstance(poll_limit, (int, np.integer)) or not 1 <= poll_limit < 2 ** 31:
        raise KernelInputError(f"poll_limit={poll_limit!r} is not allowed: it must be an integer in [1, 2^31)")
    cfg = plan.config
    threads = max(cfg.transform_threads, cfg.gemm_threads)
    persistent = launch.style == "persistent"
    ctl = np.zeros(mk.CTL_SIZE, np.int32)
    ctl[mk.CTL_NTASKS] = size
    ctl[mk.CTL_DISPATCH] = {"ticket": mk.DISPATCH_TICKET, "blockidx": mk.DISPATCH_BLOCKIDX,
                            "ready": mk.DISPATCH_READY}[launch.dispatch]
    if launch.dispatch == "ready":
        if ready_fields is None:
            raise KernelInputError(f"launch {launch.name!r}: dispatch='ready' needs its ready lists "
                                   "(gpu.runtime.executor.counters_for)")
        for key, value in ready_fields.items():
            ctl[key] = value
    ctl[mk.CTL_PERSISTENT] = int(persistent)
    ctl[mk.CTL_POLL_LIMIT] = poll_limit
    grid = min(size, persistent_blocks(plan, threads, launch.blocks_per_sm)) if persistent else size
    return ctl, grid, threads


def run_launch_megakernel(plan: WinogradPlan, launch, ws: Workspace, d_prm, d_counters, *,
                          poll_limit: int = DEFAULT_POLL_LIMIT, ready_fields: dict[int, int] | None = None,
                          specialise: bool = False) -> None:
    """One Launch of a schedule with the megakernel; raises MegakernelError on a reported failure.
    ``d_counters`` as made by ``counters_for``, ``ready_fields`` its entry for this launch; ``specialise``:
    the specialised megakernel build where the config is its implementation (``megakernel.megakernel_for``)."""
    order = np.asarray(launch.order, np.int64)
    if order.size == 0:
        return
    ctl, grid, threads = megakernel_launch(plan, launch, order.size, poll_limit, ready_fields)
    d_table = cuda.to_device(task_table(plan.graph, order))
    d_ctl = cuda.to_device(ctl)
    mk.megakernel_for(ctl, plan.config.gemm_math, plan.config, specialise)[grid, threads, 0, plan.shared_bytes](
        d_table, d_ctl, d_counters, d_prm, ws.x, ws.w, ws.U, ws.V, ws.M, ws.Y, no_trace(), *mk.launch_scalars(ctl))
    _raise_kernel_error(plan, d_ctl.copy_to_host(), launch.name)


def run_launch_per_kind(plan: WinogradPlan, launch, ws: Workspace, d_prm) -> None:
    """One single-kind Launch with that kind's non-fused kernel (block b runs map position b)."""
    order = np.asarray(launch.order, np.int64)
    if order.size == 0:
        return
    kinds = np.unique(plan.graph.kind[order])
    if kinds.size != 1:
        raise KernelInputError(f"launch {launch.name!r} mixes task kinds; only the megakernel runs such launches")
    d_table = cuda.to_device(task_table(plan.graph, order))
    kernel, threads, shared, args_of = per_kind_kernel(plan, int(kinds[0]), d_table, d_prm)
    kernel[order.size, threads, 0, shared](*args_of(ws))


def per_kind_kernel(plan: WinogradPlan, kind: int, d_table, d_prm) -> tuple:
    """(kernel, threads per block, dynamic shared bytes, args_of) of a task kind's non-fused kernel
    running the tasks of ``d_table`` (one block per row); ``args_of(ws)`` is its argument tuple on
    the tensors of workspace ``ws``."""
    cfg = plan.config
    transforms = mk.transform_kernels_for(cfg.m)
    if kind == dev.FTRANS:
        return transforms.ftrans_kernel, cfg.transform_threads, 0, lambda ws: (d_table, d_prm, ws.w, ws.U)
    if kind == dev.ITRANS:
        return transforms.itrans_kernel, cfg.transform_threads, 0, lambda ws: (d_table, d_prm, ws.x, ws.V)
    if kind == dev.GEMM:
        return (mk.kernels_for(cfg.gemm_math).gemm_kernel, cfg.gemm_threads, plan.shared_bytes,
                lambda ws: (d_table, d_prm, ws.V, ws.U, ws.M))
    return transforms.otrans_kernel, cfg.transform_threads, 0, lambda ws: (d_table, d_prm, ws.M, ws.Y)


def run_schedule(plan: WinogradPlan, schedule: Schedule, ws: Workspace, *, kernels: str = "megakernel",
                 poll_limit: int = DEFAULT_POLL_LIMIT, check: bool = True, specialise: bool = False) -> None:
    """Run every Launch of ``schedule`` in turn on the tensors of ``ws`` (the output lands in ws.Y).

    ``kernels="megakernel"`` runs each launch with the megakernel, "per_kind" with the non-fused
    kernels (single-kind launches only). The dependency counters start at ``counter_init`` once, before
    the first launch. ``check=False`` skips the host-side validity check of the schedule (to test the
    kernel's own bounded waits); an invalid map then ends in a MegakernelError, not a hang.
    ``specialise=True`` runs the megakernel launches on the specialised build where the config is its
    implementation (``gpu.kernels.winograd.megakernel.megakernel_for``; opt-in: it measured slower overall).
    """
    if kernels not in KERNEL_STYLES:
        raise KernelInputError(f"kernels={kernels!r} is not allowed (allowed: {', '.join(KERNEL_STYLES)})")
    if check:
        check_valid(plan.graph, schedule)
    d_prm = cuda.to_device(plan.params)
    if kernels == "megakernel":
        counters, ready_fields = counters_for(plan, schedule)
        d_counters = cuda.to_device(counters)
    for li, launch in enumerate(schedule.launches):
        if kernels == "megakernel":
            run_launch_megakernel(plan, launch, ws, d_prm, d_counters, poll_limit=poll_limit,
                                  ready_fields=ready_fields[li], specialise=specialise)
        else:
            run_launch_per_kind(plan, launch, ws, d_prm)
