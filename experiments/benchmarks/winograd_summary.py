"""The headline ratios of a Winograd bench run (``experiments.benchmarks.winograd_bench``'s CSV), as the README and
docs/gpu_kernels.md state them: geometric means over the run's layers, no GPU needed.

Definitions (docs/gpu_kernels.md, "Performance"): *fused best* is the faster of the mapping sweep's best
(``fused_sweep_best``) and that mapping with blockIdx dispatch (``fused_blockidx_best``); *fused default* is
``fused``, ``conv2d``'s default mapping; *cuDNN best FP32* is the faster of cuDNN Find's FP32 pick
(``cudnn_best_fp32``) and WINOGRAD_NONFUSED (``cudnn_winograd_nonfused``); *GEMM % cuBLAS* is cuBLAS's time on
the same GEMMs over ours (``cublas_gemm_phase`` / ``our_gemm_phase``). A ratio ``a / b`` is ``b``'s time over
``a``'s (above 1: ``a`` is faster). Only rows whose status is ok count; a layer missing one of a ratio's rows
is left out of that ratio, and the count says so.

    python -m experiments.benchmarks.winograd_summary experiments/results/nvidia-h200/winograd_bench.csv [--out F.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

from megasim.errors import MegasimError
from megasim.input_files import read_csv

RATIOS = (
    ("fused best / cuDNN best FP32", ("fused_sweep_best", "fused_blockidx_best"), ("cudnn_best_fp32", "cudnn_winograd_nonfused")),
    ("fused default / cuDNN best FP32", ("fused",), ("cudnn_best_fp32", "cudnn_winograd_nonfused")),
    ("our non-fused / cuDNN best FP32", ("nonfused",), ("cudnn_best_fp32", "cudnn_winograd_nonfused")),
    ("fused best / our non-fused", ("fused_sweep_best", "fused_blockidx_best"), ("nonfused",)),
    ("GEMM phase / cuBLAS (cuBLAS time over ours)", ("our_gemm_phase",), ("cublas_gemm_phase",)),
)


def best_ms(cells: dict[str, float], impls: tuple[str, ...]) -> float | None:
    """The fastest of `impls`' medians that the layer has (None: none of them)."""
    times = [cells[i] for i in impls if i in cells]
    return min(times) if times else None


def summarize(rows: list[dict[str, str]]) -> dict[str, dict]:
    """Per ratio: its geometric mean, the layers it covers and each layer's value."""
    by_layer: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("status", "ok") != "ok":
            continue
        ms = float(r["median_ms"])
        if math.isfinite(ms) and ms > 0:
            by_layer.setdefault(r["layer"], {})[r["impl"]] = ms
    out = {}
    for name, ours, theirs in RATIOS:
        per_layer = {}
        for layer, cells in by_layer.items():
            a, b = best_ms(cells, ours), best_ms(cells, theirs)
            if a is not None and b is not None:
                per_layer[layer] = b / a
        geo = math.exp(sum(math.log(v) for v in per_layer.values()) / len(per_layer)) if per_layer else math.nan
        out[name] = {"geomean": geo, "layers": len(per_layer), "per_layer": per_layer}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="a winograd_bench CSV")
    ap.add_argument("--out", default=None, help="also write the summary as JSON here")
    args = ap.parse_args(argv)
    try:
        rows = read_csv(args.csv, args.csv)[1]
        missing = {"layer", "impl", "median_ms"} - set(rows[0] if rows else ())
        if missing:
            raise ValueError(f"no rows with the columns {', '.join(sorted(missing))}")
    except (OSError, ValueError, csv.Error, MegasimError) as err:
        print(f"winograd_summary: {args.csv} cannot be read as a winograd_bench CSV: {err}", file=sys.stderr)
        return 2
    summary = summarize(rows)
    for name, s in summary.items():
        print(f"{name:48s} {s['geomean']:.3f}x over {s['layers']} layers")
    if args.out:
        Path(args.out).write_text(json.dumps({"csv": args.csv, "ratios": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
