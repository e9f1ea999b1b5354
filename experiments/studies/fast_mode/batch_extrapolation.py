"""Is simulating small batches and extrapolating in the batch a usable fast mode of the engine?

Produces ``DIR/batch_extrapolation.csv`` and ``.json`` (default DIR =
experiments/results/fast_mode): per Table-2 layer and schedule, the exact prediction at the layer's
batch N, the predictions at ``--batches N1,N2`` and their linear extrapolation to N,
``t(N2) + (t(N2) - t(N1)) (N - N2) / (N2 - N1)``, its error against the exact run, and the tasks each
side simulates. From: the megasim model on one preset (``--gpu``, default H100); no GPU is used.
The answer for N1, N2 = 8, 16 at N = 64 (41% of the tasks, so about 2.4x faster): no, errors up to 77%;
a small batch's grid fills a few waves of the GPU, whose quantisation does not scale (docs/findings.md).

Run time (2 shared cores): about 1 minute; ``--quick`` (3 layers) about 10 s.

    python -m experiments.studies.fast_mode.batch_extrapolation [--quick] [--out DIR] [--gpu H100] [--batches 8,16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from experiments.provenance import provenance, write_results
from megasim.errors import MegasimError
from megasim.hardware import get_gpu
from megasim.plan import Plan, predict
from megasim.workloads import TABLE2_NAMES, parse_layer

QUICK_LAYERS = ("resnet-4", "yolov3-3", "densenet-1")
SCHEDULES = ("fused", "nonfused")


def _batches(text: str) -> tuple[int, int]:
    try:
        n1, n2 = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give two batches N1,N2 with 1 <= N1 < N2") from None
    if not 1 <= n1 < n2:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give two batches N1,N2 with 1 <= N1 < N2")
    return n1, n2


def run(layers: Sequence[str], gpu: str, n1: int, n2: int) -> list[dict]:
    spec = get_gpu(gpu)
    rows = []
    for name in layers:
        problem = parse_layer(name)
        if problem.n <= n2:
            continue
        for schedule in SCHEDULES:
            exact, _ = predict(problem, spec, Plan(schedule))
            small = [predict(problem.with_batch(n), spec, Plan(schedule))[0] for n in (n1, n2)]
            t1, t2 = (r.predicted_us for r in small)
            estimate = t2 + (t2 - t1) * (problem.n - n2) / (n2 - n1)
            rows.append({"layer": name, "schedule": schedule, "batch": problem.n, "n1": n1, "n2": n2,
                         "exact_us": round(exact.predicted_us, 3), "t_n1_us": round(t1, 3), "t_n2_us": round(t2, 3),
                         "extrapolated_us": round(estimate, 3), "error": round(estimate / exact.predicted_us - 1, 5),
                         "exact_tasks": exact.num_tasks, "small_tasks": sum(r.num_tasks for r in small)})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="experiments/results/fast_mode")
    p.add_argument("--gpu", default="H100")
    p.add_argument("--batches", type=_batches, default=(8, 16))
    args = p.parse_args(argv)
    try:
        get_gpu(args.gpu)
    except MegasimError as exc:
        p.error(f"--gpu {args.gpu!r}: {exc}")
    n1, n2 = args.batches
    rows = run(QUICK_LAYERS if args.quick else TABLE2_NAMES, args.gpu, n1, n2)
    print(f"{'layer':11s} {'schedule':9s} {'exact us':>9s} {'extrap. us':>10s} {'error':>8s}")
    for r in rows:
        print(f"{r['layer']:11s} {r['schedule']:9s} {r['exact_us']:9.1f} {r['extrapolated_us']:10.1f} {100 * r['error']:+7.2f}%")
    summary = {}
    for schedule in SCHEDULES:
        errors = [abs(r["error"]) for r in rows if r["schedule"] == schedule]
        if errors:
            summary[schedule] = {"mean_abs_error": round(sum(errors) / len(errors), 4), "max_abs_error": round(max(errors), 4)}
            print(f"{schedule}: mean |error| {100 * summary[schedule]['mean_abs_error']:.1f}%, "
                  f"max {100 * summary[schedule]['max_abs_error']:.1f}%")
    tasks = sum(r["small_tasks"] for r in rows) / max(1, sum(r["exact_tasks"] for r in rows))
    print(f"tasks simulated: {100 * tasks:.0f}% of the exact runs'")
    write_results(rows, Path(args.out), "batch_extrapolation",
                  provenance({"gpu": args.gpu, "batches": [n1, n2], "quick": args.quick, "summary": summary,
                              "task_fraction": round(tasks, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
