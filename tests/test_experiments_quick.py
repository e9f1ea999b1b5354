"""The figure scripts run end to end with --quick: CSV (with the expected columns, non-empty), JSON with
provenance, PNG and PDF; and --plot-only redraws from the CSV alone."""

from __future__ import annotations

import csv
import importlib
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

# The scripts live in the repository's top-level `experiments` package, which is not installed with
# megasim: make it importable however pytest was started.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

SCRIPTS = {
    "fig07_layers": {"layer", "C", "K", "nonfused_us", "default_us", "best_us", "best_D_IG", "best_M",
                     "speedup_default", "speedup_best", "l2_hit_best"},
    "fig08_channels": {"layer", "C", "K", "C_plus_K", "nonfused_us", "best_us", "speedup_best"},
    "fig09_task_distance": {"layer", "M", "D_IG", "D_GO", "valid", "predicted_us", "norm_time", "l2_hit_rate"},
    "fig10_group_size": {"layer", "M", "D_IG", "D_GO", "valid", "reason", "predicted_us", "norm_time"},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_quick_run(name, tmp_path, capsys):
    module = importlib.import_module(f"experiments.{name}")
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    assert name in capsys.readouterr().out
    with (tmp_path / f"{name}.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        assert SCRIPTS[name] <= set(reader.fieldnames)
    assert rows
    assert any(r.get("valid", "True") == "True" and float(r.get("predicted_us") or r["best_us"]) > 0 for r in rows)
    meta = json.loads((tmp_path / f"{name}.json").read_text())["meta"]
    assert meta["gpu"] == "V100" and meta["parameters"]["quick"] is True and "git_sha" in meta
    for ext in ("png", "pdf"):
        path = tmp_path / f"{name}.{ext}"
        assert path.stat().st_size > 1000
        path.unlink()
    assert module.main(["--plot-only", "--out", str(tmp_path)]) == 0   # from the CSV alone
    assert (tmp_path / f"{name}.png").exists()
