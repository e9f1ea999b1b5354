"""Does the H200's calibration predict the H100? The 208 validation runs measured on an H100, predicted three ways.

Specs (none fitted on an H100 run):
- ``h200``: the H200's calibrated spec unchanged (what a user without the H100's microbenchmarks has);
- ``transfer``: ``megasim transfer-spec``: the H200's task costs and fitted rules, every value that
  ``gpu.calibrate.measure``'s microbenchmarks measure taken from the H100's run (``h100_from_h200.json``);
- ``transfer_l2_kept``: the transfer with the H200's L2 bandwidth kept (``transfer-spec --keep
  l2_bw_gbps``). The probe before its fix of 2026-11-25 read 23.5 TB/s on the H100 and 9.9 TB/s on the H200, the same
  GH100 L2: it timed a difference of two runs that both held Numba's host launch cost, and re-read from
  L1 (docs/findings.md; the fixed probe reads 4.48 TB/s on both). This row shows how much
  that one value moves.

Per spec: the validation summary (MAPE, ordering, regret, fused/non-fused speedup at the default mapping),
and per layer the MAPE and the speedup predicted against measured. Writes DIR/transfer_h100.csv (one row
per spec and layer, plus "all") and .json with provenance; each spec's validation.csv under DIR/<spec>/.

    python -m experiments.studies.transfer.transfer_h100 [--out DIR] [--workers N]      # ~6 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from experiments.provenance import provenance, write_results
from megasim.calibration.measurements import Measurements
from megasim.calibration.transfer import transferred_spec
from megasim.hardware import dump_spec, load_spec
from megasim.calibration.validation import CSV_COLUMNS, predict_rows, read_rows, summarize, write_rows

H200_SPEC = "megasim/hardware/calibrated/h200.json"
TRANSFER_SPEC = "megasim/hardware/calibrated/h100_from_h200.json"
MEASURED = "experiments/results/nvidia-h100/transfer/validation_measured.csv"
H100_MEASUREMENTS = "experiments/results/nvidia-h100/transfer/h100.measurements.json"
OUT = "experiments/results/nvidia-h100/transfer"


def l2_kept_spec(path: Path) -> str:
    """The transfer with the H200's L2 bandwidth kept (``transfer-spec --keep l2_bw_gbps``), written to `path`."""
    moved = load_spec(TRANSFER_SPEC)
    m = Measurements.from_dict(json.loads(Path(H100_MEASUREMENTS).read_text()))
    dump_spec(transferred_spec(load_spec(H200_SPEC), m, name=f"{moved.name}, L2 bandwidth kept",
                               keep=("l2_bw_gbps",)), path)
    return str(path)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", default=MEASURED)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--workers", type=int, help="processes for the predictions (default: all cores)")
    args = ap.parse_args(argv)
    measured = [r for r in read_rows(args.measured) if r.get("measured_us") not in ("", None)]
    out = Path(args.out)
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        specs = {"h200": (H200_SPEC, H200_SPEC), "transfer": (TRANSFER_SPEC, TRANSFER_SPEC),
                 "transfer_l2_kept": (l2_kept_spec(Path(tmp) / "l2_kept.json"),
                                      f"{TRANSFER_SPEC} with l2_bw_gbps of {H200_SPEC}")}
        for name, (path, label) in specs.items():
            rows = predict_rows(measured, path, label, workers=args.workers)
            rows = [{c: r.get(c, "") for c in CSV_COLUMNS} for r in rows]
            write_rows(rows, out / name / "validation.csv", CSV_COLUMNS)
            summary = summarize([r for r in rows if r["predicted_us"] != ""])
            o = summary["overall"]
            table.append({"spec": name, "layer": "all", "points": o["points"], "mape": o["mape"],
                          "max_error": o["max_error"], "kendall_tau": o["kendall_tau"],
                          "pairwise_accuracy": o["pairwise_accuracy_min"], "regret": o["regret_max"],
                          "regret_fused": o.get("regret_fused_max"), "speedup_predicted": None,
                          "speedup_measured": None, "speedup_error": o.get("speedup_error_max"),
                          "targets_met": sum(summary["targets_met"].values()),
                          "targets": len(summary["targets_met"])})
            for layer, v in summary["per_layer"].items():
                table.append({"spec": name, "layer": layer, "points": v["points"], "mape": v["mape"],
                              "max_error": v["max_error"], "kendall_tau": v["kendall_tau"],
                              "pairwise_accuracy": v["pairwise_accuracy"], "regret": v["regret"],
                              "regret_fused": v.get("regret_fused"), "speedup_predicted": v.get("speedup_predicted"),
                              "speedup_measured": v.get("speedup_measured"), "speedup_error": v.get("speedup_error"),
                              "targets_met": None, "targets": None})
    print(f"{'spec':>17} {'MAPE':>6} {'max err':>8} {'tau':>6} {'min pairwise':>12} {'worst regret':>12} "
          f"{'worst speedup err':>17} {'targets':>8}")
    for r in table:
        if r["layer"] == "all":
            speedup = "n/a" if r["speedup_error"] is None else f"{r['speedup_error']:.1%}"
            print(f"{r['spec']:>17} {r['mape']:6.1%} {r['max_error']:8.1%} {r['kendall_tau']:6.3f} "
                  f"{r['pairwise_accuracy']:12.3f} {r['regret']:12.1%} {speedup:>17} "
                  f"{r['targets_met']:>4}/{r['targets']}")
    meta = provenance({"measured": args.measured, "specs": {k: v[1] for k, v in specs.items()},
                       "device_measured": measured[0].get("device") if measured else None,
                       "metric_definitions": "megasim.calibration.validation.summarize; per-layer pairwise_accuracy in the 'all' "
                                             "row is the minimum over layers, regret and speedup_error the maximum"})
    write_results(table, out, "transfer_h100", meta)
    return table


if __name__ == "__main__":
    main()
