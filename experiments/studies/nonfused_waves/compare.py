"""The model's side of ``experiments.studies.nonfused_waves.measure``: every measured row simulated as it was
measured, with a spec (any CPU).

- ``pipeline`` (events): the non-fused schedule's prediction; (queued): its last launch's end.
- ``prefix`` k: the first k launches' device time; each launch's in-pipeline time is the difference of two
  prefixes, measured and simulated alike (the simulated one from the full pipeline's launch records).
- ``kind``: the kind's launch cut out of the shape's graph (``megasim.calibration.cases.kind_subgraph``) and
  run as measured (``variant_case``: forced occupancy by unused shared memory), timing ``queued`` or ``events``
  (``megasim.calibration.pool.simulated_us``), as the calibration simulates its own rows.

    python -m experiments.studies.nonfused_waves.compare [--spec megasim/hardware/calibrated/h200.json]
        [--measured experiments/results/nvidia-h200/nonfused_waves/nonfused_waves_measured.json] [--csv OUT]
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

MEASURED = "experiments/results/nvidia-h200/nonfused_waves/nonfused_waves_measured.json"
SPEC = "megasim/hardware/calibrated/h200.json"


def compare(spec, rows: list[dict[str, Any]], params: str) -> list[dict[str, Any]]:
    """Each measured row with ``predicted_us``, ``measured_us`` and ``error`` (predicted / measured - 1)."""
    from megasim.calibration.cases import kind_cases, variant_case
    from megasim.calibration.pool import simulated_us
    from megasim.plan import Plan, build
    from megasim.sim import simulate
    from megasim.workloads import parse_layer
    out = []
    by_layer: dict[str, Any] = {}
    for r in rows:
        if "median_ms" not in r:
            continue
        layer = r["layer"]
        if layer not in by_layer:
            g, s, _ = build(parse_layer(layer), Plan.parse("nonfused", params))
            full = simulate(g, s, spec)
            cases = {kind: subs[0] for kind, subs in kind_cases((layer,), params).items()}
            by_layer[layer] = (full, cases)
        full, cases = by_layer[layer]
        if r["what"] == "pipeline":
            pred = simulated_us(full, r["timing"])
        elif r["what"] == "prefix":
            pred = full.launches[int(r["launches"]) - 1].end_ns / 1e3
        else:
            _, sub, sched = cases[r["kind"]]
            g, s = variant_case(sub, sched, r)
            pred = simulated_us(simulate(g, s, spec), r["timing"])
        meas = r["median_ms"] * 1e3
        out.append({"layer": layer, "what": r["what"], "kind": r.get("kind", ""), "launches": r.get("launches", ""),
                    "extra_shared_bytes": r.get("extra_shared_bytes", ""), "timing": r["timing"],
                    "tasks": r.get("tasks", ""), "measured_us": meas, "predicted_us": pred, "error": pred / meas - 1})
    return out


def in_pipeline(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each launch's in-pipeline device time (prefix k less prefix k-1; the first prefix less the queued gap
    is not taken: the first launch is reported as the first prefix), measured and predicted."""
    out = []
    prefixes: dict[str, dict[int, dict]] = {}
    for r in rows:
        if r["what"] == "prefix":
            prefixes.setdefault(r["layer"], {})[int(r["launches"])] = r
    for layer, p in prefixes.items():
        for k in sorted(p):
            prev = p.get(k - 1)
            m = p[k]["measured_us"] - (prev["measured_us"] if prev else 0.0)
            s = p[k]["predicted_us"] - (prev["predicted_us"] if prev else 0.0)
            out.append({"layer": layer, "launch": k, "measured_us": m, "predicted_us": s, "error": s / m - 1})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--measured", default=MEASURED)
    ap.add_argument("--csv", help="write the rows here")
    args = ap.parse_args(argv)
    from megasim.errors import SpecError
    from megasim.hardware import load_spec
    try:
        doc = json.loads(Path(args.measured).read_text())
        spec = load_spec(args.spec)
    except (OSError, ValueError, SpecError) as err:
        sys.exit(f"compare: {err}")
    rows = compare(spec, doc["rows"], doc["params"])
    for r in rows:
        tag = r["kind"] + (f"+{r['extra_shared_bytes']}B" if r["extra_shared_bytes"] else "") if r["what"] == "kind" \
            else f"{r['what']}{r['launches']}"
        print(f"{r['layer']:28s} {tag:18s} {r['timing']:7s} measured {r['measured_us']:8.1f} predicted "
              f"{r['predicted_us']:8.1f} {100 * r['error']:+6.1f}%")
    for r in in_pipeline(rows):
        print(f"{r['layer']:28s} launch {r['launch']} in pipeline: measured {r['measured_us']:7.1f} predicted "
              f"{r['predicted_us']:7.1f} {100 * r['error']:+6.1f}%")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
