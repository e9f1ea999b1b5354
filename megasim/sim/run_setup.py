"""The setup of a run: the per-task tables the engine's event handlers read, and its records.

Everything a handler needs per task is computed here once, from the TaskGraph and the GPUSpec, as plain
lists (indexing a list is the cheapest lookup in the hot path): each task's compute work and fixed
latency (``megasim.sim.engine``'s docstring gives the formulas), its dependency counters, its tracked
L2 accesses in CSR order, and the records the result is built from (``megasim.sim.result``). The servers
are set up apart (``megasim.sim.resources``).
"""

from __future__ import annotations

from array import array

import numpy as np

from megasim.hardware.spec import TaskCost
from megasim.schedule import Schedule
from megasim.sim.l2 import L2Cache
from megasim.sim.launches import is_megakernel
from megasim.taskgraph import PER_TASK_LATENCIES, PER_TASK_SM_COSTS, TaskGraph


def _priced(graph: TaskGraph, costs: list[TaskCost], price: np.ndarray, pairs) -> np.ndarray | float:
    """Sum over (per-task array, TaskCost field) pairs of array * the task's cost's field (ns; ``price``
    each task's index in ``costs``); the arrays a graph does not give add nothing."""
    total = 0.0
    for name, field in pairs:
        arr = getattr(graph, name)
        if arr is not None:
            values = np.array([getattr(c, field) for c in costs])
            total = total + arr * values[price]
    return total


def priced_kinds(graph: TaskGraph, schedule: Schedule, spec) -> tuple[list[TaskCost], np.ndarray]:
    """Each task's price: the costs, and per task the index of its own in them (int64). A task is priced
    by its kind's cost name (``graph.cost_names``, ``GPUSpec.task_cost``), and in a launch of its kind's
    own kernel (not the megakernel: ``megasim.sim.launches.is_megakernel``) by the name's own-kernel cost
    where the spec gives one (``GPUSpec.kernel_task_cost``): a price of its own, after the kinds'. Without
    such costs the prices are the kinds (``graph.kind``, the costs ``task_cost``'s)."""
    names = graph.cost_names
    costs = [spec.task_cost(n) for n in names]
    if not spec.kernel_task_costs:
        return costs, graph.kind.astype(np.int64)
    price = graph.kind.astype(np.int64)
    own: dict[int, int] = {}            # kind -> the index of its own-kernel price
    for launch in schedule.launches:
        if is_megakernel(graph, launch) or not len(launch.order):
            continue
        k = int(graph.kind[launch.order[0]])
        cost = spec.kernel_task_cost(names[k])
        if cost == costs[k]:
            continue                    # (no own-kernel cost of its own: priced as in the megakernel)
        if k not in own:
            own[k] = len(costs)
            costs.append(cost)
        price[np.asarray(launch.order, np.int64)] = own[k]
    return costs, price


def task_costs(graph: TaskGraph, spec, costs: list[TaskCost], price: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per task (float64): compute work (ns of its SM), fixed latency, and fixed latency when the
    megakernel runs it (the same array when no kind gives ``megakernel_fixed_ns``). ``price``: each task's
    index in ``costs`` (``priced_kinds``)."""
    t = graph.num_tasks
    eff = np.array([c.compute_efficiency for c in costs])
    fixed = np.array([c.fixed_ns for c in costs])
    sm_fixed = np.array([c.sm_fixed_ns for c in costs])
    compute_ns = (graph.flops / (spec.sm_gflops * eff[price]) + _priced(graph, costs, price, PER_TASK_SM_COSTS)
                  + sm_fixed[price])
    compute_ns = np.ascontiguousarray(np.broadcast_to(compute_ns, (t,)).astype(np.float64))
    fixed_ns = fixed[price] + _priced(graph, costs, price, PER_TASK_LATENCIES)
    fixed_plain = np.ascontiguousarray(np.broadcast_to(fixed_ns, (t,)).astype(np.float64))
    mk_fixed = np.array([c.megakernel_fixed_ns for c in costs])
    fixed_mega = (fixed_ns + mk_fixed[price]).astype(np.float64) if mk_fixed.any() else fixed_plain
    return compute_ns, fixed_plain, fixed_mega


def tracked_accesses(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which accesses are to tracked regions (on-chip traffic, region -1, only counts towards a task's
    bytes), each task's tracked ones in CSR order (``rptr``, int64), and each task's bytes (float64)."""
    t = graph.num_tasks
    tracked = graph.access_region >= 0
    # The task of each access (a task may have none: a compute-only task; reduceat would index past the end).
    task_of = np.repeat(np.arange(t), np.diff(graph.access_ptr))
    per_task = np.bincount(task_of[tracked], minlength=t).astype(np.int64)
    rptr = np.concatenate([[0], np.cumsum(per_task)]).astype(np.int64)
    task_bytes = np.bincount(task_of, weights=graph.access_bytes, minlength=t).astype(np.float64)
    return tracked, rptr, task_bytes


class _Setup:
    """``_Run``'s tables (mixed into ``megasim.sim.engine._Run``; ``graph`` and ``spec`` are set first)."""

    def _init_costs(self, costs: list[TaskCost], price: np.ndarray) -> None:
        """Per task: compute work, fixed latency (plain and in the megakernel); per price (``priced_kinds``;
        ``kind_of`` holds each task's): claim and launch costs, memory overlap."""
        graph = self.graph
        compute_ns, fixed_plain, fixed_mega = task_costs(graph, self.spec, costs, price)
        self.launch_fixed = [c.launch_fixed_ns for c in costs]
        self.compute_ns = array("d", compute_ns.tobytes())
        self.fixed_ns = self._fixed_plain = array("d", fixed_plain.tobytes())
        # A task the megakernel runs also pays its kind's megakernel_fixed_ns (fence and signal, ...).
        self._fixed_mega = array("d", fixed_mega.tobytes()) if fixed_mega is not fixed_plain else self._fixed_plain
        # A megakernel block's claim of a task (ticket, table row, counter look, acquire fence): its
        # kind's megakernel_claim_ns, None = an atomic round trip for the ticket and one for the look.
        self.mk_claim = [c.megakernel_claim_ns for c in costs]
        self.price = price
        self.kind_of = price.tolist()
        # Memory/compute overlap (TaskCost.memory_overlap): that fraction of a task's memory work runs
        # beside its compute phase (a pipelined kernel's loads of the next stage); the task ends when both end.
        self.overlap = [c.memory_overlap for c in costs]
        self.overlap_on = any(o > 0.0 for o in self.overlap)

    def _init_counters(self) -> None:
        """Per task, the dependency counters it waits on and signals; the counters' values."""
        graph, t = self.graph, self.graph.num_tasks
        # Per task, a tuple of counter ids (-1 = unused slot, skipped by the loops); the tasks of a group
        # wait on and signal the same counters, and share one tuple.
        unique: dict[tuple, tuple] = {}
        self.waits = [unique.setdefault(w, w) for w in zip(*(col.tolist() for col in graph.wait_counters.T))] or [()] * t
        self.signals = [unique.setdefault(c, c) for c in zip(*(col.tolist() for col in graph.signal_counters.T))] or [()] * t
        self.remaining = graph.counter_init.tolist()
        self.waiters: dict[int, list[int]] = {}

    def _init_accesses(self) -> None:
        """Accesses to tracked regions, in CSR order per task (``rptr``); on-chip traffic (region -1)
        only counts towards a task's bytes. The L2 and the bandwidths that price a memory phase."""
        graph, spec = self.graph, self.spec
        tracked, rptr, task_bytes = tracked_accesses(graph)
        self.tracked = tracked
        self.rptr = array("q", rptr.tobytes())
        self.l2 = L2Cache(spec.l2_bytes, graph.region_parts.tolist(), graph.region_part_bytes.tolist())
        # (region, parts mask, parts count, nbytes, write) per access (``L2Cache.access_parts``); equal
        # accesses (the tasks of a group read the same parts) share one tuple, equal part ranges one mask.
        parts = self.l2.parts
        unique: dict[tuple, tuple] = {}
        self.acc = [unique.setdefault(a, a) for a in (
            (region, *parts(lo, hi, step), nbytes, write) for region, lo, hi, nbytes, write, step in zip(
                graph.access_region[tracked].tolist(), graph.access_part_lo[tracked].tolist(),
                graph.access_part_hi[tracked].tolist(), graph.access_bytes[tracked].tolist(),
                graph.access_write[tracked].tolist(), graph.access_part_step[tracked].tolist()))]
        del unique
        self.miss_of = array("d", [0.0]) * len(self.acc)
        self.task_bytes = array("d", task_bytes.tobytes())
        self.inv_dram_bw = 1.0 / spec.dram_bw_gbps
        self.inv_l2_bw = 1.0 / spec.l2_bw_gbps
        self.dram_latency = spec.dram_latency_ns
        self.l2_latency = spec.l2_latency_ns

    def _init_records(self) -> None:
        """Per-task records (the result's) and state."""
        t = self.num_tasks = self.graph.num_tasks
        self.transfers: dict[int, object] = {}     # user processes' transfers in flight: job id -> SimPy event
        self.transfers_made = 0
        self.cur_done = self.tasks_before = 0      # tasks ended in the current launch, in the ones before
        # Written once per task, read at the end: float64 arrays (8 bytes a task, not a float object's 32).
        unset = array("d", [np.nan])
        self.claim = unset * t
        self.ready = unset * t
        self.mem_start = unset * t
        self.comp_start = unset * t
        self.end = unset * t
        self.sm_of = array("i", [-1]) * t
        self.slot_of = array("i", [-1]) * t
        # A task's block's age on its SM (AgeWeightedReadinessServer): the dispatch sequence number of
        # its block (a per-task launch's block per task; a persistent block's first claim).
        self.age_of = array("q", [0]) * t
        self.blocks_dispatched = 0
        self.block_age: dict[tuple[int, int], int] = {}     # persistent launch: (sm, slot) -> age
        zero = array("d", [0.0])
        self.check_at = zero * t
        self.claim_cost = zero * t         # claim -> ready when the parents are done (dispatch, ticket, look)
        self.mem_work = zero * t
        self.mem_rest = zero * t           # the overlapped rest of a memory phase; -1 once it runs
        self.pending = [0] * t             # overlapped phases still running beside the compute phase
