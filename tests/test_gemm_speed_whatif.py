"""The faster-GEMM what-if (experiments.studies.fusion.gemm_speed_whatif): one scaled term, clear errors, a real run."""

from __future__ import annotations

import csv
import json

import pytest

from experiments.studies.fusion import gemm_speed_whatif as wi
from megasim.errors import MegasimError
from megasim.hardware import load_spec


def test_only_the_gemm_efficiency_changes():
    spec = load_spec(wi.SPEC)
    over = wi.faster_gemm(spec, 1.1)
    costs = over["task_costs"]
    assert costs["gemm"].compute_efficiency == pytest.approx(1.1 * spec.task_costs["gemm"].compute_efficiency)
    assert costs["gemm"].fixed_ns == spec.task_costs["gemm"].fixed_ns
    for kind in ("ftrans", "itrans", "otrans", "gemm@t32"):
        assert costs[kind] == spec.task_costs[kind]
    with pytest.raises(MegasimError, match="--factor 2 is not allowed"):
        wi.faster_gemm(spec, 2.0)


def test_bad_arguments_exit_with_one_line(tmp_path):
    with pytest.raises(SystemExit, match="--factor -1"):
        wi.main(["--factor", "-1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--measured 'nope.csv': no such file"):
        wi.main(["--factor", "1.2", "--layers", "resnet-4", "--measured", "nope.csv", "--out", str(tmp_path)])


def test_run_predicts_a_faster_pipeline_and_joins_the_measurement(tmp_path):
    bench = tmp_path / "bench.csv"
    with bench.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["layer", "impl", "median_ms", "status"])
        w.writerows([["resnet-4", "nonfused", "0.150", "ok"], ["resnet-4", "fused_sweep_best", "0.160", "ok"]])
    rows = wi.main(["--factor", "1.2", "--layers", "resnet-4", "--workers", "1", "--measured", str(bench),
                    "--out", str(tmp_path)])
    (r,) = rows
    assert r["nonfused_us_fast"] < r["nonfused_us_fp32"] and r["best_us_fast"] < r["best_us_fp32"]
    assert r["speedup_best_measured"] == pytest.approx(0.150 / 0.160)
    meta = json.loads((tmp_path / "gemm_speed_whatif.json").read_text())["meta"]
    assert meta["gemm_compute_efficiency_factor"] == 1.2
