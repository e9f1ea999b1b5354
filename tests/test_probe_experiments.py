"""The probe scripts' shared driver (experiments.conv_occupancy.probe_main), through the wave-tail
probe: the committed predictions joined with the H200's times are what the code computes."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TAIL = ROOT / "experiments/results/nvidia-h200/wave_tail"


def test_wave_tail_reproduces_its_committed_joined_rows(tmp_path, capsys):
    from experiments.wave_tail import main

    rows = main(["--measured", str(TAIL / "wave_tail_measured.csv"), "--out", str(tmp_path)])
    committed = {int(r["seed"]): r for r in csv.DictReader((TAIL / "joined_committed_spec/wave_tail.csv").open())}
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
