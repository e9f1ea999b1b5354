"""The im2win paper's Fig. 3 on our GPU: extra device memory per layer and implementation, measured, with
the model's footprint marked beside it.

From: a bench result (``experiments.benchmarks.im2win_bench``'s CSV, default
``experiments/results/nvidia-h200/im2win_bench.csv``: its ``extra_bytes`` column, the bytes each
implementation allocates beyond input, filter and output) and the model's footprint hook
(``Algorithm.footprint``, what ``megasim simulate ... --json`` reports as ``extra_bytes``): the
``im2win`` plug-in's window tensor for ``im2win`` and the ``im2col_gemm`` plug-in's im2col matrix for
``im2col_cublas``. ``direct`` (no footprint hook; it allocates nothing) and ``cudnn_best_fp32`` (the
workspace of the algorithm cuDNN picked; not modelled) have no model value. No GPU, no simulation.

Produces ``DIR/im2win_footprint.csv`` + ``.json`` (per layer, batch and implementation: measured and
modelled bytes, the im2win / im2col ratio, with provenance) and ``DIR/im2win_footprint.png`` / ``.pdf``
(one panel per batch in the bench, 128 then 64; log scale, bars measured, black markers the model; a
bar below 1e5 bytes is written as text at the axis: "0", or "1K" for cuDNN's 1 KB on conv7), drawn
from that CSV alone. About 3 s.

    python -m experiments.figures.im2win_footprint [--bench CSV] [--out DIR]
    python -m experiments.figures.im2win_footprint --plot-only [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

DEFAULT_DIR = Path("experiments/results/nvidia-h200")
NAME = "im2win_footprint"
SHOWN = ("im2win", "im2col_cublas", "cudnn_best_fp32", "direct")
LABELS = {"im2win": "im2win (window tensor)", "im2col_cublas": "im2col + cuBLAS (im2col matrix)",
          "cudnn_best_fp32": "cuDNN best FP32 (workspace)", "direct": "direct (none)"}
MODELLED = {"im2win": "im2win", "im2col_cublas": "im2col_gemm"}   # bench impl -> plug-in with a footprint hook


def footprint_ratios(rows: list[dict]) -> dict[tuple[str, int], float]:
    """(layer, batch) -> measured extra bytes of im2win / those of im2col_cublas, where both are present
    and im2col's are > 0. ``rows``: bench rows (``layer``, ``batch``, ``impl``, ``extra_bytes``)."""
    by = {(r["layer"], int(r["batch"]), r["impl"]): float(r["extra_bytes"]) for r in rows
          if r.get("extra_bytes") not in (None, "")}
    out = {}
    for (layer, batch, impl), b in by.items():
        if impl == "im2win":
            col = by.get((layer, batch, "im2col_cublas"))
            if col:
                out[(layer, batch)] = b / col
    return out


def footprint_rows(bench_csv: Path) -> list[dict]:
    """One row per (layer, batch, shown impl) of the bench: measured bytes, the model's (empty where not
    modelled), and im2win / im2col measured."""
    from experiments.provenance import read_rows
    from megasim.algorithms.registry import get_algorithm
    from megasim.workloads import parse_layer
    bench = [r for r in read_rows(bench_csv) if r["impl"] in SHOWN]
    ratios = footprint_ratios(bench)
    rows = []
    for r in bench:
        layer, batch = r["layer"], int(r["batch"])
        model_bytes = None
        if r["impl"] in MODELLED:
            algo = get_algorithm(MODELLED[r["impl"]])
            params = algo.params_type()            # the default tile: the footprint does not depend on it
            model_bytes = sum(algo.footprint(parse_layer(f"im2win/{layer}", batch=batch), params).values())
        rows.append({"layer": layer, "batch": batch, "impl": r["impl"], "measured_extra_bytes": int(float(r["extra_bytes"])),
                     "model_extra_bytes": model_bytes if model_bytes is not None else "",
                     "model_source": f"{MODELLED[r['impl']]} plug-in footprint" if r["impl"] in MODELLED else "not modelled",
                     "im2win_over_im2col_measured": ratios.get((layer, batch), "") if r["impl"] == "im2win" else "",
                     "status": r.get("status", "ok")})
    return rows


def plot(csv_path: Path, out_dir: Path) -> Path:
    from experiments.figures import style
    from experiments.provenance import read_rows
    rows = read_rows(csv_path)
    batches = sorted({int(r["batch"]) for r in rows}, reverse=True)
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    impls = [i for i in SHOWN if any(r["impl"] == i for r in rows)]
    style.apply()
    fig, axes = style.plt.subplots(len(batches), 1, figsize=(9.0, 3.0 * len(batches)), squeeze=False)
    x = np.arange(len(layers))
    width = 0.85 / len(impls)
    floor = 1e5                       # bars start here on the log axis; 0-byte bars are labelled "0"
    for ax, batch in zip(axes[:, 0], batches):
        cell = {(r["layer"], r["impl"]): r for r in rows if int(r["batch"]) == batch}
        for j, impl in enumerate(impls):
            xs = x - 0.425 + (j + 0.5) * width
            meas = np.array([float(cell[(lay, impl)]["measured_extra_bytes"]) if (lay, impl) in cell else np.nan
                             for lay in layers])
            ax.bar(xs, np.where(meas > floor, meas - floor, np.nan), width, bottom=floor, label=f"{LABELS[impl]}, measured",
                   color=style.OKABE_ITO[j % len(style.OKABE_ITO)])
            for xi, m in zip(xs, meas):
                if m < floor:         # below the axis: its size as text (0, or e.g. cuDNN's 1 KB on conv7)
                    ax.text(xi, floor * 1.15, "0" if m == 0 else f"{m / 1e3:.0f}K", ha="center", va="bottom",
                            fontsize=5, rotation=90 if m else 0)
            if impl in MODELLED:
                model = [float(cell[(lay, impl)]["model_extra_bytes"]) if (lay, impl) in cell else np.nan for lay in layers]
                ax.scatter(xs, model, marker="_", s=70, color="black", zorder=3,
                           label="model footprint (plug-in hook)" if j == 0 else None)
        ax.set_yscale("log")
        ax.set_ylim(floor, 2e11)
        ax.set_xticks(x, layers)
        ax.set_ylabel("extra bytes (beyond in/filter/out)")
        ax.set_title(f"batch {batch}: extra device memory per layer (bars: measured; markers: model)")
        ax.legend(fontsize=6, ncol=3, loc="upper left")
    fig.tight_layout()
    png, _ = style.save_figure(fig, out_dir, NAME)
    return png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=DEFAULT_DIR / "im2win_bench.csv")
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args(argv)
    csv_path = args.out / f"{NAME}.csv"
    if not args.plot_only:
        from experiments.provenance import provenance, write_results
        rows = footprint_rows(args.bench)
        csv_path, _ = write_results(rows, args.out, NAME, provenance({"bench": str(args.bench),
                                                                        "model": "Algorithm.footprint (no simulation)"}))
        for batch in sorted({r["batch"] for r in rows}, reverse=True):
            ratios = [r["im2win_over_im2col_measured"] for r in rows if r["batch"] == batch and r["impl"] == "im2win"]
            agree = all(r["model_extra_bytes"] == r["measured_extra_bytes"] for r in rows
                        if r["batch"] == batch and r["impl"] in MODELLED)
            total = {i: sum(r["measured_extra_bytes"] for r in rows if r["batch"] == batch and r["impl"] == i)
                     for i in SHOWN}
            print(f"batch {batch}: im2win / im2col {min(ratios):.2f}-{max(ratios):.2f}; model == measured: {agree}; "
                  + ", ".join(f"{i} {b / 1e9:.2f} GB" for i, b in total.items()))
    png = plot(csv_path, args.out)
    print(f"wrote {csv_path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
