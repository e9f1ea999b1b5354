"""Figures of the ECR/PECR experiments, drawn from the CSVs alone (``sparse_bench.csv`` measured,
``sparse_validation.csv`` with the model's predictions beside it).

- ``sparse_speedup_b<N>``: per VGG-19 layer at batch N, speedup of ECR over our dense kernel and over
  cuDNN against sparsity; solid = measured, dashed = predicted (the cuDNN curve's prediction divides
  the *measured* cuDNN time by the *predicted* ECR time: cuDNN is not modelled).
- ``sparse_theta``: the paper's Fig. 11 / Table III analysis: measured speedup of ECR over cuDNN
  against Theta = 100 x sparsity / map width, every layer and sparsity, batch 1.
- ``pecr_speedup``: on the five layers VGG-19 pools after, PECR's speedup over the unfused chains
  (ECR + ReLU + pool, dense + ReLU + pool, cuDNN + PyTorch ReLU + pool) against sparsity.
- ``sparse_pred_vs_measured``: predicted against measured kernel time, every row of our kernels.

    python -m experiments.figures.plot_sparse experiments/results/nvidia-h200
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from experiments.provenance import read_rows
from experiments.figures.style import MARKERS, OKABE_ITO, apply, new_figure, save_figure

CURVES = (("direct", "ECR over our dense kernel", OKABE_ITO[0]), ("cudnn", "ECR over cuDNN (best FP32)", OKABE_ITO[3]))
PECR_VS = (("unfused_ecr", "ECR + ReLU + pool"), ("unfused_direct", "dense + ReLU + pool"),
           ("cudnn_chain", "cuDNN + PyTorch ReLU, pool"), ("direct_fused", "dense fused"))


def _log_y(ax) -> None:
    from matplotlib.ticker import FormatStrFormatter, NullFormatter
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _times(rows, key_fields=("layer", "batch", "pattern", "op", "sparsity"), value="median_ms"):
    out = {}
    for r in rows:
        if r.get("status", "ok") != "ok" or r.get(value) in (None, ""):
            continue
        out[tuple(r[k] if k != "sparsity" else float(r[k]) for k in key_fields)] = float(r[value]) * (
            1e3 if value == "median_ms" else 1.0)
    return out


def plot_speedup(bench, pred, out_dir: Path, batch: str) -> Path | None:
    layers = list(dict.fromkeys(k[0] for k in bench if k[1] == batch))
    if not layers:
        return None
    cols = 4
    rows_n = -(-len(layers) // cols)
    import matplotlib.pyplot as plt
    apply()
    fig, axes = plt.subplots(rows_n, cols, figsize=(10, 2.0 * rows_n), sharex=True, squeeze=False)
    for ax, layer in zip(axes.flat, layers):
        ss = sorted({k[4] for k in bench if k[:3] == (layer, batch, "uniform")})
        def k(op, s, layer=layer):
            return layer, batch, "uniform", op, s
        for vs, label, colour in CURVES:
            m = [bench.get(k(vs, s), np.nan) / bench.get(k("ecr", s), np.nan) for s in ss]
            ax.plot(ss, m, "-o", color=colour, ms=3, label=f"{label}, measured")
            p_ecr = [pred.get(k("ecr", s), np.nan) for s in ss]
            p_vs = [pred.get(k(vs, s), np.nan) if vs != "cudnn" else bench.get(k(vs, s), np.nan) for s in ss]
            ax.plot(ss, np.array(p_vs) / np.array(p_ecr), "--", color=colour, label=f"{label}, predicted")
        ax.axhline(1.0, color="0.4", lw=0.8)
        _log_y(ax)
        ax.set_title(layer.split("/")[-1], fontsize=8)
    for ax in axes.flat[len(layers):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("sparsity")
    for ax in axes[:, 0]:
        ax.set_ylabel("speedup")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(f"VGG-19 conv layers, batch {batch}: speedup of ECR (time of the other / time of ECR)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (2.0 * rows_n + 1)))
    fig.legend(handles, labels, loc="upper center", ncol=4, bbox_to_anchor=(0.5, 1 - 0.3 / (2.0 * rows_n + 1)),
               fontsize=7, frameon=False)
    return save_figure(fig, out_dir, f"sparse_speedup_b{batch}")[0]


def plot_theta(rows, out_dir: Path) -> Path | None:
    t = _times(rows)
    pts = []
    for (layer, batch, pattern, op, s), ecr in t.items():
        if op != "ecr" or batch != "1" or pattern != "uniform":
            continue
        cud = t.get((layer, batch, pattern, "cudnn", s))
        width = next(int(r["HW"]) for r in rows if r["layer"] == layer)
        if cud:
            pts.append((100 * s / width, cud / ecr, s))
    if not pts:
        return None
    fig, ax = new_figure(6.4, 3.6)
    pts = np.array(pts)
    sc = ax.scatter(pts[:, 0], pts[:, 1], c=pts[:, 2], cmap="viridis", s=14)
    fig.colorbar(sc, ax=ax, label="sparsity")
    ax.axhline(1.0, color="0.4", lw=0.8)
    _log_y(ax)
    ax.set(xlabel="Theta = 100 x sparsity / map width (the paper's Fig. 11 quantity)",
           ylabel="speedup of ECR over cuDNN (measured)", title="VGG-19, batch 1, uniform zeros")
    return save_figure(fig, out_dir, "sparse_theta")[0]


def plot_pecr(rows, out_dir: Path) -> Path | None:
    t = _times(rows)
    layers = list(dict.fromkeys(r["layer"] for r in rows if r["op"] == "pecr"))
    if not layers:
        return None
    batches = sorted({r["batch"] for r in rows if r["op"] == "pecr"}, key=int)
    import matplotlib.pyplot as plt
    apply()
    fig, axes = plt.subplots(len(batches), len(layers), figsize=(2.2 * len(layers), 2.3 * len(batches)),
                             squeeze=False, sharex=True)
    for bi, batch in enumerate(batches):
        for li, layer in enumerate(layers):
            ax = axes[bi, li]
            ss = sorted({s for (l, b, p, op, s) in t if l == layer and b == batch and p == "uniform" and op == "pecr"})
            for (vs, label), colour, marker in zip(PECR_VS, OKABE_ITO, MARKERS):
                y = [t.get((layer, batch, "uniform", vs, s), np.nan) / t[(layer, batch, "uniform", "pecr", s)] for s in ss]
                ax.plot(ss, y, marker=marker, ms=3, color=colour, label=label)
            ax.axhline(1.0, color="0.4", lw=0.8)
            _log_y(ax)
            ax.set_title(f"{layer.split('/')[-1]}, N={batch}", fontsize=8)
            if bi == len(batches) - 1:
                ax.set_xlabel("sparsity")
        axes[bi, 0].set_ylabel("speedup of PECR")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4)
    fig.suptitle("PECR (conv + ReLU + 2x2 max-pool in one kernel) against the unfused chains, measured")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return save_figure(fig, out_dir, "pecr_speedup")[0]


def plot_pred_vs_measured(pred_rows, out_dir: Path) -> Path | None:
    if not pred_rows:
        return None
    fig, ax = new_figure(5.2, 4.6)
    ops = list(dict.fromkeys(r["op"] for r in pred_rows))
    for op, colour, marker in zip(ops, OKABE_ITO, MARKERS):
        rs = [r for r in pred_rows if r["op"] == op]
        ax.scatter([float(r["measured_us"]) for r in rs], [float(r["predicted_us"]) for r in rs], s=10,
                   color=colour, marker=marker, label=op, alpha=0.8)
    vals = [float(r[k]) for r in pred_rows for k in ("measured_us", "predicted_us")]
    x = np.array([min(vals) * 0.8, max(vals) * 1.2])
    ax.plot(x, x, "k-", lw=0.8)
    ax.fill_between(x, x * 0.9, x * 1.1, color="0.85", zorder=0, label="+-10%")
    ax.set(xscale="log", yscale="log", xlabel="measured kernel time (us)", ylabel="predicted (us)",
           title=f"ECR/PECR and dense twins: {len(pred_rows)} rows")
    ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "sparse_pred_vs_measured")[0]


def plot_all(out_dir: str | Path, bench_csv: str | Path | None = None) -> list[Path]:
    """Every figure into `out_dir`, from `bench_csv` (default DIR/sparse_bench.csv) and, when present,
    DIR/sparse_validation.csv."""
    out_dir = Path(out_dir)
    bench_rows = read_rows(Path(bench_csv) if bench_csv else out_dir / "sparse_bench.csv")
    pred_path = out_dir / "sparse_validation.csv"
    pred_rows = read_rows(pred_path) if pred_path.exists() else []
    bench = _times(bench_rows)
    pred = _times(pred_rows, value="predicted_us")
    made = [plot_speedup(bench, pred, out_dir, b) for b in sorted({r["batch"] for r in bench_rows}, key=int)]
    made += [plot_theta(bench_rows, out_dir), plot_pecr(bench_rows, out_dir), plot_pred_vs_measured(pred_rows, out_dir)]
    return [m for m in made if m is not None]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for path in plot_all(argv[0] if argv else "experiments/results/nvidia-h200"):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
