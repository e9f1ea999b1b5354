"""experiments.benchmarks.bench_vs_model: a winograd_bench CSV's default-mapping rows predicted by a spec (CPU only)."""

from __future__ import annotations

import csv
import json

import pytest

from experiments.benchmarks import bench_vs_model as bvm
from megasim.errors import MegasimError

LAYER = "N=8,C=8,K=16,H=24,W=24"


def _mapping(tile):
    from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd
    from megasim.algorithms.winograd.algorithm1 import recommended_params
    from megasim.workloads import parse_layer
    p = recommended_params(lower_winograd(parse_layer(LAYER), WinogradConfig(m=tile, transform_pairs_per_thread=4)))
    return {"D_IG": p.d_ig, "D_GO": p.d_go, "M": p.m}


def _bench(tmp_path, tile=6, status="ok"):
    path = tmp_path / "winograd_bench.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["layer", "impl", "median_ms", "status"])
        w.writeheader()
        for impl, ms in (("fused", "0.020"), ("nonfused", "0.030"), ("cudnn_best_fp32", "0.010")):
            w.writerow({"layer": LAYER, "impl": impl, "median_ms": ms, "status": status})
    meta = {"meta": {"per_layer": {LAYER: {"tile": tile, "fused_default": _mapping(tile)}}}}
    path.with_suffix(".json").write_text(json.dumps(meta))
    return path


def test_the_tile_of_a_bench_that_recorded_it_only_in_its_config(tmp_path):
    path = _bench(tmp_path, tile=6)
    meta = json.loads(path.with_suffix(".json").read_text())
    entry = meta["meta"]["per_layer"][LAYER]
    entry["winograd_config"] = {"m": entry.pop("tile")}
    path.with_suffix(".json").write_text(json.dumps(meta))
    assert {r["tile"] for r in bvm.bench_rows(path)} == {6}


def test_a_bench_at_other_pairs_per_thread_is_predicted_at_them(tmp_path):
    path = _bench(tmp_path, tile=6)
    meta = json.loads(path.with_suffix(".json").read_text())
    entry = meta["meta"]["per_layer"][LAYER]
    entry["winograd_config"] = {"m": 6, "transform_pairs_per_thread": 2}
    entry["winograd_config_nonfused"] = {"m": 6, "transform_pairs_per_thread": 2}
    path.with_suffix(".json").write_text(json.dumps(meta))
    params = {r["schedule"]: r["params"] for r in bvm.bench_rows(path)}
    assert params["fused"].startswith("tile=6,pairs=2,D_IG=") and params["nonfused"] == "tile=6,pairs=2"


def test_bench_rows_carry_the_tile_and_the_default_mapping(tmp_path):
    rows = bvm.bench_rows(_bench(tmp_path))
    m = _mapping(6)
    assert [(r["schedule"], r["tile"], r["params"], r["measured_us"]) for r in rows] == [
        ("fused", 6, f"tile=6,D_IG={m['D_IG']},D_GO={m['D_GO']},M={m['M']}", 20.0), ("nonfused", 6, "tile=6", 30.0)]


def test_rows_are_predicted_and_compared(tmp_path):
    rows = bvm.compare(bvm.predict_rows(bvm.bench_rows(_bench(tmp_path, tile=5)),
                                        "megasim/hardware/calibrated/h200.json", "h200", workers=1))
    assert len(rows) == 2 and all(r["predicted_ms"] > 0 for r in rows)
    for r in rows:
        assert r["error"] == pytest.approx(r["predicted_ms"] / r["measured_ms"] - 1)
    stats = bvm.summary(rows)
    assert stats["fused, tile 5-7"]["rows"] == 1 and "fused, tile 4" not in stats


def test_an_archived_bench_with_its_json_gzipped(tmp_path):
    import gzip
    path = _bench(tmp_path, tile=7)
    meta = path.with_suffix(".json")
    path.with_suffix(".json.gz").write_bytes(gzip.compress(meta.read_bytes()))
    meta.unlink()
    assert {r["tile"] for r in bvm.bench_rows(path)} == {7}


def test_unreadable_or_empty_bench_is_one_line(tmp_path, capsys):
    with pytest.raises(MegasimError, match="cannot be read as a winograd_bench CSV"):
        bvm.bench_rows(tmp_path / "missing.csv")
    with pytest.raises(MegasimError, match="no ok fused / nonfused rows"):
        bvm.bench_rows(_bench(tmp_path, status="error x"))
    assert bvm.main(["--bench", str(tmp_path / "missing.csv"), "--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("error: --bench") and "\n" not in out
