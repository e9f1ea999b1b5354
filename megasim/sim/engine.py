"""The discrete-event engine: a TaskGraph, run in a Schedule's order, on a GPUSpec.

What it models (times in ns, data in bytes; all costs from the GPUSpec, each kind's from the entry
of its cost name, ``TaskGraph.cost_names``: the kind, or an implementation variant of it such as the
GEMM at t = 32, ``gemm@t32``, which falls back to the kind's entry):

- **SMs and occupancy.** Each launch fits ``blocks_per_sm`` blocks on every SM (``occupancy``), the
  limit set by its largest task kind. A block holds its slot from dispatch until its task ends,
  including any time spent waiting on parents.
- **Dispatch.** Blocks are handed out in map order. At a launch's start the first blocks are
  placed round-robin over the SMs (``placement="round_robin"``, as the hardware's block scheduler
  spreads a grid) or SM by SM (``"fill"``); afterwards a slot that frees takes the next block after
  ``block_dispatch_ns`` (one block per task) or claims the next ticket after ``atomic_latency_ns``
  (persistent grid). Both read the task map and check the task's counters, one atomic round trip.
  In a megakernel launch whose kind gives ``megakernel_claim_ns`` (measured from traced runs), that
  replaces the ticket and the check: claim -> ready takes ``block_dispatch_ns`` (per-task launches
  only) plus the kind's claim time, when the parents are done by then. With blockIdx dispatch
  (``Launch.dispatch == "blockidx"``: block b runs map position b, no ticket) it is the measured
  claim less the ticket's cost (``megakernel_ticket_ns``, default one ``atomic_latency_ns``).
- **Dependency waits.** A task whose counters are not yet zero keeps its slot and polls; it resumes
  an atomic round trip after the last parent signals (the paper's Listing 2). Parents signal when
  they end.
- **Ready-queue dispatch** (``Launch.dispatch == "ready"``, ``megasim.ready``): a free slot
  takes the oldest task of a FIFO queue of runnable tasks, or idles until one is queued. The queue
  starts with the launch's first ``ready_window`` roots (default: one per SM); a block that finishes a
  root queues the next root in map order, and a block whose signal completes a wait group queues
  the group. Each signal's decrement is waited on (an atomic round trip held by the signalling
  block); queueing takes two more (a pending count or the root ticket, then the queue's tail), after
  which idle slots and then that block claim. A claim costs what a ticket claim costs (the kind's
  ``megakernel_claim_ns``, or two atomic round trips). A root's block also pays the root ticket's
  and the tail's round trips.
- **Memory, then compute.** A ready task first moves its bytes, then computes. Its accesses go
  through the L2 model (``L2Cache``) when it becomes ready: hits cost L2 bandwidth, misses and writes
  cost DRAM bandwidth too. The memory phase starts after the latency of its first access
  (``dram_latency_ns`` if any byte misses, else ``l2_latency_ns``) plus the kind's ``fixed_ns``
  (and ``ns_per_step`` per serial step of the task, ``TaskGraph.serial_steps``, and ``ns_per_iteration``
  per serial loop iteration, ``TaskGraph.serial_iterations``; and the kind's
  ``megakernel_fixed_ns`` when the megakernel runs the task: its fence and signal, and its ticket
  and counter check unless the kind gives ``megakernel_claim_ns``),
  and is a job on one shared memory-system server (``SharedServer``) with work
  ``max(dram_bytes / dram_bw, l2_bytes / l2_bw)`` ns; each block gets at most its kind's
  ``block_dram_bw_gbps`` (default ``tb_max_dram_bw_gbps``) of it (water-filling, as below, when
  the kinds of a launch differ). The compute phase is a job on its SM's server, work
  ``flops / (sm_gflops * compute_efficiency) + other_ops * ns_per_other_op + shared_replays *
  ns_per_replay`` ns, shared equally by
  the blocks computing there, each block receiving at most its kind's ``block_sm_share`` of the SM
  (water-filling when a launch mixes kinds of different shares: a block capped below the fair share
  gets its cap, the others share the rest equally; ``CappedSharedServer``). A kind may give
  ``block_sm_ready`` instead: its blocks stall independently, the SM is busy when any block is ready
  (a kind's blocks after the first on an SM at its ``further_block_sm_ready``, if it gives one)
  and its busy fraction is split by water-filling over the blocks' readiness (``ReadinessSharedServer``: a block
  that asks for less than the fair level gets all it asks for); such blocks count
  on their SM through their memory phase too (the kernels overlap loads and arithmetic). With the
  spec's ``mixed_kinds_sm_factor`` m, an SM holding blocks of two or more kinds does useful work only
  m of its busy time (fitted on the mixed-kind calibration runs). With the spec's
  ``younger_block_weight`` rho the split is weighted by age, the k-th oldest block on the SM weighing
  rho^k (``AgeWeightedReadinessServer``; the warp schedulers favour older warps).
  Overlap of memory and compute comes from co-resident blocks, as on the GPU.
  A kind with ``coresident_stretch`` gamma > 0 moves its data at ``1 - gamma * U_others`` of its
  capped rate, ``U_others = 1 - prod(1 - block_sm_ready)`` over the other blocks of its SM in a memory
  or compute phase when its memory phase starts (a latency-bound block's loads wait for the issue
  slots and load/store queue its neighbours take); the factor is fixed for the phase, in steps of
  1/``STRETCH_LEVELS``, and the memory server then water-fills over (kind, factor) cap classes.
  A kind with ``memory_overlap`` o > 0 (a pipelined kernel) moves only ``1 - o`` of its memory work
  before it computes; the rest is a second job on the memory server that runs beside its compute
  job, and the task ends when both have.
- **Records.** Per task: claim, ready, memory start, compute start, end, SM and slot. Resource
  timelines (memory-system jobs, SMs computing, blocks resident) are derived from these afterwards,
  so the hot path logs nothing else.
- **Launches.** Kernels of a schedule run back to back (a launch's first blocks wait the largest
  ``launch_fixed_ns`` of its kinds); the first starts after ``kernel_launch_ns``
  (``megakernel_launch_ns`` when the spec gives it and the first launch runs the megakernel: it
  mixes task kinds or is a persistent grid),
  each next one ``kernel_boundary_ns`` after the previous one's last block ends. The L2 keeps its
  contents across kernels. When the spec gives ``queued_launch_ns`` (runs timed back to back, the
  host issuing the next run while the device works), the first kernel starts after that device-side
  delay instead, and the prediction is the longer of the device's time and the host's issue time
  (the sum of the launches' ``kernel_launch_ns`` / ``megakernel_launch_ns``).

Events per task: a claim, a memory-phase start, and the completions of its two phases (three with an
overlapped rest of the memory phase; plus the
rescheduling of the two servers' next completions when it joins and leaves them). Tasks are not
SimPy processes: callbacks on SimPy events keep the cost near one heap operation per event.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from megasim.errors import SimulationError
from megasim.hardware.spec import GPUSpec, TaskCost
from megasim.ready import ready_lists
from megasim.schedule import Launch, Schedule, check_valid
from megasim.sim.clock import CLOCKS
from megasim.sim.l2 import L2Cache
from megasim.sim.occupancy import Footprint, occupancy
from megasim.sim.result import SimResult
from megasim.sim.servers import AgeWeightedReadinessServer, CappedSharedServer, ReadinessSharedServer, SharedServer
from megasim.taskgraph import PER_TASK_LATENCIES, PER_TASK_SM_COSTS, TaskGraph

PLACEMENTS = ("round_robin", "fill")
STRETCH_LEVELS = 64     # resolution of a memory phase's co-residence factor (TaskCost.coresident_stretch)


@dataclass(frozen=True)
class SimOptions:
    placement: str = "round_robin"
    clock: str = "heap"          # event queue: "heap" (fast) or "simpy" (reference); identical results

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise SimulationError(f"placement {self.placement!r} is not allowed (allowed: {', '.join(PLACEMENTS)})")
        if self.clock not in CLOCKS:
            raise SimulationError(f"clock {self.clock!r} is not allowed (allowed: {', '.join(CLOCKS)})")


def launch_footprint(graph: TaskGraph, launch: Launch) -> Footprint:
    """The footprint of a launch's blocks: a launch of one kind runs that kind's own kernel; a launch
    that mixes kinds runs the megakernel (``graph.megakernel_registers``), a persistent grid the
    persistent megakernel (``graph.persistent_registers``, 0 = the same)."""
    kinds = np.unique(graph.kind[launch.order])
    registers = int(graph.kind_registers[kinds].max())
    shared = int(graph.kind_shared_bytes[kinds].max())
    mega = graph.persistent_registers or graph.megakernel_registers if launch.style == "persistent" \
        else graph.megakernel_registers
    if kinds.size > 1 or launch.style == "persistent":
        registers = max(registers, mega)
    if launch.kernel == "megakernel":   # one kind's tasks in the megakernel: its registers, all kinds' shared memory
        registers = max(registers, mega)
        shared = int(graph.kind_shared_bytes.max())
    return Footprint(int(graph.kind_threads[kinds].max()), registers, shared)


def simulate(graph: TaskGraph, schedule: Schedule, spec: GPUSpec, options: SimOptions | None = None) -> SimResult:
    """Predict the runtime of `schedule` on `spec`. Deterministic: same inputs, identical result."""
    check_valid(graph, schedule)
    wall = time.perf_counter()
    return _Run(graph, spec, options or SimOptions()).run(schedule, wall)


def _priced(graph: TaskGraph, costs: list[TaskCost], pairs) -> np.ndarray | float:
    """Sum over (per-task array, TaskCost field) pairs of array * the task's kind's price (ns; ``costs``
    per kind of ``graph``); the arrays a graph does not give add nothing."""
    total = 0.0
    for name, field in pairs:
        arr = getattr(graph, name)
        if arr is not None:
            price = np.array([getattr(c, field) for c in costs])
            total = total + arr * price[graph.kind]
    return total


class _Run:
    """The mutable state of one simulation; used once."""

    def __init__(self, graph: TaskGraph, spec: GPUSpec, options: SimOptions) -> None:
        self.graph, self.spec, self.options = graph, spec, options
        self.clock = CLOCKS[options.clock]()
        t = graph.num_tasks
        costs = [spec.task_cost(k) for k in graph.cost_names]     # per kind, under its cost name
        eff = np.array([c.compute_efficiency for c in costs])
        fixed = np.array([c.fixed_ns for c in costs])
        self.launch_fixed = [c.launch_fixed_ns for c in costs]
        compute_ns = graph.flops / (spec.sm_gflops * eff[graph.kind]) + _priced(graph, costs, PER_TASK_SM_COSTS)
        self.compute_ns = compute_ns.tolist()
        self.block_share = [c.block_sm_share for c in costs]
        # Kinds that give block_sm_ready share their SM by the independent-stall rule
        # (ReadinessSharedServer); a kind that does not counts as always ready (1) there.
        # A class is (readiness of the kind's first block on an SM, of each further one).
        self.block_ready = [(1.0, 1.0) if c.block_sm_ready is None else
                            (c.block_sm_ready, c.block_sm_ready if c.further_block_sm_ready is None
                             else c.further_block_sm_ready) for c in costs]
        self.ready_kinds = {k for k, c in enumerate(costs) if c.block_sm_ready is not None}
        self._sms_ready: list | None = None
        fixed_ns = fixed[graph.kind] + _priced(graph, costs, PER_TASK_LATENCIES)
        self.fixed_ns = self._fixed_plain = fixed_ns.tolist()
        # A task the megakernel runs also pays its kind's megakernel_fixed_ns (fence and signal, ...).
        mk_fixed = np.array([c.megakernel_fixed_ns for c in costs])
        self._fixed_mega = (fixed_ns + mk_fixed[graph.kind]).tolist() if mk_fixed.any() else self._fixed_plain
        # A megakernel block's claim of a task (ticket, table row, counter look, acquire fence): its
        # kind's megakernel_claim_ns, None = an atomic round trip for the ticket and one for the look.
        self.mk_claim = [c.megakernel_claim_ns for c in costs]
        self.kind_of = graph.kind.tolist()
        # Per task, a tuple of counter ids (-1 = unused slot, skipped by the loops).
        self.waits = list(zip(*(col.tolist() for col in graph.wait_counters.T))) or [()] * t
        self.signals = list(zip(*(col.tolist() for col in graph.signal_counters.T))) or [()] * t
        self.remaining = graph.counter_init.tolist()
        self.waiters: dict[int, list[int]] = {}
        # Accesses to tracked regions, in CSR order per task; on-chip traffic (region -1) only counts
        # towards a task's bytes.
        tracked = graph.access_region >= 0
        self.tracked = tracked
        per_task = np.add.reduceat(tracked.astype(np.int64), graph.access_ptr[:-1]) if tracked.size else np.zeros(t, np.int64)
        per_task[np.diff(graph.access_ptr) == 0] = 0
        self.rptr = np.concatenate([[0], np.cumsum(per_task)]).tolist()
        self.acc = list(zip(graph.access_region[tracked].tolist(), graph.access_part_lo[tracked].tolist(),
                            graph.access_part_hi[tracked].tolist(), graph.access_bytes[tracked].tolist(),
                            graph.access_write[tracked].tolist(), graph.access_part_step[tracked].tolist()))
        self.miss_of = [0.0] * len(self.acc)
        self.task_bytes = np.bincount(np.repeat(np.arange(t), np.diff(graph.access_ptr)),
                                      weights=graph.access_bytes, minlength=t).tolist()
        self.inv_dram_bw = 1.0 / spec.dram_bw_gbps
        self.inv_l2_bw = 1.0 / spec.l2_bw_gbps
        self.dram_latency = spec.dram_latency_ns
        self.l2_latency = spec.l2_latency_ns
        self.l2 = L2Cache(spec.l2_bytes, graph.region_parts.tolist(), graph.region_part_bytes.tolist())
        self.mem_cap = min(1.0, spec.tb_max_dram_bw_gbps / spec.dram_bw_gbps)
        self.mem = self._mem_one_cap = SharedServer(self.clock, self.mem_cap, self._mem_done)
        self._mem_per_job: CappedSharedServer | None = None
        self.mem_caps = [self.mem_cap if c.block_dram_bw_gbps is None else min(1.0, c.block_dram_bw_gbps / spec.dram_bw_gbps)
                         for c in costs]
        # Co-residence stretch (TaskCost.coresident_stretch): a kind with gamma > 0 moves its data at
        # 1 - gamma * U_others of its rate alone, U_others from the busy blocks beside it on its SM (read
        # from its ReadinessSharedServer). The memory system then gets a cap class per (kind, level of
        # that factor, in 1/STRETCH_LEVELS steps).
        self.stretch = [c.coresident_stretch for c in costs]
        self.stretch_on = any(g > 0.0 for g in self.stretch)
        if self.stretch_on:
            levels = range(1, STRETCH_LEVELS + 1)
            caps = sorted({cap * lv / STRETCH_LEVELS for cap in self.mem_caps for lv in levels})
            index = {c: i for i, c in enumerate(caps)}
            self.mem_class = [[0] + [index[cap * lv / STRETCH_LEVELS] for lv in levels] for cap in self.mem_caps]
            self.mem_class_of = [0] * t
            self._mem_stretch = CappedSharedServer(self.clock, caps, self.mem_class_of, self._mem_done)
        # Memory/compute overlap (TaskCost.memory_overlap): that fraction of a task's memory work runs
        # beside its compute phase (a pipelined kernel's loads of the next stage); the task ends when both end.
        self.overlap = [c.memory_overlap for c in costs]
        self.overlap_on = any(o > 0.0 for o in self.overlap)
        self.mem_rest = [0.0] * t
        self.pending = [0] * t
        self._comp_done = self._join if self.overlap_on else self._finish
        self.sms = self._sms_one_cap = [SharedServer(self.clock, 1.0, self._comp_done) for _ in range(spec.sm_count)]
        self._sms_per_job: list | None = None     # CappedSharedServers, made for the first launch that needs them
        # Per-task records.
        self.claim = [np.nan] * t
        self.ready = [np.nan] * t
        self.mem_start = [np.nan] * t
        self.comp_start = [np.nan] * t
        self.end = [np.nan] * t
        self.sm_of = [-1] * t
        self.slot_of = [-1] * t
        # A task's block's age on its SM (AgeWeightedReadinessServer): the dispatch sequence number of
        # its block (a per-task launch's block per task; a persistent block's first claim).
        self.age_of = [0] * t
        self.track_age = spec.younger_block_weight not in (None, 1.0)
        self.blocks_dispatched = 0
        self.block_age: dict[tuple[int, int], int] = {}     # persistent launch: (sm, slot) -> age
        self.check_at = [0.0] * t
        self.claim_cost = [0.0] * t        # claim -> ready when the parents are done (dispatch, ticket, look)
        self.mem_work = [0.0] * t

    # --- scheduling helpers ----------------------------------------------------------------------
    def _after(self, delay: float, callback, value) -> None:
        self.clock.after(delay, callback, value)

    # --- launches ------------------------------------------------------------------------------------
    def run(self, schedule: Schedule, wall: float) -> SimResult:
        """Simulate; `wall` is the perf_counter() at which the simulation's setup began."""
        self.launch_log: list[dict] = []
        self.launches = list(schedule.launches)
        self.launch_index = -1
        spec = self.spec
        if spec.queued_launch_ns is None:
            # The host's cost of the first launch is paid before it, in series (a run on an idle GPU).
            first = self.launches[0] if self.launches else None
            self.host_ns = 0.0
            self._start_next_launch(spec.launch_ns(first is not None and self._is_megakernel(first)))
        else:
            # Back-to-back runs: the host issued this run's launches while the device worked on the
            # previous one; the run takes at least the host's issue time (SimResult.predicted_ns).
            self.host_ns = float(sum(spec.launch_ns(self._is_megakernel(l)) for l in self.launches))
            self._start_next_launch(spec.queued_launch_ns)
        self.clock.run()
        unfinished = [i for i in range(self.graph.num_tasks) if self.end[i] != self.end[i]]
        if unfinished:
            waiting = [i for i in unfinished if self.claim[i] == self.claim[i]][:10]
            raise SimulationError(f"the model stalled with {len(unfinished)} tasks unfinished; "
                                  f"blocked tasks (first 10): {waiting}")
        return SimResult.from_run(self, schedule, time.perf_counter() - wall)

    def _is_megakernel(self, launch: Launch) -> bool:
        """A launch runs the megakernel when it mixes kinds or is a persistent grid."""
        return (launch.kernel == "megakernel" or launch.style == "persistent"
                or np.unique(self.graph.kind[launch.order]).size > 1)

    def _class_of(self, caps_of_kind: list[float]) -> tuple[list[float], list[int]]:
        """The distinct caps and, per task, the index of its kind's cap among them."""
        caps = sorted(set(caps_of_kind))
        of_kind = [caps.index(c) for c in caps_of_kind]
        return caps, [of_kind[k] for k in self.graph.kind.tolist()]

    def _start_next_launch(self, delay: float) -> None:
        self.launch_index += 1
        if self.launch_index >= len(self.launches):
            return
        launch = self.launches[self.launch_index]
        occ = occupancy(self.spec, launch_footprint(self.graph, launch))
        per_sm = occ.blocks_per_sm
        if launch.style == "persistent" and launch.blocks_per_sm is not None:
            if launch.blocks_per_sm > occ.blocks_per_sm:
                raise SimulationError(f"blocks_per_sm={launch.blocks_per_sm} is not allowed for launch "
                                      f"{launch.name!r}: at most {occ.blocks_per_sm} fit ({occ.limited_by})")
            per_sm = launch.blocks_per_sm
        # One block's share of its SM's compute: its kind's block_sm_share. When every kind of the
        # launch has the same share, one cap serves all jobs (SharedServer, the fast path); a launch
        # mixing kinds of different shares gets water-filling servers with a cap per job. The servers
        # are idle between launches, so they can be swapped here.
        # The same for the memory system: a block's share of it is capped by its kind's per-block
        # DRAM bandwidth.
        kinds = np.unique(self.graph.kind[launch.order]).tolist()
        shares = {self.block_share[k] for k in kinds}
        if self.ready_kinds.intersection(kinds):
            if self._sms_ready is None:
                mixed = self.spec.mixed_kinds_sm_factor
                # With a mixing factor, every kind is a class of its own (kinds are what mix).
                keys = self.block_ready if mixed is None else [(*r, k) for k, r in enumerate(self.block_ready)]
                classes, class_of = self._class_of(keys)
                ready, further = [c[0] for c in classes], [c[1] for c in classes]
                if not self.track_age:
                    self._sms_ready = [ReadinessSharedServer(self.clock, ready, class_of, self._comp_done, further,
                                                             1.0 if mixed is None else mixed)
                                       for _ in range(self.spec.sm_count)]
                else:
                    self._sms_ready = [AgeWeightedReadinessServer(self.clock, ready, class_of, self.age_of,
                                                                  self._comp_done, further,
                                                                  1.0 if mixed is None else mixed,
                                                                  self.spec.younger_block_weight)
                                       for _ in range(self.spec.sm_count)]
            self.sms = self._sms_ready
        elif len(shares) == 1:
            self.sms = self._sms_one_cap
            share = shares.pop()
            for sm in self.sms:
                sm.cap = share
        else:
            if self._sms_per_job is None:
                caps, class_of = self._class_of(self.block_share)
                self._sms_per_job = [CappedSharedServer(self.clock, caps, class_of, self._comp_done)
                                     for _ in range(self.spec.sm_count)]
            self.sms = self._sms_per_job
        mem_caps = {self.mem_caps[k] for k in kinds}
        if self.stretch_on:
            self.mem = self._mem_stretch
        elif len(mem_caps) == 1:
            self.mem = self._mem_one_cap
            self.mem.cap = mem_caps.pop()
        else:
            if self._mem_per_job is None:
                caps, class_of = self._class_of(self.mem_caps)
                self._mem_per_job = CappedSharedServer(self.clock, caps, class_of, self._mem_done)
            self.mem = self._mem_per_job
        self.fixed_ns = self._fixed_mega if self._is_megakernel(launch) else self._fixed_plain
        self.cur = launch
        self.block_age.clear()
        self.cur_order = launch.order.tolist()
        self.cur_len = len(self.cur_order)
        self.cur_next = 0
        self.cur_done = 0
        self.ready_dispatch = launch.dispatch == "ready"
        if self.ready_dispatch:
            rl = ready_lists(self.graph, launch.order)
            self.r_roots = rl.roots.tolist()
            self.r_counter_ptr = rl.counter_ptr.tolist()
            self.r_counter_groups = rl.counter_groups.tolist()
            self.r_pending = rl.group_pending.tolist()
            self.r_group_ptr = rl.group_ptr.tolist()
            self.r_group_positions = rl.group_positions.tolist()
            window = launch.ready_window or self.spec.sm_count
            self.r_is_root = set(self.r_roots)
            self.r_pos_of: dict[int, int] = {}
            self.r_queue: deque[int] = deque(self.r_roots[:window])   # queued map positions, oldest first
            self.cur_next = min(window, len(self.r_roots))            # the next root to queue
            self.r_idle: deque[tuple[int, int]] = deque()
        # Claim -> ready (parents done) per kind: a per-task block is dispatched first; then the ticket
        # and the counter look, or the kind's measured megakernel claim in a megakernel launch.
        # A measured claim includes the ticket, which blockIdx dispatch skips (GPUSpec.megakernel_ticket_ns).
        dispatch = 0.0 if launch.style == "persistent" else self.spec.block_dispatch_ns
        atomic = self.spec.atomic_latency_ns
        plain = (atomic if launch.style == "persistent" else dispatch) + atomic
        mega = self._is_megakernel(launch)
        ticket = atomic if self.spec.megakernel_ticket_ns is None else self.spec.megakernel_ticket_ns
        no_ticket = ticket if launch.dispatch == "blockidx" else 0.0
        self.cur_check_ns = [plain if not mega or c is None else dispatch + max(0.0, c - no_ticket)
                             for c in self.mk_claim]
        start = self.clock.now + delay
        # A kind's fixed time once per launch (TaskCost.launch_fixed_ns) holds back the first blocks.
        delay += max((self.launch_fixed[k] for k in kinds), default=0.0)
        self.launch_log.append({"name": launch.name, "style": launch.style, "start_ns": start, "end_ns": np.nan,
                                "blocks_per_sm": per_sm, "limited_by": occ.limited_by,
                                "tasks": len(self.cur_order)})
        n_sm = self.spec.sm_count
        slots = n_sm * per_sm
        first = slots if launch.style == "persistent" else min(slots, len(self.cur_order))
        for b in range(first):
            if self.options.placement == "round_robin":
                sm, slot = b % n_sm, b // n_sm
            else:
                sm, slot = b // per_sm, b % per_sm
            self._after(delay, self._on_slot_free, (sm, slot))

    def _on_slot_free(self, where: tuple[int, int]) -> None:
        self._claim(*where)

    def _claim(self, sm: int, slot: int) -> None:
        """The block in (sm, slot) takes the next task of the map, or exits if none is left.

        Taking a task costs the claim (dispatch or ticket) and one atomic round trip to read its
        counters. If its parents are already done, nothing can change that, so its accesses are
        resolved now and its memory phase is scheduled directly (one event instead of two)."""
        if self.ready_dispatch:
            self._claim_ready(sm, slot)
            return
        if self.cur_next >= self.cur_len:
            return
        task = self.cur_order[self.cur_next]
        self.cur_next += 1
        self._take(task, sm, slot)

    def _claim_ready(self, sm: int, slot: int) -> None:
        """Ready-queue: the oldest queued task, else the slot idles until one is queued."""
        if self.r_queue:
            pos = self.r_queue.popleft()
        else:
            if self.cur_done < self.cur_len:
                self.r_idle.append((sm, slot))
            return
        self.r_pos_of[self.cur_order[pos]] = pos
        self._take(self.cur_order[pos], sm, slot)

    def _take(self, task: int, sm: int, slot: int) -> None:
        """The block in (sm, slot) has claimed `task`: its claim cost, then its wait or its start."""
        now = self.clock.now
        self.claim[task] = now
        self.sm_of[task] = sm
        self.slot_of[task] = slot
        if self.track_age:
            self._record_age(task, sm, slot)
        cost = self.cur_check_ns[self.kind_of[task]]
        self.claim_cost[task] = cost
        checked = now + cost
        remaining = self.remaining
        for c in self.waits[task]:
            if c >= 0 and remaining[c] > 0:
                self.waiters.setdefault(c, []).append(task)
                self.check_at[task] = checked
                return
        self._ready(task, checked)

    def _record_age(self, task: int, sm: int, slot: int) -> None:
        """``age_of[task]``: its block's dispatch sequence number (a persistent block keeps its first)."""
        if self.cur.style == "persistent":
            age = self.block_age.get((sm, slot))
            if age is None:
                age = self.block_age[(sm, slot)] = self.blocks_dispatched
                self.blocks_dispatched += 1
        else:
            age = self.blocks_dispatched
            self.blocks_dispatched += 1
        self.age_of[task] = age

    def _release(self, task: int, now: float) -> None:
        """A counter task waits on reached zero at `now`. If its other counters are zero too, the
        polling block sees it an atomic round trip later (or at its first poll, if that is later)."""
        remaining = self.remaining
        for c in self.waits[task]:
            if c >= 0 and remaining[c] > 0:
                self.waiters.setdefault(c, []).append(task)
                return
        resume = now + self.spec.atomic_latency_ns
        check = self.check_at[task]
        self._ready(task, resume if resume > check else check)

    def _ready(self, task: int, at: float) -> None:
        """The block sees its dependencies met at time `at` (>= now, by at most a claim and an atomic
        round trip): resolve its accesses in the L2 now, schedule its memory phase."""
        self.ready[task] = at
        access = self.l2.access
        acc = self.acc
        misses = self.miss_of
        dram = 0.0
        for j in range(self.rptr[task], self.rptr[task + 1]):
            region, lo, hi, nbytes, write, step = acc[j]
            miss = access(region, lo, hi, nbytes, write, step)
            misses[j] = miss
            dram += miss
        l2_bytes = self.task_bytes[task]
        work = dram * self.inv_dram_bw
        if l2_bytes * self.inv_l2_bw > work:
            work = l2_bytes * self.inv_l2_bw
        latency = (self.dram_latency if dram > 0.0 else self.l2_latency) if l2_bytes > 0.0 else 0.0
        if self.overlap_on:
            o = self.overlap[self.kind_of[task]]
            if o > 0.0:
                self.mem_rest[task] = o * work
                work -= o * work
        self.mem_work[task] = work
        self.clock.after(at - self.clock.now + latency + self.fixed_ns[task], self._on_mem_start, task)

    def _on_mem_start(self, task: int) -> None:
        work = self.mem_work[task]
        self.mem_start[task] = self.clock.now
        if work > 0.0 or self.mem_rest[task] > 0.0:
            if self.sms is self._sms_ready:     # the block competes for its SM while it loads too
                self.sms[self.sm_of[task]].enter(task)
            if self.stretch_on:                 # (the overlapped rest keeps this class)
                self.mem_class_of[task] = self._stretch_class(task)
        if work > 0.0:
            self.mem.add(task, work)
        else:
            self._mem_done(task)

    def _stretch_class(self, task: int) -> int:
        """The memory system's cap class of `task`'s memory phase (the task has entered its SM): its
        kind's cap times 1 - gamma * U_others, U_others = 1 - prod(1 - ready) over the other blocks on
        its SM that move data or compute. A stretching kind gives block_sm_ready (TaskCost), so its
        SMs are ReadinessSharedServers."""
        kind = self.kind_of[task]
        gamma = self.stretch[kind]
        if gamma <= 0.0:
            return self.mem_class[kind][STRETCH_LEVELS]
        idle = self.sms[self.sm_of[task]].idle_beside(task)
        level = int(round((1.0 - gamma * (1.0 - idle)) * STRETCH_LEVELS))
        return self.mem_class[kind][level if level > 1 else 1]

    def _mem_done(self, task: int) -> None:
        rest = self.mem_rest[task]
        if rest < 0.0:                      # the overlapped rest of the memory phase ended
            self._join(task)
            return
        self.comp_start[task] = self.clock.now
        sm = self.sms[self.sm_of[task]]
        work = self.compute_ns[task]
        present = self.sms is self._sms_ready and (self.mem_work[task] > 0.0 or rest > 0.0)
        # The age-weighted SM turns a present block into a computing one in one change (its
        # leave-then-add would post an event that the add at once supersedes).
        if present and not (self.track_age and work > 0.0):
            sm.leave(task)
        if rest > 0.0:                      # the rest of its memory work runs beside its compute
            self.mem_rest[task] = -1.0
            self.pending[task] = 1
            self.mem.add(task, rest)
        if work > 0.0:
            if present and self.track_age:
                sm.start_computing(task, work)
            else:
                sm.add(task, work)
        else:
            self._comp_done(task)

    def _join(self, task: int) -> None:
        """One of a task's overlapped phases ended; the task ends with the last."""
        if self.pending[task]:
            self.pending[task] -= 1
        else:
            self._finish(task)

    def _finish(self, task: int) -> None:
        now = self.clock.now
        self.end[task] = now
        remaining = self.remaining
        released = []
        for c in self.signals[task]:
            if c < 0:
                continue
            remaining[c] -= 1
            if remaining[c] == 0:
                for waiter in self.waiters.pop(c, ()):
                    self._release(waiter, now)
                if self.ready_dispatch:
                    released.extend(self._complete_groups(c))
        self.cur_done += 1
        if self.cur_done == self.cur_len:
            self.launch_log[-1]["end_ns"] = now
            self._start_next_launch(self.spec.kernel_boundary_ns)
        elif self.ready_dispatch:
            # The block waits for its decrement's result; if that completed wait groups it queues them.
            atomic = self.spec.atomic_latency_ns
            signalled = any(c >= 0 for c in self.signals[task])
            delay = (atomic if signalled else 0.0) + (2.0 * atomic if released else 0.0)
            if self.r_pos_of[task] in self.r_is_root:       # a root: the root ticket, then the tail
                delay += 2.0 * atomic
                if self.cur_next < len(self.r_roots):
                    released.append(-1 - self.r_roots[self.cur_next])
                    self.cur_next += 1
            self._after(delay, self._on_ready_signal, (task, released))
        else:
            self._claim(self.sm_of[task], self.slot_of[task])

    def _complete_groups(self, counter: int) -> list[int]:
        """Ready-queue: counter reached zero; the wait groups whose last pending counter it was."""
        done = []
        pending = self.r_pending
        for j in range(self.r_counter_ptr[counter], self.r_counter_ptr[counter + 1]):
            g = self.r_counter_groups[j]
            pending[g] -= 1
            if pending[g] == 0:
                done.append(g)
        return done

    def _on_ready_signal(self, value: tuple[int, list[int]]) -> None:
        """Ready-queue: the block of `task` queues the groups it released and, after a root, the next
        root (``-1 - position`` in ``released``); idle slots claim first (they were polling), then the
        block itself."""
        task, released = value
        ptr, positions = self.r_group_ptr, self.r_group_positions
        for g in released:
            if g >= 0:
                self.r_queue.extend(positions[ptr[g]:ptr[g + 1]])
            else:
                self.r_queue.append(-1 - g)
        while self.r_idle and self.r_queue:
            self._claim_ready(*self.r_idle.popleft())
        self._claim_ready(self.sm_of[task], self.slot_of[task])
