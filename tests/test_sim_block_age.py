"""Older blocks favoured on an SM (GPUSpec.younger_block_weight, AgeWeightedReadinessServer) and the
end-order statistic and fit of megasim.calibration.age."""

import dataclasses

import numpy as np
import pytest

from megasim.calibration.age import block_end_order, fit_age_weight, normalised
from megasim.errors import SpecError
from megasim.hardware import TaskCost
from megasim.sim import SimOptions, simulate
from megasim.sim.clock import ModelEnvironment
from megasim.sim.servers import AgeWeightedReadinessServer, ReadinessSharedServer
from tests.test_sim_per_job_caps import run_server as run_aged
from tests.test_sim_scenarios import compute_graph, one_launch, toy_spec


def test_weight_one_is_the_readiness_rule():
    # Random arrivals, two classes, each further block less ready: rho = 1 gives exactly the
    # ReadinessSharedServer's finish times.
    rng = np.random.default_rng(3)
    jobs = [(float(rng.uniform(0, 300)), j, float(rng.uniform(50, 400))) for j in range(12)]
    class_of = [j % 2 for j in range(12)]
    ages = [at for at, _, _ in jobs]
    plain = run_aged(lambda c, cb: ReadinessSharedServer(c, [0.4, 0.7], class_of, cb, [0.3, 0.5]), jobs)
    aged = run_aged(lambda c, cb: AgeWeightedReadinessServer(c, [0.4, 0.7], class_of, ages, cb, [0.3, 0.5],
                                                             rho=1.0), jobs)
    assert aged == pytest.approx(plain, rel=1e-9)


def test_older_blocks_end_first_by_hand():
    # Two always-ready blocks (s = 1: U = 1), work 100 each, rho = 0.5: weights 1 and 0.5, rates 2/3
    # and 1/3. The older ends at 150; the younger has done 50 by then and alone (rate 1) ends at 200.
    done = run_aged(lambda c, cb: AgeWeightedReadinessServer(c, [1.0], [0, 0], [0, 1], cb, rho=0.5),
                    [(0.0, 0, 100.0), (0.0, 1, 100.0)])
    assert done == {0: pytest.approx(150.0), 1: pytest.approx(200.0)}


def test_a_block_below_its_weighted_level_gets_its_demand():
    # Ready 0.2 (old) and 1.0 (young), rho = 0.5, U = 1: weighted levels lambda * (1, 0.5) with the
    # old block's demand 0.2 below lambda; it gets 0.2 and the young one 0.8.
    done = run_aged(lambda c, cb: AgeWeightedReadinessServer(c, [0.2, 1.0], [0, 1], [0, 1], cb, rho=0.5),
                    [(0.0, 0, 20.0), (0.0, 1, 80.0)])
    assert done == {0: pytest.approx(100.0), 1: pytest.approx(100.0)}


def test_bad_weight_is_refused():
    with pytest.raises(ValueError, match="rho"):
        AgeWeightedReadinessServer(ModelEnvironment(), [0.5], [0], [0], lambda j: None, rho=0.0)
    with pytest.raises(SpecError, match="younger_block_weight"):
        toy_spec(younger_block_weight=1.5)


def aged_spec(rho):
    return toy_spec(sm_count=4, max_blocks_per_sm=4, younger_block_weight=rho,
                    task_costs={"default": TaskCost(1.0, 0.0, block_sm_ready=0.5)})


def test_a_short_grid_tail_spreads_over_the_sms():
    # 4 SMs x 4 slots, 18 equal tasks: two tasks past one wave. With equal sharing an SM's four
    # blocks end together and the first SM to free takes both tail tasks; with older blocks favoured
    # each SM frees its oldest slot first, so the tail lands on two SMs, one each, and ends sooner.
    graph = compute_graph([100.0] * 18)
    order = one_launch(range(18))
    equal = simulate(graph, order, aged_spec(None), SimOptions(placement="round_robin"))
    aged = simulate(graph, order, aged_spec(0.8), SimOptions(placement="round_robin"))
    tail = np.argsort(aged.claim_ns)[16:]
    assert len(set(aged.sm[tail].tolist())) == 2
    assert len(set(equal.sm[np.argsort(equal.claim_ns, kind="stable")[16:]].tolist())) == 1
    assert aged.predicted_ns < equal.predicted_ns


def test_block_end_order_takes_the_first_wave_per_sm():
    # Two SMs, two first-wave blocks each (ends 10, 12 and 11, 13 ns from the first claim); a later
    # block on SM 0 (claimed at 10) is not first-wave. An SM with one first-wave block is dropped.
    claim = [0, 0, 0, 0, 10, 0]
    end = [10, 12, 11, 13, 20, 5]
    sm = [0, 0, 1, 1, 0, 2]
    order, sms = block_end_order(claim, end, sm)
    assert sms == 2 and order == pytest.approx([10.5e-3, 12.5e-3])
    assert normalised([1.0, 3.0]).tolist() == [0.5, 1.5]


def test_fit_recovers_a_weight_from_its_own_simulation(monkeypatch):
    # A "measurement" simulated at rho = 0.8 is fitted back to 0.8 (the fit's own consistency).
    import megasim.calibration.age as ca
    graph, order = compute_graph([100.0] * 32), one_launch(range(32))
    monkeypatch.setattr(ca, "end_order_case", lambda row, plan_params="": (graph, order))
    truth = simulate(graph, order, aged_spec(0.8))
    end_us, _ = block_end_order(truth.claim_ns, truth.end_ns, truth.sm)
    row = {"layer": "toy", "kind": "k", "kernel": "per_kind", "style": "per_task", "end_us": end_us}
    rho, how, checks = fit_age_weight(dataclasses.replace(aged_spec(None)), [row])
    assert rho == pytest.approx(0.8, abs=0.01)
    assert "bounded search" in how and checks[0]["simulated_equal_sharing"] == pytest.approx([1.0] * 4)


def test_start_computing_is_leave_then_add():
    # Blocks that move data first (enter), then compute: the one-change start_computing gives the
    # finish times of leave followed by add, with mixed classes and rho < 1.
    rng = np.random.default_rng(11)
    n = 10
    enter_at = rng.uniform(0, 200, n)
    compute_at = enter_at + rng.uniform(5, 80, n)
    work = rng.uniform(50, 300, n)
    class_of = [j % 3 for j in range(n)]
    ages = list(np.argsort(np.argsort(enter_at)))

    def run(combined: bool) -> dict[int, float]:
        clock = ModelEnvironment()
        done: dict[int, float] = {}
        sm = AgeWeightedReadinessServer(clock, [0.4, 0.7, 0.9], class_of, ages,
                                        lambda j: done.__setitem__(j, clock.now), [0.3, 0.5, 0.8], rho=0.8)

        def start(j):
            if combined:
                sm.start_computing(j, float(work[j]))
            else:
                sm.leave(j)
                sm.add(j, float(work[j]))
        for j in range(n):
            clock.after(float(enter_at[j]), sm.enter, j)
            clock.after(float(compute_at[j]), start, j)
        clock.run()
        return done

    separate = run(False)
    assert len(separate) == n
    assert run(True) == pytest.approx(separate, rel=1e-12)
