"""experiments/benchmarks/simulator_speed.py --quick: it runs and writes its CSV and JSON (no timing
assertions: the numbers depend on the machine)."""

from __future__ import annotations

import csv
import json

from experiments.benchmarks import simulator_speed


def test_quick_benchmark_writes_rows_and_metadata(tmp_path, capsys):
    summary = simulator_speed.main(["--quick", "--out", str(tmp_path), "--reference-s", "0.05"])
    rows = list(csv.DictReader((tmp_path / "simulator_speed.csv").open()))
    assert len(rows) == 2 * 2 * 2 * len(simulator_speed.QUICK_LAYERS)      # engines x specs x schedules x layers
    assert {r["engine"] for r in rows} == set(simulator_speed.ENGINES)
    assert {r["spec"] for r in rows} == {"preset", "calibrated"} and {r["schedule"] for r in rows} == {"fused", "nonfused"}
    assert all(int(r["tasks"]) > 0 and float(r["tasks_per_s"]) > 0 for r in rows)
    data = json.loads((tmp_path / "simulator_speed.json").read_text())
    meta = data["meta"]
    for key in ("git_sha", "date_utc", "cpu", "cpu_count", "python", "versions", "summary"):
        assert key in meta
    assert meta["versions"]["simpy"] and meta["versions"]["numpy"]
    assert summary["simpy_events_per_s"] > 0
    for engine in simulator_speed.ENGINES:
        assert summary[f"{engine}_preset_runs"] == summary[f"{engine}_calibrated_runs"] == 4
        assert summary[f"{engine}_preset_ratio"] > 0 and summary[f"{engine}_largest_run_bytes_per_task"] >= 0
    assert summary["engines_agree"] is True                                   # bit-identical predictions
    assert "SimPy reference" in capsys.readouterr().out
