"""Ready-queue dispatch (megasim.ready): the release lists, and the simulator's policy on a
hand-timed scenario and on Winograd graphs. The megakernel's side is in tests/test_gpu_winograd.py."""

from __future__ import annotations

import numpy as np
import pytest

from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.algorithms.winograd.algorithm1 import default_params
from megasim.orders import naive_fused
from megasim.ready import ready_lists
from megasim.ready import root_mask
from megasim.sim import simulate
from megasim.hardware import get_gpu
from megasim.workloads.problem import ConvProblem

from tests.test_sim_scenarios import assert_rows, dep_graph, one_launch, toy_spec


def test_lists_of_a_small_graph():
    g = dep_graph()                     # t0 signals c, t1 waits on c, t2 independent
    rl = ready_lists(g, np.array([2, 0, 1]))
    assert rl.roots.tolist() == [0, 1]  # map positions of t2, t0
    assert rl.counter_ptr.tolist() == [0, 1] and rl.counter_groups.tolist() == [0]
    assert rl.group_pending.tolist() == [1]
    assert rl.group_ptr.tolist() == [0, 1] and rl.group_positions.tolist() == [2]
    assert rl.num_released == 1


def test_counters_of_earlier_launches_are_not_waited_on():
    g = dep_graph()
    rl = ready_lists(g, np.array([1]))  # t1 alone: its parent ran in an earlier launch
    assert rl.roots.tolist() == [0] and rl.num_released == 0 and rl.num_groups == 0


def test_winograd_wait_groups():
    problem = ConvProblem(2, 24, 40, 14, 13)
    g = lower_winograd(problem, WinogradConfig(tiles_per_group=4))
    order = algorithm1(g, default_params(g)).launches[0].order
    rl = ready_lists(g, order)
    kind = g.kind[order]
    # roots: the filter and input transforms, in map order
    assert np.array_equal(rl.roots, np.flatnonzero(kind <= 1))
    # every other task is in exactly one wait group, in map order within it
    assert np.array_equal(np.sort(rl.group_positions), np.flatnonzero(kind >= 2))
    for gi in range(rl.num_groups):
        members = rl.group_positions[rl.group_ptr[gi]:rl.group_ptr[gi + 1]]
        assert np.all(np.diff(members) > 0)
        assert len(set(kind[members].tolist())) == 1
    groups = len(np.unique(g.group[g.kind == 2]))
    # a GEMM group waits on the filter counter and its input counter; an output group on its GEMM counter
    assert rl.num_groups == 2 * groups
    assert sorted(rl.group_pending.tolist()) == [1] * groups + [2] * groups
    # counter 0 (the filter transforms) releases one count per GEMM group, not one per GEMM
    assert rl.counter_ptr[1] - rl.counter_ptr[0] == groups


def test_ready_queue_never_holds_a_slot_on_a_parent():
    # atomic 2; the queue starts with both roots (window: one per SM). t0 SM0: claim 0, ready 2, end
    # 102. SM1 takes t2, not t1 (not runnable): claim 0, ready 2, end 52; its root ticket and the tail
    # (2 x 2) find no root left; nothing is queued: SM1 idles. t0's signal completes t1's group: its
    # decrement (2), the queueing (2 x 2), its root ticket (2 x 2) -> t1 queued by 108 and SM1 claims
    # it at 112 (the block holds its slot until 112, idle SM1 claims then): ready 114, end 124.
    # (Ticket dispatch: 154, tests/test_sim_scenarios.py.)
    spec = toy_spec(atomic_latency_ns=2.0)
    r = simulate(dep_graph(), one_launch([0, 1, 2], dispatch="ready"), spec)
    assert_rows(r, [(0, 0, 0, 0, 2, 102), (2, 1, 0, 0, 2, 52), (1, 1, 0, 112, 114, 124)])
    assert r.wait_ns.tolist() == [0.0, 0.0, 0.0]
    assert r.predicted_ns == 124


def test_ready_window_queues_the_next_root_when_a_root_ends():
    # window 1: only t0 is queued; SM1 idles from the start. t0 ends at 102; its block queues t1
    # (released) and then the next root t2 by 112 (2 + 4 + 4). Idle SM1 takes t1: claim 112, ready 114,
    # end 124; SM0 takes t2: claim 112, ready 114, end 164.
    spec = toy_spec(atomic_latency_ns=2.0)
    r = simulate(dep_graph(), one_launch([0, 1, 2], dispatch="ready", ready_window=1), spec)
    assert_rows(r, [(0, 0, 0, 0, 2, 102), (1, 1, 0, 112, 114, 124), (2, 0, 0, 112, 114, 164)])
    assert r.predicted_ns == 164


def test_root_mask():
    g = dep_graph()
    assert root_mask(g, np.array([0, 1, 2])).tolist() == [True, False, True]
    assert root_mask(g, np.array([1])).tolist() == [True]


@pytest.mark.parametrize("style", ["per_task", "persistent"])
def test_ready_queue_on_winograd_runs_every_task_without_waiting(style):
    problem = ConvProblem(2, 24, 40, 14, 13)
    g = lower_winograd(problem, WinogradConfig(tiles_per_group=4))
    spec = get_gpu("H200")
    for sched in (algorithm1(g, default_params(g)), naive_fused(g)):
        r = simulate(g, sched.with_style(style, "ready"), spec)
        assert np.all(np.isfinite(r.end_ns))
        assert np.all(r.wait_ns == 0)
        # a child starts after its parents ended
        for c in range(g.num_counters):
            parents = np.flatnonzero((g.signal_counters == c).any(axis=1))
            children = np.flatnonzero((g.wait_counters == c).any(axis=1))
            if parents.size and children.size:
                assert r.ready_ns[children].min() >= r.end_ns[parents].max()


def test_plan_carries_the_ready_window_and_refuses_it_elsewhere():
    from megasim.errors import MappingError
    from megasim.plan import Plan, build
    plan = Plan.parse("fused", "dispatch=ready,ready_window=7")
    _, schedule, resolved = build(ConvProblem(1, 8, 8, 10, 10), plan)
    assert schedule.launches[0].ready_window == 7 and schedule.launches[0].dispatch == "ready"
    assert "ready_window=7" in resolved.param_string()
    with pytest.raises(MappingError, match="ready_window=7 is not allowed"):
        Plan.parse("fused", "ready_window=7")
    with pytest.raises(MappingError, match="ready_window=0 is not allowed"):
        Plan.parse("fused", "dispatch=ready,ready_window=0")
