"""A run on the compiled event loop (``megasim.sim.compiled_loop``): the tables, the launches, the result.

``simulate`` uses it when the run needs nothing from SimPy's loop (no user SimPy processes). It predicts
the same, bit for bit, as the SimPy handlers, several times faster (``docs/model.md``);
``SimOptions(engine="simpy")`` runs the handlers instead. Its heaps and block lists have fixed room,
sized from the launches; a run that outgrows it (``OutOfRoom``) runs on the handlers.

The launches are set up here as ``megasim.sim.launches`` sets them up (occupancy, servers, claim costs,
ready lists, first blocks), then the loop runs each until its last task ends. The tables are built from
the TaskGraph's arrays in bulk: an access is (region, parts range, bytes, write) as in the graph, and
the L2 keeps a byte per part.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from megasim.errors import SimulationError
from megasim.hardware.spec import GPUSpec
from megasim.ready import ready_lists
from megasim.schedule import Schedule
from megasim.sim import compiled_loop as loop
from megasim.sim import launches as launches_module
from megasim.sim.clock import event_limit, runaway_error
from megasim.sim.launches import claim_costs, is_megakernel, launch_blocks_per_sm
from megasim.sim.resources import STRETCH_LEVELS, classes_of, kind_caps
from megasim.sim.result import SimResult
from megasim.sim.run_setup import priced_kinds, task_costs, tracked_accesses
from megasim.taskgraph import TaskGraph

MEM_SHARED, MEM_CAPPED, MEM_STRETCH, SM_FIRST = 0, 1, 2, 3   # server ids; then the SMs: shared, capped, readiness
MEM_ROOM = 64               # a memory-system group heap's first room (it grows; an SM's holds its blocks)


class OutOfRoom(Exception):
    """The compiled loop's heaps or block lists ran out of room (it then runs on the SimPy handlers)."""


def _classes(values: list, kind: np.ndarray) -> tuple[list, np.ndarray]:
    """``classes_of`` with the per-task classes as an array: the distinct values, ascending, and per task
    the index of its kind's value."""
    keys, of_kind = classes_of(values, list(range(len(values))))
    return keys, np.asarray(of_kind, np.int64)[kind]


class _Output:
    """What ``SimResult.from_run`` reads of a run (``megasim.sim.result.RunRecords``)."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


def run_compiled(graph: TaskGraph, schedule: Schedule, spec: GPUSpec, placement: str,
                 progress: Callable[[int, int], None] | None, wall: float) -> SimResult:
    """Simulate `schedule` on the compiled loop; `wall` is the perf_counter() at which the simulation's
    setup began. OutOfRoom if the loop's room runs out."""
    return _CompiledRun(graph, schedule, spec, placement, progress).run(wall)


class _CompiledRun:
    """One run: its launches' plans, its servers' layout, the loop's tables and state, then the launches
    one after another (``megasim.sim.engine._Run``'s setup, in arrays)."""

    def __init__(self, graph: TaskGraph, schedule: Schedule, spec: GPUSpec, placement: str,
                 progress: Callable[[int, int], None] | None) -> None:
        self.graph, self.schedule, self.spec, self.placement, self.progress = graph, schedule, spec, placement, progress
        # per price (run_setup.priced_kinds: a kind's cost name, or its own kernel's cost), each task's
        self.costs, self.kind = priced_kinds(graph, schedule, spec)
        self.launches = list(schedule.launches)
        # Per launch: its occupancy, blocks per SM, kinds and whether the megakernel runs it.
        self.plans = []
        for launch in self.launches:
            occ, per_sm = launch_blocks_per_sm(spec, graph, launch)
            self.plans.append((occ, per_sm, np.unique(self.kind[launch.order]).tolist(), is_megakernel(graph, launch)))
        self.max_per_sm = max((p[1] for p in self.plans), default=1)
        self.max_slots = spec.sm_count * self.max_per_sm
        self.sm_room = 2 * self.max_per_sm + 2          # blocks on an SM at once, with a margin
        self.lists = [ready_lists(graph, launch.order) if launch.dispatch == "ready" else None
                      for launch in self.launches]
        self._classes_and_servers()
        self.tracked, self.rptr, self.task_bytes = tracked_accesses(graph)
        self.compute_ns, self.fixed_plain, self.fixed_mega = task_costs(graph, spec, self.costs, self.kind)
        self.tb = self._tables()
        self.arrays = self._state_arrays()
        # (the loop writes into these arrays; the event heap's it replaces as it grows)
        self.st = loop.new_state(*(self.arrays[field] for field in loop.State.FIELDS))

    def _classes_and_servers(self) -> None:
        """The servers' classes (``megasim.sim.resources``: memory caps, SM shares, stretch levels,
        readiness) and the servers: the memory system shared, capped or by stretch class; per SM shared,
        capped or readiness (age-weighted where ages are weighed)."""
        spec, costs, kind = self.spec, self.costs, self.kind
        self.mem_cap, self.mem_caps, self.hit_scale, block_ready = kind_caps(spec, costs)
        self.shares = [c.block_sm_share for c in costs]
        mem_keys, self.mem_class = _classes(self.mem_caps, kind)
        sm_keys, self.sm_class = _classes(self.shares, kind)
        self.stretch = [c.coresident_stretch for c in costs]
        self.hit_on = not spec.l2_ratio_implied
        # Memory classes by level: a stretch, or a cap that depends on the job's hit fraction.
        self.stretch_on = self.hit_on or any(g > 0.0 for g in self.stretch)
        levels = range(1, STRETCH_LEVELS + 1)
        stretch_keys = (sorted({cap * lv / STRETCH_LEVELS for cap in self.mem_caps for lv in levels})
                        if self.stretch_on else [1.0])
        index = {c: i for i, c in enumerate(stretch_keys)}
        self.mem_class_at = np.zeros((len(costs), STRETCH_LEVELS + 1), np.int64)
        if self.stretch_on:
            self.mem_class_at[:, 1:] = [[index[cap * lv / STRETCH_LEVELS] for lv in levels] for cap in self.mem_caps]
        self.mixed = spec.mixed_kinds_sm_factor
        ready_keys, self.ready_class = _classes(
            block_ready if self.mixed is None else [(*r, k) for k, r in enumerate(block_ready)], kind)
        self.ready_kinds = {k for k, c in enumerate(costs) if c.block_sm_ready is not None}
        self.track_age = spec.younger_block_weight not in (None, 1.0)
        rows = (mem_keys, sm_keys, stretch_keys, [key[0] for key in ready_keys])
        k_max = self.k_max = max(len(r) for r in rows)
        self.caps = np.ones((4, k_max))
        for r, keys in enumerate(rows):
            self.caps[r, :len(keys)] = keys
        self.further = np.ones(k_max)
        self.further[:len(ready_keys)] = [key[1] for key in ready_keys]
        # The age-weighted servers' weights, grown as they grow them.
        rho = spec.younger_block_weight if self.track_age else 1.0
        self.weights, self.weight_sums = [1.0], [0.0, 1.0]
        while len(self.weights) < self.sm_room:
            self.weights.append(self.weights[-1] * rho)
            self.weight_sums.append(self.weight_sums[-1] + self.weights[-1])

        n_sm = spec.sm_count
        ns = self.ns = SM_FIRST + 3 * n_sm
        sm_capped, sm_ready = SM_FIRST + n_sm, SM_FIRST + 2 * n_sm
        self.sm_shared, self.sm_capped, self.sm_ready = SM_FIRST, sm_capped, sm_ready
        self.s_row = np.zeros(ns, np.int64)
        self.s_k = np.ones(ns, np.int64)
        self.s_rule = np.full(ns, loop.RULE_ONE, np.int64)
        self.s_cap0 = np.ones(ns)
        for s, row, keys in ((MEM_CAPPED, loop.ROW_MEM, mem_keys), (MEM_STRETCH, loop.ROW_STRETCH, stretch_keys)):
            self.s_row[s], self.s_k[s] = row, len(keys)
            self.s_rule[s] = loop.RULE_CAPPED if len(keys) > 1 else loop.RULE_ONE
            self.s_cap0[s] = keys[0]
        self.s_row[sm_capped:sm_ready], self.s_k[sm_capped:sm_ready] = loop.ROW_SM, len(sm_keys)
        self.s_rule[sm_capped:sm_ready] = loop.RULE_CAPPED if len(sm_keys) > 1 else loop.RULE_ONE
        self.s_cap0[sm_capped:sm_ready] = sm_keys[0]
        self.s_row[sm_ready:], self.s_k[sm_ready:] = loop.ROW_READY, len(ready_keys)
        self.s_rule[sm_ready:] = loop.RULE_AGE if self.track_age else loop.RULE_READY
        self.s_is_mem = np.zeros(ns, np.uint8)
        self.s_is_mem[:SM_FIRST] = 1
        # Each group's heap: its first room in the pool (an age-weighted server's blocks need none).
        room = np.where(self.s_is_mem == 1, MEM_ROOM, self.sm_room)
        room[self.s_rule == loop.RULE_AGE] = 0
        self.g_cap = np.zeros(ns * k_max, np.int64)
        for s in range(ns):
            self.g_cap[s * k_max:s * k_max + self.s_k[s]] = room[s]
        self.g_off = np.concatenate([[0], np.cumsum(self.g_cap)[:-1]]).astype(np.int64)
        self.heap_slots = int(self.g_cap.sum()) + 16 * (2 * self.max_slots + 2) + 1024

    def _tables(self):
        """The loop's read-only tables: costs, counters, accesses (the L2's parts a bit each), classes."""
        graph, spec, costs, tracked = self.graph, self.spec, self.costs, self.tracked
        t = graph.num_tasks
        lo = graph.access_part_lo[tracked].astype(np.int32)
        hi = graph.access_part_hi[tracked].astype(np.int32)
        step = graph.access_part_step[tracked].astype(np.int32)
        count = np.where(step == 1, hi - lo, (hi - lo + step - 1) // np.maximum(step, 1)).astype(np.int32)
        self.region_parts = graph.region_parts.astype(np.int64)
        consts = np.zeros(loop.N_CONSTS)
        consts[loop.C_INV_DRAM_BW] = 1.0 / spec.dram_bw_gbps
        consts[loop.C_INV_L2_BW] = 1.0 / spec.l2_bw_gbps
        consts[loop.C_DRAM_LATENCY] = spec.dram_latency_ns
        consts[loop.C_L2_LATENCY] = spec.l2_latency_ns
        consts[loop.C_ATOMIC] = spec.atomic_latency_ns
        consts[loop.C_L2_CAPACITY] = float(spec.l2_bytes)
        consts[loop.C_MIXED] = 1.0 if self.mixed is None else self.mixed
        consts[loop.C_OVERLAP_ON] = any(c.memory_overlap > 0.0 for c in costs)
        consts[loop.C_STRETCH_ON] = self.stretch_on
        consts[loop.C_TRACK_AGE] = self.track_age
        consts[loop.C_HIT_ON] = self.hit_on
        consts[loop.C_L2_RATIO] = spec.block_l2_bw_ratio
        tables = dict(
            consts=consts, kind_of=np.ascontiguousarray(self.kind, np.int16), compute_ns=self.compute_ns,
            task_bytes=self.task_bytes, rptr=self.rptr,
            waits=np.ascontiguousarray(graph.wait_counters, np.int32).reshape(t, -1),
            signals=np.ascontiguousarray(graph.signal_counters, np.int32).reshape(t, -1),
            acc_region=graph.access_region[tracked].astype(np.int32), acc_lo=lo, acc_hi=hi, acc_step=step,
            acc_count=count, acc_nbytes=graph.access_bytes[tracked].astype(np.float64),
            acc_write=graph.access_write[tracked].astype(np.uint8),
            part_off=np.concatenate([[0], np.cumsum(self.region_parts)[:-1]]).astype(np.int64),
            part_bytes=graph.region_part_bytes.astype(np.float64), region_parts=self.region_parts,
            caps=self.caps, further=self.further, overlap=np.array([c.memory_overlap for c in costs], np.float64),
            stretch=np.array(self.stretch, np.float64), hit_scale=np.array(self.hit_scale, np.float64),
            mem_class=self.mem_class_at, weights=np.array(self.weights),
            weight_sums=np.array(self.weight_sums), s_rule=self.s_rule, s_row=self.s_row, s_k=self.s_k,
            s_is_mem=self.s_is_mem, k_max=self.k_max)
        return loop.new_tables(*(tables[field] for field in loop.Tables.FIELDS))

    def _state_arrays(self) -> dict:
        """The arrays of the loop's state (module docstring of ``megasim.sim.compiled_loop``), sized for
        this run: the event heap with ``margin`` to spare (it grows), the pool of ready-queue lists."""
        graph, t, ns, k_max, sm_room = self.graph, self.graph.num_tasks, self.ns, self.k_max, self.sm_room
        n_sm, max_slots = self.spec.sm_count, self.max_slots
        pool = 1 + sum(len(launch.order) + rl.group_pending.size + rl.roots.size
                       for launch, rl in zip(self.launches, self.lists) if rl is not None)
        self.margin = 6 * max_slots + 2 * ns + 64     # entries one event can push
        events = 2 * self.margin + 1024
        nan = np.full(t, np.nan)
        per_task_age = t if self.track_age else 1      # (only the age-weighted servers read ages and rates)
        n_regions = self.region_parts.size
        counters = graph.counter_init.size
        return dict(
            ireg=np.zeros(loop.N_IREG, np.int64), freg=np.zeros(loop.N_FREG),
            ev_t=np.zeros(events), ev_e=np.zeros(events, np.int64), ev_k=np.zeros(events, np.int64),
            ev_a=np.zeros(events, np.int64), ev_b=np.zeros(events, np.int64),
            class_of=np.stack([self.mem_class, self.sm_class, np.zeros(t, np.int64), self.ready_class]).astype(np.int32),
            remaining=graph.counter_init.astype(np.int64), w_head=np.full(counters, -1, np.int64),
            w_tail=np.full(counters, -1, np.int64), w_next=np.full(t, -1, np.int64),
            claim=nan.copy(), ready=nan.copy(), mem_start=nan.copy(), comp_start=nan.copy(), end=nan,
            claim_cost=np.zeros(t), check_at=np.zeros(t), mem_work=np.zeros(t), mem_rest=np.zeros(t),
            pending=np.zeros(t, np.int64), age_of=np.zeros(per_task_age, np.int64),
            block_age=np.full((n_sm, self.max_per_sm), -1, np.int64), sm_of=np.full(t, -1, np.int32),
            slot_of=np.full(t, -1, np.int32), miss=np.zeros(int(self.tracked.sum())),
            l2_bits=np.zeros(int(self.region_parts.sum()) // 64 + 1, np.uint64), l2_count=np.zeros(n_regions, np.int64),
            lru_prev=np.full(n_regions, -1, np.int64), lru_next=np.full(n_regions, -1, np.int64),
            in_lru=np.zeros(n_regions, np.uint8),
            s_t=np.zeros(ns), s_due=np.full(ns, np.inf), s_queued=np.full(ns, np.inf), s_cap=self.s_cap0,
            s_seq=np.zeros(ns, np.int64), s_due_eid=np.full(ns, -1, np.int64), s_queued_eid=np.full(ns, -1, np.int64),
            s_n=np.zeros(ns, np.int64), g_vt=np.zeros(ns * k_max), g_rate=np.zeros(ns * k_max),
            g_len=np.zeros(ns * k_max, np.int64), g_off=self.g_off, g_cap=self.g_cap,
            g_blocks=np.zeros(ns * k_max, np.int64), g_active=np.zeros(ns * k_max, np.int64),
            s_active=np.zeros(ns, np.int64), h_key=np.zeros(self.heap_slots),
            h_seq=np.zeros(self.heap_slots, np.int64), h_job=np.zeros(self.heap_slots, np.int64),
            j_vt=np.zeros(per_task_age), j_rate=np.zeros(per_task_age), j_on=np.zeros(per_task_age, np.uint8),
            a_job=np.zeros((ns, sm_room), np.int64), a_age=np.zeros((ns, sm_room), np.int64),
            a_cls=np.zeros((ns, sm_room), np.int64), a_n=np.zeros(ns, np.int64),
            a_act=np.zeros((ns, sm_room), np.int64), a_nact=np.zeros(ns, np.int64),
            a_cnt=np.zeros((ns, k_max), np.int64), a_cord=np.zeros((ns, k_max), np.int64),
            a_ncls=np.zeros(ns, np.int64), a_order=np.zeros(sm_room, np.int64),
            done_buf=np.zeros(4 * max_slots + 4, np.int64), pool=np.zeros(pool, np.int64),
            idle_sm=np.zeros(2 * max_slots + 16, np.int64), idle_slot=np.zeros(2 * max_slots + 16, np.int64))

    def _start_launch(self, launch, plan, rl):
        """``_Launches._start_next_launch`` up to the first blocks: the launch's servers, registers, claim
        costs and ready queue; its compiled ``Launch``."""
        ir, arrays, spec = self.arrays["ireg"], self.arrays, self.spec
        occ, per_sm, kinds, mega = plan
        presence = bool(self.ready_kinds.intersection(kinds))   # (Resources.for_launch)
        launch_shares = {self.shares[k] for k in kinds}
        if presence:
            ir[loop.R_SM0] = self.sm_ready
        elif len(launch_shares) == 1:
            ir[loop.R_SM0] = self.sm_shared
            arrays["s_cap"][self.sm_shared:self.sm_capped] = launch_shares.pop()
        else:
            ir[loop.R_SM0] = self.sm_capped
        ir[loop.R_PRESENCE] = presence
        launch_mem_caps = {self.mem_caps[k] for k in kinds}
        if self.stretch_on:
            ir[loop.R_MEM] = MEM_STRETCH
        elif len(launch_mem_caps) == 1:
            ir[loop.R_MEM] = MEM_SHARED
            arrays["s_cap"][MEM_SHARED] = launch_mem_caps.pop()
        else:
            ir[loop.R_MEM] = MEM_CAPPED
        ir[loop.R_PERSISTENT] = launch.style == "persistent"
        arrays["block_age"][:] = -1
        order = launch.order.astype(np.int64)
        n = order.size
        ir[loop.R_NEXT] = 0
        ir[loop.R_DONE] = 0
        ir[loop.R_LEN] = n
        every = launches_module.PROGRESS_EVERY
        ir[loop.R_REPORT_AT] = every if self.progress is not None else -1
        ir[loop.R_REPORT_EVERY] = every
        ir[loop.R_READY] = rl is not None
        queue = np.zeros(n + 1, np.int64)
        is_root = np.zeros(max(n, 1), np.uint8)
        if rl is not None:
            window = launch.ready_window or spec.sm_count
            first_roots = rl.roots[:window]
            queue[:first_roots.size] = first_roots
            is_root[rl.roots] = 1
            ir[loop.R_RQ_HEAD], ir[loop.R_RQ_TAIL] = 0, first_roots.size
            ir[loop.R_NEXT] = min(window, rl.roots.size)
            ir[loop.R_IDLE_HEAD] = ir[loop.R_IDLE_TAIL] = 0
        empty = np.zeros(1, np.int64)
        mk_claim = [c.megakernel_claim_ns for c in self.costs]
        launch_arrays = dict(
            order=order, check_ns=np.array(claim_costs(spec, mk_claim, launch, mega), np.float64),
            fixed_ns=self.fixed_mega if mega else self.fixed_plain,
            roots=rl.roots.astype(np.int64) if rl is not None else empty,
            counter_ptr=rl.counter_ptr.astype(np.int64) if rl is not None else empty,
            counter_groups=rl.counter_groups.astype(np.int64) if rl is not None else empty,
            pending=rl.group_pending.astype(np.int64) if rl is not None else empty,
            group_ptr=rl.group_ptr.astype(np.int64) if rl is not None else empty,
            group_positions=rl.group_positions.astype(np.int64) if rl is not None else empty,
            is_root=is_root, pos_of=np.full(self.graph.num_tasks if rl is not None else 1, -1, np.int64),
            queue=queue)
        return loop.new_launch(*(launch_arrays[field] for field in loop.Launch.FIELDS))

    def run(self, wall: float) -> SimResult:
        spec, arrays, st = self.spec, self.arrays, self.st
        ir, fr = arrays["ireg"], arrays["freg"]
        ir[loop.R_LRU_HEAD] = ir[loop.R_LRU_TAIL] = -1
        ir[loop.R_HTOP] = int(self.g_cap.sum())
        ir[loop.R_EVENT_LIMIT] = event_limit(self.graph.num_tasks)
        launch_log: list[dict] = []
        if spec.queued_launch_ns is None:
            host_ns = 0.0
            delay = spec.launch_ns(bool(self.launches) and self.plans[0][3])
        else:
            host_ns = float(sum(spec.launch_ns(p[3]) for p in self.plans))
            delay = spec.queued_launch_ns
        launch_fixed = [c.launch_fixed_ns for c in self.costs]
        tasks_before, t, n_sm = 0, self.graph.num_tasks, spec.sm_count
        for index, (launch, plan, rl) in enumerate(zip(self.launches, self.plans, self.lists)):
            occ, per_sm, kinds, mega = plan
            tasks_before += int(ir[loop.R_DONE])
            ln = self._start_launch(launch, plan, rl)
            delay += spec.reset_ns(mega, index == 0)     # the reset kernel before a megakernel launch
            start = fr[loop.F_NOW] + delay
            delay += max((launch_fixed[k] for k in kinds), default=0.0)
            n = len(launch.order)
            launch_log.append({"name": launch.name, "style": launch.style, "start_ns": start, "end_ns": np.nan,
                               "blocks_per_sm": per_sm, "limited_by": occ.limited_by, "tasks": n})
            slots = n_sm * per_sm
            first = slots if launch.style == "persistent" else min(slots, n)
            loop.place_first_blocks(st, first, n_sm, per_sm, self.placement == "round_robin", delay)
            while True:
                why = loop.run_events(self.tb, st, ln, self.margin)
                if why == loop.STOP_GROW:
                    loop.grow_events(st)
                    continue
                if why == loop.STOP_RUNAWAY:
                    raise runaway_error(int(ir[loop.R_EVENT_LIMIT]), t, float(fr[loop.F_NOW]))
                if why == loop.STOP_OVERFLOW:
                    raise OutOfRoom(f"the compiled loop's server heaps ({self.heap_slots} jobs) or block lists "
                                    f"({self.sm_room} per SM) ran out of room")
                if why & loop.STOP_PROGRESS:
                    self.progress(tasks_before + int(ir[loop.R_REPORTED]), t)
                if why & loop.STOP_LAUNCH:
                    launch_log[-1]["end_ns"] = float(fr[loop.F_LAUNCH_END])
                    delay = spec.kernel_boundary_ns
                    break
                if why == loop.STOP_EMPTY:
                    unfinished = np.flatnonzero(np.isnan(arrays["end"])).tolist()
                    waiting = [i for i in unfinished if arrays["claim"][i] == arrays["claim"][i]][:10]
                    raise SimulationError(f"the model stalled with {len(unfinished)} tasks unfinished; "
                                          f"blocked tasks (first 10): {waiting}")
        records = {name: arrays[name] for name in ("claim", "ready", "claim_cost", "mem_start", "comp_start", "end",
                                                    "sm_of", "slot_of")}
        out = _Output(graph=self.graph, spec=spec, launch_log=launch_log, tracked=self.tracked,
                      miss_of=arrays["miss"], mem_cap=self.mem_cap, host_ns=host_ns, events=int(ir[loop.R_PUSHED]),
                      **records)
        return SimResult.from_run(out, self.schedule, time.perf_counter() - wall)
