"""Fig. 7 on the model: fused vs non-fused Winograd time for the paper's 13 Table-2 layers.

Produces ``DIR/fig07_layers.csv`` (one row per layer: predicted non-fused time, fused time with the
default Algorithm 1 parameters, fused time with the best parameters of a small sweep, speedups, L2 hit
rates, DRAM traffic, utilisation), ``DIR/fig07_layers_points.csv`` (every simulated point), their JSON
(with provenance, GPU spec and all parameters) and the figure ``DIR/fig07_layers.png``/``.pdf``, drawn
from the CSV alone.

From: the megasim model (``megasim.plan.predict``) on a GPU spec preset (default V100, the paper's
GPU); no GPU is used. The sweep is D_IG in {1, 2, 4} x the smallest valid D_IG for M, M in {1, 2, 4, 8},
D_GO at its default; batch 64 as in the paper (Sec. 7.2). The paper's Fig. 7 is normalised to cuDNN's
non-fused Winograd; the model has no cuDNN, so speedups here are over the model's own non-fused
schedule (four kernels), which the paper reports to be ~6 % slower than cuDNN's faster one. A third
bar is an ablation: best fused over a non-fused schedule whose GEMM kernel runs in Algorithm 1's
M=4-grouped GEMM order (filter reuse without fusion).

Run time (2 shared cores): full ~3-6 min; ``--quick`` (batch 8, M in {1, 4}, D_IG x {1, 2}) ~15 s.

    python -m experiments.figures.fig07_layers [--quick] [--out DIR] [--gpu V100]
    python -m experiments.figures.fig07_layers --plot-only --out DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from experiments.figures import style
from experiments.provenance import read_rows
from experiments.sweeps import run_script, table2_sweep

NAME = "fig07_layers"


def compute(args, spec) -> Path:
    return table2_sweep(args, spec, NAME)


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Bars of fused-over-non-fused speedup per layer (default and best-of-sweep parameters)."""
    rows = read_rows(csv_path)
    layers = [r["layer"] for r in rows]
    default = np.array([float(r["speedup_default"]) for r in rows])
    best = np.array([float(r["speedup_best"]) for r in rows])
    grouped = np.array([float(r["speedup_best_vs_grouped_gemm"]) for r in rows])
    batch = rows[0]["batch"] if rows else "?"
    fig, ax = style.new_figure(7.0, 3.4)
    x = np.arange(len(layers))
    w = 0.27
    ax.bar(x - w, default, w, label="fused (default D_IG/D_GO/M) / non-fused", color=style.OKABE_ITO[5])
    ax.bar(x, best, w, label="fused (best of sweep) / non-fused", color=style.OKABE_ITO[0])
    ax.bar(x + w, grouped, w, label="fused (best) / non-fused with M=4-grouped GEMM order (ablation)",
           color=style.OKABE_ITO[1])
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.text(len(layers) - 0.5, 1.0, "non-fused (model)", ha="right", va="bottom", fontsize=7)
    for xi, b in zip(x, best):
        ax.text(xi, b, f"{b:.2f}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x, layers, rotation=45, ha="right")
    ax.set_ylabel("speedup over non-fused (x)")
    ax.set_title(f"Model (V100 preset), Table-2 layers, batch {batch}: fused vs non-fused")
    ax.legend(loc="upper right", frameon=False, fontsize=7)
    ax.set_ylim(0, max(1.2, float(np.max(best, initial=1.0)) * 1.3))
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot)


if __name__ == "__main__":
    sys.exit(main())
