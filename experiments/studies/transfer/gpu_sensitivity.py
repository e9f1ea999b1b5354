"""How the model's fused-over-non-fused speedup and best Algorithm 1 parameters move across GPUs.

Produces ``DIR/gpu_sensitivity.csv`` (one row per (GPU, layer): the GPU's SM count and L2 size,
predicted non-fused time, fused time with default and with the best parameters of a small sweep,
speedups, the best M and D_IG multiple), ``DIR/gpu_sensitivity_points.csv`` (every simulated point),
their JSON (provenance, every GPU spec, parameters) and ``DIR/gpu_sensitivity.png``/``.pdf``, drawn
from the CSV alone.

From: the megasim model on the V100, A100, H100 and H200 presets (``--gpus``); no GPU is used. For each
GPU and each of the paper's 13 Table-2 layers at batch 64, the sweep of Figs. 7/8
(``experiments.sweeps.layer_sweep``): non-fused, fused with default parameters (M = 4, smallest valid
D_IG and D_GO), and fused with M in {1, 2, 4, 8} x D_IG in {1, 2, 4} x the smallest valid D_IG for M
(D_GO default). Speedups are over the model's own non-fused schedule. The presets' latencies and
per-block bandwidths are uncalibrated estimates (each preset's ``source`` says so), so this shows how
the model responds to SM count, L2 size and bandwidth, not measured GPUs. The ``--gpu`` option of the
other scripts is not used here. Two worker processes.

Run time (2 shared cores): full ~4 min (236 s of model time on 2 workers); ``--quick`` (4 layers, batch
8, M in {1, 4}, D_IG x {1, 2}) ~4 s.

    python -m experiments.studies.transfer.gpu_sensitivity [--quick] [--out DIR] [--gpus V100,A100,H100,H200] [--workers 2]
    python -m experiments.studies.transfer.gpu_sensitivity --plot-only --out DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiments.figures import style
from experiments.provenance import provenance, read_rows, write_results
from experiments.sweeps import (FULL_BATCH, QUICK_BATCH, QUICK_SWEEP_D_IG_MULTS, QUICK_SWEEP_M, SWEEP_D_IG_MULTS,
                                SWEEP_M, layer_sweep, parallel_map, print_table, run_script, spec_meta)
from megasim.hardware import get_gpu
from megasim.plan import Plan
from megasim.workloads import TABLE2_NAMES, parse_layer

NAME = "gpu_sensitivity"
GPUS = ("V100", "A100", "H100", "H200")
QUICK_LAYERS = ("resnet-1", "resnet-3", "yolov3-2", "densenet-1")
WORKERS = 2


def _extra_args(ap) -> None:
    ap.add_argument("--gpus", default=",".join(GPUS), help=f"GPU presets, comma-separated (default {','.join(GPUS)})")
    ap.add_argument("--workers", type=int, default=WORKERS, help=f"worker processes (default {WORKERS})")


def _sweep(job: tuple[str, str, int, tuple[int, ...], tuple[int, ...]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """layer_sweep of one (GPU, layer) (a worker's task); rows carry the GPU's name and size."""
    gpu, layer, batch, m_values, mults = job
    spec = get_gpu(gpu)
    start = time.perf_counter()
    summary, points = layer_sweep(parse_layer(layer, batch), spec, m_values, mults)
    ident = {"gpu": spec.name, "sm_count": spec.sm_count, "l2_mb": round(spec.l2_bytes / 2**20, 1),
             "dram_bw_gbps": spec.dram_bw_gbps}
    summary = {**ident, **summary, "wall_s": round(time.perf_counter() - start, 2)}
    return summary, [{**ident, **p} for p in points]


def compute(args, _spec) -> Path:
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    specs = [get_gpu(g) for g in gpus]          # a bad name fails here, before any work
    batch = QUICK_BATCH if args.quick else FULL_BATCH
    layers = QUICK_LAYERS if args.quick else TABLE2_NAMES
    m_values = QUICK_SWEEP_M if args.quick else SWEEP_M
    mults = QUICK_SWEEP_D_IG_MULTS if args.quick else SWEEP_D_IG_MULTS
    jobs = [(g, layer, batch, m_values, mults) for g in gpus for layer in layers]
    print(f"  {len(jobs)} (GPU, layer) sweeps on {args.workers} workers", flush=True)
    summaries, points = [], []
    for summary, pts in parallel_map(_sweep, jobs, args.workers):
        summaries.append(summary)
        points += pts
    params = {"gpus": gpus, "batch": batch, "layers": list(layers), "sweep_M": list(m_values),
              "sweep_D_IG_multiples_of_min": list(mults), "D_GO": "default (smallest valid for M)",
              "default": "M=4, smallest valid D_IG and D_GO",
              "baseline": "the model's own non-fused schedule (four kernels)",
              "implementation": Plan().param_string(), "workers": args.workers, "quick": args.quick}
    meta = provenance({"script": f"experiments.{NAME}", "device": "model (no GPU)",
                       "gpu_specs": [spec_meta(s) for s in specs], "parameters": params})
    write_results(points, args.out, f"{NAME}_points", meta)
    csv_path, _ = write_results(summaries, args.out, NAME, meta)
    print()
    print_table(summaries, ["gpu", "layer", "nonfused_us", "default_us", "best_us", "best_M", "best_d_ig_mult",
                            "speedup_default", "speedup_best", "l2_hit_nonfused", "l2_hit_best"])
    print()
    print_table(per_gpu(summaries), ["gpu", "sm_count", "l2_mb", "layers", "speedup_default_mean",
                                     "speedup_best_mean", "speedup_best_geomean", "best_M_mode"])
    return csv_path


def per_gpu(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean speedups per GPU (rows as written or as read back from the CSV)."""
    out = []
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        mine = [r for r in rows if r["gpu"] == gpu]
        best = np.array([float(r["speedup_best"]) for r in mine])
        ms = [int(r["best_M"]) for r in mine]
        out.append({"gpu": gpu, "sm_count": mine[0]["sm_count"], "l2_mb": mine[0]["l2_mb"], "layers": len(mine),
                    "speedup_default_mean": round(float(np.mean([float(r["speedup_default"]) for r in mine])), 4),
                    "speedup_best_mean": round(float(best.mean()), 4),
                    "speedup_best_geomean": round(float(np.exp(np.log(best).mean())), 4),
                    "best_M_mode": max(set(ms), key=ms.count)})
    return out


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Top: best-of-sweep speedup per layer, a bar per GPU, the default-parameter speedup as a tick.
    Bottom: the best M per layer and GPU, labelled with the best D_IG multiple."""
    rows = read_rows(csv_path)
    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    summary = {s["gpu"]: s for s in per_gpu(rows)}
    style.apply()
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 5.6), sharex=True, height_ratios=(3, 2))
    x = np.arange(len(layers))
    w = 0.8 / max(1, len(gpus))
    for i, gpu in enumerate(gpus):
        by_layer = {r["layer"]: r for r in rows if r["gpu"] == gpu}
        r0, s = next(iter(by_layer.values())), summary[gpu]
        colour = style.OKABE_ITO[i % len(style.OKABE_ITO)]
        xi = x + (i - (len(gpus) - 1) / 2) * w
        best = [float(by_layer[l]["speedup_best"]) if l in by_layer else np.nan for l in layers]
        default = [float(by_layer[l]["speedup_default"]) if l in by_layer else np.nan for l in layers]
        top.bar(xi, best, w, color=colour,
                label=f"{gpu}: {r0['sm_count']} SMs, {float(r0['l2_mb']):g} MB L2 "
                      f"(mean {s['speedup_best_mean']:.2f}x best, {s['speedup_default_mean']:.2f}x default)")
        top.plot(xi, default, ls="none", marker="_", ms=7, mew=1.5, color="black",
                 label="default D_IG / D_GO / M" if i == 0 else None)
        ms = [int(by_layer[l]["best_M"]) if l in by_layer else np.nan for l in layers]
        bottom.plot(xi, ms, ls="none", marker=style.MARKERS[i % len(style.MARKERS)], color=colour)
        for xv, l in zip(xi, layers):
            if l in by_layer:
                bottom.annotate(f"{by_layer[l]['best_d_ig_mult']}", (xv, int(by_layer[l]["best_M"])),
                                textcoords="offset points", xytext=(0, 4), ha="center", fontsize=5)
    top.axhline(1.0, color="black", lw=0.8, ls="--")
    top.set_ylabel("speedup over non-fused (x)")
    top.set_ylim(0, max(1.3, max(float(r["speedup_best"]) for r in rows) * 1.45))
    top.legend(frameon=False, fontsize=6.5, loc="upper right")
    top.set_title(f"Model presets, Table-2 layers, batch {rows[0]['batch']}: fused (best of sweep; tick = "
                  f"default parameters) vs non-fused", fontsize=9)
    m_all = sorted({int(r["best_M"]) for r in rows})
    bottom.set_yscale("log", base=2)
    bottom.set_yticks(m_all, [str(m) for m in m_all])
    bottom.set_ylim(min(m_all) / 1.6, max(m_all) * 2.2)
    bottom.set_ylabel("best M\n(label: D_IG / smallest)")
    bottom.set_xticks(x, layers, rotation=45, ha="right")
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot, extra_args=_extra_args, uses_gpu_option=False)


if __name__ == "__main__":
    sys.exit(main())
