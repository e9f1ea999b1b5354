"""Where would fusion pay 1.25x? The calibrated model's fused/non-fused speedup against DRAM bandwidth.

Issue 3 asks the fused megakernel (best of a small Algorithm 1 sweep) to run 1.25x faster than our
non-fused pipeline; on the H200 and the H100 it runs 0.94x and 0.97x (docs/winograd_gpu.md). The
megakernel's gain is DRAM traffic it keeps in L2, so its worth depends on how scarce DRAM bandwidth is
next to the SMs. This what-if takes the H200's calibrated spec (task costs fitted on the H200, nothing
fitted here) and changes one value, the DRAM bandwidth, over ``--bandwidths`` (4250 and 3019 GB/s are
the H200's and the H100's measured copies; the others are GPUs that do not exist: GH100 SMs beside
slower memory). Per bandwidth and Table-2 layer it predicts our non-fused pipeline and the fused sweep
of the bench (M in {1, 2, 4, 8} x D_IG in {1, 2, 4} x the smallest valid D_IG for M; ``experiments.
sweeps.layer_sweep``), and reports the best speedup and its geometric mean over the 13 layers. The
measured geometric means of the two real GPUs (``experiments.benchmarks.winograd_bench`` CSVs) are printed beside
them; the transfer experiment (docs/findings.md, Calibration and validation) measured how well the model follows a
bandwidth change (predicted +5.5%, measured +3.5% in the default mapping's speedup from the H200 to the
H100), so read the slower-memory rows as the model's extrapolation, a direction and a rough size.

Writes DIR/fusion_vs_dram.csv (one row per bandwidth and layer), DIR/fusion_vs_dram_summary.csv (one
row per bandwidth), their JSON with provenance, and DIR/fusion_vs_dram.png/.pdf drawn from the CSVs
alone (``--plot-only`` redraws it). No GPU.

    python -m experiments.studies.fusion.fusion_vs_dram [--bandwidths 4250,3019,2000,1500,1000] [--layers ...] [--workers 2] [--out DIR]   # ~6 min, 2 cores
    python -m experiments.studies.fusion.fusion_vs_dram --plot-only [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from experiments.provenance import provenance, write_results
from experiments.studies.dispatch.ready_dispatch import geomean, measured_ms
from experiments.sweeps import SWEEP_D_IG_MULTS, SWEEP_M, layer_sweep, parallel_map, print_table, spec_meta
from megasim.errors import MegasimError
from megasim.hardware import load_spec
from megasim.workloads import TABLE2_NAMES, parse_layer

SPEC = "megasim/hardware/calibrated/h200.json"
BANDWIDTHS_GBPS = (4250.0, 3019.0, 2000.0, 1500.0, 1000.0)
# The last benches that ran F(4x4) on every layer, as the model's sweeps here do (the top-level
# winograd_bench.csv runs each layer's default tile, F(6x6) on 8 of the 13).
MEASURED = {"NVIDIA H200": "experiments/results/nvidia-h200/bench_5a57591/winograd_bench.csv",
            "NVIDIA H100": "experiments/results/nvidia-h100/bench_5a57591/winograd_bench.csv"}
OUT = "experiments/results/model/fusion_vs_dram"
TARGET = 1.25


def measured_speedups(path: str) -> dict[str, float]:
    """Per layer: our non-fused median over the fused sweep's best median, from a winograd_bench CSV."""
    ms = measured_ms(path)
    layers = dict.fromkeys(layer for layer, _ in ms)
    return {layer: ms[(layer, "nonfused")] / ms[(layer, "fused_sweep_best")] for layer in layers
            if (layer, "nonfused") in ms and (layer, "fused_sweep_best") in ms}


def sweep_at(job: tuple) -> dict[str, Any]:
    """One layer's non-fused and fused-sweep prediction with the spec's DRAM bandwidth set to ``bw``
    (GB/s) and, when ``sms`` is given, its SM count set to ``sms``, and any other spec fields in ``over``
    (a dict): job = (spec_path, layer, bw[, sms[, over]])."""
    spec_path, layer, bw, *rest = job
    spec = dataclasses.replace(load_spec(spec_path), dram_bw_gbps=bw)
    if rest and rest[0] is not None:
        spec = dataclasses.replace(spec, sm_count=int(rest[0]))
    if len(rest) > 1 and rest[1]:
        spec = dataclasses.replace(spec, **rest[1])
    summary, _ = layer_sweep(parse_layer(layer), spec, SWEEP_M, SWEEP_D_IG_MULTS)
    return {"dram_bw_gbps": bw, "sm_count": spec.sm_count, "layer": layer, "nonfused_us": summary["nonfused_us"],
            "best_us": summary["best_us"], "best_M": summary["best_M"], "best_D_IG": summary["best_D_IG"],
            "best_D_GO": summary["best_D_GO"], "speedup_best": summary["speedup_best"],
            "speedup_default": summary["speedup_default"], "l2_hit_nonfused": summary["l2_hit_nonfused"],
            "l2_hit_best": summary["l2_hit_best"], "dram_mb_nonfused": summary["dram_mb_nonfused"],
            "dram_mb_best": summary["dram_mb_best"]}


def plot(out_dir: str | Path) -> tuple[Path, Path]:
    """Predicted best-of-sweep speedup against DRAM bandwidth: a thin line per layer, the geometric
    mean thick, the two GPUs' measured geometric means as points, the issue's 1.25x as a dashed line."""
    from experiments.figures import style
    from experiments.provenance import read_rows
    out = Path(out_dir)
    rows = read_rows(out / "fusion_vs_dram.csv")
    summary = read_rows(out / "fusion_vs_dram_summary.csv")
    meta = json.loads((out / "fusion_vs_dram_summary.json").read_text())["meta"]
    style.apply()
    fig, ax = style.new_figure()
    for i, layer in enumerate(dict.fromkeys(r["layer"] for r in rows)):
        mine = sorted((float(r["dram_bw_gbps"]), float(r["speedup_best"])) for r in rows if r["layer"] == layer)
        ax.plot([m[0] / 1e3 for m in mine], [m[1] for m in mine], color="grey", lw=0.7, alpha=0.6,
                label="one Table-2 layer (predicted)" if i == 0 else None)
    mean = sorted((float(r["dram_bw_gbps"]), float(r["speedup_best_geomean"])) for r in summary)
    ax.plot([m[0] / 1e3 for m in mean], [m[1] for m in mean], color=style.OKABE_ITO[0], lw=2.2, marker="o",
            label="geometric mean, predicted (H200 spec, DRAM bandwidth changed)")
    bw_of = {"NVIDIA H200": 4250.0, "NVIDIA H100": 3019.0}
    for j, m in enumerate(meta.get("measured_geomeans", [])):
        if m["device"] in bw_of:
            ax.plot(bw_of[m["device"]] / 1e3, m["speedup_best_geomean"], ls="none", marker=style.MARKERS[j + 1],
                    ms=8, color=style.OKABE_ITO[j + 1], label=f"{m['device']}, measured geometric mean")
    ax.axhline(TARGET, color="black", ls="--", lw=1, label=f"issue 3's target, {TARGET:g}x")
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_xlabel("DRAM bandwidth (TB/s)")
    ax.set_ylabel("fused best / our non-fused (x)")
    ax.legend(loc="upper right")
    return style.save_figure(fig, out, "fusion_vs_dram")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--bandwidths", default=",".join(f"{b:g}" for b in BANDWIDTHS_GBPS),
                    help="DRAM bandwidths in GB/s, comma-separated")
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from DIR's CSVs")
    args = ap.parse_args(argv)
    if args.plot_only:
        if not (Path(args.out) / "fusion_vs_dram_summary.csv").exists():
            raise SystemExit(f"--plot-only: {args.out!r} holds no fusion_vs_dram results (run without --plot-only first)")
        plot(args.out)
        return read_summary(args.out)
    try:
        bandwidths = list(dict.fromkeys(float(b) for b in args.bandwidths.split(",") if b.strip()))
    except ValueError:
        raise SystemExit(f"--bandwidths {args.bandwidths!r} is not allowed: give numbers in GB/s, comma-separated")
    if not bandwidths or not all(math.isfinite(b) and b > 0 for b in bandwidths):
        raise SystemExit(f"--bandwidths {args.bandwidths!r} is not allowed: give positive, finite GB/s values")
    try:
        spec = load_spec(args.spec)
        for layer in args.layers:
            parse_layer(layer)
    except MegasimError as err:
        raise SystemExit(str(err))
    rows = parallel_map(sweep_at, [(args.spec, layer, bw) for bw in bandwidths for layer in args.layers],
                        args.workers)
    summary = []
    for bw in bandwidths:
        mine = [r for r in rows if r["dram_bw_gbps"] == bw]
        best = [r["speedup_best"] for r in mine]
        summary.append({"dram_bw_gbps": bw, "layers": len(mine), "speedup_best_geomean": round(geomean(best), 4),
                        "speedup_best_min": min(best), "speedup_best_max": max(best),
                        f"layers_at_{TARGET:g}x": sum(b >= TARGET for b in best)})
    measured = []
    for device, path in MEASURED.items():
        if Path(path).exists():
            sp = measured_speedups(path)
            sp = {k: v for k, v in sp.items() if k in args.layers}
            measured.append({"device": device, "file": path, "layers": len(sp),
                             "speedup_best_geomean": round(geomean(list(sp.values())), 4)})
    print_table(rows, ["dram_bw_gbps", "layer", "nonfused_us", "best_us", "best_M", "speedup_best", "dram_mb_nonfused",
                       "dram_mb_best"])
    print()
    print_table(summary, list(summary[0]))
    print()
    print_table(measured, ["device", "layers", "speedup_best_geomean"])
    meta = provenance({"script": "experiments.studies.fusion.fusion_vs_dram", "device": "model (no GPU)", "spec": args.spec,
                       "gpu_spec": spec_meta(spec), "bandwidths_gbps": bandwidths, "layers": args.layers,
                       "sweep_M": list(SWEEP_M), "sweep_D_IG_multiples_of_min": list(SWEEP_D_IG_MULTS),
                       "measured_geomeans": measured, "target": TARGET})
    write_results(rows, args.out, "fusion_vs_dram", meta)
    write_results(summary, args.out, "fusion_vs_dram_summary", meta)
    plot(args.out)
    return summary


def read_summary(out_dir: str | Path) -> list[dict]:
    from experiments.provenance import read_rows
    return read_rows(Path(out_dir) / "fusion_vs_dram_summary.csv")


if __name__ == "__main__":
    main()
