"""The batch-extrapolation study runs and writes what docs/findings.md cites."""

import json

from experiments.studies.fast_mode import batch_extrapolation


def test_quick_run_writes_rows_and_a_summary(tmp_path):
    assert batch_extrapolation.main(["--quick", "--out", str(tmp_path), "--batches", "4,8"]) == 0
    data = json.loads((tmp_path / "batch_extrapolation.json").read_text())
    rows = data["rows"]
    assert {r["schedule"] for r in rows} == {"fused", "nonfused"} and len(rows) == 6
    for r in rows:
        expected = r["t_n2_us"] + (r["t_n2_us"] - r["t_n1_us"]) * (r["batch"] - 8) / 4
        assert abs(r["extrapolated_us"] - expected) < 1e-2
        assert r["small_tasks"] < r["exact_tasks"]
    assert set(data["meta"]["summary"]) == {"fused", "nonfused"} and data["meta"]["git_sha"]
