"""experiments.benchmarks.winograd_summary: the headline ratios of a Winograd bench CSV, by the docs' definitions."""

import csv
import math

import pytest

from experiments.benchmarks import winograd_summary

ROWS = [  # two layers; ms
    ("a", "fused", 2.0), ("a", "fused_sweep_best", 1.6), ("a", "fused_blockidx_best", 1.5), ("a", "nonfused", 1.8),
    ("a", "cudnn_best_fp32", 3.0), ("a", "cudnn_winograd_nonfused", 2.4), ("a", "our_gemm_phase", 1.0),
    ("a", "cublas_gemm_phase", 0.8),
    ("b", "fused", 1.0), ("b", "fused_sweep_best", 1.0), ("b", "nonfused", 0.5), ("b", "cudnn_best_fp32", 1.2),
]


def _write(tmp_path, rows, status="ok"):
    path = tmp_path / "winograd_bench.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["layer", "impl", "median_ms", "status"])
        for layer, impl, ms in rows:
            w.writerow([layer, impl, ms, status if impl == "fused" and layer == "b" else "ok"])
    return path


def test_ratios_follow_the_definitions():
    rows = [{"layer": l, "impl": i, "median_ms": str(ms), "status": "ok"} for l, i, ms in ROWS]
    s = winograd_summary.summarize(rows)
    best = s["fused best / cuDNN best FP32"]
    # layer a: min(1.6, 1.5) against min(3.0, 2.4); layer b: 1.0 against 1.2
    assert best["per_layer"] == pytest.approx({"a": 2.4 / 1.5, "b": 1.2})
    assert best["geomean"] == pytest.approx(math.sqrt(2.4 / 1.5 * 1.2))
    assert s["fused best / our non-fused"]["per_layer"] == pytest.approx({"a": 1.8 / 1.5, "b": 0.5})
    gemm = s["GEMM phase / cuBLAS (cuBLAS time over ours)"]
    assert gemm["layers"] == 1 and gemm["geomean"] == pytest.approx(0.8)      # layer b has no GEMM rows


def test_rows_not_ok_do_not_count(tmp_path, capsys):
    path = _write(tmp_path, ROWS, status="error timeout")
    assert winograd_summary.main([str(path), "--out", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "fused default / cuDNN best FP32                  1.200x over 1 layers" in out   # only a: 2.4 / 2.0


def test_a_file_that_is_not_a_bench_csv_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    assert winograd_summary.main([str(bad)]) == 2
    assert winograd_summary.main([str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "cannot be read as a winograd_bench CSV" in err
