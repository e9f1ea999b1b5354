"""A calibrated spec moved to another GPU: measured values replaced, task costs and fitted rules kept."""

import json

import pytest

from megasim.calibration.measurements import Measurements
from megasim.calibration.transfer import transferred_spec
from megasim.cli.main import main
from megasim.errors import SpecError
from megasim.hardware import load_spec

CALIBRATED = "megasim/hardware/calibrated/h200.json"


def measurements(**values) -> Measurements:
    return Measurements(device="Test GPU", date="2026-11-25", preset="H100",
                        values={k: {"value": v, "method": f"probe of {k}"} for k, v in values.items()},
                        kind_times=[{"layer": "resnet-1", "kind": "gemm", "tasks": 1, "median_ms": 123.0}])


def test_measured_values_replace_and_costs_stay():
    base = load_spec(CALIBRATED)
    m = measurements(dram_bw_gbps=3000.0, l2_bytes=30_000_000.4, kernel_launch_ns=7000.0,
                     mixed_kinds_sm_factor=0.5)
    spec = transferred_spec(base, m)
    assert spec.dram_bw_gbps == 3000.0 and spec.kernel_launch_ns == 7000.0
    assert spec.l2_bytes == 30_000_000 and isinstance(spec.l2_bytes, int)
    assert "Test GPU" in spec.sources["dram_bw_gbps"] and "probe of dram_bw_gbps" in spec.sources["dram_bw_gbps"]
    # A fitted rule in a measurements record is an earlier calibration's fit, not a property of the GPU.
    assert spec.mixed_kinds_sm_factor == base.mixed_kinds_sm_factor
    assert spec.task_costs == base.task_costs
    # What was not measured keeps its value and its source.
    assert spec.fp32_peak_gflops == base.fp32_peak_gflops
    assert spec.sources["fp32_peak_gflops"] == base.sources["fp32_peak_gflops"]
    assert spec.name == "Test GPU" and base.name in spec.description


def test_unknown_measured_field_is_refused():
    with pytest.raises(SpecError, match="'warp_size' is not a GPU spec field"):
        transferred_spec(load_spec(CALIBRATED), measurements(warp_size=32))


def test_cli_writes_a_spec_that_predicts(tmp_path, capsys):
    mfile = tmp_path / "m.json"
    mfile.write_text(json.dumps(measurements(dram_bw_gbps=3000.0).as_dict()))
    out = tmp_path / "moved.json"
    assert main(["transfer-spec", "--spec", CALIBRATED, "--measurements", str(mfile), "--out", str(out),
                 "--name", "moved"]) == 0
    text = capsys.readouterr().out
    assert "dram_bw_gbps" in text and "3000.0" in text
    spec = load_spec(out)
    assert spec.name == "moved" and spec.dram_bw_gbps == 3000.0
    assert main(["simulate", "N=2,C=16,K=24,H=10,W=9", "--spec", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_us"] > 0


def test_cli_unreadable_measurements_is_one_line(tmp_path, capsys):
    code = main(["transfer-spec", "--spec", CALIBRATED, "--measurements", str(tmp_path / "missing.json"),
                 "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "missing.json" in err and "cannot be read" in err


def test_keep_takes_named_fields_from_the_calibrated_spec():
    base = load_spec(CALIBRATED)
    spec = transferred_spec(base, measurements(dram_bw_gbps=3000.0, l2_bw_gbps=4000.0), keep=("l2_bw_gbps",))
    assert spec.dram_bw_gbps == 3000.0
    assert spec.l2_bw_gbps == base.l2_bw_gbps and spec.sources["l2_bw_gbps"] == base.sources["l2_bw_gbps"]
    assert "kept from" in spec.description and "l2_bw_gbps" in spec.description
    with pytest.raises(SpecError, match="keep='l2_bytes' is not allowed: the measurements hold dram_bw_gbps"):
        transferred_spec(base, measurements(dram_bw_gbps=3000.0), keep=("l2_bytes",))


def test_cli_keep(tmp_path, capsys):
    mfile = tmp_path / "m.json"
    mfile.write_text(json.dumps(measurements(dram_bw_gbps=3000.0, l2_bw_gbps=4000.0).as_dict()))
    out = tmp_path / "moved.json"
    assert main(["transfer-spec", "--spec", CALIBRATED, "--measurements", str(mfile), "--out", str(out),
                 "--keep", "l2_bw_gbps"]) == 0
    assert load_spec(out).l2_bw_gbps == load_spec(CALIBRATED).l2_bw_gbps
    assert "l2_bw_gbps" not in capsys.readouterr().out.split("\n", 1)[1]     # not listed as changed
    assert main(["transfer-spec", "--spec", CALIBRATED, "--measurements", str(mfile), "--out", str(out),
                 "--keep", "warp_size"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "keep='warp_size' is not allowed" in err


def test_sanity_floor_holds_with_a_kept_field():
    """An atomic round trip below the L2 latency is a probe artefact (megasim.calibration.winograd.sanity_rules):
    rejected against the kept L2 latency too."""
    base = load_spec(CALIBRATED)
    spec = transferred_spec(base, measurements(atomic_latency_ns=9.5, l2_latency_ns=140.0), keep=("l2_latency_ns",))
    assert spec.l2_latency_ns == base.l2_latency_ns and spec.atomic_latency_ns == base.l2_latency_ns
    assert "rejected as an artefact" in spec.sources["atomic_latency_ns"]


def test_malformed_measured_values_are_refused():
    base = load_spec(CALIBRATED)
    m = measurements(dram_bw_gbps=3000.0)
    m.values["dram_bw_gbps"] = {"method": "no value"}
    with pytest.raises(SpecError, match="dram_bw_gbps=.* is not allowed: each value is"):
        transferred_spec(base, m)
    m.values["dram_bw_gbps"] = {"value": "fast", "method": "x"}
    with pytest.raises(SpecError, match="dram_bw_gbps='fast' is not allowed: it must be a number"):
        transferred_spec(base, m)
    with pytest.raises(SpecError, match="GPU spec 'moved': dram_bw_gbps=-1.0 must be > 0"):
        transferred_spec(base, measurements(dram_bw_gbps=-1.0), name="moved")
