"""Updating a calibrated spec after a kernel change (megasim.calibration.update): the traced claims are
taken, the named fields refitted from the spec's own values, and every other cost kept."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from megasim.calibration.cases import kind_cases, variant_case
from megasim.calibration.measurements import Measurements
from megasim.calibration.pool import simulated_us
from megasim.calibration.update import updated_spec
from megasim.errors import SpecError
from megasim.hardware import TaskCost, dump_spec, get_gpu
from megasim.sim import simulate
from tests.test_calibration_occupancy import LAYER, VARIANTS, small_h200

TRUTH = {"ftrans": TaskCost(0.3, 800.0, block_sm_ready=0.5, block_dram_bw_gbps=8.0, megakernel_fixed_ns=2000.0,
                            megakernel_claim_ns=700.0),
         "itrans": TaskCost(0.2, 1500.0, block_sm_ready=0.4, block_dram_bw_gbps=6.0, megakernel_fixed_ns=2500.0,
                            megakernel_claim_ns=900.0, coresident_stretch=0.3),
         "gemm": TaskCost(0.45, 300.0, block_sm_ready=0.35, block_dram_bw_gbps=12.0, megakernel_fixed_ns=1200.0,
                          megakernel_claim_ns=1400.0, memory_overlap=0.5),
         "otrans": TaskCost(0.25, 900.0, block_sm_ready=0.6, block_dram_bw_gbps=7.0, megakernel_fixed_ns=1500.0,
                            megakernel_claim_ns=1200.0)}
TRACED = {"kernel": "megakernel", "style": "persistent", "blocks_per_sm": 1, "timing": "queued"}


def measured(spec, plan_params: str = "", kinds=None, layer: str = LAYER):
    """Measurements of ``spec``'s kinds as gpu.calibrate.occupancy records them: each kind alone at
    several occupancies (simulated with ``spec``), its persistent run traced with its claim time (at
    ``plan_params``, rows tagged with them; ``kinds``: only these; on ``layer``)."""
    rows = []
    for kind, cases in kind_cases((layer,), plan_params).items():
        if kinds is not None and kind not in kinds:
            continue
        (_, sub, sched), = cases
        tag = {"plan_params": plan_params} if plan_params else {}
        for v in VARIANTS:
            g, s = variant_case(sub, sched, v)
            row = {"layer": layer, "kind": kind, "tasks": sub.num_tasks, **tag,
                   "median_ms": simulated_us(simulate(g, s, spec), v["timing"]) / 1000.0, **v}
            if v == TRACED:
                row["trace_claim_ns"] = spec.task_cost(sub.cost_names[sub.kind_id(kind)]).megakernel_claim_ns
            rows.append(row)
    values = {"queued_launch_ns": {"value": spec.queued_launch_ns, "method": "test"}}
    return Measurements(device="test GPU", date="2026-11-26", preset="H200", values=values, kind_times=rows)


def changed_kernels_spec():
    """The spec of the kernels after a change to the megakernel's per-task path: claims and the time
    added once a task is ready both cheaper; the task bodies as before."""
    return small_h200(task_costs={**get_gpu("H200").task_costs, **{
        k: dataclasses.replace(c, megakernel_claim_ns=c.megakernel_claim_ns * 0.7,
                               megakernel_fixed_ns=c.megakernel_fixed_ns * 0.6) for k, c in TRUTH.items()}})


def test_update_recovers_the_per_task_costs_and_keeps_the_bodies():
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    new = changed_kernels_spec()
    updated, report = updated_spec(old, measured(new), ("megakernel_fixed_ns",), workers=1)
    for kind, truth in TRUTH.items():
        got, want = updated.task_cost(kind), new.task_cost(kind)
        assert got.megakernel_claim_ns == pytest.approx(want.megakernel_claim_ns)          # taken, not fitted
        assert got.megakernel_fixed_ns == pytest.approx(want.megakernel_fixed_ns, rel=0.05, abs=50.0), kind
        # every other field is the old spec's, exactly
        assert dataclasses.replace(got, megakernel_claim_ns=0.0, megakernel_fixed_ns=0.0) == \
            dataclasses.replace(truth, megakernel_claim_ns=0.0, megakernel_fixed_ns=0.0), kind
        assert report["kinds"][kind]["megakernel_fixed_ns"]["before"] == truth.megakernel_fixed_ns
        assert report["kinds"][kind]["rms_log_error"] < 0.01, kind
        assert "on test GPU by megasim update-spec" in updated.sources[f"task_costs.{kind}.megakernel_fixed_ns"]
    assert "megakernel_fixed_ns updated 2026-11-26 on test GPU" in updated.description
    assert updated.queued_launch_ns == old.queued_launch_ns and updated.sm_count == old.sm_count


def test_a_spec_without_the_reset_gets_the_measured_one_before_the_refit():
    """Runs timed with the reset kernel before each megakernel launch (as gpu.calibrate.occupancy times them),
    a spec fitted before the model priced it: the update puts in the probe's value (queued megakernel run of
    an empty map less a queued empty kernel) and the refitted per-task costs come out free of it."""
    reset_ns = 3000.0
    new = dataclasses.replace(small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH}),
                              megakernel_reset_ns=reset_ns)
    m = measured(new)
    m = dataclasses.replace(m, extra={"occupancy_round": {
        "queued_megakernel_launch_ns": new.queued_launch_ns + reset_ns}})
    old = dataclasses.replace(new, megakernel_reset_ns=None)
    updated, report = updated_spec(old, m, ("megakernel_fixed_ns",), workers=1)
    assert updated.megakernel_reset_ns == pytest.approx(reset_ns)
    assert report["megakernel_reset_ns"] == pytest.approx(reset_ns)
    assert "queued probe" in updated.sources["megakernel_reset_ns"]
    assert "megakernel_reset_ns added" in updated.description
    for kind, truth in TRUTH.items():
        assert updated.task_cost(kind).megakernel_fixed_ns == pytest.approx(truth.megakernel_fixed_ns, rel=0.05,
                                                                            abs=50.0), kind
    kept, _ = updated_spec(new, m, (), workers=1)              # a spec that has it keeps its own
    assert kept.megakernel_reset_ns == reset_ns and "megakernel_reset_ns added" not in kept.description


def test_claims_only_update_fits_nothing():
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    new = changed_kernels_spec()
    updated, report = updated_spec(old, measured(new), (), workers=1)
    for kind, truth in TRUTH.items():
        assert updated.task_cost(kind) == dataclasses.replace(
            truth, megakernel_claim_ns=new.task_cost(kind).megakernel_claim_ns), kind
        assert set(report["kinds"][kind]) == {"megakernel_claim_ns"}


def test_a_field_at_a_kind_is_refitted_for_that_kind_alone():
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    new = changed_kernels_spec()
    updated, report = updated_spec(old, measured(new), ("megakernel_fixed_ns@gemm",), workers=1)
    got = updated.task_cost("gemm")
    assert got.megakernel_fixed_ns == pytest.approx(new.task_cost("gemm").megakernel_fixed_ns, rel=0.05, abs=50.0)
    assert set(report["kinds"]["gemm"]) >= {"megakernel_claim_ns", "megakernel_fixed_ns"}
    for kind in ("ftrans", "itrans", "otrans"):
        assert updated.task_cost(kind).megakernel_fixed_ns == TRUTH[kind].megakernel_fixed_ns, kind
        assert set(report["kinds"][kind]) == {"megakernel_claim_ns"}, kind


def test_the_gemm_epilogue_can_be_refitted_by_name():
    """``sm_fixed_ns@gemm``: an update frees the GEMM's epilogue time (what megasim calibrate fits by default;
    an update keeps every field it is not told to refit) and nothing else's."""
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    new = changed_kernels_spec()
    updated, report = updated_spec(old, measured(new), ("sm_fixed_ns@gemm",), workers=1, max_evals=20)
    assert set(report["kinds"]["gemm"]) >= {"sm_fixed_ns"} and "sm_fixed_ns" not in report["kinds"]["itrans"]
    assert updated.task_cost("gemm").sm_fixed_ns == report["kinds"]["gemm"]["sm_fixed_ns"]["after"] > 0.0
    assert updated.task_cost("itrans").sm_fixed_ns == 0.0


def test_an_update_needs_rows_only_of_what_it_refits():
    """A measurements file with a layer that has only the GEMM's own runs (the few-wave shapes of
    experiments.studies.nonfused_waves.refit): an update of GEMM fields took every other cost name on it too
    ('no time of kind gemm@t32 on layer ...'), though it refits none of their fields."""
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    new = changed_kernels_spec()
    m = measured(new)
    m.kind_times += measured(new, "t=32", kinds=("gemm",)).kind_times        # gemm@t32 on LAYER only
    other = "N=8,C=128,K=64,H=12,W=12"
    m.kind_times += [r for r in measured(new, kinds=("gemm",), layer=other).kind_times if r["kernel"] == "per_kind"]
    updated, report = updated_spec(old, m, ("megakernel_fixed_ns@gemm",), workers=1)
    assert "megakernel_fixed_ns" in report["kinds"]["gemm"]
    assert all(set(report["kinds"][k]) <= {"megakernel_claim_ns"} for k in report["kinds"] if k != "gemm")
    assert updated.task_cost("gemm").megakernel_fixed_ns == pytest.approx(
        new.task_cost("gemm").megakernel_fixed_ns, rel=0.05, abs=50.0)
    for kind in ("ftrans", "itrans", "otrans"):
        assert updated.task_cost(kind).megakernel_fixed_ns == TRUTH[kind].megakernel_fixed_ns, kind


def test_a_new_variant_gets_a_cost_of_its_own_started_from_its_kind():
    """The big tiles' transforms (megasim.algorithms.winograd.lowering.OWN_COST_TILES): a spec without an ``itrans@m6``
    entry, measurements of itrans alone at tile=6 only; refitting two fields of the variant gives it an
    entry whose other fields (and their sources) are itrans's, and leaves every kind as it was."""
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    old = dataclasses.replace(old, sources={**old.sources, "task_costs.itrans.block_sm_ready": "test source"})
    truth6 = dataclasses.replace(TRUTH["itrans"], compute_efficiency=0.08, fixed_ns=400.0, megakernel_claim_ns=950.0)
    new = small_h200(task_costs={**old.task_costs, "itrans@m6": truth6})
    m = measured(new, "tile=6", kinds=("itrans",))
    assert {r["plan_params"] for r in m.kind_times} == {"tile=6"}
    updated, report = updated_spec(old, m, ("compute_efficiency@itrans@m6", "fixed_ns@itrans@m6"), workers=1)
    got = updated.task_costs["itrans@m6"]
    assert got.compute_efficiency == pytest.approx(0.08, rel=0.05)
    assert got.fixed_ns == pytest.approx(400.0, rel=0.1, abs=50.0)
    assert got.megakernel_claim_ns == pytest.approx(950.0)                     # traced, not fitted
    assert dataclasses.replace(got, compute_efficiency=1.0, fixed_ns=0.0, megakernel_claim_ns=0.0) == \
        dataclasses.replace(TRUTH["itrans"], compute_efficiency=1.0, fixed_ns=0.0, megakernel_claim_ns=0.0)
    assert updated.sources["task_costs.itrans@m6.block_sm_ready"] == "test source (itrans's, held)"
    assert "refitted on itrans@m6's tasks alone" in updated.sources["task_costs.itrans@m6.compute_efficiency"]
    assert set(report["kinds"]) == {"itrans@m6"}
    for kind in TRUTH:
        assert updated.task_costs[kind] == old.task_costs[kind], kind


def test_refitting_a_variants_dram_rate_runs():
    """The least-squares path with the DRAM rate per block among the free fields (it once raised a TypeError:
    the variant's start values name that field too): a fit that runs and changes only the variant."""
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    truth6 = dataclasses.replace(TRUTH["itrans"], compute_efficiency=0.08, fixed_ns=400.0)
    m = measured(small_h200(task_costs={**old.task_costs, "itrans@m6": truth6}), "tile=6", kinds=("itrans",))
    updated, report = updated_spec(old, m, ("compute_efficiency@itrans@m6", "block_dram_bw_gbps@itrans@m6"),
                                   workers=1, max_evals=12)
    assert set(report["kinds"]) == {"itrans@m6"} and "block_dram_bw_gbps" in report["kinds"]["itrans@m6"]
    assert updated.task_costs["itrans@m6"].block_dram_bw_gbps > 0
    for kind in TRUTH:
        assert updated.task_costs[kind] == old.task_costs[kind], kind


@pytest.mark.parametrize("refit, match", [
    ("compute_speed", "refit field 'compute_speed' is not allowed: want some of"),
    ("compute_speed@gemm", "refit field 'compute_speed@gemm' is not allowed"),
    ("compute_efficiency@gemx", "refit field 'compute_efficiency@gemx' names no task cost of"),
    ("compute_efficiency@gemx@m6", "refit field 'compute_efficiency@gemx@m6' names no task cost of"),
])
def test_bad_refit_fields_are_one_line_errors(refit, match):
    with pytest.raises(SpecError, match=match) as info:
        updated_spec(small_h200(), measured(small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})),
                     (refit,))
    assert "\n" not in str(info.value)


def test_cli_update_spec(tmp_path):
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    spec_file, m_file, out = tmp_path / "old.json", tmp_path / "m.measurements.json", tmp_path / "new.json"
    dump_spec(old, spec_file)
    m_file.write_text(json.dumps(measured(changed_kernels_spec()).as_dict()))
    run = subprocess.run([sys.executable, "-m", "megasim.cli.main", "update-spec", "--spec", str(spec_file),
                          "--measurements", str(m_file), "--refit", "--out", str(out)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "megakernel_claim_ns 1400 -> 980" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "megasim.cli.main", "update-spec", "--spec", str(spec_file),
                          "--measurements", str(m_file), "--refit", "fixed_time", "--out", str(out)],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "fixed_time" in bad.stderr and "Traceback" not in bad.stderr


def test_measurements_without_megakernel_runs_are_a_one_line_error():
    m = measured(small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH}))
    m = dataclasses.replace(m, kind_times=[r for r in m.kind_times if r["kernel"] != "megakernel"
                                           and r.get("timing") != "queued"])
    with pytest.raises(SpecError, match="no traced or single-kind megakernel runs to update from"):
        updated_spec(small_h200(), m, ("megakernel_fixed_ns",))


def test_a_transform_with_mixed_kind_runs_is_refitted_on_them_beside_the_refitted_gemm():
    from megasim.calibration.cases import MIXED_PAIRS, mixed_case
    old = small_h200(task_costs={**get_gpu("H200").task_costs, **TRUTH})
    new = changed_kernels_spec()
    m = measured(new)
    mixed = [{"layer": LAYER, "kind": "+".join(pair),
              "median_ms": simulated_us(simulate(*mixed_case(LAYER, pair), new), "queued") / 1000.0}
             for pair in MIXED_PAIRS]
    m = dataclasses.replace(m, extra={"mixed_kind_rows": mixed})
    updated, report = updated_spec(old, m, ("megakernel_fixed_ns",), workers=1)
    assert report["kinds"]["itrans"]["cases"][-1] == f"{LAYER} itrans+gemm mixed"
    assert report["kinds"]["otrans"]["cases"][-1] == f"{LAYER} gemm+otrans mixed"
    assert not any("mixed" in c for c in report["kinds"]["gemm"]["cases"])
    assert "mixed-kind runs it takes part in" in updated.sources["task_costs.itrans.megakernel_fixed_ns"]
    for kind in TRUTH:      # the mixed runs were simulated with the GEMM as refitted: all recovered
        assert updated.task_cost(kind).megakernel_fixed_ns == pytest.approx(
            new.task_cost(kind).megakernel_fixed_ns, rel=0.05, abs=50.0), kind
        assert report["kinds"][kind]["rms_log_error"] < 0.01, kind
    # beside_gemm=False: the single-kind runs alone
    _, alone = updated_spec(old, m, ("megakernel_fixed_ns",), workers=1, beside_gemm=False)
    assert not any("mixed" in c for c in alone["kinds"]["itrans"]["cases"])
