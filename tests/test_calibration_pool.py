"""The calibration's simulations (megasim.calibration.pool, megasim.calibration.lsq): a batch simulates each
(case, cost) once, over processes or not with the same numbers; the batched least squares finds a minimum
within its budget; the fits report progress."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest

from megasim.calibration.lsq import forward_steps, least_squares_batched
from megasim.calibration.pool import CasePool, runs_megakernel, simulate_case
from megasim.calibration.cases import kind_cases, variant_case
from megasim.hardware import TaskCost, get_gpu

LAYER = "N=8,C=256,K=64,H=16,W=16"
VARIANTS = [{"kernel": "per_kind", "timing": "queued"},
            {"kernel": "per_kind", "extra_shared_bytes": 100 * 1024, "timing": "queued"},
            {"kernel": "megakernel", "style": "per_task", "timing": "queued"},
            {"kernel": "megakernel", "style": "persistent", "blocks_per_sm": 1, "timing": "queued"}]
COST = TaskCost(0.4, 700.0, block_sm_ready=0.4, block_dram_bw_gbps=9.0, megakernel_fixed_ns=2500.0)


def small_h200():
    h = get_gpu("H200")
    f = 4 / h.sm_count
    return dataclasses.replace(h, sm_count=4, fp32_peak_gflops=h.fp32_peak_gflops * f, dram_bw_gbps=h.dram_bw_gbps * f,
                               l2_bw_gbps=h.l2_bw_gbps * f, queued_launch_ns=1500.0)


def gemm_cases():
    (_, sub, sched), = kind_cases((LAYER,))["gemm"]
    return [(str(v), *variant_case(sub, sched, v), v["timing"]) for v in VARIANTS]


def test_a_batch_simulates_each_case_and_cost_once_and_matches_one_at_a_time():
    spec, cases = small_h200(), gemm_cases()
    slower = dataclasses.replace(COST, compute_efficiency=0.2)
    with CasePool({"gemm": cases}, workers=1) as pool:
        first, second, again = pool.simulate_batch([("gemm", spec, "gemm", COST), ("gemm", spec, "gemm", slower),
                                                     ("gemm", spec, "gemm", COST)])
        assert pool.stats.simulated == 2 * len(cases) and pool.stats.reused == len(cases)
        assert pool.simulate("gemm", spec, "gemm", COST) == first       # looked up
        assert pool.stats.simulated == 2 * len(cases)
    assert first == again
    s = dataclasses.replace(spec, task_costs={**spec.task_costs, "gemm": COST})
    assert first == [simulate_case(c, s) for c in cases]                    # bit for bit, in order
    assert all(a > b for a, b in zip(second, first))


def test_a_launch_that_is_not_the_megakernel_does_not_read_the_megakernel_costs():
    """The pool reuses a per-kind kernel run's time when only megakernel_fixed_ns or megakernel_claim_ns
    changed: the engine must not read them there (megasim.sim.launches)."""
    spec, cases = small_h200(), gemm_cases()
    assert [runs_megakernel(c) for c in cases] == [False, False, True, True]
    other = dataclasses.replace(COST, megakernel_fixed_ns=9000.0, megakernel_claim_ns=3000.0)
    with_cost = [dataclasses.replace(spec, task_costs={**spec.task_costs, "gemm": c}) for c in (COST, other)]
    direct = [[simulate_case(case, s) for case in cases] for s in with_cost]
    assert direct[0][:2] == direct[1][:2] and direct[0][2] != direct[1][2]
    with CasePool({"gemm": cases}, workers=1) as pool:
        got = pool.simulate_batch([("gemm", spec, "gemm", COST), ("gemm", spec, "gemm", other)])
        assert pool.stats.simulated == len(cases) + 2
    assert got == direct


def test_pooled_batch_matches_one_process():
    spec, cases = small_h200(), gemm_cases()
    costs = [COST, dataclasses.replace(COST, block_sm_ready=0.7), dataclasses.replace(COST, fixed_ns=100.0)]
    with CasePool({"gemm": cases}, workers=1) as one, CasePool({"gemm": cases}, workers=2) as two:
        serial = one.simulate_batch([("gemm", spec, "gemm", c) for c in costs])
        pooled = two.simulate_batch([("gemm", spec, "gemm", c) for c in costs])
    assert pooled == serial
    with pytest.raises(ValueError, match="workers=0"):
        CasePool({"gemm": cases}, workers=0)


def test_forward_steps_follow_scipy_and_turn_back_at_a_bound():
    x = np.array([0.0, -2.0, 0.995])
    h = forward_steps(x, np.array([-5.0, -5.0, -5.0]), np.array([5.0, 5.0, 1.0]), 0.02)
    assert h[0] == pytest.approx(0.02) and h[1] == pytest.approx(-0.04) and h[2] == pytest.approx(-0.02)


def test_batched_least_squares_finds_the_minimum_within_its_budget():
    target = np.array([1.0, -0.5, 2.0])
    batches = []

    def many(points):
        batches.append(len(points))
        return [np.concatenate([p - target, 0.1 * (p - target) ** 2]) for p in points]

    seen = []
    res = least_squares_batched(many, [0.0, 0.0, 0.0], [-3] * 3, [3] * 3, max_evals=200, diff_step=1e-3,
                                xtol=1e-10, ftol=1e-10, gtol=1e-10, on_evaluation=lambda n, c: seen.append((n, c)))
    assert res.x == pytest.approx(target, abs=1e-4) and res.stopped == "converged"
    assert 3 in batches                                     # a Jacobian's points in one batch
    assert res.evaluations == sum(batches) <= 200 and seen[-1][0] == res.evaluations
    assert [c for _, c in seen] == sorted([c for _, c in seen], reverse=True)   # the best so far
    short = least_squares_batched(many, [0.0, 0.0, 0.0], [-3] * 3, [3] * 3, max_evals=6, diff_step=1e-3,
                                  xtol=1e-10, ftol=1e-10, gtol=1e-10)
    assert short.stopped == "budget" and short.evaluations <= 6
    assert short.cost < 0.5 * float(np.sum(many([np.zeros(3)])[0] ** 2))   # the best point it simulated


def test_fit_report_writes_plain_lines_off_a_terminal():
    from megasim.calibration.winograd import CalibrationProgress
    from megasim.cli.calibrate import FitReport
    from megasim.cli.common import Progress
    out = io.StringIO()
    with Progress(stream=io.StringIO(), enabled=False) as progress:
        report = FitReport(progress, stream=out, every_s=3600.0)
        report(CalibrationProgress("kinds"))
        report(CalibrationProgress("kinds", "gemm", 9, 300, 0.0412))
        report(CalibrationProgress("kinds", "ftrans", 5, 150, 0.2))
        report(CalibrationProgress("kinds", "ftrans", 40, 150, 0.1, done=True))
        assert progress.message == "calibrating: kinds: gemm 9/300 rms 0.041, ftrans done"
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("megasim: calibrating: kinds (")
    assert "ftrans done" in lines[1]


def test_measuring_steps_are_shown_one_at_a_time():
    from megasim.calibration.winograd import CalibrationProgress
    from megasim.cli.calibrate import FitReport
    from megasim.cli.common import Progress
    out = io.StringIO()
    with Progress(stream=io.StringIO(), enabled=False) as progress:
        report = FitReport(progress, stream=out, every_s=3600.0)
        report(CalibrationProgress("measuring", "dram_bw_gbps"))
        report(CalibrationProgress("measuring", "l2_bw_gbps"))
        assert progress.message == "calibrating: measuring: l2_bw_gbps"
        report(CalibrationProgress("younger_block_weight"))
        report(CalibrationProgress("younger_block_weight", evaluations=3))
        assert progress.message == "calibrating: younger_block_weight: 3 evaluations"
    assert len(out.getvalue().splitlines()) == 3


def test_mixed_checks_over_processes_match_one_process():
    from megasim.calibration.cases import MIXED_PAIRS, mixed_checks
    from megasim.calibration.winograd import _scalar_pool
    spec = small_h200()
    rows = [{"layer": LAYER, "kind": "+".join(pair), "median_ms": 1.0} for pair in MIXED_PAIRS]
    with _scalar_pool(2) as map_fn:
        assert mixed_checks(spec, rows, map_fn=map_fn) == mixed_checks(spec, rows)
