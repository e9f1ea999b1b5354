"""Launches: the kernels of a schedule, run back to back, and what each one sets up.

A launch fits ``blocks_per_sm`` blocks on every SM (``megasim.sim.occupancy``; a persistent grid may ask
for fewer), takes the servers its kinds need (``megasim.sim.resources``), prices a claim per kind (the
block dispatch, the ticket and the counter look, or the kind's measured megakernel claim), starts its
ready queue under ready-queue dispatch, and places its first blocks: round-robin over the SMs, as the
hardware's block scheduler spreads a grid, or SM by SM (``SimOptions.placement``), after the largest
``launch_fixed_ns`` of its kinds; a megakernel launch also waits ``megakernel_reset_ns`` first, the
counter and control reset the executor runs as a small kernel before it (``GPUSpec.reset_ns``). The next
launch starts ``kernel_boundary_ns`` after the last task of this one ends (``megasim.sim.phases``).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from megasim.errors import SimulationError
from megasim.hardware.spec import GPUSpec
from megasim.ready import ready_lists
from megasim.schedule import Launch
from megasim.sim.occupancy import Footprint, Occupancy, occupancy
from megasim.taskgraph import TaskGraph

PROGRESS_EVERY = 16384      # tasks of a launch between two calls of a run's progress callback


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


REQUESTED_GRID = "the requested grid"      # Occupancy.limited_by of a persistent grid smaller than what fits


def launch_blocks_per_sm(spec: GPUSpec, graph: TaskGraph, launch: Launch) -> tuple[Occupancy, int]:
    """The launch's occupancy and the blocks it places per SM: those that fit, or a persistent grid's
    own ``blocks_per_sm`` (SimulationError if more than fit; ``limited_by`` REQUESTED_GRID if fewer)."""
    occ = occupancy(spec, launch_footprint(graph, launch))
    per_sm = occ.blocks_per_sm
    if launch.style == "persistent" and launch.blocks_per_sm is not None:
        if launch.blocks_per_sm > occ.blocks_per_sm:
            raise SimulationError(f"blocks_per_sm={launch.blocks_per_sm} is not allowed for launch "
                                  f"{launch.name!r}: at most {occ.blocks_per_sm} fit ({occ.limited_by})")
        per_sm = launch.blocks_per_sm
        if per_sm < occ.blocks_per_sm:
            occ = Occupancy(per_sm, REQUESTED_GRID)
    return occ, per_sm


def is_megakernel(graph: TaskGraph, launch: Launch) -> bool:
    """A launch runs the megakernel when it mixes kinds or is a persistent grid."""
    return (launch.kernel == "megakernel" or launch.style == "persistent"
            or np.unique(graph.kind[launch.order]).size > 1)


def claim_costs(spec: GPUSpec, mk_claim: list[float | None], launch: Launch, mega: bool) -> list[float]:
    """Claim -> ready (parents done) per kind: a per-task block is dispatched first; then the ticket
    and the counter look, or the kind's measured megakernel claim (``mk_claim``, per kind; None: none
    measured) in a megakernel launch (``mega``). A measured claim includes the ticket, which blockIdx
    dispatch skips (GPUSpec.megakernel_ticket_ns)."""
    dispatch = 0.0 if launch.style == "persistent" else spec.block_dispatch_ns
    atomic = spec.atomic_latency_ns
    plain = (atomic if launch.style == "persistent" else dispatch) + atomic
    ticket = atomic if spec.megakernel_ticket_ns is None else spec.megakernel_ticket_ns
    no_ticket = ticket if launch.dispatch == "blockidx" else 0.0
    return [plain if not mega or c is None else dispatch + max(0.0, c - no_ticket) for c in mk_claim]


class _Launches:
    """``_Run``'s launch handling (mixed into ``megasim.sim.engine._Run``)."""

    def _is_megakernel(self, launch: Launch) -> bool:
        return is_megakernel(self.graph, launch)

    def _start_next_launch(self, delay: float) -> None:
        """Start the schedule's next launch (if any) `delay` ns from now."""
        self.launch_index += 1
        if self.launch_index >= len(self.launches):
            self.done.succeed()
            return
        launch = self.launches[self.launch_index]
        occ, per_sm = launch_blocks_per_sm(self.spec, self.graph, launch)
        kinds = np.unique(self.price[launch.order]).tolist()     # its tasks' prices (run_setup.priced_kinds)
        self.sms, self.mem, self.presence = self.resources.for_launch(kinds)
        self.fixed_ns = self._fixed_mega if self._is_megakernel(launch) else self._fixed_plain
        self.cur = launch
        self.block_age.clear()
        self.cur_order = launch.order.tolist()
        self.cur_len = len(self.cur_order)
        self.cur_next = 0
        self.tasks_before += self.cur_done      # the tasks of the launches before this one
        self.cur_done = 0
        self.report_at = PROGRESS_EVERY if self.progress is not None else -1
        self.ready_dispatch = launch.dispatch == "ready"
        if self.ready_dispatch:
            self._start_ready_queue(launch)
        self.cur_check_ns = self._claim_costs(launch)
        # A megakernel launch waits for the reset kernel before it (GPUSpec.megakernel_reset_ns).
        delay += self.spec.reset_ns(self._is_megakernel(launch), self.launch_index == 0)
        start = self.clock.now + delay
        # A kind's fixed time once per launch (TaskCost.launch_fixed_ns) holds back the first blocks.
        delay += max((self.launch_fixed[k] for k in kinds), default=0.0)
        self.launch_log.append({"name": launch.name, "style": launch.style, "start_ns": start, "end_ns": np.nan,
                                "blocks_per_sm": per_sm, "limited_by": occ.limited_by,
                                "tasks": len(self.cur_order)})
        self._place_first_blocks(launch, per_sm, delay)

    def _report_progress(self) -> None:
        """Tell ``progress`` how many tasks have ended (every ``PROGRESS_EVERY`` of a launch)."""
        self.report_at += PROGRESS_EVERY
        self.progress(self.tasks_before + self.cur_done, self.num_tasks)

    def _claim_costs(self, launch: Launch) -> list[float]:
        return claim_costs(self.spec, self.mk_claim, launch, self._is_megakernel(launch))

    def _start_ready_queue(self, launch: Launch) -> None:
        """Ready-queue dispatch (``megasim.ready``): the launch's wait groups, and its queue, which starts
        with the first ``ready_window`` roots (default: one per SM)."""
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

    def _place_first_blocks(self, launch: Launch, per_sm: int, delay: float) -> None:
        """The launch's first blocks claim `delay` ns from now: one per slot (a persistent grid fills
        every slot; a per-task launch as many as it has tasks), round-robin over the SMs or SM by SM."""
        n_sm = self.spec.sm_count
        slots = n_sm * per_sm
        first = slots if launch.style == "persistent" else min(slots, len(self.cur_order))
        round_robin = self.options.placement == "round_robin"
        for b in range(first):
            if round_robin:
                sm, slot = b % n_sm, b // n_sm
            else:
                sm, slot = b // per_sm, b % per_sm
            self.clock.after(delay, self._on_slot_free, (sm, slot))
