"""Ready-queue dispatch against ticket dispatch: the model's prediction beside the H200's measurement.

For each Table-2 layer, megasim predicts (calibrated spec) our non-fused pipeline and the fused
megakernel at the default Algorithm 1 parameters under ticket dispatch (the paper's) and under
ready-queue dispatch (``megasim.ready``); the measured medians come from a
``experiments.benchmarks.winograd_bench`` CSV (impls ``nonfused``, ``fused``, ``fused_ready``). The spec was fitted
on ticket-dispatch calibration runs only, so the ready column is a prediction of a policy the model
never saw. Prints a table; writes DIR/ready_dispatch.csv and .json with provenance.

    python -m experiments.studies.dispatch.ready_dispatch [--layers ...] [--measured CSV] [--spec FILE] [--out DIR]   # ~6 min, 1 core
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from experiments.provenance import provenance, write_results
from megasim.hardware import load_spec
from megasim.plan import Plan, predict
from megasim.workloads import TABLE2_NAMES, parse_layer

SPEC = "megasim/hardware/calibrated/h200.json"
MEASURED = "experiments/results/nvidia-h200/ready_dispatch/winograd_bench.csv"
PLANS = {"nonfused": Plan(schedule="nonfused"), "fused": Plan(), "fused_ready": Plan(dispatch="ready")}


def measured_ms(path: str) -> dict[tuple[str, str], float]:
    with open(path, newline="") as fh:
        return {(r["layer"], r["impl"]): float(r["median_ms"]) for r in csv.DictReader(fh) if r["status"] == "ok"}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--measured", default=MEASURED)
    ap.add_argument("--out", default="experiments/results/nvidia-h200/ready_dispatch")
    args = ap.parse_args(argv)
    from experiments.layer_args import checked_layers
    checked_layers(args.layers, ap.error)   # every layer named is a problem, before any work
    spec = load_spec(args.spec)
    meas = measured_ms(args.measured)
    rows = []
    for name in args.layers:
        problem = parse_layer(name)
        row: dict = {"layer": name}
        for impl, plan in PLANS.items():
            row[f"{impl}_predicted_us"] = predict(problem, spec, plan)[0].predicted_ns / 1e3
            ms = meas.get((name, impl))
            row[f"{impl}_measured_us"] = ms * 1e3 if ms is not None else math.nan
        rows.append(row)
    head = f"{'layer':>11} " + " ".join(f"{i + ' pred/meas':>24}" for i in PLANS) + "   ticket/ready pred  meas"
    print(head)
    for r in rows:
        cells = " ".join(f"{r[i + '_predicted_us']:11.0f} /{r[i + '_measured_us']:11.0f}" for i in PLANS)
        print(f"{r['layer']:>11} {cells}   {r['fused_predicted_us'] / r['fused_ready_predicted_us']:17.2f} "
              f"{r['fused_measured_us'] / r['fused_ready_measured_us']:5.2f}")
    ok = [r for r in rows if math.isfinite(r["fused_ready_measured_us"])]
    err = [abs(r["fused_ready_predicted_us"] / r["fused_ready_measured_us"] - 1) for r in ok]
    agree = sum((r["fused_predicted_us"] > r["fused_ready_predicted_us"]) ==
                (r["fused_measured_us"] > r["fused_ready_measured_us"]) for r in ok)
    summary = {"ready_mape": sum(err) / len(err) if err else math.nan,
               "ready_max_error": max(err) if err else math.nan,
               "faster_of_ticket_and_ready_agrees": f"{agree} of {len(ok)}",
               "ticket_over_ready_predicted_geomean": geomean([r["fused_predicted_us"] / r["fused_ready_predicted_us"] for r in ok]),
               "ticket_over_ready_measured_geomean": geomean([r["fused_measured_us"] / r["fused_ready_measured_us"] for r in ok])}
    print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    meta = provenance({"script": "experiments.studies.dispatch.ready_dispatch", "spec": args.spec, "measured": args.measured,
                       "summary": summary})
    write_results(rows, args.out, "ready_dispatch", meta)
    return rows


if __name__ == "__main__":
    main()
