"""Which fitted field decides a spec's validation miss: each field that two specs disagree on, put back one
at a time.

Two specs of the same GPU, fitted from the same kind of measurements (``--spec`` the one that misses,
``--reference`` one that does not), predict the same measured validation rows (``--measured``, a
``validation_measured.csv``); for every task-cost field and spec-wide fitted value where they differ by
more than 0.1%, ``--spec`` with that one field set to ``--reference``'s value predicts them again. A field
whose swap alone moves a layer's fused/non-fused speedup error (``megasim.calibration.validation
.summarize``) most is where the two fits part. Nothing is fitted here; no GPU is used.

Produces: DIR/field_swap.csv (one row per (swapped field, layer): the field, its two values, the layer's
MAPE and speedup error with the swap; the first rows, field ``none``, are ``--spec`` unchanged) and
DIR/field_swap.json (the same rows and provenance: both specs, the measured file, commit, date).
Runs on: any CPU. Takes: about 3 minutes for 35 fields and 4 layers on 2 cores.

    python -m experiments.studies.calibration.field_swap --spec A.json --reference B.json \
        --measured validation.csv --layers yolov3-1,yolov3-2,resnet-1,densenet-1 --out DIR
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

from experiments.provenance import provenance, write_results

RELATIVE_DIFFERENCE = 1e-3


def differing_fields(spec: dict[str, Any], reference: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(cost name, field) of every task-cost field, and (None, field) of every spec-wide value, whose
    values differ by more than RELATIVE_DIFFERENCE between the two spec files."""
    def differs(a: Any, b: Any) -> bool:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return abs(a - b) > RELATIVE_DIFFERENCE * max(abs(a), abs(b))
        return a != b
    out: list[tuple[str, str | None]] = []
    for kind, cost in spec["task_costs"].items():
        for field, entry in cost.items():
            ref = reference["task_costs"].get(kind, {}).get(field)
            if isinstance(entry, dict) and isinstance(ref, dict) and differs(entry.get("value"), ref.get("value")):
                out.append((kind, field))
    for field, entry in spec["values"].items():
        ref = reference["values"].get(field)
        if isinstance(entry, dict) and isinstance(ref, dict) and differs(entry.get("value"), ref.get("value")):
            out.append((None, field))
    return out


def swapped(spec: dict[str, Any], reference: dict[str, Any], kind: str | None, field: str) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    where, ref = (out["task_costs"][kind], reference["task_costs"][kind]) if kind else (out["values"], reference["values"])
    where[field]["value"] = ref[field]["value"]
    return out


def per_layer(spec: dict[str, Any], measured: list[dict[str, str]], workers: int, client: Any) -> dict[str, dict]:
    """The validation summary's per-layer figures of `spec` on the measured rows."""
    from megasim.calibration.validation import predict_rows, summarize
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(spec, fh)
    try:
        rows = predict_rows(measured, fh.name, "swap", workers=workers, client=client)
    finally:
        Path(fh.name).unlink()
    return summarize(rows)["per_layer"]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="the spec whose miss is looked into")
    parser.add_argument("--reference", required=True, help="a spec of the same GPU that does not miss")
    parser.add_argument("--measured", required=True, help="a validation_measured.csv (or a validation.csv)")
    parser.add_argument("--layers", default="yolov3-1,yolov3-2,resnet-1,densenet-1")
    parser.add_argument("--out", required=True)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    from megasim.cli.validate import read_measured
    from megasim.errors import MegasimError
    from megasim.sweep.cluster import open_client
    layers = [name.strip() for name in args.layers.split(",") if name.strip()]
    try:
        spec, reference = (json.loads(Path(p).read_text()) for p in (args.spec, args.reference))
        measured = read_measured(args.measured, layers)
    except (OSError, json.JSONDecodeError, MegasimError) as err:
        parser.error(str(err))
    if not measured:
        parser.error(f"--measured {args.measured!r} has no rows of the layers {', '.join(layers)}")
    fields = [(None, None)] + differing_fields(spec, reference)
    rows = []
    print(f"{'field':40s} " + " ".join(f"{name:>12s}" for name in layers) + "   (speedup error)")
    with open_client(workers=args.workers) as client:
        for kind, field in fields:
            trial = spec if field is None else swapped(spec, reference, kind, field)
            figures = per_layer(trial, measured, args.workers, client)
            label = "none" if field is None else (f"{kind}.{field}" if kind else field)
            if field is None:
                values = (None, None)
            else:
                own, ref = ((spec["task_costs"][kind], reference["task_costs"][kind]) if kind
                            else (spec["values"], reference["values"]))
                values = (own[field]["value"], ref[field]["value"])
            for layer in layers:
                f = figures.get(layer, {})
                rows.append({"field": label, "spec_value": values[0], "reference_value": values[1], "layer": layer,
                             "mape": f.get("mape"), "speedup_error": f.get("speedup_error")})
            print(f"{label:40s} " + " ".join(f"{figures.get(l, {}).get('speedup_error', float('nan')):+12.3f}"
                                             for l in layers), flush=True)
    meta = provenance({"study": "field_swap", "spec": args.spec, "reference": args.reference,
                       "measured": args.measured, "layers": layers})
    write_results(rows, Path(args.out), "field_swap", meta)
    return rows


if __name__ == "__main__":
    main()
