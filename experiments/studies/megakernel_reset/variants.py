"""The megakernel's per-run reset (``GPUSpec.megakernel_reset_ns``) against the validation sets: the validation
summaries of several H200 specs side by side, with each spec's file hash and its reset and per-task megakernel
costs, in one JSON.

The variants (docs/calibration.md, "The megakernel's reset"), each a spec file built as its ``--variant`` note
says and validated with ``megasim validate table2 --spec FILE --measured CSV --out DIR`` on the 208 mappings
(``experiments/results/nvidia-h200/calibration_measure_fit/validation_measured.csv``) and, with
``--mappings 32``, the 416 (``experiments/results/nvidia-h200/validate_scaling/measured_1gpu.csv``):

- ``before``: the fit without the reset (``git show afe1c08:megasim/hardware/calibrated/h200.json``);
- ``reset_added``: that file with ``megakernel_reset_ns`` added and nothing refitted (the reset counted twice:
  the old fit's per-task costs already hold it);
- ``updated``: ``megasim update-spec --spec before.json --measurements
  megasim/hardware/calibrated/h200.measurements.json --out FILE`` (the committed spec);
- ``full_refit``: ``megasim calibrate --algo winograd --from-measurements
  megasim/hardware/calibrated/h200.measurements.json --out FILE`` with the reset in the model.

    python -m experiments.studies.megakernel_reset.variants --out FILE \\
        --variant NAME SPEC DIR_208 DIR_416 NOTE [--variant ...]

Reads only the files named; no simulation (seconds).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
from pathlib import Path

from megasim.hardware import load_spec
from megasim.calibration.validation import run_meta

SUMMARY_KEYS = ("mape", "kendall_tau", "pairwise_accuracy_min", "pairwise_accuracy_resolved_min", "regret_max",
                "regret_fused_max", "speedup_error_max")


def _per_layer(summary: dict, rows_csv: Path) -> dict:
    """Per layer: regret, speedup error, and the mean of predicted / measured - 1 over its fused mappings and
    over its non-fused ones (``megasim validate``'s rows)."""
    errors: dict[str, dict[str, list[float]]] = {}
    with rows_csv.open() as f:
        for r in csv.DictReader(f):
            if r.get("predicted_us") and r.get("measured_us"):
                side = "nonfused" if r["schedule"] == "nonfused" else "fused"
                errors.setdefault(r["layer"], {}).setdefault(side, []).append(
                    float(r["predicted_us"]) / float(r["measured_us"]) - 1.0)
    return {layer: {"regret": v["regret"], "speedup_error": v.get("speedup_error"),
                    **{f"mean_error_{side}": sum(e) / len(e) for side, e in sorted(errors.get(layer, {}).items())}}
            for layer, v in summary["per_layer"].items()}


def variant_entry(spec_path: str, dirs: dict[str, str], note: str) -> dict:
    """One variant: its spec (hash, reset, each cost name's megakernel_fixed_ns) and, per validation set, the
    overall metrics, the bars missed, each layer's pairwise accuracy, and each layer's regret, speedup error and
    mean signed error (predicted / measured - 1) of its fused and of its non-fused mappings."""
    spec = load_spec(spec_path)
    entry = {"note": note, "spec": spec_path, "spec_sha256": hashlib.sha256(Path(spec_path).read_bytes()).hexdigest(),
             "megakernel_reset_ns": spec.megakernel_reset_ns,
             "megakernel_fixed_ns": {k: c.megakernel_fixed_ns for k, c in sorted(spec.task_costs.items())
                                     if k != "default"}}
    for name, folder in dirs.items():
        summary = json.loads((Path(folder) / "validation_summary.json").read_text())
        entry[name] = {"overall": {k: summary["overall"][k] for k in SUMMARY_KEYS},
                       "bars_not_met": [t for t, ok in summary["targets_met"].items() if not ok],
                       "pairwise_accuracy": {layer: v["pairwise_accuracy"] for layer, v in summary["per_layer"].items()},
                       "per_layer": _per_layer(summary, Path(folder) / "validation.csv"),
                       "measured_from": summary["meta"]["measured_from"]}
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", nargs=5, action="append", required=True,
                    metavar=("NAME", "SPEC", "DIR_208", "DIR_416", "NOTE"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    variants = {name: variant_entry(spec, {"mappings_208": d208, "mappings_416": d416}, note)
                for name, spec, d208, d416, note in args.variant}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": run_meta({"what": __doc__.splitlines()[0]}), "variants": variants},
                              indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
