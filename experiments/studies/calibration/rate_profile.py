"""A profile along one field of a kind's cost (by default its per-block DRAM rate): how well its runs fit at each
value, and what the spec then predicts for the fused schedule and for the mixed-kind runs.

For each ``--values`` value the kind's ``--field`` is held there and its other second-round fields are refitted
(``megasim update-spec``'s refit: from the spec's values, the update's light prior): on its single-kind runs alone,
as the kinds stage fits them, or with ``--beside-gemm`` on those and the mixed-kind runs it takes part in, as the
calibration fits the transforms (``megasim.calibration.winograd.beside_fits``). Where the runs fit about equally
well at two values, they leave the field loose; the fused predictions and the mixed-kind runs (the kind's blocks
sharing SMs with the GEMM's) say whether it matters and which value the mixed runs pick (docs/calibration.md,
"Beside the GEMM"; docs/findings.md, "The input transform's stretch, profiled").

    python -m experiments.studies.calibration.rate_profile --spec SPEC --measurements FILE --kind itrans \\
        --values 14 18 22 --out FILE.json
    python -m experiments.studies.calibration.rate_profile --spec SPEC --measurements FILE --kind itrans \\
        --field coresident_stretch --beside-gemm --values 0.15 0.34 0.55 --out FILE.json

Runs on: any CPU, about 5-10 s per value on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

from megasim.calibration.cases import mixed_checks
from megasim.calibration.fit import BOUNDS, FREE_ROUND2
from megasim.calibration.update import updated_spec
from megasim.calibration.validation import run_meta
from megasim.cli.common import read_measurements
from megasim.errors import MegasimError
from megasim.hardware.files import load_spec
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.workloads import parse_layer

FUSED_LAYERS = ("resnet-1", "N=32,C=16,K=64,H=96,W=96")


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--measurements", required=True)
    ap.add_argument("--kind", default="itrans")
    ap.add_argument("--field", default="block_dram_bw_gbps", choices=FREE_ROUND2, help="the field held")
    ap.add_argument("--values", "--rates", dest="values", nargs="+", type=float, required=True, metavar="VALUE",
                    help="the field's values (GB/s for the default field)")
    ap.add_argument("--beside-gemm", action="store_true",
                    help="refit on the mixed-kind runs too, as the calibration fits the transforms")
    ap.add_argument("--layers", nargs="+", default=list(FUSED_LAYERS),
                    help="layers whose default fused schedule to predict")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    lo, hi = BOUNDS[args.field]
    bad = [v for v in args.values if not lo <= v <= hi]
    if bad:
        raise SystemExit(f"rate_profile: --values {bad[0]!r} is not allowed: {args.field} is in [{lo}, {hi}]")
    try:
        return _run(args)
    except MegasimError as err:            # a bad file, kind or layer: one line naming it
        raise SystemExit(f"rate_profile: {err}") from None


def _run(args: argparse.Namespace) -> int:
    spec, m = load_spec(args.spec), read_measurements(args.measurements, "--measurements")
    if args.kind not in spec.task_costs:
        raise SystemExit(f"rate_profile: --kind {args.kind!r} is not allowed: the spec prices "
                         f"{', '.join(sorted(spec.task_costs))}")
    cases = {layer: build(parse_layer(layer), Plan.parse("fused", ""))[:2] for layer in args.layers}
    mixed = [r for r in m.extra.get("mixed_kind_rows") or [] if args.kind in r["kind"].split("+")]
    refit = tuple(f"{f}@{args.kind}" for f in FREE_ROUND2 if f != args.field)
    rows = []
    for value in args.values:
        held = dataclasses.replace(spec.task_costs[args.kind], **{args.field: value})
        fitted, report = updated_spec(dataclasses.replace(spec, task_costs={**spec.task_costs, args.kind: held}), m,
                                      refit=refit, workers=args.workers, beside_gemm=args.beside_gemm)
        cost = fitted.task_costs[args.kind]
        rows.append({args.field: value,
                     "rms_log_error": report["kinds"][args.kind]["rms_log_error"],
                     "fields": {f: getattr(cost, f) for f in FREE_ROUND2},
                     "fused_us": {layer: simulate(g, sch, fitted).predicted_us for layer, (g, sch) in cases.items()},
                     "mixed_errors": {f"{c['layer']} {c['kinds']}": c["error"] for c in mixed_checks(fitted, mixed)}})
        r = rows[-1]
        runs = "single-kind and mixed-kind runs" if args.beside_gemm else "single-kind runs"
        print(f"{args.kind} at {args.field} {value:6.3f}: rms log error {r['rms_log_error']:.4f} on its {runs}; fused "
              + ", ".join(f"{k} {v:.1f} us" for k, v in r["fused_us"].items()) + "; mixed "
              + ", ".join(f"{k} {100 * v:+.1f}%" for k, v in r["mixed_errors"].items()))
    out = {"meta": run_meta({"what": __doc__.splitlines()[0], "spec": args.spec, "spec_sha256": _sha256(args.spec),
                             "measurements": args.measurements, "measurements_sha256": _sha256(args.measurements),
                             "kind": args.kind, "field": args.field, "beside_gemm": args.beside_gemm}),
           "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":       # (the refit's Dask workers are spawned: they import this module)
    raise SystemExit(main())
