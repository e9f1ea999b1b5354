"""The DRAM-contention experiment (issue 3): the hog's sizing, the measured-row readers, and the model side.

The hog itself (gpu.probes.dram_hog_kernel.DramHog) needs a GPU: its sizing rule is pure and tested here; its protocol
(start poll, census, coverage marks) was exercised on the H200 (the DRAM hog runs docs/findings.md cites)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpu.probes.dram_hog_kernel import REGISTERS_PER_SM, hog_threads, registers_left
from gpu.errors import KernelInputError


def test_hog_fills_the_register_file():
    """60-64 registers: 32 warps of 2,048 registers fill the 64K file, nothing is left for another block.
    Fewer registers leave room (the block is capped at 1,024 threads); more registers mean fewer warps."""
    for regs in (57, 60, 63, 64):
        assert hog_threads(regs) == 1024 and registers_left(regs) == 0
    assert hog_threads(40) == 1024 and registers_left(40) == REGISTERS_PER_SM - 32 * 1280
    assert hog_threads(128) == 512 and registers_left(128) == 0
    assert hog_threads(100) == 608 and registers_left(100) == REGISTERS_PER_SM - 19 * 3328   # 3,200 rounded up to 256s
    with pytest.raises(KernelInputError, match="regs_per_thread=0 is not allowed"):
        hog_threads(0)


def _write(path, rows):
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, restval="")
        w.writeheader()
        w.writerows(rows)
    return path


def _measured_rows():
    rows = [{"layer": "", "hog_sms": 0, "impl": "copy_gbps", "detail": "4000.0", "dram_latency_ns": 300.0,
             "l2_latency_ns": 150.0, "atomic_latency_ns": 10.0},
            {"layer": "", "hog_sms": 64, "impl": "copy_gbps", "detail": "1000.0 hog_gbps=3000.0",
             "dram_latency_ns": 900.0, "l2_latency_ns": 600.0, "atomic_latency_ns": 20.0}]
    for s, (nf, fb) in ((0, (1.0, 1.25)), (64, (3.0, 2.0))):
        rows += [{"layer": "a", "hog_sms": s, "impl": "nonfused", "median_ms": nf},
                 {"layer": "a", "hog_sms": s, "impl": "fused", "median_ms": 9.0},
                 {"layer": "a", "hog_sms": s, "impl": "fused_sweep_best", "median_ms": fb}]
    return rows


def test_readers_of_measured_rows():
    from experiments.studies.fusion.winograd_contention import (copy_bandwidths, format_measured, latencies_of, speedups)
    rows = _measured_rows()
    assert speedups(rows) == {("a", 0): pytest.approx(0.8), ("a", 64): pytest.approx(1.5)}
    assert copy_bandwidths(rows) == {0: 4000.0, 64: 1000.0}
    assert copy_bandwidths([{"hog_sms": 32, "copy_gbps": "2555.4"}]) == {32: 2555.4}    # the probe's CSV
    assert latencies_of(rows)[64] == {"dram_latency_ns": 900.0, "l2_latency_ns": 600.0, "atomic_latency_ns": 20.0}
    assert latencies_of([{"hog_sms": 0, "copy_gbps": 1.0}]) == {}
    table = format_measured(rows)
    assert "0.800 1.500" in table and table.splitlines()[-1].startswith("geomean")


def test_predict_bad_input_is_one_line(tmp_path):
    from experiments.studies.fusion.winograd_contention import main, predict
    with pytest.raises(SystemExit, match="needs --hog CSV"):
        predict([])
    with pytest.raises(SystemExit, match="does not exist"):
        predict(["--hog", str(tmp_path / "none.csv")])
    hog = _write(tmp_path / "hog.csv", [{"hog_sms": 0, "copy_gbps": 4000.0}, {"hog_sms": 64, "copy_gbps": 1000.0}])
    with pytest.raises(SystemExit, match=r"--sms \[32\] not in"):
        predict(["--hog", str(hog), "--sms", "0", "32"])
    with pytest.raises(SystemExit, match="--latency: .* has latency probes for S = \\[\\]"):
        predict(["--hog", str(hog), "--latency"])
    assert main(["nothing"]) == 2


@pytest.mark.slow
def test_predict_scarce_dram_and_slow_latency(tmp_path):
    """A layer whose data outgrows the L2, predicted beside a hog on 64 SMs: the bandwidth rule gives the
    spec a quarter of its bandwidth and 68 SMs, and the fused/non-fused speedup rises (fusion moves fewer
    DRAM bytes); the latency rule also triples the DRAM latency and quadruples the L2's, and both schedules
    slow down further. The measured speedups are joined, the files carry provenance."""
    from experiments.studies.fusion.winograd_contention import predict
    layer = "N=32,C=64,K=64,H=56,W=56"
    rows = _measured_rows()
    for r in rows:
        if r.get("layer") == "a":
            r["layer"] = layer
    measured = _write(tmp_path / "measured.csv", rows)
    bw = predict(["--hog", str(measured), "--layers", layer, "--workers", "1", "--measured", str(measured),
                  "--out", str(tmp_path)])
    lat = predict(["--hog", str(measured), "--layers", layer, "--workers", "1", "--latency", "--out", str(tmp_path)])
    assert [r["sm_count"] for r in bw] == [132, 68] and bw[1]["dram_bw_gbps"] == pytest.approx(bw[0]["dram_bw_gbps"] / 4, rel=1e-3)
    assert bw[1]["predicted_geomean"] > bw[0]["predicted_geomean"]
    assert bw[0]["measured_geomean"] == pytest.approx(0.8) and bw[1]["measured_geomean"] == pytest.approx(1.5)
    by_s = {}
    for name in ("winograd_contention_predicted", "winograd_contention_latency_predicted"):
        by_s[name] = {int(r["hog_sms"]): r for r in csv.DictReader((tmp_path / f"{name}.csv").open())}
    plain, slow = by_s["winograd_contention_predicted"], by_s["winograd_contention_latency_predicted"]
    assert float(slow[0]["nonfused_us"]) == pytest.approx(float(plain[0]["nonfused_us"]))   # S=0: the spec as is
    assert float(slow[64]["nonfused_us"]) > float(plain[64]["nonfused_us"])
    assert float(slow[64]["best_us"]) > float(plain[64]["best_us"])
    assert lat[1]["hog_sms"] == 64
    meta = json.loads((tmp_path / "winograd_contention_latency_predicted.json").read_text())["meta"]
    assert meta["git_sha"] and "latency" in meta["latency_rule"]


def test_predict_scale_bad_input_is_one_line(tmp_path):
    from experiments.studies.fusion.winograd_contention import predict
    hog = _write(tmp_path / "hog.csv", [{"hog_sms": 0, "copy_gbps": 4000.0}, {"hog_sms": 64, "copy_gbps": 1000.0}])
    with pytest.raises(SystemExit, match="--scale 'l2_bytes=half' is not allowed"):
        predict(["--hog", str(hog), "--scale", "l2_bytes=half"])
    for bad in ("no_such_field=2", "l2_bytes=0", "name=2"):
        with pytest.raises(SystemExit, match="FIELD must be a numeric spec field"):
            predict(["--hog", str(hog), "--scale", bad])


def test_littles_law_scales_every_per_block_dram_cap():
    """Same bytes in flight, three times the latency: every per-block DRAM cap a third; kinds without a
    cap keep none; nothing else changes."""
    import dataclasses

    from experiments.studies.fusion.winograd_contention import SPEC, block_rate_caps
    from megasim.hardware import load_spec
    spec = load_spec(SPEC)
    slow = dataclasses.replace(spec, **block_rate_caps(spec, 1 / 3))
    assert slow.tb_max_dram_bw_gbps == pytest.approx(spec.tb_max_dram_bw_gbps / 3)
    for kind, cost in spec.task_costs.items():
        new = slow.task_costs[kind]
        if cost.block_dram_bw_gbps is None:
            assert new.block_dram_bw_gbps is None
        else:
            assert new.block_dram_bw_gbps == pytest.approx(cost.block_dram_bw_gbps / 3)
        assert dataclasses.replace(new, block_dram_bw_gbps=cost.block_dram_bw_gbps) == cost
    assert slow.dram_bw_gbps == spec.dram_bw_gbps


def test_littles_law_needs_latency(tmp_path):
    from experiments.studies.fusion.winograd_contention import predict
    hog = _write(tmp_path / "hog.csv", [{"hog_sms": 0, "copy_gbps": 4000.0}, {"hog_sms": 64, "copy_gbps": 1000.0}])
    with pytest.raises(SystemExit, match="--littles-law is not allowed without --latency"):
        predict(["--hog", str(hog), "--littles-law"])


def test_sync_rule_scales_only_the_megakernel_costs():
    from experiments.studies.fusion.winograd_contention import SPEC, megakernel_sync_costs
    from megasim.hardware import load_spec
    costs = load_spec(SPEC).task_costs
    slow = megakernel_sync_costs(costs, 5.0)
    for kind, c in costs.items():
        assert slow[kind].megakernel_fixed_ns == pytest.approx(5 * c.megakernel_fixed_ns)
        assert (slow[kind].megakernel_claim_ns is None) == (c.megakernel_claim_ns is None)
        if c.megakernel_claim_ns is not None:
            assert slow[kind].megakernel_claim_ns == pytest.approx(5 * c.megakernel_claim_ns)
        assert slow[kind].fixed_ns == c.fixed_ns and slow[kind].block_dram_bw_gbps == c.block_dram_bw_gbps


def test_sync_rule_needs_latency(tmp_path):
    from experiments.studies.fusion.winograd_contention import predict
    hog = _write(tmp_path / "hog.csv", [{"hog_sms": 0, "copy_gbps": 4000.0}, {"hog_sms": 64, "copy_gbps": 1000.0}])
    with pytest.raises(SystemExit, match="--sync-latency is not allowed without --latency"):
        predict(["--hog", str(hog), "--sync-latency"])


def test_plot_from_csvs_alone(tmp_path):
    """The figure is drawn from a measured CSV alone (the predicted curves are optional); a directory
    without measurements is a one-line error."""
    from experiments.studies.fusion.winograd_contention import main, plot
    mdir = tmp_path / "m"
    mdir.mkdir()
    _write(mdir / "winograd_contention.csv", _measured_rows())
    png = plot(["--measured-dir", str(mdir), "--predicted-dir", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert png.stat().st_size > 0 and (tmp_path / "winograd_contention.pdf").exists()
    with pytest.raises(SystemExit, match="holds no winograd_contention.csv"):
        plot(["--measured-dir", str(tmp_path / "empty")])
    # with a committed predicted curve (tests/data/winograd_contention_predicted/; README names its results file)
    predicted = Path(__file__).resolve().parent / "data/winograd_contention_predicted"
    assert main(["plot", "--measured-dir", str(mdir), "--predicted-dir", str(predicted), "--out", str(tmp_path)]) == 0
