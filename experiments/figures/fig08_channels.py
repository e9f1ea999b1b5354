"""Fig. 8 on the model: fused-over-non-fused speedup against the channel size C + K.

Produces ``DIR/fig08_channels.csv`` (one row per Table-2 layer: C, K, C+K, non-fused and best fused
predicted times, speedups, L2 hit rates), ``DIR/fig08_channels_points.csv`` (every simulated point),
their JSON (provenance, GPU spec, parameters) and ``DIR/fig08_channels.png``/``.pdf``, drawn from the
CSV alone.

From: the megasim model on a GPU spec preset (default V100); no GPU is used. The numbers come from the
same sweep as Fig. 7 (``experiments.sweeps.table2_sweep``: D_IG in {1, 2, 4} x its minimum, M in
{1, 2, 4, 8}, D_GO default, batch 64), recomputed so this script stands alone. As in the paper's
Fig. 8, the baseline is the (model's) own non-fused schedule.

Run time (2 shared cores): full ~3-6 min; ``--quick`` ~15 s.

    python -m experiments.figures.fig08_channels [--quick] [--out DIR] [--gpu V100]
    python -m experiments.figures.fig08_channels --plot-only --out DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from experiments.figures import style
from experiments.provenance import read_rows
from experiments.sweeps import run_script, table2_sweep

NAME = "fig08_channels"


def compute(args, spec) -> Path:
    return table2_sweep(args, spec, NAME)


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Speedup (best of sweep; default parameters hollow) against C+K, log2 x-axis, points labelled."""
    rows = read_rows(csv_path)
    ck = np.array([int(r["C_plus_K"]) for r in rows])
    best = np.array([float(r["speedup_best"]) for r in rows])
    default = np.array([float(r["speedup_default"]) for r in rows])
    grouped = np.array([float(r["speedup_best_vs_grouped_gemm"]) for r in rows])
    batch = rows[0]["batch"] if rows else "?"
    fig, ax = style.new_figure(6.4, 3.8)
    ax.scatter(ck, default, marker="o", facecolors="none", edgecolors=style.OKABE_ITO[5],
               label="fused, default parameters", zorder=3)
    ax.scatter(ck, best, marker="o", color=style.OKABE_ITO[0], label="fused, best of sweep", zorder=4)
    ax.scatter(ck, grouped, marker="x", color=style.OKABE_ITO[1], zorder=4,
               label="fused best / non-fused with M=4-grouped GEMM (ablation)")
    for r, x, y in zip(rows, ck, best):
        ax.annotate(r["layer"], (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6)
    if len(ck) > 1:   # least-squares trend of speedup against log2(C+K), as a guide to the eye
        slope, icpt = np.polyfit(np.log2(ck), best, 1)
        xs = np.linspace(ck.min(), ck.max(), 50)
        ax.plot(xs, slope * np.log2(xs) + icpt, color=style.OKABE_ITO[3], lw=1, ls=":",
                label=f"trend: {slope:+.3f} per doubling of C+K")
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ticks: list[int] = []
    for v in sorted(set(ck.tolist())):     # skip ticks too close to the previous one to be legible
        if not ticks or v > 1.12 * ticks[-1]:
            ticks.append(v)
    ax.set_xticks(ticks, [str(v) for v in ticks])
    ax.minorticks_off()
    ax.set_xlabel("channel size C + K (channels)")
    ax.set_ylabel("speedup over non-fused (x)")
    ax.set_title(f"Model (V100 preset), batch {batch}: fusion speedup vs channel size")
    ax.legend(frameon=False, loc="upper right", fontsize=7)
    ax.set_ylim(0.9, max(1.2, float(np.max(np.concatenate([best, grouped]), initial=1.0))) * 1.12)
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot)


if __name__ == "__main__":
    sys.exit(main())
