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
from megasim.sim.launches import claim_costs, is_megakernel, launch_footprint
from megasim.sim.occupancy import occupancy
from megasim.sim.resources import STRETCH_LEVELS
from megasim.sim.result import SimResult
from megasim.sim.run_setup import task_costs, tracked_accesses
from megasim.taskgraph import TaskGraph

MEM_SHARED, MEM_CAPPED, MEM_STRETCH, SM_FIRST = 0, 1, 2, 3   # server ids; then the SMs: shared, capped, readiness
MEM_ROOM = 64               # a memory-system group heap's first room (it grows; an SM's holds its blocks)


class OutOfRoom(Exception):
    """The compiled loop's heaps or block lists ran out of room (it then runs on the SimPy handlers)."""


def _classes(values: list, kind: np.ndarray) -> tuple[list, np.ndarray]:
    """``megasim.sim.resources.classes_of`` on arrays: the distinct values, ascending, and per task the
    index of its kind's value."""
    keys = sorted(set(values))
    of_kind = np.array([keys.index(v) for v in values], np.int64)
    return keys, of_kind[kind]


class _Output:
    """What ``SimResult.from_run`` reads of a run."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


def run_compiled(graph: TaskGraph, schedule: Schedule, spec: GPUSpec, placement: str,
                 progress: Callable[[int, int], None] | None, wall: float) -> SimResult:
    """Simulate `schedule` on the compiled loop; `wall` is the perf_counter() at which the simulation's
    setup began. OutOfRoom if the loop's room runs out."""
    costs = [spec.task_cost(k) for k in graph.cost_names]
    t = graph.num_tasks
    kind = graph.kind.astype(np.int64)
    launches = list(schedule.launches)
    n_sm = spec.sm_count

    # Per launch: its blocks per SM, kinds and whether the megakernel runs it.
    plans = []
    for launch in launches:
        occ = occupancy(spec, launch_footprint(graph, launch))
        per_sm = occ.blocks_per_sm
        if launch.style == "persistent" and launch.blocks_per_sm is not None:
            if launch.blocks_per_sm > occ.blocks_per_sm:
                raise SimulationError(f"blocks_per_sm={launch.blocks_per_sm} is not allowed for launch "
                                      f"{launch.name!r}: at most {occ.blocks_per_sm} fit ({occ.limited_by})")
            per_sm = launch.blocks_per_sm
        plans.append((occ, per_sm, np.unique(graph.kind[launch.order]).tolist(), is_megakernel(graph, launch)))
    max_per_sm = max((p[1] for p in plans), default=1)
    max_slots = n_sm * max_per_sm
    sm_room = 2 * max_per_sm + 2           # blocks on an SM at once, with a margin

    # The servers' classes (megasim.sim.resources): memory caps, SM shares, stretch levels, readiness.
    mem_cap = min(1.0, spec.tb_max_dram_bw_gbps / spec.dram_bw_gbps)
    mem_caps = [mem_cap if c.block_dram_bw_gbps is None else min(1.0, c.block_dram_bw_gbps / spec.dram_bw_gbps)
                for c in costs]
    shares = [c.block_sm_share for c in costs]
    mem_keys, mem_class = _classes(mem_caps, kind)
    sm_keys, sm_class = _classes(shares, kind)
    stretch = [c.coresident_stretch for c in costs]
    stretch_on = any(g > 0.0 for g in stretch)
    levels = range(1, STRETCH_LEVELS + 1)
    stretch_keys = sorted({cap * lv / STRETCH_LEVELS for cap in mem_caps for lv in levels}) if stretch_on else [1.0]
    index = {c: i for i, c in enumerate(stretch_keys)}
    mem_class_at = np.zeros((len(costs), STRETCH_LEVELS + 1), np.int64)
    if stretch_on:
        mem_class_at[:, 1:] = [[index[cap * lv / STRETCH_LEVELS] for lv in levels] for cap in mem_caps]
    block_ready = [(1.0, 1.0) if c.block_sm_ready is None else
                   (c.block_sm_ready, c.block_sm_ready if c.further_block_sm_ready is None else c.further_block_sm_ready)
                   for c in costs]
    mixed = spec.mixed_kinds_sm_factor
    ready_keys, ready_class = _classes(block_ready if mixed is None else [(*r, k) for k, r in enumerate(block_ready)], kind)
    ready_kinds = {k for k, c in enumerate(costs) if c.block_sm_ready is not None}
    track_age = spec.younger_block_weight not in (None, 1.0)
    rows = (mem_keys, sm_keys, stretch_keys, [key[0] for key in ready_keys])
    k_max = max(len(r) for r in rows)
    caps = np.ones((4, k_max))
    for r, keys in enumerate(rows):
        caps[r, :len(keys)] = keys
    further = np.ones(k_max)
    further[:len(ready_keys)] = [key[1] for key in ready_keys]
    # The age-weighted servers' weights, grown as they grow them.
    rho = spec.younger_block_weight if track_age else 1.0
    weights, weight_sums = [1.0], [0.0, 1.0]
    while len(weights) < sm_room:
        weights.append(weights[-1] * rho)
        weight_sums.append(weight_sums[-1] + weights[-1])

    # The servers: the memory system shared, capped or by stretch class; per SM shared, capped, readiness.
    ns = SM_FIRST + 3 * n_sm
    sm_shared, sm_capped, sm_ready = SM_FIRST, SM_FIRST + n_sm, SM_FIRST + 2 * n_sm
    s_row = np.zeros(ns, np.int64)
    s_k = np.ones(ns, np.int64)
    s_rule = np.full(ns, loop.RULE_ONE, np.int64)
    s_cap0 = np.ones(ns)
    for s, row, keys in ((MEM_CAPPED, loop.ROW_MEM, mem_keys), (MEM_STRETCH, loop.ROW_STRETCH, stretch_keys)):
        s_row[s], s_k[s] = row, len(keys)
        s_rule[s] = loop.RULE_CAPPED if len(keys) > 1 else loop.RULE_ONE
        s_cap0[s] = keys[0]
    s_row[sm_capped:sm_ready], s_k[sm_capped:sm_ready] = loop.ROW_SM, len(sm_keys)
    s_rule[sm_capped:sm_ready] = loop.RULE_CAPPED if len(sm_keys) > 1 else loop.RULE_ONE
    s_cap0[sm_capped:sm_ready] = sm_keys[0]
    s_row[sm_ready:], s_k[sm_ready:] = loop.ROW_READY, len(ready_keys)
    s_rule[sm_ready:] = loop.RULE_AGE if track_age else loop.RULE_READY
    s_is_mem = np.zeros(ns, np.uint8)
    s_is_mem[:SM_FIRST] = 1
    # Each group's heap: its first room in the pool (an age-weighted server's blocks need none).
    room = np.where(s_is_mem == 1, MEM_ROOM, sm_room)
    room[s_rule == loop.RULE_AGE] = 0
    g_cap = np.zeros(ns * k_max, np.int64)
    for s in range(ns):
        g_cap[s * k_max:s * k_max + s_k[s]] = room[s]
    g_off = np.concatenate([[0], np.cumsum(g_cap)[:-1]]).astype(np.int64)
    heap_slots = int(g_cap.sum()) + 16 * (2 * max_slots + 2) + 1024

    # Accesses and the L2.
    tracked, rptr, task_bytes = tracked_accesses(graph)
    lo = graph.access_part_lo[tracked].astype(np.int32)
    hi = graph.access_part_hi[tracked].astype(np.int32)
    step = graph.access_part_step[tracked].astype(np.int32)
    count = np.where(step == 1, hi - lo, (hi - lo + step - 1) // np.maximum(step, 1)).astype(np.int32)
    region_parts = graph.region_parts.astype(np.int64)
    part_off = np.concatenate([[0], np.cumsum(region_parts)[:-1]]).astype(np.int64)
    n_regions = region_parts.size
    compute_ns, fixed_plain, fixed_mega = task_costs(graph, spec, costs)

    consts = np.zeros(loop.N_CONSTS)
    consts[loop.C_INV_DRAM_BW] = 1.0 / spec.dram_bw_gbps
    consts[loop.C_INV_L2_BW] = 1.0 / spec.l2_bw_gbps
    consts[loop.C_DRAM_LATENCY] = spec.dram_latency_ns
    consts[loop.C_L2_LATENCY] = spec.l2_latency_ns
    consts[loop.C_ATOMIC] = spec.atomic_latency_ns
    consts[loop.C_L2_CAPACITY] = float(spec.l2_bytes)
    consts[loop.C_MIXED] = 1.0 if mixed is None else mixed
    consts[loop.C_OVERLAP_ON] = any(c.memory_overlap > 0.0 for c in costs)
    consts[loop.C_STRETCH_ON] = stretch_on
    consts[loop.C_TRACK_AGE] = track_age
    tables = dict(
        consts=consts, kind_of=np.ascontiguousarray(graph.kind, np.int16), compute_ns=compute_ns,
        task_bytes=task_bytes, rptr=rptr,
        waits=np.ascontiguousarray(graph.wait_counters, np.int32).reshape(t, -1),
        signals=np.ascontiguousarray(graph.signal_counters, np.int32).reshape(t, -1),
        acc_region=graph.access_region[tracked].astype(np.int32), acc_lo=lo, acc_hi=hi, acc_step=step,
        acc_count=count, acc_nbytes=graph.access_bytes[tracked].astype(np.float64),
        acc_write=graph.access_write[tracked].astype(np.uint8), part_off=part_off,
        part_bytes=graph.region_part_bytes.astype(np.float64), region_parts=region_parts,
        caps=caps, further=further, overlap=np.array([c.memory_overlap for c in costs], np.float64),
        stretch=np.array(stretch, np.float64), mem_class=mem_class_at, weights=np.array(weights),
        weight_sums=np.array(weight_sums), s_rule=s_rule, s_row=s_row, s_k=s_k, s_is_mem=s_is_mem, k_max=k_max)
    tb = loop.new_tables(*(tables[field] for field in loop.Tables.FIELDS))

    # Ready-queue lists per launch (and the pool their released lists take).
    lists = [ready_lists(graph, launch.order) if launch.dispatch == "ready" else None for launch in launches]
    pool = 1 + sum(len(launch.order) + rl.group_pending.size + rl.roots.size
                   for launch, rl in zip(launches, lists) if rl is not None)
    margin = 6 * max_slots + 2 * ns + 64
    events = 2 * margin + 1024
    nan = np.full(t, np.nan)
    per_task_age = t if track_age else 1      # (only the age-weighted servers read ages and per-job rates)
    n_acc = int(tracked.sum())
    counters = graph.counter_init.size
    arrays = dict(
        ireg=np.zeros(loop.N_IREG, np.int64), freg=np.zeros(loop.N_FREG),
        ev_t=np.zeros(events), ev_e=np.zeros(events, np.int64), ev_k=np.zeros(events, np.int64),
        ev_a=np.zeros(events, np.int64), ev_b=np.zeros(events, np.int64),
        class_of=np.stack([mem_class, sm_class, np.zeros(t, np.int64), ready_class]).astype(np.int32),
        remaining=graph.counter_init.astype(np.int64), w_head=np.full(counters, -1, np.int64),
        w_tail=np.full(counters, -1, np.int64), w_next=np.full(t, -1, np.int64),
        claim=nan.copy(), ready=nan.copy(), mem_start=nan.copy(), comp_start=nan.copy(), end=nan,
        claim_cost=np.zeros(t), check_at=np.zeros(t), mem_work=np.zeros(t), mem_rest=np.zeros(t),
        pending=np.zeros(t, np.int64), age_of=np.zeros(per_task_age, np.int64),
        block_age=np.full((n_sm, max_per_sm), -1, np.int64), sm_of=np.full(t, -1, np.int32), slot_of=np.full(t, -1, np.int32), miss=np.zeros(n_acc),
        l2_bits=np.zeros(int(region_parts.sum()) // 64 + 1, np.uint64), l2_count=np.zeros(n_regions, np.int64),
        lru_prev=np.full(n_regions, -1, np.int64), lru_next=np.full(n_regions, -1, np.int64),
        in_lru=np.zeros(n_regions, np.uint8),
        s_t=np.zeros(ns), s_due=np.full(ns, np.inf), s_queued=np.full(ns, np.inf), s_cap=s_cap0,
        s_seq=np.zeros(ns, np.int64), s_due_eid=np.full(ns, -1, np.int64), s_queued_eid=np.full(ns, -1, np.int64),
        s_n=np.zeros(ns, np.int64), g_vt=np.zeros(ns * k_max), g_rate=np.zeros(ns * k_max),
        g_len=np.zeros(ns * k_max, np.int64), g_off=g_off, g_cap=g_cap, g_blocks=np.zeros(ns * k_max, np.int64),
        g_active=np.zeros(ns * k_max, np.int64), s_active=np.zeros(ns, np.int64),
        h_key=np.zeros(heap_slots), h_seq=np.zeros(heap_slots, np.int64), h_job=np.zeros(heap_slots, np.int64),
        j_vt=np.zeros(per_task_age), j_rate=np.zeros(per_task_age), j_on=np.zeros(per_task_age, np.uint8),
        a_job=np.zeros((ns, sm_room), np.int64), a_age=np.zeros((ns, sm_room), np.int64),
        a_cls=np.zeros((ns, sm_room), np.int64), a_n=np.zeros(ns, np.int64),
        a_act=np.zeros((ns, sm_room), np.int64), a_nact=np.zeros(ns, np.int64),
        a_cnt=np.zeros((ns, k_max), np.int64), a_cord=np.zeros((ns, k_max), np.int64), a_ncls=np.zeros(ns, np.int64),
        a_order=np.zeros(sm_room, np.int64), done_buf=np.zeros(4 * max_slots + 4, np.int64),
        pool=np.zeros(pool, np.int64), idle_sm=np.zeros(2 * max_slots + 16, np.int64),
        idle_slot=np.zeros(2 * max_slots + 16, np.int64))
    # (the loop writes into these arrays; the event heap's it replaces as it grows)
    st = loop.new_state(*(arrays[field] for field in loop.State.FIELDS))
    ir, fr = arrays["ireg"], arrays["freg"]
    ir[loop.R_LRU_HEAD] = ir[loop.R_LRU_TAIL] = -1
    ir[loop.R_HTOP] = int(g_cap.sum())

    launch_log: list[dict] = []
    if spec.queued_launch_ns is None:
        host_ns = 0.0
        delay = spec.launch_ns(bool(launches) and plans[0][3])
    else:
        host_ns = float(sum(spec.launch_ns(p[3]) for p in plans))
        delay = spec.queued_launch_ns
    launch_fixed = [c.launch_fixed_ns for c in costs]
    mk_claim = [c.megakernel_claim_ns for c in costs]
    tasks_before = 0
    for launch, (occ, per_sm, kinds, mega), rl in zip(launches, plans, lists):
        # The servers this launch's kinds need (Resources.for_launch).
        presence = bool(ready_kinds.intersection(kinds))
        launch_shares = {shares[k] for k in kinds}
        if presence:
            ir[loop.R_SM0] = sm_ready
        elif len(launch_shares) == 1:
            ir[loop.R_SM0] = sm_shared
            arrays["s_cap"][sm_shared:sm_capped] = launch_shares.pop()
        else:
            ir[loop.R_SM0] = sm_capped
        ir[loop.R_PRESENCE] = presence
        launch_mem_caps = {mem_caps[k] for k in kinds}
        if stretch_on:
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
        tasks_before += int(ir[loop.R_DONE])
        ir[loop.R_NEXT] = 0
        ir[loop.R_DONE] = 0
        ir[loop.R_LEN] = n
        every = launches_module.PROGRESS_EVERY
        ir[loop.R_REPORT_AT] = every if progress is not None else -1
        ir[loop.R_REPORT_EVERY] = every
        ir[loop.R_READY] = rl is not None
        queue = np.zeros(n + 1, np.int64)
        is_root = np.zeros(max(n, 1), np.uint8)
        if rl is not None:
            window = launch.ready_window or n_sm
            first_roots = rl.roots[:window]
            queue[:first_roots.size] = first_roots
            is_root[rl.roots] = 1
            ir[loop.R_RQ_HEAD], ir[loop.R_RQ_TAIL] = 0, first_roots.size
            ir[loop.R_NEXT] = min(window, rl.roots.size)
            ir[loop.R_IDLE_HEAD] = ir[loop.R_IDLE_TAIL] = 0
        empty = np.zeros(1, np.int64)
        launch_arrays = dict(
            order=order, check_ns=np.array(claim_costs(spec, mk_claim, launch, mega), np.float64),
            fixed_ns=fixed_mega if mega else fixed_plain,
            roots=rl.roots.astype(np.int64) if rl is not None else empty,
            counter_ptr=rl.counter_ptr.astype(np.int64) if rl is not None else empty,
            counter_groups=rl.counter_groups.astype(np.int64) if rl is not None else empty,
            pending=rl.group_pending.astype(np.int64) if rl is not None else empty,
            group_ptr=rl.group_ptr.astype(np.int64) if rl is not None else empty,
            group_positions=rl.group_positions.astype(np.int64) if rl is not None else empty,
            is_root=is_root, pos_of=np.full(t if rl is not None else 1, -1, np.int64), queue=queue)
        ln = loop.new_launch(*(launch_arrays[field] for field in loop.Launch.FIELDS))
        start = fr[loop.F_NOW] + delay
        delay += max((launch_fixed[k] for k in kinds), default=0.0)
        launch_log.append({"name": launch.name, "style": launch.style, "start_ns": start, "end_ns": np.nan,
                           "blocks_per_sm": per_sm, "limited_by": occ.limited_by, "tasks": n})
        slots = n_sm * per_sm
        first = slots if launch.style == "persistent" else min(slots, n)
        loop.place_first_blocks(st, first, n_sm, per_sm, placement == "round_robin", delay)
        while True:
            why = loop.run_events(tb, st, ln, margin)
            if why == loop.STOP_GROW:
                loop.grow_events(st)
                continue
            if why == loop.STOP_OVERFLOW:
                raise OutOfRoom(f"the compiled loop's server heaps ({arrays['h_key'].size} jobs) or block lists "
                                f"({sm_room} per SM) ran out of room")
            if why & loop.STOP_PROGRESS:
                progress(tasks_before + int(ir[loop.R_REPORTED]), t)
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
    out = _Output(graph=graph, spec=spec, launch_log=launch_log, tracked=tracked, miss_of=arrays["miss"],
                  mem_cap=mem_cap, host_ns=host_ns, **records,
                  events=int(ir[loop.R_PUSHED]))
    return SimResult.from_run(out, schedule, time.perf_counter() - wall)

