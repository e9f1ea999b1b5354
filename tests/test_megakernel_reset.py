"""The megakernel's per-run reset (GPUSpec.megakernel_reset_ns): the counter and control reset kernel the
executor issues before each megakernel launch, paid on the device before the launch's first blocks; a plain
kernel's launch (the non-fused pipeline) pays none; derived by the calibration from its queued-launch probe."""

import dataclasses

import pytest

from megasim.calibration.measurements import Measurements
from megasim.calibration.winograd import measured_base, reset_entry
from megasim.errors import SpecError
from megasim.hardware import get_gpu
from megasim.hardware.files import dump_spec, load_spec
from megasim.plan import Plan, build
from megasim.sim import SimOptions, simulate
from megasim.workloads import parse_layer

PROBLEM = parse_layer("N=2,C=16,K=32,H=14,W=14")
RESET_NS = 2500.0


def _predict(spec, schedule: str, engine: str = "compiled"):
    graph, sched, _ = build(PROBLEM, Plan(schedule), spec)
    return simulate(graph, sched, spec, SimOptions(engine=engine))


def _queued(reset: float | None):
    return dataclasses.replace(get_gpu("H100"), queued_launch_ns=3000.0, megakernel_launch_ns=9000.0,
                               megakernel_reset_ns=reset)


@pytest.mark.parametrize("engine", ["compiled", "simpy"])
def test_a_fused_run_starts_its_megakernel_after_the_reset(engine):
    without, with_reset = (_predict(_queued(r), "fused", engine) for r in (None, RESET_NS))
    assert [l.start_ns for l in with_reset.launches] == pytest.approx(
        [l.start_ns + RESET_NS for l in without.launches])
    assert with_reset.predicted_ns == pytest.approx(without.predicted_ns + RESET_NS)


@pytest.mark.parametrize("engine", ["compiled", "simpy"])
def test_the_non_fused_pipeline_has_no_reset(engine):
    without, with_reset = (_predict(_queued(r), "nonfused", engine) for r in (None, RESET_NS))
    assert with_reset.predicted_ns == without.predicted_ns


def test_a_run_on_an_idle_gpu_holds_the_reset_in_the_megakernel_launch_cost():
    spec = dataclasses.replace(_queued(RESET_NS), queued_launch_ns=None)
    assert spec.reset_ns(True, first=True) == 0.0
    assert spec.reset_ns(True, first=False) == RESET_NS
    assert spec.reset_ns(False, first=False) == 0.0
    without = _predict(dataclasses.replace(spec, megakernel_reset_ns=None), "fused")
    assert _predict(spec, "fused").predicted_ns == without.predicted_ns


def test_the_calibration_derives_it_from_the_queued_probe():
    values = {"queued_launch_ns": {"value": 3500.0, "method": "empty kernel, queued"}}
    entry = reset_entry(values, {"occupancy_round": {"queued_megakernel_launch_ns": 6400.0}})
    assert entry["value"] == pytest.approx(2900.0)
    assert "6400 ns" in entry["method"] and "3500 ns" in entry["method"]
    assert reset_entry(values, {}) is None
    assert reset_entry({}, {"occupancy_round": {"queued_megakernel_launch_ns": 6400.0}}) is None
    assert reset_entry(values, {"occupancy_round": {"queued_megakernel_launch_ns": 3000.0}})["value"] == 0.0
    m = Measurements(device="GPU", date="2026-11-28", preset="H100", values=values,
                     extra={"occupancy_round": {"queued_megakernel_launch_ns": 6400.0}})
    spec = measured_base(get_gpu("H100"), m)
    assert spec.megakernel_reset_ns == pytest.approx(2900.0)
    assert "queued probe" in spec.sources["megakernel_reset_ns"]


def test_a_measured_value_wins_over_the_derived_one():
    values = {"queued_launch_ns": {"value": 3500.0, "method": "queued"},
              "megakernel_reset_ns": {"value": 1000.0, "method": "measured directly"}}
    m = Measurements(device="GPU", date="2026-11-28", preset="H100", values=values,
                     extra={"occupancy_round": {"queued_megakernel_launch_ns": 6400.0}})
    assert measured_base(get_gpu("H100"), m).megakernel_reset_ns == 1000.0


def test_the_field_is_checked_and_round_trips(tmp_path):
    with pytest.raises(SpecError, match="megakernel_reset_ns"):
        dataclasses.replace(get_gpu("H100"), megakernel_reset_ns=-1.0)
    spec = _queued(RESET_NS)
    path = tmp_path / "spec.json"
    dump_spec(spec, path)
    assert load_spec(path).megakernel_reset_ns == RESET_NS
    dump_spec(_queued(None), path)
    assert load_spec(path).megakernel_reset_ns is None
