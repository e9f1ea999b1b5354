"""Fig. 10 on the model: effect of the group size M on the fused kernel, ResNet layers 1-4.

Produces ``DIR/fig10_group_size.csv`` (one row per (layer, M): D_IG and D_GO used, predicted fused time,
time normalised to the layer's best valid point, L2 hit rate, DRAM traffic, waits, tail, utilisation;
M > N_G gives a row with valid=False and the model's reason), its JSON (provenance, GPU spec,
parameters) and ``DIR/fig10_group_size.png``/``.pdf``, drawn from the CSV alone.

From: the megasim model on a GPU spec preset (default V100); no GPU is used. M in {1, 2, 4, 8, 16, 32};
D_IG and D_GO the smallest valid values for each M, as ``megasim.mapping.default_params`` sets them
(so D_IG grows about linearly with M). Batch 64.

Run time (2 shared cores): full ~15-30 s; ``--quick`` (batch 8, M in {1, 2, 4, 8}) ~2 s.

    python -m experiments.figures.fig10_group_size [--quick] [--out DIR] [--gpu V100]
    python -m experiments.figures.fig10_group_size --plot-only --out DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from experiments.figures import style
from experiments.provenance import provenance, read_rows, write_results
from experiments.sweeps import (FULL_BATCH, QUICK_BATCH, RESNET_LAYERS, graph_of, layer_info, measure,
                                normalise, print_table, run_script, spec_meta)
from megasim.algorithms.winograd import WinogradParams
from megasim.plan import Plan
from megasim.workloads import parse_layer

NAME = "fig10_group_size"
M_VALUES = (1, 2, 4, 8, 16, 32)
QUICK_M_VALUES = (1, 2, 4, 8)


def compute(args, spec) -> Path:
    batch = QUICK_BATCH if args.quick else FULL_BATCH
    m_values = QUICK_M_VALUES if args.quick else M_VALUES
    rows = []
    for layer in RESNET_LAYERS:
        problem = parse_layer(layer, batch)
        info = layer_info(problem, graph_of(problem))
        for m in m_values:
            rows.append({**info, **measure(problem, spec, Plan("fused", WinogradParams(m=m)))})
        valid = sum(r["valid"] for r in rows if r["layer"] == layer)
        print(f"  {layer}: {valid} valid of {len(m_values)} (N_G={info['N_G']})", flush=True)
    normalise(rows)
    params = {"batch": batch, "layers": list(RESNET_LAYERS), "M_values": list(m_values),
              "D_IG": "smallest valid for M (default_params)", "D_GO": "smallest valid for M (default_params)",
              "quick": args.quick}
    meta = provenance({**spec_meta(spec), "script": f"experiments.{NAME}", "device": "model (no GPU)",
                       "parameters": params})
    csv_path, _ = write_results(rows, args.out, NAME, meta)
    print()
    print_table([r for r in rows if r["valid"]],
                ["layer", "M", "D_IG", "D_GO", "predicted_us", "norm_time", "l2_hit_rate", "dram_mb",
                 "wait_us_total", "after_last_itrans_us"])
    return csv_path


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Normalised fused time against M (log2 axis), one line per layer; the best point ringed."""
    rows = [r for r in read_rows(csv_path) if r["valid"] == "True"]
    fig, ax = style.new_figure(6.4, 3.8)
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    for i, layer in enumerate(layers):
        pts = sorted((int(r["M"]), float(r["norm_time"])) for r in rows if r["layer"] == layer)
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        colour = style.OKABE_ITO[i % len(style.OKABE_ITO)]
        ax.plot(xs, ys, marker=style.MARKERS[i], color=colour, label=layer)
        j = ys.index(min(ys))
        ax.plot(xs[j], ys[j], marker="o", ms=11, mfc="none", mec=colour, ls="none")
    batch = rows[0]["batch"] if rows else "?"
    ms = sorted({int(r["M"]) for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("group size M (GEMM tasks sharing a filter matrix, placed together)")
    ax.set_ylabel("fused time / best time of layer")
    ax.set_title(f"Model (V100 preset), batch {batch}: effect of M (D_IG, D_GO smallest valid)")
    ax.legend(frameon=False)
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot)


if __name__ == "__main__":
    sys.exit(main())
