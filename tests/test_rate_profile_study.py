"""experiments.studies.calibration.rate_profile: a kind's per-block DRAM rate held at each value, its other fields
refitted on its single-kind runs; the fit's error, the fused predictions and the mixed-kind runs at each rate."""

from __future__ import annotations

import json

import pytest

from experiments.studies.calibration.rate_profile import main

SPEC = "megasim/hardware/calibrated/h200.json"
MEASUREMENTS = "megasim/hardware/calibrated/h200.measurements.json"


@pytest.mark.slow
def test_each_rate_is_held_and_the_rest_refitted(tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert main(["--spec", SPEC, "--measurements", MEASUREMENTS, "--rates", "10", "30", "--layers",
                 "N=4,C=16,K=16,H=24,W=24", "--workers", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["block_dram_bw_gbps"] for r in rows] == [10.0, 30.0]
    assert [r["fields"]["block_dram_bw_gbps"] for r in rows] == [10.0, 30.0]       # held
    assert all(0.0 < r["rms_log_error"] < 0.5 for r in rows)
    # the mixed-kind runs of the input transform only, and a faster block a shorter fused run
    assert all(set(r["mixed_errors"]) == {"resnet-1 itrans+gemm", "vgg-3 itrans+gemm",
                                          "N=32,C=16,K=64,H=96,W=96 itrans+gemm"} for r in rows)
    (slow,), (fast,) = (r["fused_us"].values() for r in rows)
    assert fast < slow
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("args, says", [(["--rates", "0"], "--values 0.0 is not allowed"),
                                        (["--rates", "0.99", "--field", "coresident_stretch"],
                                         "--values 0.99 is not allowed: coresident_stretch is in"),
                                        (["--rates", "14", "--kind", "nope"], "--kind 'nope' is not allowed"),
                                        (["--rates", "14", "--measurements", "/nonexistent.json"], "cannot be read")])
def test_bad_input_is_one_line(tmp_path, args, says):
    base = {"--spec": SPEC, "--measurements": MEASUREMENTS, "--out": str(tmp_path / "x.json")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = [a for flag, value in base.items() if flag != "--rates" for a in (flag, value)]
    argv += ["--rates", *[v for f, v in zip(args[::2], args[1::2]) if f == "--rates"]]
    with pytest.raises(SystemExit, match=f"rate_profile: .*{says}"):
        main(argv)
