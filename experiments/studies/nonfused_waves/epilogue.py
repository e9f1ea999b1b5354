"""The GEMM's own kernel across channel counts: its cost fitted on the calibration layers' runs alone, without and
with the SM time of each task's prologue and epilogue (``TaskCost.sm_fixed_ns``), then every GEMM run of the
calibration and of a channel sweep simulated as measured (any CPU).

The calibration fits the GEMM's own-kernel cost (``megasim.calibration.winograd.kernel_fits``) on its runs at three
channel counts (C = 16, 64, 512). The channel sweep (``experiments.studies.nonfused_waves.measure --params ""``:
``N=32,K=64,H=W=96`` at C = 8-256 and ``N=64,K=128,H=W=28`` at C = 32-512, no validation layer) is held out: it
is never fitted here, only predicted. The fits start from the spec's other costs (``--spec``, its own-kernel
costs dropped), as the calibration's own-kernel stage does. A third fit is a what-if of another form: the GEMM's
stores taken out of its memory phase (a store does not stall the thread; their bytes set to ~0), no epilogue.

    python -m experiments.studies.nonfused_waves.epilogue --spec SPEC --measurements FILE \\
        --sweep experiments/results/nvidia-h200/nonfused_pipeline/csweep_measured.json --out FILE.json

Results and what they say: docs/findings.md, "The GEMM's epilogue". About 1 minute on 2 cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from megasim.calibration.cases import natural_cases, natural_rows, row_label, variant_case
from megasim.calibration.pool import simulate_case
from megasim.calibration.validation import run_meta
from megasim.calibration.winograd import kind_fits
from megasim.cli.common import read_measurements
from megasim.errors import MegasimError
from megasim.hardware.files import load_spec


def sweep_rows(doc: dict[str, Any], plan_params: str) -> list[dict[str, Any]]:
    """The sweep's GEMM runs alone (its own kernel at natural and forced occupancy), as calibration rows."""
    if doc.get("params", None) != plan_params:
        raise MegasimError(f"--sweep was measured at --params {doc.get('params')!r}, the calibration at "
                           f"{plan_params!r}: they must be the same")
    return [{k: v for k, v in r.items() if k != "what"} for r in doc["rows"]
            if r.get("what") == "kind" and r.get("kind") == "gemm" and "median_ms" in r]


def _stores_free(cases: dict) -> dict:
    """The GEMM's cases with its stores' bytes set to ~0 (the what-if: stores do not hold the memory phase)."""
    return {key: (kind, dataclasses.replace(g, access_bytes=np.where(g.access_write, 1e-3, g.access_bytes)), sched)
            for key, (kind, g, sched) in cases.items()}


def fit_and_predict(spec, m, sweep: list[dict[str, Any]], epilogue: bool, workers: int,
                    stores_free: bool = False) -> dict[str, Any]:
    """The GEMM's own-kernel cost fitted on ``m``'s calibration rows, and each calibration and sweep row predicted."""
    layers = tuple(m.layers)
    natural_of, params_of = natural_cases(m, layers)
    cases = _stores_free(natural_of["gemm"]) if stores_free else natural_of["gemm"]
    (job,), (fit,) = kind_fits(spec, m, layers, {"gemm": cases}, params_of, None, workers,
                               own_kernel=True, epilogue=epilogue)
    cost = dataclasses.replace(fit["cost"], megakernel_fixed_ns=0.0, megakernel_claim_ns=None)
    fitted = dataclasses.replace(spec, kernel_task_costs={"gemm": cost})
    everything = dataclasses.replace(m, kind_times=list(m.kind_times) + sweep)
    all_of, all_params = natural_cases(everything, tuple(everything.layers))
    all_cases = _stores_free(all_of["gemm"]) if stores_free else all_of["gemm"]
    rows = []
    for r in natural_rows(everything, all_cases, all_params):
        if r.get("kernel") == "megakernel" or r.get("timing") != "queued":
            continue
        g, s = variant_case(*all_cases[(r["layer"], all_params(r))][1:], r)
        predicted = simulate_case(("row", g, s, "queued"), fitted)
        measured = float(r["median_ms"]) * 1000.0
        rows.append({"layer": r["layer"], "run": row_label(r), "held_out": r["layer"] not in layers,
                     "measured_us": measured, "predicted_us": predicted, "error": predicted / measured - 1.0})
    return {"sm_fixed_ns_fitted": epilogue, "stores_free": stores_free, "free": list(job["free"]), "rms_log_error": fit["rms_log_error"],
            "cost": {f: getattr(cost, f) for f in job["free"]}, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="a calibrated spec (its GEMM's other costs are the fits' context)")
    ap.add_argument("--measurements", required=True, help="the calibration's measurements (.json or .json.gz)")
    ap.add_argument("--sweep", required=True, help="nonfused_waves_measured.json of the channel sweep")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        spec = dataclasses.replace(load_spec(args.spec), kernel_task_costs={})
        m = read_measurements(args.measurements, "--measurements")
        sweep = sweep_rows(json.loads(Path(args.sweep).read_text()), m.plan_params)
        fits = [fit_and_predict(spec, m, sweep, epilogue, args.workers, stores) for epilogue, stores in
                ((False, False), (True, False), (False, True))]
    except (MegasimError, OSError, ValueError, KeyError) as err:
        raise SystemExit(f"epilogue: {err}") from None
    for f in fits:
        print(f"sm_fixed_ns {'fitted' if f['sm_fixed_ns_fitted'] else 'not fitted'}"
              f"{', stores out of the memory phase' if f['stores_free'] else ''}: rms log error "
              f"{f['rms_log_error']:.3f} on the calibration rows"
              + (f", sm_fixed_ns {f['cost']['sm_fixed_ns']:.0f}" if f['sm_fixed_ns_fitted'] else ""))
        for r in f["rows"]:
            if r["run"].startswith("per_kind (queued)"):
                print(f"  {r['layer']:28s} {'held out' if r['held_out'] else 'fitted  '} {100 * r['error']:+6.1f}%")
    digest = {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in (args.spec, args.measurements, args.sweep)}
    doc = {"meta": run_meta({"what": __doc__.splitlines()[0], "inputs_sha256": digest}), "fits": fits}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":       # (the fits' Dask workers are spawned: they import this module)
    raise SystemExit(main())
