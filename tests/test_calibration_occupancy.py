"""The second calibration round's fit (megasim.calibration.winograd): rows of each kind's tasks alone at several
occupancies, timed with the host hidden, recover a known (compute_efficiency, fixed_ns, block_sm_ready, ...)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from megasim.calibration.cases import kind_cases, variant_case
from megasim.calibration.fit import UPDATE_PRIOR_WEIGHT
from megasim.calibration.measurements import Measurements
from megasim.calibration.pool import simulated_us
from megasim.calibration.winograd import calibrated_spec
from megasim.hardware import TaskCost, get_gpu
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.workloads import parse_layer

LAYER = "N=8,C=256,K=64,H=16,W=16"
VARIANTS = [{"kernel": "per_kind", "timing": "queued"},
            {"kernel": "per_kind", "timing": "events"},
            {"kernel": "per_kind", "extra_shared_bytes": 100 * 1024, "timing": "queued"},
            {"kernel": "per_kind", "extra_shared_bytes": 200 * 1024, "timing": "queued"},
            {"kernel": "megakernel", "style": "per_task", "timing": "queued"},
            {"kernel": "megakernel", "style": "persistent", "blocks_per_sm": 1, "timing": "queued"}]


def small_h200(**over):
    """The H200 preset cut down to 4 SMs (per-SM compute and bandwidth kept), its per-block L2 rate the one
    its bandwidths imply, as a calibration from them fits it (``measured_base``)."""
    h = get_gpu("H200")
    f = 4 / h.sm_count
    return dataclasses.replace(h, sm_count=4, fp32_peak_gflops=h.fp32_peak_gflops * f, dram_bw_gbps=h.dram_bw_gbps * f,
                               l2_bw_gbps=h.l2_bw_gbps * f, queued_launch_ns=1500.0, block_l2_bw_ratio=None, **over)


def test_variant_case_occupancy():
    spec = small_h200()
    (_, sub, sched), = kind_cases((LAYER,))["gemm"]
    per = {}
    for v in VARIANTS:
        g, s = variant_case(sub, sched, v)
        per[str(v)] = simulate(g, s, spec).launches[0].blocks_per_sm
    assert per[str(VARIANTS[0])] == 4 and per[str(VARIANTS[2])] == 2     # registers; shared memory
    assert per[str(VARIANTS[3])] == 1                                      # shared memory
    assert per[str(VARIANTS[4])] == 4 and per[str(VARIANTS[5])] == 1     # megakernel: 128 registers; the grid


TRUTH = {"ftrans": TaskCost(0.3, 800.0, block_sm_ready=0.5, block_dram_bw_gbps=8.0, megakernel_fixed_ns=2000.0),
         "itrans": TaskCost(0.2, 1500.0, block_sm_ready=0.4, block_dram_bw_gbps=6.0, megakernel_fixed_ns=2500.0),
         "gemm": TaskCost(0.45, 300.0, block_sm_ready=0.35, block_dram_bw_gbps=12.0, megakernel_fixed_ns=3000.0),
         "otrans": TaskCost(0.25, 900.0, block_sm_ready=0.6, block_dram_bw_gbps=7.0, megakernel_fixed_ns=1500.0)}


def _synthetic_measurements():
    """(spec, measurements): TRUTH's runs of every kind at each of VARIANTS and the two mixed-kind runs, simulated on
    a 4-SM H200."""
    from megasim.calibration.cases import MIXED_PAIRS, mixed_case
    spec = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    rows = []
    for kind, cases in kind_cases((LAYER,)).items():
        (_, sub, sched), = cases
        for v in VARIANTS:
            g, s = variant_case(sub, sched, v)
            us = simulated_us(simulate(g, s, spec), v["timing"])
            rows.append({"layer": LAYER, "kind": kind, "tasks": sub.num_tasks, "median_ms": us / 1000.0, **v})
    values = {name: {"value": getattr(spec, name), "method": "test"} for name in
              ("sm_count", "fp32_peak_gflops", "dram_bw_gbps", "l2_bw_gbps", "queued_launch_ns", "kernel_launch_ns")}
    mixed = [{"layer": LAYER, "kind": "+".join(pair), "median_ms": simulated_us(simulate(
              *mixed_case(LAYER, pair), spec), "queued") / 1000.0} for pair in MIXED_PAIRS]
    return spec, Measurements(device="test", date="2026-01-01", preset="H200", values=values, kind_times=rows,
                              extra={"mixed_kind_rows": mixed})


@pytest.mark.slow
def test_fit_predicts_a_held_out_occupancy():
    from megasim.calibration.cases import MIXED_PAIRS
    truth = TRUTH
    spec, m = _synthetic_measurements()
    fitted, report = calibrated_spec(get_gpu("H200"), m, (LAYER,), max_evals=150, workers=1)
    # the mixed-kind runs fit no spec-wide factor unless fit_mixed asks for it
    assert fitted.mixed_kinds_sm_factor is None and "mixed_kinds_sm_factor" not in report
    assert [c["kinds"] for c in report["mixed_checks"]] == ["+".join(p) for p in MIXED_PAIRS]
    # each transform was fitted again beside the GEMM, on its own runs and the mixed run it takes part in; the
    # GEMM was not (its own runs pin it)
    assert report["kinds"]["itrans"]["mixed_runs"] == 1 and report["kinds"]["otrans"]["mixed_runs"] == 1
    assert report["kinds"]["gemm"]["mixed_runs"] == 0 and report["kinds"]["ftrans"]["mixed_runs"] == 0
    assert report["kinds"]["itrans"]["cases"][-1] == f"{LAYER} itrans+gemm mixed"
    # so the mixed runs, which the single-kind runs alone left 5.1% off (itrans+gemm: the prior holds the fields
    # those runs leave loose near their starts), are fitted
    assert all(abs(c["error"]) < 0.03 for c in report["mixed_checks"]), report["mixed_checks"]
    held_out = {"kernel": "megakernel", "style": "persistent", "blocks_per_sm": 2, "timing": "queued"}
    for kind, true in truth.items():
        assert report["kinds"][kind]["rms_log_error"] < 0.02, kind
        assert report["kinds"][kind]["single_kind_rms_log_error"] < 0.02, kind
        # the events row, and for a transform the two forced-occupancy rows of its own kernel: reported,
        # not fitted (the GEMM fits those)
        checks = report["kinds"][kind]["checks"]
        forced = 0 if kind == "gemm" else 2
        assert len(checks) == 1 + forced and sum("per_kind+" in c["case"] for c in checks) == forced, checks
        # (efficiency, share, per-block bandwidth) trade off on so few runs; what must hold is that
        # the fitted costs predict a run they were not fitted on.
        (_, sub, sched), = kind_cases((LAYER,))[kind]
        g, s = variant_case(sub, sched, held_out)
        want = simulated_us(simulate(g, s, spec), "queued")
        got = simulated_us(simulate(g, s, dataclasses.replace(spec, task_costs=fitted.task_costs)), "queued")
        assert got == pytest.approx(want, rel=0.03), kind


@pytest.mark.slow
def test_calibrate_cli_says_which_fits_took_mixed_kind_runs(tmp_path, capsys):
    import json as json_module
    from megasim.cli.main import main
    _, m = _synthetic_measurements()
    path = tmp_path / "m.json"
    path.write_text(json_module.dumps(m.as_dict()))
    assert main(["calibrate", "--algo", "winograd", "--from-measurements", str(path), "--out", str(tmp_path / "s.json"),
                 "--workers", "1"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert "(1 of them mixed-kind runs: fitted beside the GEMM)" in lines["itrans"], lines["itrans"]
    assert "block_sm_ready 0." in lines["itrans"] and "block_sm_share" not in lines["itrans"]
    assert "mixed-kind runs" not in lines["gemm"]


def test_beside_rows_name_the_transforms_of_each_mixed_run():
    from megasim.calibration.winograd import beside_rows
    rows = [{"layer": LAYER, "kind": kinds, "median_ms": 0.1} for kinds in ("itrans+gemm", "gemm+otrans", "ftrans+gemm")]
    m = Measurements(device="test", date="2026-01-01", preset="H200", extra={"mixed_kind_rows": rows})
    assert beside_rows(m) == {"itrans": [rows[0]], "otrans": [rows[1]]}
    assert beside_rows(Measurements(device="test", date="2026-01-01", preset="H200")) == {}


def _two_minima(costs):
    """Times whose log error has a local minimum at block_sm_ready 0.35 (error 0.2 left) and the global one
    at 0.9, and pins coresident_stretch at 0.1."""
    out = []
    for c in costs:
        r = c.block_sm_ready
        out.append(np.exp([(r - 0.9) * (r - 0.35) * 10.0, 0.2 if r < 0.62 else 0.0, c.coresident_stretch - 0.1]))
    return out


def test_a_fit_from_scratch_keeps_the_start_with_the_least_error():
    from megasim.calibration.fit import ALT_STARTS, fit_kind
    spec, free = get_gpu("H100"), ("block_sm_ready", "coresident_stretch")
    # coresident_stretch's residual moves 0.1 per e-fold here, as weakly as the prior holds it at PRIOR_WEIGHT:
    # this test is about the starts, so the prior is the update's light one
    fit_kind = functools.partial(fit_kind, prior_weight=UPDATE_PRIOR_WEIGHT)
    one = fit_kind(spec, "k", None, [1.0, 1.0, 1.0], max_evals=150, free=free, simulate_costs=_two_minima)
    assert one["cost"].block_sm_ready == pytest.approx(0.35, abs=0.02) and one["rms_log_error"] > 0.1
    both = fit_kind(spec, "k", None, [1.0, 1.0, 1.0], max_evals=150, free=free, simulate_costs=_two_minima,
                    alt_starts=ALT_STARTS)
    assert both["cost"].block_sm_ready == pytest.approx(0.9, abs=0.02) and both["rms_log_error"] < 0.01
    assert both["cost"].coresident_stretch == pytest.approx(0.1, abs=0.01)
    # a start naming a field the fit does not free is skipped
    same = fit_kind(spec, "k", None, [1.0, 1.0, 1.0], max_evals=150, free=("block_sm_ready",),
                    simulate_costs=_two_minima, alt_starts=ALT_STARTS)
    assert same["cost"].block_sm_ready == pytest.approx(0.35, abs=0.02)


# --- mixed-kind runs: two kinds interleaved in one megakernel launch (checks, not fitted) ----------

def test_interleave_keeps_each_order_and_spreads_both():
    from megasim.calibration.cases import interleave
    a, b = np.arange(3), np.arange(100, 109)
    out = interleave(a, b)
    assert sorted(out.tolist()) == sorted(a.tolist() + b.tolist())
    assert [x for x in out if x < 100] == [0, 1, 2] and [x for x in out if x >= 100] == list(range(100, 109))
    pos_a = [int(np.flatnonzero(out == x)[0]) for x in a]
    assert pos_a[0] <= 2 and 4 <= pos_a[1] <= 6 and pos_a[2] >= 8        # one a per third of the launch


def test_mixed_case_runs_both_kinds_in_one_megakernel_launch():
    from megasim.calibration.cases import MIXED_PAIRS, mixed_case, mixed_checks
    spec = small_h200()
    for pair in MIXED_PAIRS:
        g, s = mixed_case(LAYER, pair)
        launch = s.launches[0]
        assert launch.kernel == "megakernel" and len(s.launches) == 1
        kinds = {g.kind_names[int(k)] for k in np.unique(g.kind[np.asarray(launch.order)])}
        assert kinds == set(pair)
        assert (g.wait_counters < 0).all()                                     # no waits, as measured
    rows = [{"layer": LAYER, "kind": "itrans+gemm", "median_ms": 1.0, "single_kind_sum_us": 900.0}]
    (check,) = mixed_checks(spec, rows)
    assert check["measured_us"] == 1000.0 and check["simulated_us"] > 0
    assert check["error"] == pytest.approx(check["simulated_us"] / 1000.0 - 1.0)


def test_mixed_order_names_a_missing_kind():
    from megasim.calibration.cases import mixed_order
    from megasim.errors import SpecError
    graph, schedule, _ = build(parse_layer(LAYER), Plan.parse("nonfused", ""))
    with pytest.raises(SpecError, match="no launch of kind 'stencil'"):
        mixed_order(graph, schedule, ("itrans", "stencil"))


def test_measured_claim_is_the_mean_of_the_traced_rows():
    from megasim.calibration.winograd import with_measured_claim
    spec = small_h200()
    rows = [{"layer": "a", "kind": "gemm", "trace_claim_ns": 1000.0},
            {"layer": "b", "kind": "gemm", "plan_params": "pairs=4", "trace_claim_ns": 2000.0},
            {"layer": "a", "kind": "gemm"}]                                     # an untraced row
    got, claim = with_measured_claim(spec, "gemm", rows)
    assert got.task_cost("gemm").megakernel_claim_ns == 1500.0 == claim["value"]
    assert "a, b [pairs=4]" in claim["method"] and got.task_cost("itrans") == spec.task_cost("itrans")
    assert with_measured_claim(spec, "gemm", rows[2:]) == (spec, None)           # old measurements


def test_mixed_factor_is_recovered_from_mixed_runs():
    """Mixed-kind runs simulated with a known mixed_kinds_sm_factor give it back (and the fit's
    source names the runs)."""
    from megasim.calibration.cases import MIXED_PAIRS, mixed_case, mixed_checks
    from megasim.calibration.winograd import fit_mixed_factor
    truth = {k: TaskCost(0.3, 500.0, block_sm_ready=r) for k, r in
             (("ftrans", 0.5), ("itrans", 0.3), ("gemm", 0.6), ("otrans", 0.25))}
    spec = small_h200(task_costs={**get_gpu("H200").task_costs, **truth})
    rows = []
    for pair in MIXED_PAIRS:
        g, s = mixed_case(LAYER, pair)
        us = simulated_us(simulate(g, s, dataclasses.replace(spec, mixed_kinds_sm_factor=0.8)), "queued")
        rows.append({"layer": LAYER, "kind": "+".join(pair), "median_ms": us / 1000.0})
    factor, how = fit_mixed_factor(spec, rows)
    # On so small a layer the times move in event-sized steps with the factor: near the truth, and
    # the runs reproduced.
    assert factor == pytest.approx(0.8, abs=0.05)
    for c in mixed_checks(dataclasses.replace(spec, mixed_kinds_sm_factor=factor), rows):
        assert abs(c["error"]) < 0.01, c
    assert "2 mixed-kind runs" in how and "itrans+gemm" in how


# --- the case pool: the calibration's simulations over processes give the numbers of one process ---

def test_case_pool_matches_one_process_and_keeps_order():
    from megasim.calibration.pool import CasePool
    spec = small_h200()
    (_, sub, sched), = kind_cases((LAYER,))["gemm"]
    cases = []
    for v in VARIANTS:
        g, s = variant_case(sub, sched, v)
        cases.append((str(v), g, s, v["timing"]))
    cost = TaskCost(0.4, 700.0, block_sm_ready=0.4, block_dram_bw_gbps=9.0, megakernel_fixed_ns=2500.0)
    with CasePool({"gemm": cases}, workers=1) as one, CasePool({"gemm": cases}, workers=2) as two:
        serial = one.simulate("gemm", spec, "gemm", cost)
        pooled = two.simulate("gemm", spec, "gemm", cost)
        again = two.simulate("gemm", spec, "gemm", dataclasses.replace(cost, compute_efficiency=0.2))
    assert pooled == serial                       # bit for bit, in the cases' order
    assert len(set(serial)) > 1                   # the cases differ, so the order is tested
    assert all(a > b for a, b in zip(again, serial))   # a slower kind: every case slower (no stale cost)
    with pytest.raises(ValueError, match="workers=0"):
        CasePool({"gemm": cases}, workers=0)


@pytest.mark.slow
def test_own_kernel_costs_fit_the_own_kernels_runs_that_the_joint_cost_cannot():
    """Each kind's own kernel a slower build than its megakernel function (the truth's kernel_task_costs): the
    joint cost fits both kernels' runs as well as one cost can, and the own-kernel stage fits the own kernel's."""
    mega = {"ftrans": TaskCost(0.3, 800.0, block_sm_ready=0.5, block_dram_bw_gbps=8.0, megakernel_fixed_ns=2000.0),
            "itrans": TaskCost(0.2, 1500.0, block_sm_ready=0.4, block_dram_bw_gbps=6.0, megakernel_fixed_ns=2500.0),
            "gemm": TaskCost(0.45, 300.0, block_sm_ready=0.35, block_dram_bw_gbps=12.0, megakernel_fixed_ns=3000.0),
            "otrans": TaskCost(0.25, 900.0, block_sm_ready=0.6, block_dram_bw_gbps=7.0, megakernel_fixed_ns=1500.0)}
    own = {k: dataclasses.replace(c, compute_efficiency=c.compute_efficiency * 0.6,
                                  megakernel_fixed_ns=0.0) for k, c in mega.items()}
    spec = small_h200(task_costs={**get_gpu("H200").task_costs, **mega}, kernel_task_costs=own)
    rows = []
    for kind, cases in kind_cases((LAYER,)).items():
        (_, sub, sched), = cases
        for v in VARIANTS:
            g, s = variant_case(sub, sched, v)
            rows.append({"layer": LAYER, "kind": kind, "tasks": sub.num_tasks,
                         "median_ms": simulated_us(simulate(g, s, spec), v["timing"]) / 1000.0, **v})
    values = {name: {"value": getattr(spec, name), "method": "test"} for name in
              ("sm_count", "fp32_peak_gflops", "dram_bw_gbps", "l2_bw_gbps", "queued_launch_ns", "kernel_launch_ns")}
    m = Measurements(device="test", date="2026-01-01", preset="H200", values=values, kind_times=rows)
    fitted, report = calibrated_spec(get_gpu("H200"), m, (LAYER,), max_evals=100, workers=1)
    assert set(report["own_kernels"]) == set(mega)
    # kept where it fits the own kernel's runs better than the joint cost (here: not the filter transform,
    # whose one run hardly moves with the efficiency)
    assert set(fitted.kernel_task_costs) == {k for k, r in report["own_kernels"].items() if r["kept"]} >= {"gemm", "itrans"}
    joint_only = dataclasses.replace(fitted, kernel_task_costs={})
    for kind in mega:
        # (a transform has one own-kernel run fitted here, and the prior holds its six fields near their starts)
        assert report["own_kernels"][kind]["rms_log_error"] < 0.04, kind
        (_, sub, sched), = kind_cases((LAYER,))[kind]
        g, s = variant_case(sub, sched, VARIANTS[0])          # its own kernel at its own occupancy
        want = simulated_us(simulate(g, s, spec), "queued")
        own_error = abs(simulated_us(simulate(g, s, fitted), "queued") / want - 1)
        joint_error = abs(simulated_us(simulate(g, s, joint_only), "queued") / want - 1)
        assert own_error <= joint_error, kind
        if kind in fitted.kernel_task_costs:
            assert own_error < 0.04 and joint_error > 1.8 * own_error, (kind, own_error, joint_error)
        g, s = variant_case(sub, sched, VARIANTS[4])          # the megakernel's runs: priced by the joint cost
        assert simulated_us(simulate(g, s, fitted), "queued") == simulated_us(simulate(g, s, joint_only), "queued")


@pytest.mark.slow
def test_the_gemm_epilogue_is_fitted_only_when_asked_and_recovered():
    """A GEMM whose tasks spend SM time beside their flops (``sm_fixed_ns``) at C = 16 and C = 256: with
    ``epilogue`` the fit frees the field and recovers it; without, the field stays 0 and is not free."""
    from megasim.calibration.cases import natural_cases
    from megasim.calibration.winograd import kind_fits
    layers = ("N=8,C=16,K=64,H=16,W=16", "N=8,C=256,K=64,H=16,W=16")
    truth = dataclasses.replace(TRUTH["gemm"], sm_fixed_ns=2500.0)
    spec = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH, "gemm": truth})
    rows = []
    for layer in layers:
        (_, sub, sched), = kind_cases((layer,))["gemm"]
        for v in VARIANTS:
            g, s = variant_case(sub, sched, v)
            rows.append({"layer": layer, "kind": "gemm", "tasks": sub.num_tasks,
                         "median_ms": simulated_us(simulate(g, s, spec), v["timing"]) / 1000.0, **v})
    values = {name: {"value": getattr(spec, name), "method": "test"} for name in
              ("sm_count", "fp32_peak_gflops", "dram_bw_gbps", "l2_bw_gbps", "queued_launch_ns", "kernel_launch_ns")}
    m = Measurements(device="test", date="2026-01-01", preset="H200", values=values, kind_times=rows)
    natural_of, params_of = natural_cases(m, layers)
    natural_of = {"gemm": natural_of["gemm"]}
    base = dataclasses.replace(spec, task_costs={**spec.task_costs, "gemm": TRUTH["gemm"]})
    (job,), (fit,) = kind_fits(base, m, layers, natural_of, params_of, 120, 1, epilogue=True)
    assert "sm_fixed_ns" in job["free"]
    assert fit["rms_log_error"] < 0.02
    assert fit["cost"].sm_fixed_ns == pytest.approx(2500.0, rel=0.3)
    (job,), (fit,) = kind_fits(base, m, layers, natural_of, params_of, 2, 1)
    assert "sm_fixed_ns" not in job["free"] and fit["cost"].sm_fixed_ns == 0.0
