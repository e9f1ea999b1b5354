"""The probe scripts' shared driver (experiments.studies.sparse_model.conv_occupancy.probe_main), through the wave-tail
probe: the committed predictions joined with the H200's times are what the code computes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the H200's wave-tail measurements and their committed join with the spec's predictions (tests/data/README.md)
TAIL = ROOT / "tests/data/h200_wave_tail"


def test_wave_tail_reproduces_its_committed_joined_rows(tmp_path, capsys):
    from experiments.studies.dispatch.wave_tail import main

    rows = main(["--measured", str(TAIL / "wave_tail_measured.csv"), "--out", str(tmp_path)])
    committed = {int(r["seed"]): r for r in csv.DictReader((TAIL / "wave_tail_joined.csv").open())}
    assert len(rows) == len(committed) == 12
    for r in rows:
        c = committed[r["seed"]]
        assert r["predicted_us"] == pytest.approx(float(c["predicted_us"]), rel=1e-9)
        assert r["measured_us"] == pytest.approx(float(c["measured_us"]))
        assert r["error"] == pytest.approx(r["predicted_us"] / r["measured_us"] - 1)
        if r["wave_fraction"] == 1.0:
            assert r["predicted_rel_wave"] == r["measured_rel_wave"] == 1.0
    assert (tmp_path / "wave_tail.csv").exists() and (tmp_path / "wave_tail.json").exists()
    out = capsys.readouterr().out
    assert "pred/wave" in out and len(out.strip().splitlines()) == 13


def test_probe_dispatch_plans_time_the_bench_best_under_both_dispatches(tmp_path):
    """gpu.probes.dispatch (GPU only) reads each layer's fused_sweep_best from a bench JSON and times it
    with ticket and blockIdx dispatch beside the non-fused pipeline; the plans carry the GEMM math."""
    from gpu.probes.dispatch import best_params, plans_for
    bench = tmp_path / "winograd_bench.json"
    bench.write_text(json.dumps({"meta": {"per_layer": {
        "resnet-1": {"fused_sweep_best": {"D_IG": 992, "D_GO": 2816, "M": 16}},
        "vgg-1": {"fused_sweep_best": None}}}}))
    assert best_params(bench) == {"resnet-1": "D_IG=992,D_GO=2816,M=16"}
    plans = dict(plans_for("D_IG=992,D_GO=2816,M=16", "3xtf32"))
    assert list(plans) == ["fused_ticket", "fused_blockidx", "nonfused"]
    assert [plans[k].dispatch for k in ("fused_ticket", "fused_blockidx")] == ["ticket", "blockidx"]
    assert (plans["fused_blockidx"].params.d_ig, plans["fused_blockidx"].params.d_go, plans["fused_blockidx"].params.m) == (992, 2816, 16)
    assert {p.params.gemm_math for p in plans.values()} == {"3xtf32"} and plans["nonfused"].schedule == "nonfused"
    assert {p.params.gemm_math for _, p in plans_for("D_IG=1,D_GO=2,M=1", "fp32")} == {"fp32"}
    persistent = dict(plans_for("D_IG=1,D_GO=2,M=1", "fp32", persistent_blocks=4))["fused_persistent"]
    assert (persistent.style, persistent.blocks_per_sm, persistent.dispatch) == ("persistent", 4, "ticket")


def test_bench_sweep_model_predicts_the_benchs_own_points(monkeypatch):
    """At the bench's tile and pairs: the sweep's points are those of the graph the bench swept."""
    from experiments.benchmarks import bench_sweep_model as bsm
    from experiments.benchmarks.winograd_bench import sweep_candidates
    from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd
    from megasim.workloads import parse_layer
    monkeypatch.setattr(bsm, "parallel_map", lambda fn, jobs, workers: jobs)
    layer = "N=4,C=8,K=8,H=20,W=20"
    jobs = bsm.predict_layers("spec.json", [layer], "small", "fp32", 1, {layer: (7, 2)})
    plans = [plan for _, _, plan in jobs]
    assert plans[0].schedule == "nonfused" and plans[0].params.tile == 7
    graph = lower_winograd(parse_layer(layer), WinogradConfig(m=7, transform_pairs_per_thread=2))
    assert [(p.params.d_ig, p.params.d_go, p.params.m) for p in plans[1:]] == [(c.d_ig, c.d_go, c.m) for c in sweep_candidates(graph, "small")]
    assert {(p.params.tile, p.params.transform_pairs_per_thread, p.schedule) for p in plans[1:]} == {(7, 2, "fused")}


def test_bench_sweep_model_leaves_a_layer_without_rank_correlation_out_of_the_mean(tmp_path, capsys):
    """A layer whose predictions are all equal has no Spearman rank correlation (nan): the mean skips it."""
    from experiments.benchmarks import bench_sweep_model as bsm
    from experiments.provenance import write_results
    pts = [{"layer": "resnet-4", "schedule": "nonfused", "valid": True, "predicted_us": 50.0, "D_IG": "", "D_GO": "",
            "M": ""}]
    pts += [{"layer": "resnet-4", "schedule": "fused", "valid": True, "predicted_us": 40.0, "D_IG": d, "D_GO": 9,
             "M": 1} for d in (1, 2, 3)]
    write_results(pts, tmp_path / "pts", "points", {"script": "test"})
    sweep = [{"D_IG": d, "D_GO": 9, "M": 1, "median_ms": ms, "status": "ok"} for d, ms in ((1, 0.05), (2, 0.04), (3, 0.045))]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"meta": {"per_layer": {"resnet-4": {"tile": 4, "fused_sweep": sweep}}}}))
    bsm.main(["--layers", "resnet-4", "--points", str(tmp_path / "pts" / "points.csv"), "--measured", str(bench),
              "--spec", "megasim/hardware/calibrated/h200.json", "--out", str(tmp_path / "out")])
    assert "Spearman): mean - over 0 layers; mean |error| of the points 10.4% over 1" in capsys.readouterr().out


def test_bench_sweep_model_judges_the_models_pick_on_measured_points(tmp_path):
    """experiments.benchmarks.bench_sweep_model: the pick is the fastest predicted valid fused point; its regret is its
    measured median over the best measured one; bad inputs are one-line exits."""
    from experiments.benchmarks import bench_sweep_model as bsm
    points = [{"layer": "L", "schedule": "nonfused", "valid": True, "predicted_us": 100.0, "D_IG": None,
               "D_GO": None, "M": None},
              {"layer": "L", "schedule": "fused", "valid": True, "predicted_us": 90.0, "D_IG": 8, "D_GO": 44, "M": 1},
              {"layer": "L", "schedule": "fused", "valid": True, "predicted_us": 95.0, "D_IG": 16, "D_GO": 88, "M": 2},
              {"layer": "L", "schedule": "fused", "valid": False, "predicted_us": float("nan"), "D_IG": 1,
               "D_GO": 1, "M": 1}]
    bench = tmp_path / "winograd_bench.json"
    bench.write_text(json.dumps({"meta": {"per_layer": {"L": {"fused_sweep": [
        {"D_IG": 8, "D_GO": 44, "M": 1, "median_ms": 0.110, "status": "ok"},
        {"D_IG": 16, "D_GO": 88, "M": 2, "median_ms": 0.100, "status": "ok"},
        {"D_IG": 1, "D_GO": 1, "M": 1, "status": "error MappingError"}]}}}}))
    (row,) = bsm.summarise(points, bsm.measured_sweeps(bench))
    assert row["choice"] == "D_IG=8 D_GO=44 M=1" and row["speedup_predicted"] == round(100 / 90, 4)
    assert row["best_measured"] == "D_IG=16 D_GO=88 M=2" and row["regret"] == round(0.110 / 0.100 - 1, 4)
    assert "spearman" not in row                     # two measured points: no rank correlation
    points.append({"layer": "L", "schedule": "fused", "valid": True, "predicted_us": 99.0, "D_IG": 32, "D_GO": 88,
                   "M": 2})
    meta = json.loads(bench.read_text())
    meta["meta"]["per_layer"]["L"]["fused_sweep"].append({"D_IG": 32, "D_GO": 88, "M": 2, "median_ms": 0.120,
                                                          "status": "ok"})
    bench.write_text(json.dumps(meta))
    (row,) = bsm.summarise(points, bsm.measured_sweeps(bench))
    # predicted 90 < 95 < 99, measured 110 > 100 < 120: ranks (1, 2, 3) against (2, 1, 3)
    assert row["spearman"] == 0.5
    assert row["points_mape"] == round((abs(90 / 110 - 1) + abs(95 / 100 - 1) + abs(99 / 120 - 1)) / 3, 4)
    with pytest.raises(SystemExit, match="^--bench-tiles needs --measured"):
        bsm.main(["--layers", "resnet-4", "--bench-tiles"])
    assert bsm.bench_implementations(bench) == {"L": (4, None)}
    meta["meta"]["per_layer"]["L"].update(tile=7, winograd_config={"m": 7, "transform_pairs_per_thread": 2})
    bench.write_text(json.dumps(meta))
    assert bsm.bench_implementations(bench) == {"L": (7, 2)}
    import gzip                                       # an archived bench: its JSON gzipped
    archived = tmp_path / "archived.json.gz"
    archived.write_bytes(gzip.compress(bench.read_bytes()))
    assert bsm.bench_implementations(archived) == {"L": (7, 2)}
    assert bsm.measured_sweeps(archived) == bsm.measured_sweeps(bench)
    with pytest.raises(SystemExit, match="^--layers: unknown layer 'nope'"):
        bsm.main(["--layers", "nope"])
    with pytest.raises(SystemExit, match="^--measured '.*missing.json': no such file$"):
        bsm.main(["--layers", "resnet-4", "--measured", str(tmp_path / "missing.json")])
