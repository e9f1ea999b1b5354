"""experiments.studies.transfer.transfer_h100 (the H200's calibration predicting the H100's measured runs) and
experiments.studies.fusion.fusion_vs_dram (the fused/non-fused speedup as DRAM bandwidth falls), on small
committed inputs under tests/data/."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

DATA = Path(__file__).resolve().parent / "data"
# resnet-1's and vgg-1's non-fused and best fused medians of the F(4x4) benches on both GPUs
BENCHES = {"NVIDIA H200": str(DATA / "h200_bench_5a57591_winograd_bench.csv"),
           "NVIDIA H100": str(DATA / "h100_bench_5a57591_winograd_bench.csv")}


def test_measured_speedups_by_hand(tmp_path):
    from experiments.studies.fusion.fusion_vs_dram import geomean, measured_speedups
    path = tmp_path / "bench.csv"
    rows = [("a", "nonfused", 2.0, "ok"), ("a", "fused_sweep_best", 1.0, "ok"),
            ("b", "nonfused", 1.0, "ok"), ("b", "fused_sweep_best", 2.0, "ok"),
            ("c", "nonfused", 1.0, "ok"), ("c", "fused_sweep_best", 0.5, "error x")]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["layer", "impl", "median_ms", "status"])
        w.writerows(rows)
    assert measured_speedups(str(path)) == {"a": 2.0, "b": 0.5}     # c's fused run failed: no speedup
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)


@pytest.mark.slow
def test_fusion_vs_dram_slower_memory_favours_fusion(tmp_path, capsys, monkeypatch):
    """On a layer whose data outgrows the L2 (resnet-1 at batch 32), the model's fused/non-fused speedup
    rises as DRAM bandwidth falls: the fused schedule moves fewer DRAM bytes. (Not on every layer: on
    one that fits the L2 both schedules write the same bytes back, and the fused one gains nothing.)
    The files carry provenance, with the measured benches read (their layers are not the one run here,
    so no measured layer enters the geometric means)."""
    from experiments.studies.fusion import fusion_vs_dram
    from experiments.studies.fusion.fusion_vs_dram import main
    monkeypatch.setattr(fusion_vs_dram, "MEASURED", BENCHES)
    layer = "N=32,C=64,K=64,H=56,W=56"
    summary = main(["--layers", layer, "--bandwidths", "4000,500", "--workers", "1", "--out", str(tmp_path)])
    fast, slow = summary
    assert fast["dram_bw_gbps"] == 4000.0 and slow["dram_bw_gbps"] == 500.0
    assert slow["speedup_best_geomean"] > fast["speedup_best_geomean"]
    rows = list(csv.DictReader((tmp_path / "fusion_vs_dram.csv").open()))
    assert {r["layer"] for r in rows} == {layer} and len(rows) == 2
    assert all(float(r["dram_mb_best"]) < float(r["dram_mb_nonfused"]) for r in rows)
    meta = json.loads((tmp_path / "fusion_vs_dram_summary.json").read_text())["meta"]
    assert meta["git_sha"] and meta["bandwidths_gbps"] == [4000.0, 500.0]
    assert [(m["device"], m["file"], m["layers"]) for m in meta["measured_geomeans"]] == [
        (device, path, 0) for device, path in BENCHES.items()]
    assert (tmp_path / "fusion_vs_dram.png").stat().st_size > 0 and (tmp_path / "fusion_vs_dram.pdf").exists()
    (tmp_path / "fusion_vs_dram.png").unlink()
    assert len(main(["--plot-only", "--out", str(tmp_path)])) == 2       # redrawn from the CSVs alone
    assert (tmp_path / "fusion_vs_dram.png").exists()


def test_fusion_vs_dram_bad_input_is_one_line(tmp_path):
    from experiments.studies.fusion.fusion_vs_dram import main
    with pytest.raises(SystemExit, match="--bandwidths 'fast' is not allowed"):
        main(["--bandwidths", "fast"])
    for bad in ("0,100", "nan", "inf,100"):
        with pytest.raises(SystemExit, match="positive, finite"):
            main(["--bandwidths", bad])
    with pytest.raises(SystemExit, match="holds no fusion_vs_dram results"):
        main(["--plot-only", "--out", str(tmp_path / "nothing")])


@pytest.mark.slow
def test_transfer_h100_on_two_measured_rows(tmp_path, capsys, monkeypatch):
    """Two of the H100's measured rows (resnet-4, non-fused and the default fused map; from
    tests/data/h100_transfer/, whose README names the results files), predicted by the three specs: the rows
    are the committed ones, the transferred spec's predictions are what
    `megasim simulate --spec h100_from_h200.json` gives, the H200 spec predicts the non-fused pipeline
    faster than the transfer (more DRAM bandwidth), and keeping the H200's L2 bandwidth changes the
    fused prediction."""
    from experiments.studies.transfer import transfer_h100
    from megasim.calibration.validation import read_rows, write_rows
    # the H100's microbenchmark values (the l2_kept spec's source), and its measured validation runs of resnet-4
    monkeypatch.setattr(transfer_h100, "H100_MEASUREMENTS", str(DATA / "h100_transfer/h100.measurements.json"))
    rows = [r for r in read_rows(DATA / "h100_transfer/validation_measured_resnet4.csv")
            if r["layer"] == "resnet-4" and r["label"] in ("nonfused", "a1_default")]
    assert len(rows) == 2
    # Measured on kernels (b3d0478) whose transforms had other registers than today's: the rows are data for
    # the transfer pipeline here, so their TaskGraph hashes (which `megasim validate` matches) are dropped.
    rows = [{**r, "taskgraph_hash": ""} for r in rows]
    measured = tmp_path / "measured.csv"
    write_rows(rows, measured)
    table = transfer_h100.main(["--measured", str(measured), "--out", str(tmp_path), "--workers", "1"])
    overall = {r["spec"]: r for r in table if r["layer"] == "all"}
    assert set(overall) == {"h200", "transfer", "transfer_l2_kept"}
    assert all(r["points"] == 2 and 0 < r["mape"] < 0.5 for r in overall.values())
    per_spec = {name: {r["label"]: float(r["predicted_us"]) for r in read_rows(tmp_path / name / "validation.csv")}
                for name in overall}
    from megasim.hardware import load_spec
    from megasim.plan import Plan, predict
    from megasim.workloads import parse_layer
    spec = load_spec(transfer_h100.TRANSFER_SPEC)
    nonfused = next(r for r in rows if r["label"] == "nonfused")
    want = predict(parse_layer("resnet-4"), spec, Plan.parse(nonfused["schedule"], nonfused["params"]))[0].predicted_us
    assert per_spec["transfer"]["nonfused"] == pytest.approx(want)
    # The H100 has less DRAM bandwidth than the H200: the transfer predicts the non-fused pipeline slower.
    assert per_spec["transfer"]["nonfused"] > per_spec["h200"]["nonfused"]
    assert not math.isclose(per_spec["transfer"]["a1_default"], per_spec["transfer_l2_kept"]["a1_default"])
