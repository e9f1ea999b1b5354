"""The model against a winograd_bench run: its default-mapping fused and non-fused rows, predicted.

``experiments.benchmarks.winograd_bench`` times, per layer, the fused megakernel at conv2d's default mapping (row
``fused``; the mapping is in the JSON's ``per_layer[layer]["fused_default"]``) and the non-fused pipeline
(``nonfused``), at the layer's tile (``per_layer[layer]["tile"]``, F(4x4) in runs before bbd9d23). This script
predicts the same rows with a calibrated spec (same layer, tile, mapping and pairs per transform thread as
the bench's defaults) and reports the error per row and its mean. Nothing is fitted here: it is an
out-of-sample check of the spec on whatever the bench ran (each layer's tile, mapping and pairs as its JSON records
them).

Writes DIR/bench_vs_model.csv (a row per layer and schedule: tile, measured and predicted ms, error) and
.json with provenance. No GPU; ~1 min on 2 cores.

    python -m experiments.benchmarks.bench_vs_model --bench experiments/results/nvidia-h200/winograd_bench.csv \\
        --spec megasim/hardware/calibrated/h200.json [--workers 2] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from experiments.provenance import provenance, read_rows, write_results
from experiments.sweeps import print_table
from experiments.benchmarks.winograd_bench import read_bench_json, recorded_tile
from megasim.errors import MegasimError
from megasim.algorithms.winograd.lowering import DEFAULT_TRANSFORM_PAIRS_PER_THREAD
from megasim.calibration.validation import predict_rows

NAME = "bench_vs_model"
OUT = "experiments/results/model/bench_vs_model"
SCHEDULES = ("fused", "nonfused")


def bench_rows(csv_path: str | Path) -> list[dict[str, Any]]:
    """The bench's default-mapping rows as validation rows (layer, schedule, params, measured_us, tile), or a
    one-line error naming the file."""
    csv_path = Path(csv_path)
    try:
        measured = {(r["layer"], r["impl"]): r for r in read_rows(csv_path)}
        per_layer = read_bench_json(csv_path.with_suffix(".json"))["meta"]["per_layer"]   # (or its .json.gz)
    except (OSError, ValueError, KeyError) as err:
        raise MegasimError(f"--bench {str(csv_path)!r} cannot be read as a winograd_bench CSV with its JSON "
                           f"beside it (.json or .json.gz): {err}") from None
    rows = []
    for layer, meta in per_layer.items():
        tile = recorded_tile(meta)
        mapping = meta.get("fused_default")
        for schedule in SCHEDULES:
            row = measured.get((layer, schedule))
            if row is None or row.get("status") != "ok" or mapping is None:
                continue
            params = f"tile={tile}"
            config = meta.get("winograd_config" if schedule == "fused" else "winograd_config_nonfused", {})
            pairs = config.get("transform_pairs_per_thread")
            if pairs is not None and pairs != DEFAULT_TRANSFORM_PAIRS_PER_THREAD[schedule]:
                params += f",pairs={pairs}"      # a bench run at --config pairs=P
            if schedule == "fused":
                params += f",D_IG={mapping['D_IG']},D_GO={mapping['D_GO']},M={mapping['M']}"
            rows.append({"layer": layer, "schedule": schedule, "tile": tile, "params": params,
                         "measured_us": 1000.0 * float(row["median_ms"])})
    if not rows:
        raise MegasimError(f"--bench {str(csv_path)!r} has no ok fused / nonfused rows with a default mapping")
    return rows


def compare(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Predicted rows with their error (predicted / measured - 1)."""
    out = []
    for r in rows:
        if r.get("predicted_us") in ("", None):
            continue
        out.append({"layer": r["layer"], "schedule": r["schedule"], "tile": r["tile"], "params": r["params"],
                    "measured_ms": r["measured_us"] / 1000.0, "predicted_ms": float(r["predicted_us"]) / 1000.0,
                    "error": float(r["predicted_us"]) / r["measured_us"] - 1.0})
    return out


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean absolute and mean signed error per schedule and per group of tiles (F(4x4) or larger)."""
    out: dict[str, dict[str, float]] = {}
    for schedule in SCHEDULES:
        for label, keep in (("all", lambda t: True), ("tile 4", lambda t: t == 4), ("tile 5-7", lambda t: t > 4)):
            errs = [r["error"] for r in rows if r["schedule"] == schedule and keep(r["tile"])]
            if errs:
                out[f"{schedule}, {label}"] = {"rows": len(errs), "mape": sum(abs(e) for e in errs) / len(errs),
                                               "bias": sum(errs) / len(errs)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="a winograd_bench CSV (its JSON beside it)")
    ap.add_argument("--spec", default="megasim/hardware/calibrated/h200.json", help="a calibrated spec file")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    try:
        rows = compare(predict_rows(bench_rows(args.bench), args.spec, Path(args.spec).name, args.workers))
    except MegasimError as err:
        print(f"error: {err}")
        return 2
    print_table(rows, ("layer", "schedule", "tile", "measured_ms", "predicted_ms", "error"))
    stats = summary(rows)
    for key, s in stats.items():
        print(f"{key}: {s['rows']} rows, mean |error| {100 * s['mape']:.1f}%, mean error {100 * s['bias']:+.1f}%")
    meta = provenance({"script": NAME, "bench": args.bench, "spec": args.spec, "summary": stats})
    paths = write_results(rows, args.out, NAME, meta)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
