"""What the calibrated model predicts for a faster GEMM kernel: fused best and our non-fused, per Table-2 layer.

The 3xTF32 GEMM math runs the GEMM on tensor cores (``MEGASIM_GEMM_MATH=3xtf32``, ``gpu.kernels.winograd.gemm_tc``). Alone
(``gpu.diagnostics.bench_gemm``, the GEMM kernel timed by itself) it ran 1.51x the FP32 kernel's speed, geometric
mean over the 13 GEMM phases. The H200 spec's GEMM cost was fitted on the FP32 kernel; recalibrating it
takes the full ``megasim calibrate`` run. This what-if changes one fitted value instead: the GEMM kind's
``compute_efficiency`` times ``--factor`` (its other fitted terms, the per-task and megakernel costs,
stay). Nothing is fitted to the pipeline's measurements; they are printed beside the prediction
(``--measured``, a ``winograd_bench`` CSV).

Per layer it predicts our non-fused pipeline and the fused sweep of the bench (``experiments.sweeps.
layer_sweep``: M in {1, 2, 4, 8} x D_IG in {1, 2, 4} x the smallest valid D_IG for M) at factor 1 and at
``--factor``, writes DIR/gemm_speed_whatif.csv and .json with provenance, and prints the table. No GPU.

    python -m experiments.studies.fusion.gemm_speed_whatif --factor 1.51 \\
        --measured experiments/results/nvidia-h200/gemm_3xtf32/winograd_bench.csv   # ~10 min, 2 cores
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from experiments.studies.fusion.fusion_vs_dram import measured_speedups, sweep_at
from experiments.provenance import provenance, write_results
from experiments.studies.dispatch.ready_dispatch import geomean
from experiments.sweeps import SWEEP_D_IG_MULTS, SWEEP_M, parallel_map, print_table, spec_meta
from megasim.errors import MegasimError
from megasim.hardware import load_spec
from megasim.workloads import TABLE2_NAMES, parse_layer

SPEC = "megasim/hardware/calibrated/h200.json"
OUT = "experiments/results/model/gemm_speed_whatif"
KIND = "gemm"


def faster_gemm(spec, factor: float) -> dict:
    """Spec fields with the GEMM kind's ``compute_efficiency`` times ``factor`` (a what-if, not a fit)."""
    costs = dict(spec.task_costs)
    if KIND not in costs:
        raise MegasimError(f"spec {spec.name!r} has no {KIND!r} task cost to speed up")
    eff = costs[KIND].compute_efficiency
    if not 0 < eff * factor <= 1:
        raise MegasimError(f"--factor {factor:g} is not allowed: the GEMM's compute efficiency {eff:.4f} would become "
                           f"{eff * factor:.4f}; allowed up to {1 / eff:.4f} (efficiency 1)")
    costs[KIND] = dataclasses.replace(costs[KIND], compute_efficiency=eff * factor)
    return {"task_costs": costs}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--factor", type=float, required=True, help="GEMM speed-up alone (e.g. 1.51)")
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--measured", default=None, help="a winograd_bench CSV to print beside the prediction")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    if not (math.isfinite(args.factor) and args.factor > 0):
        raise SystemExit(f"--factor {args.factor!r} is not allowed: give a positive, finite speed-up")
    try:
        spec = load_spec(args.spec)
        over = faster_gemm(spec, args.factor)
        for layer in args.layers:
            parse_layer(layer)
    except MegasimError as err:
        raise SystemExit(str(err))
    if args.measured and not Path(args.measured).exists():
        raise SystemExit(f"--measured {args.measured!r}: no such file")
    jobs = [(args.spec, layer, spec.dram_bw_gbps, None, f) for f in ({}, over) for layer in args.layers]
    res = parallel_map(sweep_at, jobs, args.workers)
    measured = measured_speedups(args.measured) if args.measured else {}
    n = len(args.layers)
    rows = []
    for layer, base, fast in zip(args.layers, res[:n], res[n:]):
        rows.append({"layer": layer, "nonfused_us_fp32": base["nonfused_us"], "best_us_fp32": base["best_us"],
                     "speedup_best_fp32": base["speedup_best"], "nonfused_us_fast": fast["nonfused_us"],
                     "best_us_fast": fast["best_us"], "speedup_best_fast": fast["speedup_best"],
                     "speedup_best_measured": measured.get(layer, math.nan)})
    summary = {"layer": "geomean", **{k: geomean([r[k] for r in rows]) for k in rows[0] if k != "layer"}}
    print_table(rows + [summary], list(rows[0]))
    meta = provenance({"script": "experiments.studies.fusion.gemm_speed_whatif", "device": "model (no GPU)", "spec": args.spec,
                       "gpu_spec": spec_meta(spec), "gemm_compute_efficiency_factor": args.factor,
                       "layers": args.layers, "sweep_M": list(SWEEP_M),
                       "sweep_D_IG_multiples_of_min": list(SWEEP_D_IG_MULTS), "measured": args.measured})
    write_results(rows + [summary], args.out, "gemm_speed_whatif", meta)
    return rows


if __name__ == "__main__":
    main()
