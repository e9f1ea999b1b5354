"""Fig. 9 on the model: effect of the task distance D_IG on the fused kernel, ResNet layers 1-4.

Produces ``DIR/fig09_task_distance.csv`` (one row per (layer, D_IG): predicted fused time, time
normalised to the layer's best point, L2 hit rate, DRAM traffic, dependency waits, time after the last
input transform, utilisation), its JSON (provenance, GPU spec, parameters) and
``DIR/fig09_task_distance.png``/``.pdf``, drawn from the CSV alone.

From: the megasim model on a GPU spec preset (default V100); no GPU is used. M = 4 (clipped to N_G
when a layer has fewer groups, as at batch 8 for resnet-4), D_GO at its default; D_IG runs from the
smallest valid value for M (``megasim.mapping.default_params``; smaller ones are rejected by
Algorithm 1) up to 16x it or the number of input transforms N_I, whichever is smaller. Batch 64.

Run time (2 shared cores): full ~20-40 s; ``--quick`` (batch 8, 4 points per layer) ~3 s.

    python -m experiments.figures.fig09_task_distance [--quick] [--out DIR] [--gpu V100]
    python -m experiments.figures.fig09_task_distance --plot-only --out DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from experiments.figures import style
from experiments.provenance import provenance, read_rows, write_results
from experiments.sweeps import (FULL_BATCH, QUICK_BATCH, RESNET_LAYERS, d_ig_range, graph_of, layer_info,
                                measure, min_d_ig, normalise, print_table, run_script, spec_meta)
from megasim.algorithms.winograd import WinogradParams
from megasim.plan import Plan
from megasim.workloads import parse_layer

NAME = "fig09_task_distance"
M = 4
FACTORS = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16)
QUICK_FACTORS = (1, 2, 4, 16)


def compute(args, spec) -> Path:
    batch = QUICK_BATCH if args.quick else FULL_BATCH
    factors = QUICK_FACTORS if args.quick else FACTORS
    rows = []
    for layer in RESNET_LAYERS:
        problem = parse_layer(layer, batch)
        graph = graph_of(problem)
        info = layer_info(problem, graph)
        m = min(M, info["N_G"])
        base = min_d_ig(graph, m)
        for d_ig in d_ig_range(graph, m, factors):
            point = measure(problem, spec, Plan("fused", WinogradParams(m=m, d_ig=d_ig)))
            rows.append({**info, "min_D_IG": base, "d_ig_over_min": round(d_ig / max(1, base), 3), **point})
        print(f"  {layer}: {sum(r['layer'] == layer for r in rows)} points, min D_IG {base} (M={m})", flush=True)
    normalise(rows)
    params = {"batch": batch, "layers": list(RESNET_LAYERS), "M": M, "M_clipped_to_N_G": True,
              "D_IG_factors_of_min": list(factors), "D_IG_cap": "N_I (number of input transforms)",
              "D_GO": "default (smallest valid for M)", "quick": args.quick}
    meta = provenance({**spec_meta(spec), "script": f"experiments.{NAME}", "device": "model (no GPU)",
                       "parameters": params})
    csv_path, _ = write_results(rows, args.out, NAME, meta)
    print()
    print_table(rows, ["layer", "M", "D_IG", "d_ig_over_min", "predicted_us", "norm_time", "l2_hit_rate",
                       "dram_mb", "wait_us_total", "after_last_itrans_us"])
    return csv_path


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Normalised fused time against D_IG (log2 axis), one line per layer; the best point ringed."""
    rows = [r for r in read_rows(csv_path) if r["valid"] == "True"]
    fig, ax = style.new_figure(6.4, 3.8)
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    for i, layer in enumerate(layers):
        pts = sorted((int(r["D_IG"]), float(r["norm_time"]), r["M"]) for r in rows if r["layer"] == layer)
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        colour = style.OKABE_ITO[i % len(style.OKABE_ITO)]
        ax.plot(xs, ys, marker=style.MARKERS[i], color=colour, label=f"{layer} (M={pts[0][2]})")
        j = ys.index(min(ys))
        ax.plot(xs[j], ys[j], marker="o", ms=11, mfc="none", mec=colour, ls="none")
    batch = rows[0]["batch"] if rows else "?"
    ax.set_xscale("log", base=2)
    ax.set_xlabel("task distance D_IG (input transforms before the first GEMM, blocks)")
    ax.set_ylabel("fused time / best time of layer")
    ax.set_title(f"Model (V100 preset), batch {batch}: effect of D_IG (leftmost point = smallest valid)")
    ax.legend(frameon=False)
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot)


if __name__ == "__main__":
    sys.exit(main())
