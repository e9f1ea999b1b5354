"""The discrete-event engine: a TaskGraph, run in a Schedule's order, on a GPUSpec.

What it models (times in ns, data in bytes; all costs from the GPUSpec):

- **SMs and occupancy.** Each launch fits ``blocks_per_sm`` blocks on every SM (``occupancy``), the
  limit set by its largest task kind. A block holds its slot from dispatch until its task ends,
  including any time spent waiting on parents.
- **Dispatch.** Blocks are handed out in map order. At a launch's start the first blocks are
  placed round-robin over the SMs (``placement="round_robin"``, as the hardware's block scheduler
  spreads a grid) or SM by SM (``"fill"``); afterwards a slot that frees takes the next block after
  ``block_dispatch_ns`` (one block per task) or claims the next ticket after ``atomic_latency_ns``
  (persistent grid). Both read the task map and check the task's counters, one atomic round trip.
- **Dependency waits.** A task whose counters are not yet zero keeps its slot and polls; it resumes
  an atomic round trip after the last parent signals (the paper's Listing 2). Parents signal when
  they end.
- **Memory, then compute.** A ready task first moves its bytes, then computes. Its accesses go
  through the L2 model (``L2Cache``) when it becomes ready: hits cost L2 bandwidth, misses and writes
  cost DRAM bandwidth too. The memory phase starts after the latency of its first access
  (``dram_latency_ns`` if any byte misses, else ``l2_latency_ns``) plus the kind's ``fixed_ns``,
  and is a job on one shared memory-system server (``SharedServer``) with work
  ``max(dram_bytes / dram_bw, l2_bytes / l2_bw)`` ns; each block gets at most
  ``tb_max_dram_bw_gbps`` of it. The compute phase is a job on its SM's server, work
  ``flops / (sm_gflops * compute_efficiency)`` ns, shared equally by the blocks computing there.
  Overlap of memory and compute comes from co-resident blocks, as on the GPU.
- **Launches.** Kernels of a schedule run back to back; the first starts after ``kernel_launch_ns``,
  each next one ``kernel_boundary_ns`` after the previous one's last block ends. The L2 keeps its
  contents across kernels.

Events per task: a claim, a memory-phase start, and the completions of its two phases (plus the
rescheduling of the two servers' next completions when it joins and leaves them). Tasks are not
SimPy processes: callbacks on SimPy events keep the cost near one heap operation per event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import simpy

from megasim.errors import SimulationError
from megasim.hardware.spec import GPUSpec
from megasim.mapping.schedule import Launch, Schedule, check_valid
from megasim.sim.l2 import L2Cache
from megasim.sim.occupancy import Footprint, Occupancy, occupancy
from megasim.sim.result import SimResult
from megasim.sim.servers import SharedServer
from megasim.taskgraph import TaskGraph

PLACEMENTS = ("round_robin", "fill")


@dataclass(frozen=True)
class SimOptions:
    placement: str = "round_robin"
    record_timeline: bool = True

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise SimulationError(f"placement {self.placement!r} is not allowed (allowed: {', '.join(PLACEMENTS)})")


def launch_footprint(graph: TaskGraph, launch: Launch) -> Footprint:
    kinds = np.unique(graph.kind[launch.order])
    return Footprint(int(graph.kind_threads[kinds].max()), int(graph.kind_registers[kinds].max()),
                     int(graph.kind_shared_bytes[kinds].max()))


def simulate(graph: TaskGraph, schedule: Schedule, spec: GPUSpec, options: SimOptions | None = None) -> SimResult:
    """Predict the runtime of `schedule` on `spec`. Deterministic: same inputs, identical result."""
    check_valid(graph, schedule)
    return _Run(graph, spec, options or SimOptions()).run(schedule)


class _Run:
    """The mutable state of one simulation; used once."""

    def __init__(self, graph: TaskGraph, spec: GPUSpec, options: SimOptions) -> None:
        self.graph, self.spec, self.options = graph, spec, options
        self.env = simpy.Environment()
        t = graph.num_tasks
        eff = np.array([spec.task_cost(k).compute_efficiency for k in graph.kind_names])
        fixed = np.array([spec.task_cost(k).fixed_ns for k in graph.kind_names])
        self.compute_ns = (graph.flops / (spec.sm_gflops * eff[graph.kind])).tolist()
        self.fixed_ns = fixed[graph.kind].tolist()
        self.waits = [[c for c in row if c >= 0] for row in graph.wait_counters.tolist()]
        self.signals = [[c for c in row if c >= 0] for row in graph.signal_counters.tolist()]
        self.remaining = graph.counter_init.tolist()
        self.waiters: dict[int, list[int]] = {}
        self.ptr = graph.access_ptr.tolist()
        self.acc = list(zip(graph.access_region.tolist(), graph.access_part_lo.tolist(),
                            graph.access_part_hi.tolist(), graph.access_bytes.tolist(),
                            graph.access_write.tolist()))
        self.region_tensor = graph.region_tensor.tolist()
        self.l2 = L2Cache(spec.l2_bytes, graph.region_parts.tolist(), graph.region_part_bytes.tolist())
        self.mem = SharedServer(self.env, min(1.0, spec.tb_max_dram_bw_gbps / spec.dram_bw_gbps),
                                self._mem_done, self._log_mem if options.record_timeline else None)
        self.sms = [SharedServer(self.env, 1.0, self._compute_done,
                                 self._log_sm if options.record_timeline else None)
                    for _ in range(spec.sm_count)]
        # Per-task records.
        self.claim = [np.nan] * t
        self.ready = [np.nan] * t
        self.mem_start = [np.nan] * t
        self.comp_start = [np.nan] * t
        self.end = [np.nan] * t
        self.sm_of = [-1] * t
        self.slot_of = [-1] * t
        self.dram_of = [0.0] * t
        # Totals.
        n_tensors = len(graph.tensor_names)
        self.dram_read = [0.0] * n_tensors
        self.dram_write = [0.0] * n_tensors
        self.l2_read = [0.0] * n_tensors
        self.onchip_bytes = 0.0
        # Timeline logs: (time, value) pairs at each change.
        self.mem_log: list[tuple[float, int]] = []
        self.busy_sm_log: list[tuple[float, int]] = []
        self.resident_log: list[tuple[float, int]] = []
        self.busy_sms = 0
        self.resident = 0
        self.events = 0

    # --- logging -------------------------------------------------------------------------------
    def _log_mem(self, now: float, old_n: int, new_n: int) -> None:
        self.mem_log.append((now, new_n))

    def _log_sm(self, now: float, old_n: int, new_n: int) -> None:
        if (old_n == 0) != (new_n == 0):
            self.busy_sms += 1 if new_n else -1
            self.busy_sm_log.append((now, self.busy_sms))

    def _log_resident(self, delta: int) -> None:
        self.resident += delta
        if self.options.record_timeline:
            self.resident_log.append((self.env.now, self.resident))

    # --- scheduling helpers ----------------------------------------------------------------------
    def _after(self, delay: float, callback, value) -> None:
        self.events += 1
        ev = self.env.timeout(delay, value)
        ev.callbacks.append(callback)

    # --- launches ------------------------------------------------------------------------------------
    def run(self, schedule: Schedule) -> SimResult:
        wall = time.perf_counter()
        self.launch_log: list[dict] = []
        self.launches = list(schedule.launches)
        self.launch_index = -1
        self._start_next_launch(self.spec.kernel_launch_ns)
        self.env.run()
        unfinished = [i for i in range(self.graph.num_tasks) if self.end[i] != self.end[i]]
        if unfinished:
            waiting = [i for i in unfinished if self.claim[i] == self.claim[i]][:10]
            raise SimulationError(f"the model stalled with {len(unfinished)} tasks unfinished; "
                                  f"blocked tasks (first 10): {waiting}")
        return SimResult.from_run(self, schedule, time.perf_counter() - wall)

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
        self.cur = launch
        self.cur_order = launch.order.tolist()
        self.cur_next = 0
        self.cur_done = 0
        self.cur_claim_ns = (self.spec.atomic_latency_ns if launch.style == "persistent"
                             else self.spec.block_dispatch_ns)
        start = self.env.now + delay
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

    def _on_slot_free(self, ev) -> None:
        self._claim(*ev.value)

    def _claim(self, sm: int, slot: int) -> None:
        """The block in (sm, slot) takes the next task of the map, or exits if none is left."""
        if self.cur_next >= len(self.cur_order):
            return                       # nothing left to claim: the slot idles (its block exits)
        task = self.cur_order[self.cur_next]
        self.cur_next += 1
        now = self.env.now
        self.claim[task] = now
        self.sm_of[task] = sm
        self.slot_of[task] = slot
        self._log_resident(+1)
        self._after(self.cur_claim_ns + self.spec.atomic_latency_ns, self._on_check, task)

    def _on_check(self, ev) -> None:
        self._check(ev.value)

    def _check(self, task: int) -> None:
        remaining = self.remaining
        for c in self.waits[task]:
            if remaining[c] > 0:
                self.waiters.setdefault(c, []).append(task)
                return
        self._ready(task)

    def _ready(self, task: int) -> None:
        now = self.env.now
        self.ready[task] = now
        l2 = self.l2
        acc = self.acc
        tensor = self.region_tensor
        dram = 0.0
        l2_bytes = 0.0
        for i in range(self.ptr[task], self.ptr[task + 1]):
            region, lo, hi, nbytes, write = acc[i]
            l2_bytes += nbytes
            if region < 0:
                self.onchip_bytes += nbytes
                continue
            miss = l2.access(region, lo, hi, nbytes, write)
            dram += miss
            ti = tensor[region]
            if write:
                self.dram_write[ti] += miss
            else:
                self.dram_read[ti] += miss
                self.l2_read[ti] += nbytes
        self.dram_of[task] = dram
        spec = self.spec
        work = max(dram / spec.dram_bw_gbps, l2_bytes / spec.l2_bw_gbps)
        latency = (spec.dram_latency_ns if dram > 0.0 else spec.l2_latency_ns) if l2_bytes > 0.0 else 0.0
        self._after(latency + self.fixed_ns[task], self._on_mem_start, (task, work))

    def _on_mem_start(self, ev) -> None:
        task, work = ev.value
        self.mem_start[task] = self.env.now
        if work > 0.0:
            self.mem.add(task, work)
        else:
            self._mem_done(task)

    def _mem_done(self, task: int) -> None:
        self.comp_start[task] = self.env.now
        work = self.compute_ns[task]
        if work > 0.0:
            self.sms[self.sm_of[task]].add(task, work)
        else:
            self._finish(task)

    def _compute_done(self, task: int) -> None:
        self._finish(task)

    def _finish(self, task: int) -> None:
        now = self.env.now
        self.end[task] = now
        self._log_resident(-1)
        remaining = self.remaining
        for c in self.signals[task]:
            remaining[c] -= 1
            if remaining[c] == 0:
                for waiter in self.waiters.pop(c, ()):
                    self._after(self.spec.atomic_latency_ns, self._on_check, waiter)
        self.cur_done += 1
        if self.cur_done == len(self.cur_order):
            self.launch_log[-1]["end_ns"] = now
            self._start_next_launch(self.spec.kernel_boundary_ns)
        else:
            self._claim(self.sm_of[task], self.slot_of[task])
