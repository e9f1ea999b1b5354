"""Exact small scenarios: a 2-SM toy GPU with round numbers, a few hand-made tasks of known cost, and the
exact (task, sm, slot, claim, ready, end) times derived by hand from the model in engine.py's docstring.

Toy GPU: sm_gflops = 1 FLOP/ns (so a task of F flops computes for F ns alone), compute efficiency 1,
DRAM 1 B/ns, L2 2 B/ns, every latency and launch/dispatch cost 0 unless a scenario sets it, and a
per-block bandwidth cap far above the DRAM bandwidth (cap = 1) unless a scenario sets it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from megasim.errors import SimulationError
from megasim.hardware import GPUSpec, TaskCost, get_gpu
from megasim.schedule import Launch, Schedule
from megasim.sim import Footprint, SimOptions, occupancy, simulate
from megasim.taskgraph import TaskGraphBuilder


def toy_spec(**over) -> GPUSpec:
    kw = dict(name="toy", sm_count=2, max_threads_per_sm=2048, max_blocks_per_sm=1, registers_per_sm=65536,
              max_registers_per_thread=255, shared_mem_per_sm_bytes=65536, max_shared_mem_per_block_bytes=49152,
              sm_clock_mhz=1000.0, fp32_peak_gflops=2.0, dram_bw_gbps=1.0, l2_bytes=10**6, l2_bw_gbps=2.0,
              l2_partitions=1, dram_latency_ns=0.0, l2_latency_ns=0.0, atomic_latency_ns=0.0,
              kernel_launch_ns=0.0, kernel_boundary_ns=0.0, block_dispatch_ns=0.0, tb_max_dram_bw_gbps=1000.0,
              task_costs={"default": TaskCost(1.0, 0.0)})
    kw.update(over)
    return GPUSpec(**kw)


def compute_graph(flops, kind_kw=None):
    """Independent compute-only tasks of one kind."""
    b = TaskGraphBuilder()
    b.add_kind("k", **(kind_kw or {}))
    for f in flops:
        b.add_task("k", flops=f)
    return b.build()


def one_launch(order, **kw) -> Schedule:
    return Schedule("s", (Launch(np.array(order, np.int64), **kw),))


def rows(result, tasks=None):
    """(task, sm, slot, claim, ready, end) of each task."""
    tasks = range(result.num_tasks) if tasks is None else tasks
    return [(i, int(result.sm[i]), int(result.slot[i]), float(result.claim_ns[i]), float(result.ready_ns[i]),
             float(result.end_ns[i])) for i in tasks]


def assert_rows(result, expected):
    got = rows(result, [e[0] for e in expected])
    for g, e in zip(got, expected):
        assert g[:3] == e[:3], f"task {e[0]}: (sm, slot) {g[1:3]} != {e[1:3]}"
        assert g[3:] == pytest.approx(e[3:], rel=1e-12, abs=1e-9), f"task {e[0]}: times {g[3:]} != {e[3:]}"


def test_two_tasks_share_one_sm():
    # fill placement, 2 blocks per SM: both tasks land on SM 0. Processor sharing: each gets 1/2 FLOP/ns;
    # t0 (100) has received 100 at t=200; t1 (200) then has 100 left alone: ends at 300.
    spec = toy_spec(max_blocks_per_sm=2)
    r = simulate(compute_graph([100, 200]), one_launch([0, 1]), spec, SimOptions(placement="fill"))
    assert_rows(r, [(0, 0, 0, 0, 0, 200), (1, 0, 1, 0, 0, 300)])
    assert r.predicted_ns == 300
    # round_robin spreads them over the two SMs: each runs alone.
    r = simulate(compute_graph([100, 200]), one_launch([0, 1]), spec)
    assert_rows(r, [(0, 0, 0, 0, 0, 100), (1, 1, 0, 0, 0, 200)])


def test_five_tasks_one_block_per_sm():
    # One block per SM; slots take the next task in map order as they free.
    # t0 -> SM0 [0,100]; t1 -> SM1 [0,50]; SM1 frees at 50: t2 [50,80]; at 80: t3 [80,120];
    # SM0 frees at 100: t4 [100,110]. Makespan 120.
    r = simulate(compute_graph([100, 50, 30, 40, 10]), one_launch(range(5)), toy_spec())
    assert_rows(r, [(0, 0, 0, 0, 0, 100), (1, 1, 0, 0, 0, 50), (2, 1, 0, 50, 50, 80),
                    (3, 1, 0, 80, 80, 120), (4, 0, 0, 100, 100, 110)])
    assert r.predicted_ns == 120
    assert r.launches[0].blocks_per_sm == 1 and r.launches[0].limited_by == "blocks"


def test_map_order_not_task_id_order():
    # Same tasks, map order [4, 3, 2, 1, 0]: t4 SM0 [0,10]; t3 SM1 [0,40]; t2 SM0 [10,40];
    # t1 takes the slot freed first at 40 (SM0 and SM1 both free at 40; SM0's job was started first) ...
    r = simulate(compute_graph([100, 50, 30, 40, 10]), one_launch([4, 3, 2, 1, 0]), toy_spec())
    assert_rows(r, [(4, 0, 0, 0, 0, 10), (3, 1, 0, 0, 0, 40), (2, 0, 0, 10, 10, 40)])
    # ... and t1, t0 start at 40 on the two SMs: t1 ends 90, t0 ends 140.
    assert sorted(r.claim_ns[[0, 1]]) == [40, 40] and {int(r.sm[0]), int(r.sm[1])} == {0, 1}
    assert r.end_ns[1] == 90 and r.end_ns[0] == 140 and r.predicted_ns == 140


def test_dispatch_atomic_and_launch_costs():
    # kernel_launch 10, block_dispatch 5, atomic 2: a block is ready 5 + 2 = 7 ns after its claim.
    # t0 SM0: claim 10, ready 17, end 117. t1 SM1: claim 10, ready 17, end 67.
    # t2 SM1: claim 67, ready 74, end 104. t3 SM1: claim 104, ready 111, end 151.
    # t4 SM0: claim 117, ready 124, end 134. Makespan 151.
    spec = toy_spec(kernel_launch_ns=10.0, block_dispatch_ns=5.0, atomic_latency_ns=2.0)
    r = simulate(compute_graph([100, 50, 30, 40, 10]), one_launch(range(5)), spec)
    assert_rows(r, [(0, 0, 0, 10, 17, 117), (1, 1, 0, 10, 17, 67), (2, 1, 0, 67, 74, 104),
                    (3, 1, 0, 104, 111, 151), (4, 0, 0, 117, 124, 134)])
    assert r.predicted_ns == 151
    assert r.launches[0].start_ns == 10 and r.launches[0].end_ns == 151
    assert np.all(r.wait_ns == 0)


def test_occupancy_from_footprint_and_sharing():
    # Kind: 256 threads, 32 registers, 1000 B shared (rounded to 1024). Limits per SM: blocks 8,
    # threads 2048/256 = 8, registers 65536/(8 warps * 1024) = 8, shared 3072/1024 = 3 -> 3 blocks.
    spec = toy_spec(max_blocks_per_sm=8, shared_mem_per_sm_bytes=3072)
    kind = {"threads": 256, "registers": 32, "shared_bytes": 1000}
    # fill: t0..t2 on SM0, t3..t5 on SM1, t6 waits for a slot.
    # SM0: t0 30, t1 60, t2 90 flops sharing by 3: t0 ends at 90 (each got 30).
    #   t6 (10) joins at 90 in t0's slot: 3 jobs again, t6 gets 10 by 120 (t1 has 20 left, t2 50).
    #   Then 2 jobs: t1 ends 120 + 40 = 160 (t2 has 30 left), t2 alone ends 190.
    # SM1: t3..t5 300 each, 3 sharing: all end at 900.
    g = compute_graph([30, 60, 90, 300, 300, 300, 10], kind)
    r = simulate(g, one_launch(range(7)), spec, SimOptions(placement="fill"))
    assert r.launches[0].blocks_per_sm == 3 and r.launches[0].limited_by == "shared memory"
    assert_rows(r, [(0, 0, 0, 0, 0, 90), (1, 0, 1, 0, 0, 160), (2, 0, 2, 0, 0, 190), (3, 1, 0, 0, 0, 900),
                    (4, 1, 1, 0, 0, 900), (5, 1, 2, 0, 0, 900), (6, 0, 0, 90, 90, 120)])
    assert r.predicted_ns == 900


@pytest.mark.parametrize("fp,blocks,limit", [
    (Footprint(1024, 32, 0), 2, "threads"),             # 2048 / 1024
    (Footprint(256, 70, 0), 3, "registers"),            # 70*32 -> 2304 per warp, x8 warps: 65536 // 18432
    (Footprint(64, 16, 0), 4, "blocks"),                # max_blocks_per_sm
    (Footprint(33, 16, 129), 4, "blocks"),              # 2 warps, 256 B shared: 16 blocks of smem
    (Footprint(128, 32, 20000), 3, "shared memory"),    # 65536 // 20096
])
def test_occupancy_limits(fp, blocks, limit):
    occ = occupancy(toy_spec(max_blocks_per_sm=4), fp)
    assert (occ.blocks_per_sm, occ.limited_by) == (blocks, limit)


@pytest.mark.parametrize("fp,needle", [(Footprint(1025, 32, 0), "1025 threads"),
                                       (Footprint(128, 256, 0), "256 registers"),
                                       (Footprint(128, 32, 50000), "50000 bytes"),
                                       (Footprint(128, 32, 40000), "not one block fits"),
                                       (Footprint(128, 32, 40000), "needs shared_mem_per_sm_bytes=40,064, the spec has 32,768"),
                                       (Footprint(1024, 128, 0), "a block of 1024 threads, 128 registers per thread and 0 "
                                                                 "bytes of shared memory needs registers_per_sm=131,072")])
def test_occupancy_errors(fp, needle):
    spec = toy_spec(shared_mem_per_sm_bytes=32768)
    with pytest.raises(SimulationError, match=needle):
        occupancy(spec, fp)


def test_round_robin_vs_fill():
    # 2 blocks per SM, flops [100, 100, 10, 10].
    # round_robin: block b -> (SM b % 2, slot b // 2): SM0 has t0, t2; SM1 has t1, t3.
    #   t2 ends at 20 (both at 1/2), t0 then alone: 100 - 10 = 90 left -> ends 110. Same on SM1.
    # fill: SM0 has t0, t1 (200 total work at 1 FLOP/ns -> both end 200); SM1 has t2, t3 (end 20).
    spec = toy_spec(max_blocks_per_sm=2)
    g = compute_graph([100, 100, 10, 10])
    rr = simulate(g, one_launch(range(4)), spec, SimOptions(placement="round_robin"))
    assert_rows(rr, [(0, 0, 0, 0, 0, 110), (1, 1, 0, 0, 0, 110), (2, 0, 1, 0, 0, 20), (3, 1, 1, 0, 0, 20)])
    fill = simulate(g, one_launch(range(4)), spec, SimOptions(placement="fill"))
    assert_rows(fill, [(0, 0, 0, 0, 0, 200), (1, 0, 1, 0, 0, 200), (2, 1, 0, 0, 0, 20), (3, 1, 1, 0, 0, 20)])
    assert (rr.predicted_ns, fill.predicted_ns) == (110, 200)


def test_unknown_placement():
    with pytest.raises(SimulationError, match="'spread'"):
        SimOptions(placement="spread")


def dep_graph():
    """t0 (100 flops) signals c; t1 (10 flops) waits on c; t2 (50 flops) is independent."""
    b = TaskGraphBuilder()
    b.add_kind("k")
    c = b.add_counter()
    b.add_task("k", flops=100, signals=[c])
    b.add_task("k", flops=10, waits=[c])
    b.add_task("k", flops=50)
    return b.build()


def test_dependency_wait_holds_slot():
    # atomic 2: t0 SM0 claim 0, ready 2, end 102. t1 SM1 claim 0, checks at 2, waits holding SM1's only
    # slot. t0 signals at 102; t1 re-checks an atomic later: ready 104, end 114. t2 gets no slot until
    # t0's frees: SM0 claim 102, ready 104, end 154.
    spec = toy_spec(atomic_latency_ns=2.0)
    r = simulate(dep_graph(), one_launch([0, 1, 2]), spec)
    assert_rows(r, [(0, 0, 0, 0, 2, 102), (1, 1, 0, 0, 104, 114), (2, 0, 0, 102, 104, 154)])
    # wait = ready - claim - claim cost (dispatch 0 + atomic 2).
    assert r.wait_ns.tolist() == [0.0, 102.0, 0.0]
    assert r.predicted_ns == 154


def test_launch_boundary():
    # Two kernels: [t0, t2] then [t1]. kernel_launch 10, boundary 7.
    # Kernel 1: t0 SM0 [10, 110], t2 SM1 [10, 60]; ends 110. Kernel 2 starts 117: t1 SM0 [117, 127].
    spec = toy_spec(kernel_launch_ns=10.0, kernel_boundary_ns=7.0)
    sched = Schedule("two", (Launch(np.array([0, 2])), Launch(np.array([1]))))
    r = simulate(dep_graph(), sched, spec)
    assert_rows(r, [(0, 0, 0, 10, 10, 110), (2, 1, 0, 10, 10, 60), (1, 0, 0, 117, 117, 127)])
    assert [(l.start_ns, l.end_ns) for l in r.launches] == [(10, 110), (117, 127)]
    assert r.predicted_ns == 127
    assert r.wait_ns[1] == 0


def test_persistent_style_claims_by_ticket():
    # Persistent grid of 1 block per SM: a claim costs one atomic (3) and the counter check another (3);
    # block_dispatch (100) is not paid. t0 SM0: claim 0, ready 6, end 16. t1 SM1: claim 0, ready 6,
    # end 26. SM0's block loops: claims t2 at 16, ready 22, end 52.
    spec = toy_spec(atomic_latency_ns=3.0, block_dispatch_ns=100.0)
    g = compute_graph([10, 20, 30])
    r = simulate(g, one_launch([0, 1, 2], style="persistent"), spec)
    assert_rows(r, [(0, 0, 0, 0, 6, 16), (1, 1, 0, 0, 6, 26), (2, 0, 0, 16, 22, 52)])
    assert r.predicted_ns == 52 and r.launches[0].style == "persistent"
    # One block per task pays the dispatch: ready 103; t2 claims at 113, ready 216, end 246.
    r = simulate(g, one_launch([0, 1, 2]), spec)
    assert_rows(r, [(0, 0, 0, 0, 103, 113), (1, 1, 0, 0, 103, 123), (2, 0, 0, 113, 216, 246)])


def test_persistent_blocks_per_sm():
    # Occupancy allows 4, the grid asks for 1 per SM: 4 tasks of 100 run two at a time.
    spec = toy_spec(max_blocks_per_sm=4)
    g = compute_graph([100, 100, 100, 100])
    r = simulate(g, one_launch(range(4), style="persistent", blocks_per_sm=1), spec)
    assert r.launches[0].blocks_per_sm == 1
    assert_rows(r, [(0, 0, 0, 0, 0, 100), (1, 1, 0, 0, 0, 100), (2, 0, 0, 100, 100, 200),
                    (3, 1, 0, 100, 100, 200)])
    with pytest.raises(SimulationError, match="blocks_per_sm=5 .* at most 4"):
        simulate(g, one_launch(range(4), style="persistent", blocks_per_sm=5), spec)


def mem_graph(sizes, flops=None, kind="k"):
    """Independent tasks, each reading `sizes[i]` bytes of its own (never cached) region."""
    b = TaskGraphBuilder()
    b.add_kind(kind)
    for i, n in enumerate(sizes):
        reg = b.add_region(f"r{i}", parts=1, part_bytes=n)
        b.add_task(kind, flops=0 if flops is None else flops[i], accesses=[(reg, 0, 1, n, False)])
    return b.build()


def test_memory_sharing_with_per_block_cap():
    # Two memory-only tasks on the two SMs, 100 B and 300 B, all misses: work = max(B / 1, B / 2) = B ns.
    # Cap 0.5 (tb_max 0.5 B/ns of 1 B/ns): two jobs each get min(0.5, 1/2) = 0.5: t0 ends 200;
    # t1 has 200 left and alone still gets only 0.5: ends 200 + 400 = 600.
    g = mem_graph([100, 300])
    r = simulate(g, one_launch([0, 1]), toy_spec(tb_max_dram_bw_gbps=0.5))
    assert_rows(r, [(0, 0, 0, 0, 0, 200), (1, 1, 0, 0, 0, 600)])
    assert r.mem_cap == 0.5
    # No cap: t0 ends 200 as before; t1 alone gets the whole system: 200 + 200 = 400.
    r = simulate(g, one_launch([0, 1]), toy_spec())
    assert_rows(r, [(0, 0, 0, 0, 0, 200), (1, 1, 0, 0, 0, 400)])
    assert r.dram_read_bytes.tolist() == [100, 300] and r.task_dram_bytes.tolist() == [100, 300]


def reuse_graph(nbytes):
    """Two tasks reading one region: the first misses, the second (run after it) hits."""
    b = TaskGraphBuilder()
    b.add_kind("k")
    reg = b.add_region("r", parts=1, part_bytes=nbytes)
    for _ in range(2):
        b.add_task("k", flops=0, accesses=[(reg, 0, 1, nbytes, False)])
    return b.build()


@pytest.mark.parametrize("engine", ["simpy", "compiled"])
def test_a_block_moves_hits_at_its_l2_rate_whatever_the_dram(engine):
    # One SM, one block at a time: task 0 misses 128 B, task 1 hits them. Block rate b = 0.25 B/ns on
    # misses, b * block_l2_bw_ratio on hits (the ratio implied by D = 1, L = 2 B/ns: 2).
    # Task 0: work max(128 / 1, 128 / 2) = 128 ns at cap b / D = 0.25: 512 ns. Task 1: work 64 ns, at
    # least 128 / (2 * 0.25) = 256 ns: ends 768.
    spec = toy_spec(sm_count=1, max_blocks_per_sm=1, tb_max_dram_bw_gbps=0.25)
    assert spec.block_l2_bw_ratio == 2.0 and spec.l2_ratio_implied
    g, order = reuse_graph(128), one_launch([0, 1])
    r = simulate(g, order, spec, SimOptions(engine=engine))
    assert r.end_ns.tolist() == [512.0, 768.0] and r.task_dram_bytes.tolist() == [128, 0]
    # Twice the DRAM bandwidth, the ratio kept: task 0 is held to b on its misses (512 ns), task 1
    # still takes 256 ns; it does not slow down as when its cap followed the DRAM (b / D: 512 ns).
    faster = dataclasses.replace(spec, dram_bw_gbps=2.0)
    assert faster.block_l2_bw_ratio == 2.0 and not faster.l2_ratio_implied
    r = simulate(g, order, faster, SimOptions(engine=engine))
    assert r.end_ns.tolist() == [512.0, 768.0]
    # A stated ratio of 4: hits move at 1 B/ns per block, capped by the L2 (2 B/ns): task 1 takes 128 ns.
    r = simulate(g, order, dataclasses.replace(spec, block_l2_bw_ratio=4.0), SimOptions(engine=engine))
    assert r.end_ns.tolist() == [512.0, 640.0]


def test_memory_then_compute_with_latency_and_task_cost():
    # Kind cost: efficiency 0.5, fixed 7 ns. dram_latency 30.
    # t0: 100 B miss + 50 flops: ready 0, memory starts 30 + 7 = 37, ends 137, computes 50 / 0.5 = 100: 237.
    # t1: 40 B miss, 0 flops on SM1 concurrently: memory 37..? both share from 37: t1 gets 0.5 B/ns,
    #   40 B at 0.5 -> ends 117; t0 has received 40, has 60 left alone: ends 177; compute to 277.
    spec = toy_spec(dram_latency_ns=30.0, task_costs={"default": TaskCost(1.0, 0.0), "k": TaskCost(0.5, 7.0)})
    g = mem_graph([100, 40], flops=[50, 0])
    r = simulate(g, one_launch([0, 1]), spec)
    assert r.mem_start_ns.tolist() == [37, 37]
    assert r.compute_start_ns.tolist() == pytest.approx([177, 117])
    assert_rows(r, [(0, 0, 0, 0, 0, 277), (1, 1, 0, 0, 0, 117)])


def l2_graph():
    """A chain t0 -> t1 -> t2 -> t3 over two regions: A (400 B) and B (800 B).
    t0 writes A, t1 reads A, t2 reads B, t3 reads A."""
    b = TaskGraphBuilder()
    b.add_kind("k")
    a = b.add_region("a", parts=1, part_bytes=400)
    bb = b.add_region("b", parts=1, part_bytes=800)
    c = [b.add_counter() for _ in range(3)]
    b.add_task("k", signals=[c[0]], accesses=[(a, 0, 1, 400, True)])
    b.add_task("k", waits=[c[0]], signals=[c[1]], accesses=[(a, 0, 1, 400, False)])
    b.add_task("k", waits=[c[1]], signals=[c[2]], accesses=[(bb, 0, 1, 800, False)])
    b.add_task("k", waits=[c[2]], accesses=[(a, 0, 1, 400, False)])
    return b.build()


def test_l2_hit_after_write_miss_after_eviction():
    # L2 1000 B, dram latency 30, L2 latency 5; one block per SM.
    # t0 (SM0) writes A: a write always costs DRAM: 400 B -> work max(400/1, 400/2) = 400, latency 30:
    #   [0, 430]. t1 (SM1) waits from 0; ready 430; A is resident: hit, work 400/2 = 200, latency 5:
    #   ends 635. t2 claims SM0 at 430, waits, ready 635; B misses (800 B): latency 30, work 800: 1465.
    #   A + B = 1200 B > 1000: A (least recently used) is evicted. t3 claims SM1 at 635, ready 1465,
    #   A misses again: 30 + 400 -> 1895.
    spec = toy_spec(l2_bytes=1000, dram_latency_ns=30.0, l2_latency_ns=5.0)
    r = simulate(l2_graph(), one_launch([0, 1, 2, 3]), spec)
    assert_rows(r, [(0, 0, 0, 0, 0, 430), (1, 1, 0, 0, 430, 635), (2, 0, 0, 430, 635, 1465),
                    (3, 1, 0, 635, 1465, 1895)])
    assert r.task_dram_bytes.tolist() == [400, 0, 800, 400]
    assert r.dram_write_bytes.tolist() == [400, 0]
    assert r.dram_read_bytes.tolist() == [400, 800]
    assert r.l2_read_bytes.tolist() == [800, 800]
    assert r.l2_hit_rate == pytest.approx(1 - 1200 / 1600)
    # With an L2 that holds both, t3 hits: 1465 + 5 + 200 = 1670.
    r = simulate(l2_graph(), one_launch([0, 1, 2, 3]), dataclasses.replace(spec, l2_bytes=1200))
    assert r.task_dram_bytes.tolist() == [400, 0, 800, 0]
    assert r.end_ns[3] == 1670


def test_l2_keeps_contents_across_kernels():
    # Same chain, one kernel per task: the write of A in kernel 1 is a hit for kernel 2's read.
    spec = toy_spec(l2_bytes=1000)
    sched = Schedule("k4", tuple(Launch(np.array([i])) for i in range(4)))
    r = simulate(l2_graph(), sched, spec)
    assert r.task_dram_bytes.tolist() == [400, 0, 800, 400]
    # Kernel ends: 400, 400 + 200 = 600, 600 + 800 = 1400, 1400 + 400 = 1800 (no launch costs).
    assert [l.end_ns for l in r.launches] == [400, 600, 1400, 1800]


def test_partial_region_hits():
    # Region of 4 parts x 100 B: write parts [0, 2) (200 B), then read all 4 parts (400 B): half hits,
    # so the read misses 200 B: work max(200 / 1, 400 / 2) = 200 ns.
    b = TaskGraphBuilder()
    b.add_kind("k")
    reg = b.add_region("x", parts=4, part_bytes=100)
    c = b.add_counter()
    b.add_task("k", signals=[c], accesses=[(reg, 0, 2, 200, True)])
    b.add_task("k", waits=[c], accesses=[(reg, 0, 4, 400, False), (-1, 0, 1, 1000, False)])
    r = simulate(b.build(), one_launch([0, 1]), toy_spec())
    assert r.task_dram_bytes.tolist() == [200, 200]
    # The 1000 on-chip bytes cost L2 bandwidth only: t1's work is max(200/1, 1400/2) = 700.
    assert r.end_ns.tolist() == [200, 900]
    assert r.onchip_bytes == 1000


def test_h100_derived_two_sm_spec():
    # dataclasses.replace on a preset gives the same exact behaviour as the hand-built toy GPU.
    base = get_gpu("H100")
    zero = {f: 0.0 for f in ("dram_latency_ns", "l2_latency_ns", "atomic_latency_ns", "kernel_launch_ns",
                             "kernel_boundary_ns", "block_dispatch_ns")}
    spec = dataclasses.replace(base, sm_count=2, fp32_peak_gflops=2.0, max_blocks_per_sm=1,
                               tb_max_dram_bw_gbps=base.dram_bw_gbps * 10,
                               task_costs={"default": TaskCost(1.0, 0.0)}, **zero)
    r = simulate(compute_graph([100, 50, 30, 40, 10]), one_launch(range(5)), spec)
    assert r.end_ns.tolist() == [100, 50, 80, 120, 110]


def test_stall_is_reported():
    # A graph whose counter never reaches zero (built by hand, bypassing the builder's counting) stalls;
    # the engine must say which tasks wait rather than return a number.
    g = dep_graph()
    bad = dataclasses.replace(g, counter_init=np.array([2], np.int32))
    with pytest.raises(SimulationError, match=r"stalled with 1 tasks unfinished.*\[1\]"):
        simulate(bad, one_launch([0, 1, 2]), toy_spec(max_blocks_per_sm=2))


def test_a_persistent_grid_smaller_than_what_fits_is_limited_by_the_request():
    """The launch record named what limits the most that fit (registers) for a grid the plan set smaller."""
    from megasim.hardware import get_gpu
    from megasim.plan import Plan, predict
    from megasim.sim.launches import REQUESTED_GRID
    from megasim.workloads import parse_layer
    problem, spec = parse_layer("N=2,C=16,K=24,H=10,W=9"), get_gpu("H100")
    asked, _ = predict(problem, spec, Plan.parse("fused", "style=persistent,blocks_per_sm=1"))
    full, _ = predict(problem, spec, Plan.parse("fused", "style=persistent"))
    assert full.launches[0].blocks_per_sm > 1 and full.launches[0].limited_by != REQUESTED_GRID
    assert (asked.launches[0].blocks_per_sm, asked.launches[0].limited_by) == (1, REQUESTED_GRID)
