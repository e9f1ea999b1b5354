"""The network-level study's figure: predicted network time per GPU and algorithm, and the fraction of
each network's time that each algorithm wins (the paper's Fig. 11, extended to every algorithm).

From: a sweep table of ``experiments/sweeps/network_study*.toml`` (``megasim sweep``; Parquet or CSV),
model predictions only, no GPU. Each catalogue layer of VGG-16, ResNet-50, YOLOv3 and DenseNet-161 is
matched to its shape's row (a network repeats shapes; the sweep evaluated each once). An *algorithm* is
one row label: Winograd fused (the optimiser's best mapping), Winograd non-fused (the four-kernel
pipeline), the direct convolution, im2win, im2col+GEMM (each at the optimiser's best mapping).

Only the rows of the points the sweep file has now are used (``--sweep``, default
``experiments/sweeps/<the table's sweep name>.toml``): a table keeps the rows of points that a changed spec
file replaced. Produces ``DIR/network_study.csv`` (per network, GPU and algorithm: layers, layers it can run, summed
predicted time over them, layers and share of time it wins) and its JSON (the table's sweep hash,
commit and batch), then ``DIR/network_study.png``/``.pdf`` drawn from that CSV alone. Top row: each
network's predicted time per GPU for every algorithm that runs all its layers (Winograd cannot take
stride 2: on ResNet-50 and YOLOv3 its bar is missing and the best-per-layer total, ``best``, shows
what mixing algorithms gives). Bottom row: per GPU, the share of the best-per-layer network time spent
in layers each algorithm wins.

Takes: seconds.

    python -m experiments.figures.network_study --table experiments/results/network_study/network_study_small.parquet
    python -m experiments.figures.network_study --plot-only --out experiments/results/network_study
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from experiments.figures import style
from experiments.provenance import provenance, read_rows, write_results

NAME = "network_study"
NETWORKS = ("vgg16", "resnet50", "yolov3", "densenet161")
LABELS = ("Winograd fused", "Winograd non-fused", "direct", "im2win", "im2col+GEMM")
BEST = "best"
DEFAULT_OUT = Path("experiments/results/network_study")


def label_of(row: dict[str, Any]) -> str | None:
    """The algorithm label of a sweep row (None for a row this figure does not use)."""
    algorithm = row["algorithm"]
    if algorithm == "winograd":
        if row["mode"] == "optimize":
            return "Winograd fused"
        return "Winograd non-fused" if row["schedule"] == "nonfused" else None
    return {"direct": "direct", "im2win": "im2win", "im2col_gemm": "im2col+GEMM"}.get(algorithm)


def shape_key(spec_string: str) -> str:
    """A problem's shape without its batch (the table's problems carry the sweep's batch)."""
    return re.sub(r"^N=\d+,", "", spec_string)


def current_rows(rows: list[dict[str, Any]], sweep_file: Path) -> list[dict[str, Any]]:
    """The rows of the points ``sweep_file`` has now. A table keeps the rows of points a sweep no longer has
    (a spec file that changed gives new point keys; the old rows stay, after the current ones), and
    ``summarise`` lets a later row of a (GPU, shape, algorithm) override an earlier one."""
    from megasim.sweep.points import expand
    from megasim.sweep.spec import load_sweep
    keys = {p.key for p in expand(load_sweep(sweep_file))}
    return [r for r in rows if r["point_key"] in keys]


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (network, GPU, label): the network's layers, those the label runs, their summed time, and the
    layers and share of the best-per-layer time it wins; plus a ``best`` row per (network, GPU)."""
    from megasim.workloads import network_layers
    times: dict[tuple[str, str, str], float] = {}     # (gpu, shape, label) -> us
    gpus: list[str] = []
    for r in rows:
        label = label_of(r)
        if label is None:
            continue
        if r["gpu"] not in gpus:
            gpus.append(r["gpu"])
        if r["status"] == "ok" and r["predicted_us"] is not None:
            times[(r["gpu"], shape_key(r["problem"]), label)] = float(r["predicted_us"])
    out = []
    for net in NETWORKS:
        shapes = [shape_key(p.spec_string()) for p in network_layers(net)]
        for gpu in gpus:
            best_total, wins, win_time, best_layers = 0.0, {}, {}, 0
            for shape in shapes:
                here = {lab: times[(gpu, shape, lab)] for lab in LABELS if (gpu, shape, lab) in times}
                if not here:
                    continue
                winner = min(here, key=here.get)
                best_layers += 1
                best_total += here[winner]
                wins[winner] = wins.get(winner, 0) + 1
                win_time[winner] = win_time.get(winner, 0.0) + here[winner]
            for lab in LABELS:
                ok = [times[(gpu, s, lab)] for s in shapes if (gpu, s, lab) in times]
                out.append({"network": net, "gpu": gpu, "algorithm": lab, "layers": len(shapes), "layers_ok": len(ok),
                            "total_us": round(sum(ok), 3) if ok else "",
                            "complete": len(ok) == len(shapes), "wins_layers": wins.get(lab, 0),
                            "win_time_fraction": round(win_time.get(lab, 0.0) / best_total, 4) if best_total else ""})
            out.append({"network": net, "gpu": gpu, "algorithm": BEST, "layers": len(shapes), "layers_ok": best_layers,
                        "total_us": round(best_total, 3), "complete": best_layers == len(shapes), "wins_layers": "",
                        "win_time_fraction": ""})
    return out


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """The figure, from the summary CSV alone."""
    import matplotlib.pyplot as plt
    import numpy as np
    rows = read_rows(csv_path)
    style.apply()
    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    short = [f"{Path(g).stem} (cal.)" if g.endswith(".json") else g for g in gpus]
    labels = [*LABELS, BEST]
    colours = dict(zip(labels, style.OKABE_ITO))
    fig, axes = plt.subplots(2, len(NETWORKS), figsize=(4.2 * len(NETWORKS), 7.0), squeeze=False)
    x = np.arange(len(gpus))
    width = 0.8 / len(labels)
    for col, net in enumerate(NETWORKS):
        ax = axes[0][col]
        for i, lab in enumerate(labels):
            vals = []
            for g in gpus:
                r = next((r for r in rows if r["network"] == net and r["gpu"] == g and r["algorithm"] == lab), None)
                vals.append(float(r["total_us"]) / 1e3 if r and r["complete"] == "True" and r["total_us"] else np.nan)
            ax.bar(x + (i - len(labels) / 2 + 0.5) * width, vals, width, color=colours[lab], label=lab,
                   hatch="//" if lab == BEST else None, edgecolor="white" if lab == BEST else None)
        ax.set_title(net)
        ax.set_xticks(x, short, rotation=45, ha="right")
        if col == 0:
            ax.set_ylabel("predicted network time (ms)")
        ax = axes[1][col]
        bottom = np.zeros(len(gpus))
        for lab in LABELS:
            vals = []
            for g in gpus:
                r = next((r for r in rows if r["network"] == net and r["gpu"] == g and r["algorithm"] == lab), None)
                vals.append(float(r["win_time_fraction"]) if r and r["win_time_fraction"] else 0.0)
            ax.bar(x, vals, 0.7, bottom=bottom, color=colours[lab], label=lab)
            bottom += np.array(vals)
        ax.set_ylim(0, 1)
        ax.set_xticks(x, short, rotation=45, ha="right")
        if col == 0:
            ax.set_ylabel("share of best-per-layer time won")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=len(labels), fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return style.save_figure(fig, out_dir, NAME)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--table", type=Path, help="the sweep table (.parquet or .csv) of a network_study sweep")
    ap.add_argument("--sweep", type=Path, help="the sweep file whose current points are shown (default: "
                    "experiments/sweeps/<the table's sweep name>.toml); the table's rows of other points are left out")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    ap.add_argument("--plot-only", action="store_true", help="redraw from DIR/network_study.csv")
    args = ap.parse_args(argv)
    csv_path = args.out / f"{NAME}.csv"
    if not args.plot_only:
        if args.table is None:
            raise SystemExit("network_study: give --table TABLE (the sweep's table), or --plot-only")
        from megasim.errors import MegasimError
        from megasim.sweep.table import read_table
        try:
            rows = read_table(args.table)
        except MegasimError as err:
            raise SystemExit(f"network_study: error: {err}") from None
        if not rows:
            raise SystemExit(f"network_study: {args.table} has no rows: run the sweep first")
        sweep_file = args.sweep or Path("experiments/sweeps") / f"{rows[0]['sweep']}.toml"
        if not sweep_file.is_file():
            raise SystemExit(f"network_study: --sweep {sweep_file} does not exist: give the sweep file of {args.table}")
        try:
            table_rows = len(rows)
            rows = current_rows(rows, sweep_file)
        except MegasimError as err:
            raise SystemExit(f"network_study: error: {err}") from None
        if not rows:
            raise SystemExit(f"network_study: {args.table} has no rows of {sweep_file}'s points: run that sweep first")
        summary = summarise(rows)
        meta = provenance({"script": "experiments.figures.network_study", "device": "model (no GPU)",
                           "table": str(args.table), "sweep_file": str(sweep_file),
                           "table_rows_of_other_points": table_rows - len(rows),
                           "sweep": sorted({r["sweep"] for r in rows}),
                           "sweep_hash": sorted({r["sweep_hash"] for r in rows}),
                           "table_git_sha": sorted({r["git_sha"] for r in rows}),
                           "batch": sorted({r["batch"] for r in rows}),
                           "rows": len(rows), "failed_rows": sum(r["status"] != "ok" for r in rows)})
        csv_path, _ = write_results(summary, args.out, NAME, meta)
        for net in NETWORKS:
            best = [r for r in summary if r["network"] == net and r["algorithm"] == BEST]
            for b in best:
                ranked = sorted((r for r in summary if r["network"] == net and r["gpu"] == b["gpu"]
                                 and r["algorithm"] != BEST and r["win_time_fraction"]),
                                key=lambda r: -r["win_time_fraction"])
                print(f"  {net:<12} {Path(b['gpu']).stem:<16} best {b['total_us'] / 1e3:9.2f} ms; wins: "
                      + ", ".join(f"{r['algorithm']} {r['win_time_fraction']:.0%}" for r in ranked))
    elif not csv_path.exists():
        raise SystemExit(f"--plot-only: {csv_path} does not exist; run with --table first")
    png, pdf = plot(csv_path, args.out)
    print(f"network_study: wrote {csv_path}, {png} and {pdf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
