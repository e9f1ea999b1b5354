"""Fig. 11 on the model: fused vs non-fused Winograd over whole networks' 3x3 convolutions.

Produces ``DIR/fig11_networks.csv`` (one row per catalogue layer of VGG-16, ResNet-50, YOLOv3 and
DenseNet-161: shape, batch, whether it is included, predicted non-fused and fused times, speedup, the
Algorithm 1 parameters used, L2 hit rates), ``DIR/fig11_networks_summary.csv`` (per network: summed
times and speedup), their JSON (provenance, GPU spec, parameters) and ``DIR/fig11_networks.png``/``.pdf``,
drawn from ``fig11_networks.csv`` alone.

From: the megasim model on a GPU spec preset (default H100); no GPU is used. As in the paper's Fig. 11
(Sec. 7.4): every 3x3 convolution of each network at a 224x224 input (YOLOv3 416x416, as the catalogue
has it), batch 64, DenseNet-161 batch 48; the network's figure is the sum over its layers. Stride-2 3x3
layers (ResNet-50's three downsampling convolutions, YOLOv3's five) are **skipped**: the paper replaces
only stride-1 convolutions and the Winograd lowering needs stride 1; they appear in the CSV with
``included=False`` and the reason. Fused = Algorithm 1 with default parameters (M = 4, smallest valid
D_IG and D_GO); non-fused = the model's four-kernel pipeline (the paper normalises to cuDNN, which the
model does not have). Layers of equal shape are simulated once (the model is deterministic) and the
prediction is reused (column ``same_as``). Two worker processes.

Run time (2 shared cores): full ~50 s (23 distinct shapes, up to 310 k tasks each; 46 s of model time on
2 workers); ``--quick`` (batch 4, 3 layers per network) ~3 s.

    python -m experiments.figures.fig11_networks [--quick] [--out DIR] [--gpu H100] [--workers 2]
    python -m experiments.figures.fig11_networks --plot-only --out DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiments.figures import style
from experiments.provenance import provenance, read_rows, write_results
from experiments.sweeps import parallel_map, print_table, run_script, spec_meta
from megasim.errors import MegasimError
from megasim.plan import Plan, predict
from megasim.workloads import ConvProblem, network_layers

NAME = "fig11_networks"
NETWORKS = (("vgg16", 64), ("resnet50", 64), ("yolov3", 64), ("densenet161", 48))   # Sec. 7.4 batches
QUICK_BATCH = 4
QUICK_LAYERS = 3      # per network, evenly spaced over its stride-1 layers
WORKERS = 2
SKIP_REASON = "stride 2: not replaced in the paper's Fig. 11; the Winograd lowering needs stride 1"


def _extra_args(ap) -> None:
    ap.add_argument("--workers", type=int, default=WORKERS, help=f"worker processes (default {WORKERS})")


def _predict_shape(job: tuple[ConvProblem, Any]) -> dict[str, Any]:
    """Non-fused and fused (default Algorithm 1) predictions of one layer shape (a worker's task)."""
    problem, spec = job
    out: dict[str, Any] = {}
    start = time.perf_counter()
    for schedule in ("nonfused", "fused"):
        try:
            result, plan = predict(problem, spec, Plan(schedule))
        except MegasimError as exc:
            out.update({f"{schedule}_us": "", "reason": str(exc)})
            continue
        out[f"{schedule}_us"] = round(result.predicted_us, 3)
        out[f"l2_hit_{schedule}"] = round(result.l2_hit_rate, 4)
        out["tasks"] = result.num_tasks
        if schedule == "fused":
            out.update(D_IG=plan.params.d_ig, D_GO=plan.params.d_go, M=plan.params.m)
    out["sim_wall_s"] = round(time.perf_counter() - start, 2)
    return out


def _selected(layers: Sequence[ConvProblem], quick: bool) -> set[str]:
    stride1 = [p.name for p in layers if p.stride == 1]
    if not quick:
        return set(stride1)
    idx = np.unique(np.linspace(0, len(stride1) - 1, QUICK_LAYERS).round().astype(int))
    return {stride1[i] for i in idx}


def compute(args, spec) -> Path:
    rows: list[dict[str, Any]] = []
    jobs: dict[tuple, ConvProblem] = {}      # distinct shape -> its first layer
    for network, batch in NETWORKS:
        batch = QUICK_BATCH if args.quick else batch
        layers = network_layers(network)
        chosen = _selected(layers, args.quick)
        for p in layers:
            if args.quick and p.name not in chosen and p.stride == 1:
                continue
            p = p.with_batch(batch)
            row = {"gpu": spec.name, "network": network, "layer": p.name, "C": p.c, "K": p.k, "H": p.h, "W": p.w,
                   "stride": p.stride, "batch": batch, "included": p.stride == 1,
                   "reason": "" if p.stride == 1 else SKIP_REASON, "same_as": ""}
            if p.stride == 1:
                key = (p.n, p.c, p.k, p.h, p.w, p.r, p.s, p.padding)
                first = jobs.setdefault(key, p)
                row["same_as"] = "" if first is p else first.name
                row["_key"] = key
            rows.append(row)
    keys = list(jobs)
    print(f"  {sum(r['included'] for r in rows)} stride-1 layers, {len(keys)} distinct shapes, "
          f"{sum(not r['included'] for r in rows)} stride-2 layers skipped; {args.workers} workers", flush=True)
    results = dict(zip(keys, parallel_map(_predict_shape, [(jobs[k], spec) for k in keys], args.workers)))
    for row in rows:
        key = row.pop("_key", None)
        if key is None:
            continue
        res = dict(results[key])
        if row["same_as"]:
            res["sim_wall_s"] = 0.0          # reused, not simulated again
        row.update(res)
        if row.get("nonfused_us") not in ("", None) and row.get("fused_us") not in ("", None):
            row["speedup"] = round(row["nonfused_us"] / row["fused_us"], 4)
        else:
            row["included"] = False
    summary = network_summary(rows)
    params = {"networks": {n: (QUICK_BATCH if args.quick else b) for n, b in NETWORKS},
              "fused": "Algorithm 1, default parameters (M=4, smallest valid D_IG and D_GO)",
              "nonfused": "the model's four-kernel pipeline (no cuDNN on the model side)",
              "skipped": SKIP_REASON, "distinct_shapes": len(keys),
              "layers_per_network": f"{QUICK_LAYERS} evenly spaced stride-1 layers" if args.quick else "all",
              "implementation": Plan().param_string(), "workers": args.workers, "quick": args.quick}
    meta = provenance({**spec_meta(spec), "script": f"experiments.{NAME}", "device": "model (no GPU)",
                       "parameters": params})
    write_results(summary, args.out, f"{NAME}_summary", meta)
    csv_path, _ = write_results(rows, args.out, NAME, meta)
    print()
    print_table([r for r in rows if r["included"] and not r["same_as"]],
                ["layer", "C", "K", "H", "batch", "nonfused_us", "fused_us", "speedup", "D_IG", "M", "sim_wall_s"])
    print()
    print_table(summary, ["network", "batch", "layers", "skipped", "nonfused_us", "fused_us", "speedup",
                          "layer_speedup_min", "layer_speedup_max"])
    return csv_path


def network_summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per network: summed predicted times of its included layers and their ratio (rows as written or
    as read back from the CSV)."""
    out = []
    for network in dict.fromkeys(r["network"] for r in rows):
        mine = [r for r in rows if r["network"] == network]
        inc = [r for r in mine if str(r["included"]) == "True"]
        nf = sum(float(r["nonfused_us"]) for r in inc)
        fu = sum(float(r["fused_us"]) for r in inc)
        sp = [float(r["speedup"]) for r in inc]
        out.append({"network": network, "batch": mine[0]["batch"], "layers": len(inc),
                    "skipped": len(mine) - len(inc), "nonfused_us": round(nf, 1), "fused_us": round(fu, 1),
                    "speedup": round(nf / fu, 4) if fu else "",
                    "layer_speedup_min": round(min(sp), 4) if sp else "",
                    "layer_speedup_max": round(max(sp), 4) if sp else ""})
    return out


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Bars of the per-network speedup (summed times), each layer's speedup as dots over its bar."""
    rows = read_rows(csv_path)
    summary = network_summary(rows)
    meta_gpu = rows[0]["gpu"] if rows else "?"
    fig, ax = style.new_figure(6.4, 3.6)
    x = np.arange(len(summary))
    speedups = np.array([float(s["speedup"]) for s in summary])
    ax.bar(x, speedups, 0.6, color=style.OKABE_ITO[0], alpha=0.85, label="network (summed times)")
    rng = np.random.default_rng(0)       # fixed jitter: the same CSV gives the same figure
    for i, s in enumerate(summary):
        pts = [float(r["speedup"]) for r in rows if r["network"] == s["network"] and r["included"] == "True"]
        ax.plot(i + rng.uniform(-0.22, 0.22, len(pts)), pts, ls="none", marker="o", ms=3, mfc="none",
                color=style.OKABE_ITO[1], label="one layer" if i == 0 else None)
        ax.text(i, speedups[i] / 2, f"{speedups[i]:.2f}x", ha="center", va="center", fontsize=9, color="white",
                fontweight="bold")
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    labels = [f"{s['network']}\n{s['layers']} layers, batch {s['batch']}\n"
              f"{float(s['nonfused_us']) / 1e3:.2f} -> {float(s['fused_us']) / 1e3:.2f} ms"
              + (f"\n({s['skipped']} stride-2 skipped)" if s["skipped"] else "") for s in summary]
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlabel("summed predicted time, non-fused -> fused", fontsize=7)
    ax.set_ylabel("speedup over non-fused (x)")
    ax.set_title(f"Model ({meta_gpu} preset): 3x3 stride-1 convolutions per network, fused vs non-fused")
    ax.legend(frameon=False, loc="upper left", fontsize=7, ncol=2)
    top = max(float(np.max(speedups, initial=1.0)), max((float(r["speedup"]) for r in rows
                                                           if r["included"] == "True"), default=1.0))
    ax.set_ylim(0, max(1.3, top * 1.25))
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot, extra_args=_extra_args, default_gpu="H100")


if __name__ == "__main__":
    sys.exit(main())
