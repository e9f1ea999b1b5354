"""Specs fitted from one measurement set on different machines, side by side on the three H200 validation sets.

``megasim calibrate --from-measurements`` is deterministic on one machine (any ``--workers``), but its least-squares
search follows the last bits of the simulation's and the solver's arithmetic, which another CPU, NumPy/BLAS build or
SciPy version changes; where the calibration runs leave a direction loose, that moves the fit to another minimum of
about the same error (docs/calibration.md, "How long, how good"). Each ``--spec`` is validated as
``megasim validate table2`` does it, on:

- the 208 mappings (``experiments/results/nvidia-h200/calibration_measure_fit/validation_measured.csv``);
- the 416 mappings (``--mappings 32``, ``experiments/results/nvidia-h200/validate_scaling/measured_1gpu.csv``);
- the 416 re-measured (``--mappings 32``, ``experiments/results/nvidia-h200/validation_rerun/validation_measured.csv``).

    python -m experiments.studies.calibration.refit_spread --out FILE --spec NAME SPEC NOTE [--spec ...]

About 40 s per spec on 2 cores. The JSON holds, per spec, its hash, each set's overall metrics, the bars missed and
each layer's pairwise accuracy (``experiments.studies.megakernel_reset.variants.variant_entry``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.studies.megakernel_reset.variants import variant_entry
from megasim.calibration.validation import run_meta
from megasim.hardware import load_spec

VALIDATION_SETS = {
    "mappings_208": ("experiments/results/nvidia-h200/calibration_measure_fit/validation_measured.csv", 16),
    "mappings_416": ("experiments/results/nvidia-h200/validate_scaling/measured_1gpu.csv", 32),
    "mappings_416_rerun": ("experiments/results/nvidia-h200/validation_rerun/validation_measured.csv", 32),
}


def validate(spec: str, out_dir: Path) -> dict[str, str]:
    """Each validation set's summary folder for `spec` (``megasim validate table2``, one process per set)."""
    dirs = {}
    for name, (measured, mappings) in VALIDATION_SETS.items():
        folder = out_dir / name
        done = subprocess.run([sys.executable, "-m", "megasim.cli.main", "validate", "table2", "--spec", spec,
                               "--mappings", str(mappings), "--measured", measured, "--out", str(folder)],
                              stdout=subprocess.DEVNULL)
        if done.returncode != 0:      # megasim has printed its one-line reason on stderr
            raise SystemExit(f"refit_spread: megasim validate refused --spec {spec} on {name} (status {done.returncode})")
        dirs[name] = str(folder)
    return dirs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", nargs=3, action="append", required=True, metavar=("NAME", "SPEC", "NOTE"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    names = [name for name, _, _ in args.spec]
    if len(set(names)) < len(names):
        ap.error(f"--spec NAME {next(n for n in names if names.count(n) > 1)!r} is given twice: each spec needs its own name")
    specs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec, note in args.spec:
            specs[name] = variant_entry(spec, validate(spec, Path(tmp) / name), note)
            specs[name]["mixed_kinds_sm_factor"] = load_spec(spec).mixed_kinds_sm_factor
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": run_meta({"what": __doc__.splitlines()[0]}), "specs": specs}, indent=1) + "\n")
    for name, entry in specs.items():
        row = [f"{name:22s}", f"m {entry['mixed_kinds_sm_factor']:.3f}"]
        for s in VALIDATION_SETS:
            o = entry[s]["overall"]
            row.append(f"{s[9:]}: MAPE {100 * o['mape']:.1f}% pairwise {o['pairwise_accuracy_min']:.3f} "
                       f"speedup {100 * o['speedup_error_max']:.1f}% missed {','.join(entry[s]['bars_not_met']) or '-'}")
        print(" | ".join(row))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
