"""experiments.figures.network_study uses a table's rows of the sweep's current points only: a table keeps
the rows of points that a changed spec file replaced, after the current ones."""

from pathlib import Path

from experiments.figures.network_study import current_rows, summarise
from megasim.sweep.points import expand
from megasim.sweep.spec import load_sweep

SWEEP = """
name = "tiny_network"
networks = ["vgg16"]
gpus = ["H100"]
batch = 1

[[runs]]
algorithm = "winograd"
schedules = ["nonfused"]
"""


def test_rows_of_points_the_sweep_no_longer_has_are_left_out(tmp_path):
    path = tmp_path / "tiny_network.toml"
    path.write_text(SWEEP)
    points = expand(load_sweep(path))
    current = [{"point_key": p.key, "status": "ok", "gpu": "H100", "problem": p.problem.spec_string(),
                "algorithm": "winograd", "mode": "fixed", "schedule": "nonfused", "predicted_us": 1.0} for p in points]
    stale = [dict(r, point_key=r["point_key"] + "-old-spec", predicted_us=99.0) for r in current]
    kept = current_rows(current + stale, Path(path))
    assert kept == current
    vgg = [r for r in summarise(kept) if r["network"] == "vgg16" and r["algorithm"] == "Winograd non-fused"]
    assert vgg and vgg[0]["total_us"] == 13.0            # 13 layers at 1 us, none at the stale 99 us
