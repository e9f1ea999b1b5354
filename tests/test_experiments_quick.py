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


_MODULES = {name: f"experiments.figures.{name}" for name in
            ("fig03_task_timeline", "fig07_layers", "fig08_channels", "fig09_task_distance", "fig10_group_size",
             "fig11_networks", "plot_sparse", "plot_validation", "pred_vs_measured")}
_MODULES.update(gpu_sensitivity="experiments.studies.transfer.gpu_sensitivity",
                fusion_vs_dram="experiments.studies.fusion.fusion_vs_dram")


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_quick_run(name, tmp_path, capsys):
    module = importlib.import_module(_MODULES[name])
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


# Scripts with their own options (issue 7): (columns, GPU named in meta, extra arguments).
MORE_SCRIPTS = {
    "fig03_task_timeline": ({"mapping", "schedule", "D_IG", "D_GO", "M", "predicted_us", "t0_us", "t1_us", "itrans",
                             "gemm", "otrans", "waiting", "slots"}, "V100"),
    "fig11_networks": ({"network", "layer", "stride", "included", "reason", "same_as", "nonfused_us", "fused_us",
                        "speedup"}, "H100"),
    "gpu_sensitivity": ({"gpu", "sm_count", "l2_mb", "layer", "speedup_default", "speedup_best", "best_M",
                         "best_d_ig_mult"}, None),
}


def _run_and_replot(module, name, tmp_path, argv, quick=True):
    assert module.main([*(["--quick"] if quick else []), "--out", str(tmp_path), *argv]) == 0
    for ext in ("png", "pdf"):
        path = tmp_path / f"{name}.{ext}"
        assert path.stat().st_size > 1000
        path.unlink()
    (tmp_path / f"{name}.json").unlink()       # the figure needs the CSV alone
    assert module.main(["--plot-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / f"{name}.png").stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MORE_SCRIPTS))
def test_quick_run_more(name, tmp_path, capsys):
    module = importlib.import_module(_MODULES[name])
    columns, gpu = MORE_SCRIPTS[name]
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    assert name in capsys.readouterr().out
    with (tmp_path / f"{name}.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        assert columns <= set(reader.fieldnames)
    assert rows
    meta = json.loads((tmp_path / f"{name}.json").read_text())["meta"]
    assert meta["parameters"]["quick"] is True and "git_sha" in meta
    if gpu:
        assert meta["gpu"] == gpu
    _run_and_replot(module, name, tmp_path, [])


def test_fig03_counts_are_time_averages():
    from experiments.figures.fig03_task_timeline import mean_open
    import numpy as np

    # [0, 10) and [5, 15): bins of 5 ns hold 1, 2, 1 open intervals on average; a bin half covered, 0.5.
    got = mean_open(np.array([0.0, 5.0]), np.array([10.0, 15.0]), np.array([0.0, 5.0, 10.0, 15.0, 25.0]))
    assert got.tolist() == [1.0, 2.0, 1.0, 0.0]
    got = mean_open(np.array([2.5]), np.array([5.0]), np.array([0.0, 5.0]))
    assert got.tolist() == [0.5]


@pytest.mark.slow
def test_fig03_with_measured_run(tmp_path):
    """--measured: a recorded run (task,kind,start_ns,end_ns,sm) is binned and drawn beside the model."""
    module = importlib.import_module("experiments.figures.fig03_task_timeline")
    recorded = tmp_path / "recorded.csv"
    with recorded.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["task", "kind", "start_ns", "end_ns", "sm"])
        for i, kind in enumerate(["ftrans", "itrans", "itrans", "gemm", "gemm", "otrans"]):
            writer.writerow([i, kind, 1000 + 300 * i, 1600 + 300 * i, i % 2])
    _run_and_replot(module, "fig03_task_timeline", tmp_path, ["--measured", str(recorded)])
    rows = list(csv.DictReader((tmp_path / "fig03_task_timeline_measured.csv").open(newline="")))
    assert rows and float(rows[0]["measured_us"]) == pytest.approx(2.1)
    with pytest.raises(SystemExit) as exc:
        module.main(["--quick", "--out", str(tmp_path), "--measured", str(tmp_path / "missing.csv")])
    assert exc.value.code == 2


def _synthetic_validation(path):
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["layer", "schedule", "params", "predicted_us", "measured_us", "gpu", "status"])
        for i, layer in enumerate(["resnet-1", "resnet-2", "vgg-1"]):
            for j, schedule in enumerate(["nonfused", "fused"]):
                predicted = 100.0 * (i + 1) * (j + 2)
                writer.writerow([layer, schedule, "D_IG=124,M=4" if j else "", predicted,
                                 predicted * (1.0 + 0.05 * (i - j)), "synthetic", "ok"])
        writer.writerow(["vgg-1", "fused", "D_IG=1,M=4", 500.0, "", "synthetic", "invalid"])   # left out


@pytest.mark.slow
def test_pred_vs_measured(tmp_path, capsys):
    module = importlib.import_module("experiments.figures.pred_vs_measured")
    with pytest.raises(SystemExit) as exc:          # no validation CSV yet: one line, status 2
        module.main(["--measured", str(tmp_path / "validation.csv"), "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    source = tmp_path / "validation.csv"
    _synthetic_validation(source)
    _run_and_replot(module, "pred_vs_measured", tmp_path, ["--measured", str(source)], quick=False)
    for unused in ("--quick", "--gpu"):      # listed by --help before, and they did nothing
        with pytest.raises(SystemExit) as exc:
            module.main([unused, "--out", str(tmp_path)])
        assert exc.value.code == 2
    rows = list(csv.DictReader((tmp_path / "pred_vs_measured.csv").open(newline="")))
    assert len(rows) == 6 and {"ratio", "rel_error", "gpu"} <= set(rows[0])
    assert "skipped 1 rows" in capsys.readouterr().out
    first = next(r for r in rows if r["layer"] == "resnet-2" and r["schedule"] == "nonfused")
    assert float(first["rel_error"]) == pytest.approx(1 / 1.05 - 1, abs=1e-4)


def test_plot_validation_takes_out_and_writes_nothing_by_default(tmp_path, capsys):
    """--help was read as the CSV's path (a FileNotFoundError traceback), and with no arguments it drew
    into experiments/results/nvidia-h200/."""
    module = importlib.import_module("experiments.figures.plot_validation")
    with pytest.raises(SystemExit) as exc:
        module.main(["--help"])
    assert exc.value.code == 0 and "--out" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:      # no --out: argparse's error, nothing written
        module.main([])
    assert exc.value.code == 2 and "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        module.main([str(tmp_path / "missing.csv"), "--out", str(tmp_path)])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    source = tmp_path / "validation.csv"
    _synthetic_validation(source)
    out = tmp_path / "figs"
    out.mkdir()
    assert [p.parent for p in module.main([str(source), "--out", str(out)])] == [out, out]
    assert not list(tmp_path.glob("*.png"))
