"""Where specs disagree about one kind: each spec's simulation of the kind's single-kind runs on chosen layers.

Two fits of one kind can sit in different minima that price the calibration layers' runs alike and a layer
elsewhere apart (docs/findings.md, "A fourth calibration layer"). For each layer this simulates the runs a
calibration measures of the kind (``megasim.calibration.cases.variant_case``: its own kernel at its natural
occupancy and at forced 2 and 1 blocks per SM, the megakernel per task and as persistent grids of 1 and 2 blocks
per SM; queued timing) under every ``--spec``, and prints each run's times side by side with their spread
(max / min - 1). A run whose spread is large on a layer and small on the calibration layers is one a calibration
can add to tell the minima apart. Only specs are read: no measured time.

    python -m experiments.studies.calibration.kind_minima --kind gemm \\
        --spec low SPEC_A --spec high SPEC_B --layers resnet-1 vgg-3 "N=32,C=512,K=512,H=9,W=9" --out FILE.json

Runs on: any CPU, about a second per layer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from megasim.calibration.cases import kind_cases, row_label, variant_case
from megasim.calibration.pool import simulate_case
from megasim.calibration.validation import run_meta
from megasim.errors import MegasimError
from megasim.hardware.files import load_spec

# The single-kind runs gpu.calibrate.occupancy measures of each kind, as measurement rows.
RUNS = ({"kernel": "per_kind"}, {"kernel": "per_kind", "extra_shared_bytes": 102400},
        {"kernel": "per_kind", "extra_shared_bytes": 163840}, {"kernel": "megakernel"},
        {"kernel": "megakernel", "style": "persistent", "blocks_per_sm": 1},
        {"kernel": "megakernel", "style": "persistent", "blocks_per_sm": 2})


def kind_runs_us(specs: dict, kind: str, layer: str, params: str = "") -> list[dict]:
    """Per run of `kind` on `layer`, its label, task count and simulated time (us) under each spec."""
    subs = kind_cases((layer,), params).get(kind)
    if not subs:
        raise MegasimError(f"--kind {kind!r} is not allowed: the non-fused schedule of {layer} has no such launch")
    _, sub, sched = subs[0]
    rows = []
    for run in RUNS:
        graph, schedule = variant_case(sub, sched, run)
        times = {name: simulate_case((layer, graph, schedule, "queued"), spec) for name, spec in specs.items()}
        rows.append({"layer": layer, "run": row_label({**run, "timing": "queued"}), "tasks": int(sub.num_tasks),
                     "us": times, "spread": max(times.values()) / min(times.values()) - 1.0})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", nargs=2, action="append", required=True, metavar=("NAME", "FILE"))
    ap.add_argument("--kind", default="gemm")
    ap.add_argument("--layers", nargs="+", required=True)
    ap.add_argument("--param", default="", help="implementation parameters of the non-fused plan (default: the defaults)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        specs = {name: load_spec(path) for name, path in args.spec}
        rows = [r for layer in args.layers for r in kind_runs_us(specs, args.kind, layer, args.param)]
    except MegasimError as err:            # a bad spec file, kind or layer: one line naming it
        raise SystemExit(f"kind_minima: {err}") from None
    for r in rows:
        print(f"{r['layer']:28s} {r['run']:40s} " + " ".join(f"{n} {t:9.1f}" for n, t in r["us"].items())
              + f"  spread {100 * r['spread']:.1f}%")
    out = {"meta": run_meta({"what": __doc__.splitlines()[0], "kind": args.kind, "param": args.param,
                             "specs": {name: path for name, path in args.spec}}), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
