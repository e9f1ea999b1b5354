"""The H200's costs fitted from scratch at the measured per-block L2 ratio and at the bandwidths' own, each
validated on the three validation sets: does the measured ratio predict the mappings better?

Both fits use the committed calibration measurements (``megasim/hardware/calibrated/h200.measurements.json``);
the measured one adds ``block_l2_bw_ratio`` from ``experiments/results/nvidia-h200/block_l2_rate/block_l2_rate.json``
(``experiments.studies.block_l2_rate.measure``). Each spec is validated, as ``megasim validate table2
--measured``, on the 208 mappings, the 416 mappings and their re-measurement.

    python -m experiments.studies.block_l2_rate.variants --out DIR      # ~5 min on 2 cores
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from experiments.provenance import provenance

MEASUREMENTS = "megasim/hardware/calibrated/h200.measurements.json"
RATIO = "experiments/results/nvidia-h200/block_l2_rate/block_l2_rate.json"
SETS = {"208": "experiments/results/nvidia-h200/calibration_measure_fit/validation_measured.csv",
        "416": "experiments/results/nvidia-h200/validate_scaling/measured_1gpu.csv",
        "416_rerun": "experiments/results/nvidia-h200/validation_rerun/validation_measured.csv"}


def megasim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "megasim.cli.main", *args], check=True, stdout=subprocess.DEVNULL)


def summary(path: Path) -> dict:
    """The bars' metrics of a validation summary: MAPE, the worst layer's pairwise accuracy, regret (all
    mappings and the fused ones), the speedup error, and the bars missed."""
    s = json.loads(path.read_text())
    layers = s["per_layer"]
    worst = min(layers, key=lambda k: layers[k]["pairwise_accuracy"])
    fused = max(layers, key=lambda k: layers[k].get("regret_fused") or 0.0)
    return {"mape": s["overall"]["mape"], "pairwise_worst": layers[worst]["pairwise_accuracy"], "pairwise_worst_layer": worst,
            "regret_max": max(v["regret"] for v in layers.values()),
            "regret_fused_max": layers[fused].get("regret_fused"), "regret_fused_layer": fused,
            "missed": [k for k, met in s["targets_met"].items() if not met]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ratio = json.loads(Path(RATIO).read_text())["meta"]["block_l2_bw_ratio"]
    m = json.loads(Path(MEASUREMENTS).read_text())
    m["values"]["block_l2_bw_ratio"] = {"value": ratio, "method": f"one block's L2 over its DRAM read rate ({RATIO})"}
    (out / "measured_ratio.measurements.json").write_text(json.dumps(m))
    results = {}
    for name, measurements in (("own_ratio", MEASUREMENTS), ("measured_ratio", str(out / "measured_ratio.measurements.json"))):
        spec = out / f"{name}.json"
        megasim("calibrate", "--algo", "winograd", "--from-measurements", measurements, "--out", str(spec))
        results[name] = {}
        for tag, measured in SETS.items():
            megasim("validate", "table2", "--spec", str(spec), "--measured", measured, "--out", str(out / f"{name}_{tag}"))
            results[name][tag] = summary(out / f"{name}_{tag}" / "validation_summary.json")
            r = results[name][tag]
            print(f"{name:15s} {tag:10s} MAPE {r['mape']:.3f}  pairwise {r['pairwise_worst']:.3f} ({r['pairwise_worst_layer']})  "
                  f"regret {r['regret_max']:.3f}, fused {r['regret_fused_max']:.3f} ({r['regret_fused_layer']})  missed {len(r['missed'])}")
    (out / "block_l2_rate_variants.json").write_text(json.dumps(
        {"meta": provenance({"script": "block_l2_rate.variants", "block_l2_bw_ratio": ratio}), "variants": results}, indent=1))


if __name__ == "__main__":
    main()
