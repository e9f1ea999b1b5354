"""How far apart the specs of one GPU's measurement sets land, per prior weight: the criterion that chose
``megasim.calibration.fit.PRIOR_WEIGHT`` before any validation.

For each weight, the specs fitted from the same measurement sets (``--spec WEIGHT SET FILE``) predict the
calibration layers' default fused and non-fused schedules (``megasim simulate``; predictions only, nothing
measured); the spread of a prediction is max / min - 1 over the sets. Beside it, each spec's mean rms log error
over its cost names' own runs (from the fit's ``source`` lines): what a firmer prior costs the kinds' fits.

    python -m experiments.studies.calibration.prior_spread --out FILE --spec 0.1 c c.json --spec 0.1 r r.json ...

About 10 s per spec on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from megasim.calibration.measurements import CALIBRATION_LAYERS
from megasim.calibration.validation import run_meta

SCHEDULES = ("fused", "nonfused")
RMS = re.compile(r"rms log error (\d+\.\d+)")


def predicted_us(spec: str, layer: str, schedule: str) -> float:
    done = subprocess.run([sys.executable, "-m", "megasim.cli.main", "simulate", layer, "--spec", spec,
                           "--schedule", schedule, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"prior_spread: megasim simulate refused --spec {spec} {layer}: {done.stderr.strip()}")
    return float(json.loads(done.stdout)["predicted_us"])


def mean_rms(spec: str) -> float:
    """The mean over cost names of the rms log error their fit's source states."""
    sources = json.loads(Path(spec).read_text())["task_costs"]
    per_name = {}
    for name, fields in sources.items():
        for field in fields.values():
            found = RMS.search(field.get("source", "")) if isinstance(field, dict) else None
            if found:
                per_name[name] = float(found.group(1))
    return statistics.fmean(per_name.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", nargs=3, action="append", required=True, metavar=("WEIGHT", "SET", "SPEC"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    for weight, name, spec in args.spec:
        if not Path(spec).is_file():
            ap.error(f"--spec {weight} {name} {spec!r}: no such file")
        try:
            float(weight)
        except ValueError:
            ap.error(f"--spec WEIGHT {weight!r} is not allowed: it must be a number (the prior weight the spec was fitted at)")
    by_weight: dict[str, dict[str, dict]] = defaultdict(dict)
    for weight, name, spec in args.spec:
        by_weight[weight][name] = {"spec": spec, "mean_rms_log_error": mean_rms(spec),
                                   "predicted_us": {f"{layer} {s}": predicted_us(spec, layer, s)
                                                    for layer in CALIBRATION_LAYERS for s in SCHEDULES}}
    result = {}
    for weight, sets in by_weight.items():
        keys = next(iter(sets.values()))["predicted_us"]
        spread = {k: max(v["predicted_us"][k] for v in sets.values()) / min(v["predicted_us"][k] for v in sets.values()) - 1
                  for k in keys}
        result[weight] = {"sets": sets, "spread": spread, "max_spread_fused": max(v for k, v in spread.items() if k.endswith(" fused")),
                          "mean_rms_log_error": statistics.fmean(v["mean_rms_log_error"] for v in sets.values())}
        print(f"prior weight {weight}: fused predictions spread up to {100 * result[weight]['max_spread_fused']:.1f}% "
              f"over {len(sets)} sets, mean rms log error {result[weight]['mean_rms_log_error']:.3f}")
    out = Path(args.out)
    out.write_text(json.dumps({"meta": run_meta({"what": __doc__.splitlines()[0]}), "weights": result}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
