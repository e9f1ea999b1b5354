"""Which fitted field moves a spec's fused prediction of the calibration layers: each field two specs disagree on,
put back one at a time (predictions only: no measurement, no validation row).

Two specs of one GPU fitted from two measurement sets (``--spec``, ``--reference``) predict a layer's default fused
schedule apart (``prior_spread``'s criterion). For every task-cost field and spec value where they differ by more
than 0.1%, ``--spec`` with that one field set to ``--reference``'s value predicts each ``--layers`` layer's default
fused schedule again; the fields are listed by how far their swap alone moves the prediction (the largest first).

    python -m experiments.studies.calibration.fused_field_swap --spec A.json --reference B.json \\
        --layers resnet-1 N=32,C=16,K=64,H=96,W=96 --out FILE.json

Runs on: any CPU, about 1 s per field and layer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.studies.calibration.field_swap import differing_fields, swapped
from megasim.calibration.validation import run_meta
from megasim.hardware.files import spec_from_dict
from megasim.cli.common import read_json
from megasim.errors import MegasimError
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.workloads import parse_layer

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--layers", nargs="+", default=["resnet-1", "N=32,C=16,K=64,H=96,W=96"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except MegasimError as err:            # a bad file or layer: one line naming it
        raise SystemExit(f"fused_field_swap: {err}") from None


def _run(args: argparse.Namespace) -> int:
    spec, reference = read_json(args.spec, "--spec"), read_json(args.reference, "--reference")
    for data, flag, path in ((spec, "--spec", args.spec), (reference, "--reference", args.reference)):
        spec_from_dict(data, f"{flag} {path!r}")
    cases = {layer: build(parse_layer(layer), Plan.parse("fused", ""))[:2] for layer in args.layers}

    def predicted(data: dict) -> dict[str, float]:
        s = spec_from_dict(data, "a swapped spec")
        return {layer: simulate(g, sch, s).predicted_us for layer, (g, sch) in cases.items()}

    base, ref = predicted(spec), predicted(reference)
    rows = []
    for kind, field in differing_fields(spec, reference):
        table = spec["task_costs"][kind] if kind else spec["values"]
        ref_table = reference["task_costs"][kind] if kind else reference["values"]
        moved = predicted(swapped(spec, reference, kind, field))
        rows.append({"field": f"task_costs.{kind}.{field}" if kind else f"values.{field}",
                     "spec_value": table[field]["value"], "reference_value": ref_table[field]["value"],
                     "moves": {layer: moved[layer] / base[layer] - 1.0 for layer in cases}})
    rows.sort(key=lambda r: -max(abs(v) for v in r["moves"].values()))
    out = {"meta": run_meta({"what": __doc__.splitlines()[0], "spec": args.spec, "reference": args.reference}),
           "fused_us": {"spec": base, "reference": ref}, "swaps": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"fused, --spec against --reference: " + ", ".join(f"{k} {base[k]:.1f} / {ref[k]:.1f} us" for k in base))
    for r in rows[:8]:
        moves = ", ".join(f"{k} {100 * v:+.1f}%" for k, v in r["moves"].items())
        print(f"  {r['field']:45s} {r['spec_value']:12.5g} -> {r['reference_value']:12.5g}: {moves}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
