"""Processor sharing with a cap per job (water-filling, ``CappedSharedServer``), its use by the engine
for launches that mix kinds of different ``block_sm_share``, and the queued-launch timing model
(``GPUSpec.queued_launch_ns``). Exact hand-derived scenarios plus a randomised check against the
one-cap server."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from megasim.hardware import TaskCost, get_gpu
from megasim.schedule import Launch, Schedule
from megasim.plan import Plan, build
from megasim.sim import SimOptions, simulate
from megasim.sim.clock import ModelEnvironment
from megasim.sim.engine import Simulation
from megasim.sim.servers import (SERVERS, AgeWeightedReadinessServer, CappedSharedServer, ProcessorSharingServer,
                                 ReadinessSharedServer, SharedServer, make_server)
from megasim.taskgraph import TaskGraphBuilder
from megasim.workloads import parse_layer
from tests.test_determinism import UnbatchedEnvironment
from tests.test_sim_scenarios import assert_rows, one_launch, toy_spec


def run_server(server_factory, jobs):
    """jobs: (arrival ns, job id, work ns); returns {job: finish ns}."""
    clock = ModelEnvironment()
    done = {}
    server = server_factory(clock, lambda j: done.__setitem__(j, clock.now))
    for at, job, work in jobs:
        clock.after(at, lambda jw: server.add(*jw), (job, work))
    clock.run()
    return done


def test_water_filling_rates():
    # Caps: class 0 = 0.2, class 1 = 1.0. Jobs 0 (class 0, work 20) and 1, 2 (class 1, work 80 each).
    # Three jobs: fair share 1/3 > 0.2, so job 0 gets 0.2 and jobs 1, 2 share 0.8: 0.4 each.
    # Job 0 ends at 20 / 0.2 = 100; jobs 1, 2 have received 40 by then; alone they get 0.5 each:
    # 40 more take 80 ns: end at 180.
    done = run_server(lambda c, cb: CappedSharedServer(c, [0.2, 1.0], [0, 1, 1], cb),
                      [(0, 0, 20.0), (0, 1, 80.0), (0, 2, 80.0)])
    assert done == pytest.approx({0: 100.0, 1: 180.0, 2: 180.0})


def test_water_filling_all_capped_and_arrival():
    # Caps 0.25 and 0.5, one job each: 0.75 < 1, both run at their caps. Job 0 (cap 0.25, work 50)
    # ends at 200; job 1 (cap 0.5, work 50) ends at 100. Job 2 (cap 0.5, work 30) arrives at 40:
    # three jobs, fair share 1/3: job 0 keeps 0.25 (below), jobs 1 and 2 get min(0.5, 0.75 / 2) = 0.375.
    # Job 1 has 30 left at 40: ends at 40 + 80 = 120; job 2 has received 30 by 120: ends 120 too.
    done = run_server(lambda c, cb: CappedSharedServer(c, [0.25, 0.5], [0, 1, 1], cb),
                      [(0, 0, 50.0), (0, 1, 50.0), (40, 2, 30.0)])
    assert done == pytest.approx({0: 200.0, 1: 120.0, 2: 120.0})


@pytest.mark.parametrize("cap", [1.0, 0.3])
def test_one_class_matches_shared_server(cap):
    rng = np.random.default_rng(5)
    jobs = [(float(rng.uniform(0, 500)), j, float(rng.uniform(1, 200))) for j in range(60)]
    ref = run_server(lambda c, cb: SharedServer(c, cap, cb), jobs)
    # Two classes with the same cap behave as one.
    got = run_server(lambda c, cb: CappedSharedServer(c, [cap, cap], [j % 2 for j in range(60)], cb), jobs)
    assert got.keys() == ref.keys()
    for j in ref:
        assert got[j] == pytest.approx(ref[j], rel=1e-9)


@pytest.mark.parametrize("cap", [1.0, 0.3])
def test_one_group_path_is_the_general_path_bit_for_bit(cap):
    # A server with one rate group runs add and _fire with the loops over groups unrolled
    # (megasim/sim/servers/base.py); the general path gives the same finish times, exactly. Equal jobs
    # arriving together finish together (ties within the tolerance).
    rng = np.random.default_rng(7)
    jobs = [(float(rng.uniform(0, 500)), j, float(rng.uniform(1, 200))) for j in range(80)]
    jobs += [(250.0, 80 + j, 40.0) for j in range(5)]

    def general(c, cb):
        server = SharedServer(c, cap, cb)
        server.add, server._fire = server._add, server._fire_groups
        return server
    assert SharedServer(ModelEnvironment(), cap, print).add.__func__ is ProcessorSharingServer._add_one
    assert run_server(general, jobs) == run_server(lambda c, cb: SharedServer(c, cap, cb), jobs)


def test_make_server_by_rule():
    clock = ModelEnvironment()
    assert type(make_server("shared", clock, print, cap=0.5)) is SharedServer
    assert type(make_server("capped", clock, print, caps=[0.5, 1.0], class_of=[0, 1])) is CappedSharedServer
    assert type(make_server("readiness", clock, print, caps=[0.5], class_of=[0], mixed=0.9)) is ReadinessSharedServer
    assert type(make_server("age_weighted", clock, print, caps=[0.5], class_of=[0], age_of=[0],
                            rho=0.9)) is AgeWeightedReadinessServer
    assert set(SERVERS) == {"shared", "capped", "readiness", "age_weighted"}
    with pytest.raises(ValueError, match="not known"):
        make_server("fifo", clock, print)


def two_kind_graph():
    b = TaskGraphBuilder()
    b.add_kind("a")
    b.add_kind("b")
    b.add_task("a", flops=100)
    b.add_task("b", flops=100)
    return b.build()


def test_mixed_launch_caps_each_job_by_its_kind():
    # One SM (fill placement, 2 blocks per SM), 1 FLOP/ns. Kind a: share 0.25; kind b: share 1.
    # Both compute together: a gets 0.25, b gets the remaining 0.75. b ends at 100 / 0.75 = 133.33;
    # a has received 33.33, alone still capped at 0.25: 66.67 more take 266.67 ns: ends 400.
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=2,
                    task_costs={"a": TaskCost(1.0, 0.0, block_sm_share=0.25), "b": TaskCost(1.0, 0.0)})
    r = simulate(two_kind_graph(), Schedule("s", (Launch(np.array([0, 1])),)), spec, SimOptions(placement="fill"))
    assert_rows(r, [(0, 0, 0, 0, 0, 400), (1, 0, 1, 0, 0, 100 / 0.75)])
    # The same kinds in separate launches: each launch caps at its own kind's share.
    r = simulate(two_kind_graph(), Schedule("s", (Launch(np.array([0])), Launch(np.array([1])))), spec,
                 SimOptions(placement="fill"))
    assert r.end_ns.tolist() == pytest.approx([400.0, 500.0])


def test_equal_shares_keep_the_fast_server():
    # Kinds of equal share in one launch: identical to the single-cap model (bit for bit).
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=2,
                    task_costs={"a": TaskCost(1.0, 0.0, block_sm_share=0.5), "b": TaskCost(1.0, 0.0, block_sm_share=0.5)})
    r = simulate(two_kind_graph(), Schedule("s", (Launch(np.array([0, 1])),)), spec, SimOptions(placement="fill"))
    assert r.end_ns.tolist() == [200.0, 200.0]


def test_queued_launch_overlaps_host_cost():
    # kernel_launch 50 (host), queued 3 (device): the kernel starts at 3, ends 103 on SM 0.
    spec = toy_spec(kernel_launch_ns=50.0, queued_launch_ns=3.0)
    b = TaskGraphBuilder()
    b.add_kind("k")
    b.add_task("k", flops=100)
    g = b.build()
    r = simulate(g, Schedule("s", (Launch(np.array([0])),)), spec)
    assert r.launches[0].start_ns == 3.0 and r.predicted_ns == 103.0
    # A short run is host-bound: it takes the host's issue time.
    r = simulate(g, Schedule("s", (Launch(np.array([0])),)), dataclasses.replace(spec, kernel_launch_ns=500.0))
    assert r.end_ns[0] == 103.0 and r.predicted_ns == 500.0
    # Without queued_launch_ns the launch cost is paid first, in series.
    r = simulate(g, Schedule("s", (Launch(np.array([0])),)), dataclasses.replace(spec, queued_launch_ns=None))
    assert r.predicted_ns == 150.0


def test_presets_unchanged_by_per_job_caps(monkeypatch):
    # Preset specs have every share at 1: a fused (mixed-kind) launch uses the one-cap server. (The
    # runs agreeing alone would not show that: the per-job servers are made to refuse here.)
    from megasim.sim.servers import SERVERS

    def refuse(*args, **kwargs):
        raise AssertionError("a preset spec built a per-job or readiness server")
    for rule in ("capped", "readiness", "age_weighted"):
        monkeypatch.setitem(SERVERS, rule, refuse)
    graph, sched, _ = build(parse_layer("N=2,C=16,K=24,H=20,W=18"), Plan("fused"))
    assert len(set(graph.kind[sched.launches[0].order].tolist())) == 4     # the launch mixes all 4 kinds
    spec = get_gpu("H100")
    a = simulate(graph, sched, spec)
    b = Simulation(graph, sched, spec, env=UnbatchedEnvironment()).run()
    assert a.predicted_ns == b.predicted_ns


def two_kind_mem_graph(nbytes=(100, 100)):
    b = TaskGraphBuilder()
    b.add_kind("a")
    b.add_kind("b")
    for i, (kind, n) in enumerate(zip("ab", nbytes)):
        reg = b.add_region(f"r{i}", parts=1, part_bytes=n)
        b.add_task(kind, flops=0, accesses=[(reg, 0, 1, n, False)])
    return b.build()


def test_per_kind_dram_caps_water_fill():
    # DRAM 1 B/ns; kind a's blocks sustain 0.25 B/ns, kind b's the spec's 1000 (cap 1). Both move
    # 100 B at once (two SMs): a gets 0.25, b the remaining 0.75: b ends at 133.33; a, alone, still
    # 0.25: its remaining 66.67 B take 266.67 ns: ends at 400.
    spec = toy_spec(task_costs={"a": TaskCost(1.0, 0.0, block_dram_bw_gbps=0.25), "b": TaskCost(1.0, 0.0)})
    r = simulate(two_kind_mem_graph(), Schedule("s", (Launch(np.array([0, 1])),)), spec)
    assert r.end_ns.tolist() == pytest.approx([400.0, 100 / 0.75])
    assert r.mem_cap == 1.0                       # the spec's default cap is still reported


def test_megakernel_fixed_ns_and_forced_megakernel_launch():
    # megakernel_fixed_ns = 30 is paid only when the megakernel runs the task: a mixed launch, a
    # persistent grid, or Launch(kernel="megakernel"); not by the kind's own kernel.
    spec = toy_spec(task_costs={"default": TaskCost(1.0, 0.0, megakernel_fixed_ns=30.0)})
    g = two_kind_graph()
    own = simulate(g, Schedule("s", (Launch(np.array([0])), Launch(np.array([1])))), spec)
    assert own.end_ns.tolist() == [100.0, 200.0]
    mixed = simulate(g, Schedule("s", (Launch(np.array([0, 1])),)), spec)
    assert mixed.end_ns.tolist() == [130.0, 130.0]
    forced = simulate(g, Schedule("s", (Launch(np.array([0]), kernel="megakernel"), Launch(np.array([1])))), spec)
    assert forced.end_ns.tolist() == [130.0, 230.0]
    with pytest.raises(Exception, match="kernel 'other' is not allowed"):
        Launch(np.array([0]), kernel="other")
    # The schedule hash of a launch without a kernel choice is what it was before the field existed.
    assert Schedule("s", (Launch(np.array([0])),)).hash != Schedule("s", (Launch(np.array([0]), kernel="megakernel"),)).hash


# --- independent stalls (block_sm_ready, ReadinessSharedServer) --------------------------------------

@pytest.mark.parametrize("n,s", [(1, 0.35), (3, 0.35), (4, 0.8), (5, 1.0)])
def test_readiness_identical_jobs(n, s):
    # n equal jobs arriving together: each receives (1 - (1 - s)^n) / n until they all end together.
    done = run_server(lambda c, cb: ReadinessSharedServer(c, [s], [0] * n, cb), [(0.0, j, 100.0) for j in range(n)])
    assert set(done) == set(range(n))
    for t in done.values():
        assert t == pytest.approx(100.0 * n / (1.0 - (1.0 - s) ** n))


def test_readiness_two_classes_by_hand():
    # Job 0 (ready 0.25) and job 1 (ready 1.0), work 100 each, from t = 0: the SM is always busy
    # (U = 1 - 0.75 * 0 = 1); job 0 asks for less than the fair half, so it gets all it asks for (0.25)
    # and job 1 the rest (0.75): job 1 ends at 133.3 with job 0 at 33.3; alone, job 0 still runs at
    # 0.25: its last 66.7 take 266.7 ns, end at 400. (In proportion to readiness, an earlier rule,
    # job 0 would have received 0.2 and ended at 425.)
    done = run_server(lambda c, cb: ReadinessSharedServer(c, [0.25, 1.0], [0, 1], cb), [(0.0, 0, 100.0), (0.0, 1, 100.0)])
    assert done == {1: pytest.approx(400.0 / 3.0), 0: pytest.approx(400.0)}


def test_readiness_three_classes_water_level():
    # Ready 0.1, 0.5, 0.9, one job each, work 1000: U = 1 - 0.9 * 0.5 * 0.1 = 0.955. The 0.1 job gets
    # 0.1; the fair level of the other two, (0.955 - 0.1) / 2 = 0.4275, is below both demands, so each
    # gets 0.4275. The 0.5 and 0.9 jobs end together at t = 1000 / 0.4275 = 2339.2; by then the 0.1
    # job has done 0.1 * 2339.2 = 233.9 and, alone at 0.1, needs (1000 - 233.9) / 0.1 ns more.
    done = run_server(lambda c, cb: ReadinessSharedServer(c, [0.1, 0.5, 0.9], [0, 1, 2], cb),
                      [(0.0, 0, 1000.0), (0.0, 1, 1000.0), (0.0, 2, 1000.0)])
    t12 = 1000.0 / 0.4275
    assert done[1] == pytest.approx(t12) and done[2] == pytest.approx(t12)
    assert done[0] == pytest.approx(t12 + (1000.0 - 0.1 * t12) / 0.1)


@pytest.mark.parametrize("n,s,f", [(1, 0.54, 0.375), (2, 0.54, 0.375), (3, 0.54, 0.375), (3, 0.3, 0.9)])
def test_readiness_further_blocks(n, s, f):
    # n equal jobs of one class whose first block is ready s and each further one f: the SM is busy
    # U = 1 - (1 - s)(1 - f)^(n - 1), split equally but never above a block's rate alone, s (the
    # last case: U / 3 = 0.331 > 0.3), so all end at 100 / min(s, U / n).
    done = run_server(lambda c, cb: ReadinessSharedServer(c, [s], [0] * n, cb, [f]), [(0.0, j, 100.0) for j in range(n)])
    u = 1.0 - (1.0 - s) * (1.0 - f) ** (n - 1)
    for t in done.values():
        assert t == pytest.approx(100.0 / min(s, u / n))


def test_readiness_further_blocks_by_hand_mixed():
    # Class 1 (s 0.5, f 0.2): two jobs, work 100; class 0 (s 0.25): one job, work 100. Busy
    # U = 1 - (0.5 * 0.8) * 0.75 = 0.7; the fair level 0.7 / 3 = 0.233 is below every demand (0.25,
    # 0.5), so all three get it and end together at 300 / 0.7. The second block's readiness (0.2, not
    # 0.5) is what makes U 0.7 rather than 1 - 0.5 * 0.5 * 0.75 = 0.8125.
    done = run_server(lambda c, cb: ReadinessSharedServer(c, [0.25, 0.5], [1, 1, 0], cb, [0.25, 0.2]),
                      [(0.0, 0, 100.0), (0.0, 1, 100.0), (0.0, 2, 100.0)])
    for t in done.values():
        assert t == pytest.approx(300.0 / 0.7)
    with pytest.raises(ValueError, match="further="):
        ReadinessSharedServer(None, [0.5], [0], None, [0.0])


def test_further_readiness_in_a_spec():
    with pytest.raises(Exception, match="further_block_sm_ready=0.5 needs block_sm_ready"):
        TaskCost(further_block_sm_ready=0.5)
    with pytest.raises(Exception, match="further_block_sm_ready=1.5 is not allowed"):
        TaskCost(block_sm_ready=0.5, further_block_sm_ready=1.5)
    # In the engine: the GEMM's non-fused kernel (3 blocks per SM on the H200) runs faster when its
    # further blocks are more ready, and a further readiness equal to the first changes nothing.
    g, sched, _ = build(parse_layer("resnet-4"), Plan("nonfused"))
    base = get_gpu("H200")

    def with_gemm(**kw):
        return dataclasses.replace(base, task_costs={**base.task_costs, "gemm": dataclasses.replace(
            base.task_cost("gemm"), block_sm_ready=0.5, **kw)})
    one = simulate(g, sched, with_gemm()).predicted_ns
    assert simulate(g, sched, with_gemm(further_block_sm_ready=0.5)).predicted_ns == one
    assert simulate(g, sched, with_gemm(further_block_sm_ready=0.9)).predicted_ns < one
    assert simulate(g, sched, with_gemm(further_block_sm_ready=0.2)).predicted_ns > one


def test_readiness_of_one_is_equal_sharing():
    jobs = [(0.0, 0, 50.0), (10.0, 1, 80.0), (20.0, 2, 30.0), (200.0, 3, 10.0)]
    ready = run_server(lambda c, cb: ReadinessSharedServer(c, [1.0, 1.0], [0, 1, 0, 1], cb), jobs)
    shared = run_server(lambda c, cb: SharedServer(c, 1.0, cb), jobs)
    assert ready == pytest.approx(shared)


def test_readiness_in_a_spec_changes_only_kinds_that_give_it():
    with pytest.raises(Exception, match="give one of them"):
        TaskCost(block_sm_share=0.5, block_sm_ready=0.5)
    with pytest.raises(Exception, match="block_sm_ready=0"):
        TaskCost(block_sm_ready=0.0)
    # The engine uses the readiness server for a launch with such a kind: 3 blocks of ready 0.5 on one
    # SM run slower than with plain sharing (ready 1).
    g, sched, _ = build(parse_layer("resnet-4"), Plan("nonfused"))
    base = get_gpu("H200")
    slow = dataclasses.replace(base, task_costs={**base.task_costs, "gemm": dataclasses.replace(
        base.task_cost("gemm"), block_sm_ready=0.5)})
    assert simulate(g, sched, slow).predicted_ns > simulate(g, sched, base).predicted_ns


def test_readiness_counts_blocks_that_are_loading():
    # Job 0 (ready 0.5, work 100) computes from t = 0; job 1's block (same class) is present, moving
    # its data, over [0, 50): U = 1 - 0.5 * 0.5 = 0.75 shared by the two blocks, so job 0 gets
    # 0.375 and has 18.75 done at t = 50; alone then at 0.5, its last 81.25 take 162.5 ns: ends at 212.5.
    clock = ModelEnvironment()
    done = {}
    server = ReadinessSharedServer(clock, [0.5], [0, 0], lambda j: done.__setitem__(j, clock.now))
    clock.after(0.0, lambda _: server.enter(1), None)
    clock.after(0.0, lambda _: server.add(0, 100.0), None)
    clock.after(50.0, lambda _: server.leave(1), None)
    clock.run()
    assert done == {0: pytest.approx(212.5)}


def test_megakernel_claim_ns_overlaps_the_wait_on_parents():
    # dep_graph: t0 (100 flops) signals c; t1 (10 flops) waits on c; t2 (50) is independent. One block per
    # SM on two SMs, 1 FLOP/ns per SM, atomic 2, dispatch 3. The megakernel (a persistent grid) claims a
    # task in the kind's megakernel_claim_ns = 20, in place of the ticket and counter atomics (2 + 2).
    from tests.test_sim_scenarios import dep_graph
    spec = toy_spec(atomic_latency_ns=2.0, block_dispatch_ns=3.0,
                    task_costs={"default": TaskCost(1.0, 0.0, megakernel_fixed_ns=5.0, megakernel_claim_ns=20.0)})
    persistent = Schedule("s", (Launch(np.array([0, 1, 2]), style="persistent", blocks_per_sm=1),))
    r = simulate(dep_graph(), persistent, spec)
    # t0: SM 0, ready 20, end 20 + 5 + 100 = 125. t1: SM 1, claim 0, its claim done at 20 while t0 runs,
    # so it waits; ready an atomic after t0's signal (127), end 127 + 5 + 10 = 142: the claim overlapped
    # the wait. t2: SM 0's block, free first, after t0 (persistent: no dispatch), ready 125 + 20, end
    # 145 + 5 + 50 = 200.
    assert_rows(r, [(0, 0, 0, 0, 20, 125), (1, 1, 0, 0, 127, 142), (2, 0, 0, 125, 145, 200)])
    assert r.wait_ns.tolist() == [0.0, 107.0, 0.0]
    # Per-task launches add the dispatch before the claim; the kind's own kernel ignores the claim time.
    per_task = simulate(dep_graph(), Schedule("s", (Launch(np.array([0, 2]), kernel="megakernel"),
                                                    Launch(np.array([1]), kernel="megakernel"))), spec)
    assert per_task.ready_ns[[0, 2]].tolist() == [23.0, 23.0]
    own = simulate(dep_graph(), Schedule("s", (Launch(np.array([0, 2])), Launch(np.array([1])))), spec)
    assert own.ready_ns[[0, 2]].tolist() == [5.0, 5.0] and own.end_ns[[0, 2]].tolist() == [105.0, 55.0]
    with pytest.raises(Exception, match="megakernel_claim_ns=-1.0 is not allowed"):
        TaskCost(megakernel_claim_ns=-1.0)


def test_coresident_stretch_slows_a_memory_phase_by_its_sms_other_blocks():
    # One SM (fill placement), 2 blocks per SM, DRAM 1 B/ns. Kind a: 100 B at its cap of 0.25 B/ns =
    # 400 ns alone; coresident_stretch 0.5. Kind b (block_sm_ready 0.5, 1000 B, cap 1) starts its memory
    # phase first (map order b, a), so a's phase starts beside it: U_others = 0.5, a moves at
    # 0.25 * (1 - 0.5 * 0.5) = 0.1875 B/ns: ends at 533.33. b gets the remaining 0.8125 B/ns until then
    # (433.33 B), then 1 B/ns: ends at 1100.
    costs = {"a": TaskCost(1.0, 0.0, block_dram_bw_gbps=0.25, block_sm_ready=1.0, coresident_stretch=0.5),
             "b": TaskCost(1.0, 0.0, block_sm_ready=0.5)}
    spec = toy_spec(max_blocks_per_sm=2, task_costs=costs)
    g = two_kind_mem_graph((100, 1000))
    r = simulate(g, Schedule("s", (Launch(np.array([1, 0])),)), spec, SimOptions(placement="fill"))
    assert r.end_ns.tolist() == pytest.approx([1600.0 / 3.0, 1100.0])
    # Alone on its SM (round robin: one block per SM here) a takes its 400 ns: nothing to stretch.
    alone = simulate(g, Schedule("s", (Launch(np.array([1, 0])),)), spec)
    assert alone.end_ns[0] == pytest.approx(400.0)
    # gamma = 0 is the rule without the stretch, as is a spec that does not give it: a at 0.25 B/ns ends at
    # 400, b at 0.75 B/ns until then (300 B), then 1 B/ns: ends at 1100.
    off = {k: dataclasses.replace(c, coresident_stretch=0.0) for k, c in costs.items()}
    plain = {"a": TaskCost(1.0, 0.0, block_dram_bw_gbps=0.25, block_sm_ready=1.0), "b": costs["b"]}
    for o in (off, plain):
        r0 = simulate(g, Schedule("s", (Launch(np.array([1, 0])),)), toy_spec(max_blocks_per_sm=2, task_costs=o),
                      SimOptions(placement="fill"))
        assert r0.end_ns.tolist() == pytest.approx([400.0, 1100.0])
    with pytest.raises(Exception, match="coresident_stretch=1.0 is not allowed"):
        TaskCost(coresident_stretch=1.0)
    with pytest.raises(Exception, match="coresident_stretch=0.5 needs block_sm_ready"):
        TaskCost(coresident_stretch=0.5)


def test_memory_overlap_runs_the_rest_of_a_memory_phase_beside_compute():
    # One task: 100 B at DRAM 1 B/ns (100 ns of memory work) and F flops at 1 flop/ns (2 GFLOP/s over
    # 2 SMs). memory_overlap 0.75: a prologue of 25 ns of memory work, then its compute and the other
    # 75 ns of memory work side by side; the task ends with the later of the two.
    def run(flops, overlap, **kw):
        b = TaskGraphBuilder()
        b.add_kind("k")
        reg = b.add_region("r", parts=1, part_bytes=100)
        b.add_task("k", flops=flops, accesses=[(reg, 0, 1, 100, False)])
        spec = toy_spec(task_costs={"default": TaskCost(1.0, 0.0, memory_overlap=overlap, **kw)})
        return simulate(b.build(), one_launch([0]), spec)

    assert run(300, 0.0).end_ns[0] == pytest.approx(400.0)        # memory, then compute
    r = run(300, 0.75)
    assert r.compute_start_ns[0] == pytest.approx(25.0)
    assert r.end_ns[0] == pytest.approx(325.0)                     # compute-bound: 25 + 300
    assert run(50, 0.75).end_ns[0] == pytest.approx(100.0)         # memory-bound: 25 + 75
    assert run(0, 1.0).end_ns[0] == pytest.approx(100.0)           # no compute: the memory work alone
    # All of it overlapped, on a readiness-shared SM with the stretch on: alone on its SM, nothing
    # stretches it, and the memory work runs at its full rate beside the 50 ns of compute.
    assert run(50, 1.0, block_sm_ready=1.0, coresident_stretch=0.5).end_ns[0] == pytest.approx(100.0)
    with pytest.raises(Exception, match="memory_overlap=1.5 is not allowed"):
        TaskCost(memory_overlap=1.5)


def test_mixed_kinds_factor_by_hand():
    # Classes 0 (s 0.25) and 1 (s 0.5), one job each, work 100, mixed factor 0.8. Busy
    # U = 1 - 0.75 * 0.5 = 0.625, times 0.8 while both are present: 0.5; fair level 0.25 = class 0's
    # demand, so class 0 gets 0.25, class 1 the other 0.25: both end at 400. Alone (one class), a
    # class is never penalised: a single job of class 1 ends at 100 / 0.5 = 200.
    done = run_server(lambda c, cb: ReadinessSharedServer(c, [0.25, 0.5], [0, 1], cb, mixed=0.8),
                      [(0.0, 0, 100.0), (0.0, 1, 100.0)])
    assert done[0] == pytest.approx(400.0) and done[1] == pytest.approx(400.0)
    alone = run_server(lambda c, cb: ReadinessSharedServer(c, [0.25, 0.5], [1], cb, mixed=0.8), [(0.0, 0, 100.0)])
    assert alone[0] == pytest.approx(200.0)
    with pytest.raises(ValueError, match="mixed="):
        ReadinessSharedServer(None, [0.5], [0], None, mixed=0.0)


def test_mixed_kinds_factor_in_a_spec():
    base = get_gpu("H200")
    with pytest.raises(Exception, match="mixed_kinds_sm_factor=1.2 must be in"):
        dataclasses.replace(base, mixed_kinds_sm_factor=1.2)
    # In the engine: a fused schedule (kinds mixed on the SMs) slows with the factor; the non-fused
    # schedule (one kind per launch) does not change at all. (Against a factor of 1, not None: a factor
    # gives every kind a class of its own, which reorders ties and moves this schedule by 0.02%.)
    from megasim.hardware import load_spec
    problem = parse_layer("resnet-1")
    calibrated = load_spec(Path(__file__).resolve().parents[1] / "megasim/hardware/calibrated/h200.json")
    plain = dataclasses.replace(calibrated, mixed_kinds_sm_factor=1.0)
    mixed = dataclasses.replace(plain, mixed_kinds_sm_factor=0.5)
    g, sched, _ = build(problem, Plan("nonfused"))
    assert simulate(g, sched, mixed).predicted_ns == simulate(g, sched, plain).predicted_ns
    g, sched, _ = build(problem, Plan("fused"))
    assert simulate(g, sched, mixed).predicted_ns > simulate(g, sched, plain).predicted_ns
