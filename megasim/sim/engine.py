"""The discrete-event engine: a TaskGraph, run in a Schedule's order, on a GPUSpec.

What it models (times in ns, data in bytes; all costs from the GPUSpec, each kind's from the entry
of its cost name, ``TaskGraph.cost_names``: the kind, or an implementation variant of it such as the
GEMM at t = 32, ``gemm@t32``, which falls back to the kind's entry; in a launch of one kind's own
kernel, the name's own-kernel entry where the spec gives one, ``megasim.sim.run_setup.priced_kinds``):

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
  and is a job on one shared memory-system server with work
  ``max(dram_bytes / dram_bw, l2_bytes / l2_bw)`` ns; a block moves its bytes no faster than its
  kind's ``block_dram_bw_gbps`` b (default ``tb_max_dram_bw_gbps``) on its misses and ``b *
  block_l2_bw_ratio`` on all its bytes, which caps its share of the server (water-filling, as below,
  when the caps of a launch's blocks differ; ``megasim.sim.resources``). The compute phase is a job on its SM's server, work
  ``flops / (sm_gflops * compute_efficiency) + other_ops * ns_per_other_op + shared_replays *
  ns_per_replay + sm_fixed_ns`` ns, shared equally by
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
  ``launch_fixed_ns`` of its kinds; a megakernel launch first waits ``megakernel_reset_ns``, the
  counter and control reset kernel the executor issues before it, when the spec gives it:
  ``GPUSpec.reset_ns``); the first starts after ``kernel_launch_ns``
  (``megakernel_launch_ns`` when the spec gives it and the first launch runs the megakernel: it
  mixes task kinds or is a persistent grid),
  each next one ``kernel_boundary_ns`` after the previous one's last block ends. The L2 keeps its
  contents across kernels. When the spec gives ``queued_launch_ns`` (runs timed back to back, the
  host issuing the next run while the device works), the first kernel starts after that device-side
  delay instead, and the prediction is the longer of the device's time and the host's issue time
  (the sum of the launches' ``kernel_launch_ns`` / ``megakernel_launch_ns``).

Events per task: a claim, a memory-phase start, and the completions of its two phases (three with an
overlapped rest of the memory phase; plus the rescheduling of the two servers' next completions when it
joins and leaves them). They are SimPy events on the run's ``simpy.Environment``
(``megasim.sim.clock.ModelEnvironment``), where user SimPy processes can run beside the model
(``Simulation``, docs/simpy_processes.md). Tasks are not SimPy processes: a model event is a callback,
and calls posted for the same time and handler one after another share one SimPy event (blocks
dispatched together, alike tasks whose memory phases start together), in the order they would have run
one event each. A run without user processes runs the same handlers compiled
(``megasim.sim.compiled_loop``), popping the same events in the same order: the same prediction, bit for
bit, 6-9x faster (``SimOptions.engine``).

The code: this module holds the options, ``simulate`` and the run (``_Run``), assembled from its setup
(``megasim.sim.run_setup``: per-task tables and records), its launches (``megasim.sim.launches``), its
claims and dependency waits (``megasim.sim.claims``) and its tasks' memory and compute phases
(``megasim.sim.phases``). The servers are ``megasim.sim.servers`` (the processor-sharing rules, made by
``make_server``); which one each launch needs is ``megasim.sim.resources``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from megasim.errors import MappingError, SimulationError
from megasim.hardware.spec import GPUSpec
from megasim.schedule import Schedule, check_valid
from megasim.sim.claims import _Claims
from megasim.sim.clock import ModelEnvironment, event_limit
from megasim.sim.launches import _Launches, launch_footprint
from megasim.sim.phases import _Phases
from megasim.sim.resources import STRETCH_LEVELS, Resources
from megasim.sim.result import SimResult
from megasim.sim.run_setup import _Setup, priced_kinds
from megasim.taskgraph import TaskGraph

PLACEMENTS = ("round_robin", "fill")
ENGINES = ("auto", "simpy", "compiled")

__all__ = ["ENGINES", "PLACEMENTS", "STRETCH_LEVELS", "ModelEnvironment", "SimOptions", "Simulation", "launch_footprint",
           "simulate"]


@dataclass(frozen=True)
class SimOptions:
    """``placement``: how a launch's first blocks are spread over the SMs. ``engine``: what runs the
    events: ``"simpy"``, the handlers on SimPy's queue; ``"compiled"``, the same handlers compiled
    (``megasim.sim.compiled_loop``: the same prediction, bit for bit, many times faster; not for runs
    with user SimPy processes, or on an environment given to ``Simulation``); ``"auto"`` (the default),
    compiled where it can, else SimPy."""
    placement: str = "round_robin"
    engine: str = "auto"

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise SimulationError(f"placement {self.placement!r} is not allowed (allowed: {', '.join(PLACEMENTS)})")
        if self.engine not in ENGINES:
            raise SimulationError(f"engine {self.engine!r} is not allowed (allowed: {', '.join(ENGINES)})")


def simulate(graph: TaskGraph, schedule: Schedule, spec: GPUSpec, options: SimOptions | None = None, *,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Predict the runtime of `schedule` on `spec`. Deterministic: same inputs, identical result.
    ``progress(tasks_ended, tasks)``, if given, is called every ``PROGRESS_EVERY`` tasks of a launch."""
    return Simulation(graph, schedule, spec, options, progress=progress).run()


class Simulation:
    """One run of the model on its own SimPy environment, for runs that add SimPy processes.

        sim = Simulation(graph, schedule, spec)
        sim.env.process(traffic(sim))            # a user process: yields SimPy events, may call the model
        result = sim.run()

    ``env`` is a ``ModelEnvironment`` (a ``simpy.Environment``); the model's events and the processes'
    share its queue, times in ns. ``run()`` returns when the schedule's last task ends (processes
    still running then are left where they are). What a process can ask of the model:
    ``dram_transfer(nbytes)``, a transfer through the memory system, sharing its bandwidth with the
    blocks' memory phases, as a SimPy event that fires when it ends; ``now``.
    ``simulate(graph, schedule, spec)`` is ``Simulation(graph, schedule, spec).run()``.
    """

    def __init__(self, graph: TaskGraph, schedule: Schedule, spec: GPUSpec, options: SimOptions | None = None,
                 env: ModelEnvironment | None = None, *, progress: Callable[[int, int], None] | None = None) -> None:
        """``env``: the environment to run on (default: a new one); it must be at time 0 and hold no
        other model. ``progress``: as ``simulate``'s."""
        if progress is not None and not callable(progress):
            raise SimulationError(f"progress={progress!r} is not allowed: give a callable (tasks_ended, tasks) or None")
        check_valid(graph, schedule)
        if not isinstance(spec, GPUSpec):
            hint = f"megasim.hardware.get_gpu({spec!r})" if isinstance(spec, str) else "megasim.hardware.get_gpu or load_spec"
            raise MappingError(f"spec {spec!r:.60} (a {type(spec).__name__}) is not allowed: give a GPUSpec ({hint})")
        if options is not None and not isinstance(options, SimOptions):
            raise MappingError(f"options {options!r:.60} (a {type(options).__name__}) are not allowed: give a "
                               f"SimOptions or None")
        self._wall = time.perf_counter()
        self._own_env = env is None
        if env is None:
            env = ModelEnvironment()
        elif not isinstance(env, ModelEnvironment):
            raise SimulationError(f"env must be a megasim.sim.ModelEnvironment, got {type(env).__name__}")
        elif env.now != 0:
            raise SimulationError(f"env is at time {env.now}; a simulation starts at time 0")
        self.env = env
        self.graph, self.schedule, self.spec = graph, schedule, spec
        self.options = options or SimOptions()
        self.progress = progress
        self._run: _Run | None = None
        self._ran = False

    @property
    def now(self) -> float:
        return self.env.now

    def dram_transfer(self, nbytes: float):
        """A SimPy event that fires when ``nbytes`` (> 0) have moved through the memory system from now:
        one job on the memory-system server of the launch running now (the first one before it starts),
        work ``nbytes / dram_bw``, shared with the blocks' memory phases and capped like a block's."""
        if not self._ran:
            raise SimulationError("dram_transfer is for SimPy processes of a running simulation: call it from "
                                  "a process started with sim.env.process(...) before sim.run()")
        try:
            nbytes = float(nbytes)
        except (TypeError, ValueError):
            raise SimulationError(f"nbytes={nbytes!r} is not allowed: a transfer moves a finite, positive "
                                  f"number of bytes") from None
        if not nbytes > 0.0 or nbytes == float("inf"):
            raise SimulationError(f"nbytes={nbytes!r} is not allowed: a transfer moves a finite, positive number of bytes")
        return self._run.external_transfer(nbytes)

    def run(self) -> SimResult:
        if self._ran:
            raise SimulationError("a Simulation runs once; make a new one")
        self._ran = True
        engine = self.options.engine
        if engine != "simpy":
            from megasim.sim import compiled_run
            why = None
            if not self._own_env:
                why = "the simulation was given its own environment"
            if why is None and self.env.pending():
                why = "SimPy processes run beside the model"
            if why is None:
                try:
                    return compiled_run.run_compiled(self.graph, self.schedule, self.spec, self.options.placement,
                                                     self.progress, self._wall)
                except compiled_run.OutOfRoom as err:      # (progress, if any, then restarts from 0)
                    why = str(err)
            if engine == "compiled":
                raise SimulationError(f"engine='compiled' is not allowed here: {why} (use engine='auto' or 'simpy')")
        self._run = _Run(self.graph, self.schedule, self.spec, self.options, self.env, self.progress)
        return self._run.run(self.schedule, self._wall)


class _Run(_Setup, _Launches, _Claims, _Phases):
    """The mutable state of one simulation; used once. Its tables are ``_Setup``'s; its event handlers
    are ``_Launches``', ``_Claims``' and ``_Phases``'."""

    @property
    def events(self) -> int:
        """The queue entries the model posted (``ModelEnvironment.events``)."""
        return self.clock.events

    def __init__(self, graph: TaskGraph, schedule: Schedule, spec: GPUSpec, options: SimOptions,
                 env: ModelEnvironment, progress: Callable[[int, int], None] | None = None) -> None:
        self.graph, self.spec, self.options, self.progress = graph, spec, options, progress
        self.clock = env
        self.done = env.event()         # succeeds when the schedule's last launch has ended
        costs, price = priced_kinds(graph, schedule, spec)     # per kind, under its cost name (and own kernel)
        self._init_costs(costs, price)
        self._init_counters()
        self._init_accesses()
        self._init_records()
        # A task whose memory overlaps its compute (TaskCost.memory_overlap) ends when both phases have.
        self._comp_done = self._join if self.overlap_on else self._finish
        self.resources = Resources(self.clock, spec, costs, self.kind_of, self.age_of, self._mem_done,
                                   self._comp_done)
        self.mem_cap = self.resources.mem_cap
        self.track_age = self.resources.track_age
        self.stretch_on = self.resources.stretch_on
        if self.stretch_on:
            self.mem_class_of = self.resources.mem_class_of

    def run(self, schedule: Schedule, wall: float) -> SimResult:
        """Simulate; `wall` is the perf_counter() at which the simulation's setup began."""
        self.launch_log: list[dict] = []
        self.clock.event_limit = self.clock.events + event_limit(self.num_tasks)   # (the runaway guard)
        self.clock.runaway_tasks = self.num_tasks
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
        try:
            try:
                self.clock.run(until=self.done)
            except RuntimeError:
                if self.done.triggered:     # (SimPy's "no scheduled events left" is a stall, below)
                    raise
            unfinished = np.flatnonzero(np.isnan(np.array(self.end, dtype=np.float64))).tolist()
            if unfinished:
                waiting = [i for i in unfinished if self.claim[i] == self.claim[i]][:10]
                raise SimulationError(f"the model stalled with {len(unfinished)} tasks unfinished; "
                                      f"blocked tasks (first 10): {waiting}")
            return SimResult.from_run(self, schedule, time.perf_counter() - wall)
        finally:
            # The servers call back into the run (and the run into itself): drop those references, so
            # the run's tables are freed when it ends, not at the next cyclic garbage collection.
            self.resources.close()
            self.resources = self.sms = self.mem = self._comp_done = None
            self.clock.drop_model_events()
