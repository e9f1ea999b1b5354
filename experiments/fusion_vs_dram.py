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
measured geometric means of the two real GPUs (``experiments.winograd_bench`` CSVs) are printed beside
them; the transfer experiment (docs/validation.md, session 19) measured how well the model follows a
bandwidth change (predicted +5.5%, measured +3.5% in the default mapping's speedup from the H200 to the
H100), so read the slower-memory rows as the model's extrapolation, a direction and a rough size.

Writes DIR/fusion_vs_dram.csv (one row per bandwidth and layer), DIR/fusion_vs_dram_summary.csv (one
row per bandwidth) and their JSON with provenance. No GPU.

    python -m experiments.fusion_vs_dram [--bandwidths 4250,3019,2000,1500,1000] [--layers ...] [--workers 2] [--out DIR]   # ~8 min, 2 cores
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
from pathlib import Path
from typing import Any

from experiments.provenance import provenance, write_results
from experiments.sweeps import SWEEP_D_IG_MULTS, SWEEP_M, layer_sweep, parallel_map, print_table, spec_meta
from megasim.errors import MegasimError
from megasim.hardware import load_spec
from megasim.workloads import TABLE2_NAMES, parse_layer

SPEC = "megasim/hardware/calibrated/h200.json"
BANDWIDTHS_GBPS = (4250.0, 3019.0, 2000.0, 1500.0, 1000.0)
MEASURED = {"NVIDIA H200": "experiments/results/nvidia-h200/winograd_bench.csv",
            "NVIDIA H100": "experiments/results/nvidia-h100/winograd_bench.csv"}
OUT = "experiments/results/model/fusion_vs_dram"
TARGET = 1.25


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def measured_speedups(path: str) -> dict[str, float]:
    """Per layer: our non-fused median over the fused sweep's best median, from a winograd_bench CSV."""
    ms: dict[tuple[str, str], float] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            if r["status"] == "ok":
                ms[(r["layer"], r["impl"])] = float(r["median_ms"])
    layers = dict.fromkeys(layer for layer, _ in ms)
    return {layer: ms[(layer, "nonfused")] / ms[(layer, "fused_sweep_best")] for layer in layers
            if (layer, "nonfused") in ms and (layer, "fused_sweep_best") in ms}


def _sweep(job: tuple[str, str, float]) -> dict[str, Any]:
    spec_path, layer, bw = job
    spec = dataclasses.replace(load_spec(spec_path), dram_bw_gbps=bw)
    summary, _ = layer_sweep(parse_layer(layer), spec, SWEEP_M, SWEEP_D_IG_MULTS)
    return {"dram_bw_gbps": bw, "layer": layer, "nonfused_us": summary["nonfused_us"],
            "best_us": summary["best_us"], "best_M": summary["best_M"], "best_D_IG": summary["best_D_IG"],
            "best_D_GO": summary["best_D_GO"], "speedup_best": summary["speedup_best"],
            "speedup_default": summary["speedup_default"], "l2_hit_nonfused": summary["l2_hit_nonfused"],
            "l2_hit_best": summary["l2_hit_best"], "dram_mb_nonfused": summary["dram_mb_nonfused"],
            "dram_mb_best": summary["dram_mb_best"]}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--bandwidths", default=",".join(f"{b:g}" for b in BANDWIDTHS_GBPS),
                    help="DRAM bandwidths in GB/s, comma-separated")
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    try:
        bandwidths = [float(b) for b in args.bandwidths.split(",") if b.strip()]
    except ValueError:
        raise SystemExit(f"--bandwidths {args.bandwidths!r} is not allowed: give numbers in GB/s, comma-separated")
    if not bandwidths or min(bandwidths) <= 0:
        raise SystemExit(f"--bandwidths {args.bandwidths!r} is not allowed: give positive GB/s values")
    try:
        spec = load_spec(args.spec)
        for layer in args.layers:
            parse_layer(layer)
    except MegasimError as err:
        raise SystemExit(str(err))
    rows = parallel_map(_sweep, [(args.spec, layer, bw) for bw in bandwidths for layer in args.layers],
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
    meta = provenance({"script": "experiments.fusion_vs_dram", "device": "model (no GPU)", "spec": args.spec,
                       "gpu_spec": spec_meta(spec), "bandwidths_gbps": bandwidths, "layers": args.layers,
                       "sweep_M": list(SWEEP_M), "sweep_D_IG_multiples_of_min": list(SWEEP_D_IG_MULTS),
                       "measured_geomeans": measured, "target": TARGET})
    write_results(rows, args.out, "fusion_vs_dram", meta)
    write_results(summary, args.out, "fusion_vs_dram_summary", meta)
    return summary


if __name__ == "__main__":
    main()
