"""Specs side by side on the H200 validation sets: fitted from one measurement set on different machines, or by
different fits.

``megasim calibrate --from-measurements`` is deterministic on one machine (any ``--workers``), but its least-squares
search follows the last bits of the simulation's and the solver's arithmetic, which another CPU, NumPy/BLAS build or
SciPy version changes; where the calibration runs leave a direction loose, that moves the fit to another minimum of
about the same error (docs/calibration.md, "How long, how good"). Each ``--spec`` is validated as
``megasim validate table2`` does it, on:

- the 208 mappings (``experiments/results/nvidia-h200/calibration_measure_fit/validation_measured.csv``);
- the 416 mappings (``--mappings 32``, ``experiments/results/nvidia-h200/validate_scaling/measured_1gpu.csv``);
- the 416 re-measured (``--mappings 32``, ``experiments/results/nvidia-h200/validation_rerun/validation_measured.csv``);
- with ``--fresh``, 13 other layers none of the calibrations or model changes looked at before (vgg16, yolov3 and
  densenet161 layers of other shapes, C = 3 and tiny ones among them; 16 mappings each,
  ``experiments/results/nvidia-h200/calibration_prior/fresh_layers/validation_measured.csv``).

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

TABLE2 = ("table2",)
FRESH_LAYERS = ("vgg16/conv2_1", "vgg16/conv4_1", "vgg16/conv5_1", "yolov3/res3_1", "yolov3/res4_1", "vgg16/conv1_2",
                "yolov3/res1_1", "yolov3/res2_1", "yolov3/res5_1", "densenet161/block2_1", "densenet161/block3_1",
                "vgg16/conv1_1", "yolov3/conv0")
VALIDATION_SETS = {
    "mappings_208": ("experiments/results/nvidia-h200/calibration_measure_fit/validation_measured.csv", 16, TABLE2),
    "mappings_416": ("experiments/results/nvidia-h200/validate_scaling/measured_1gpu.csv", 32, TABLE2),
    "mappings_416_rerun": ("experiments/results/nvidia-h200/validation_rerun/validation_measured.csv", 32, TABLE2),
}
FRESH_SET = {"fresh_layers_208": ("experiments/results/nvidia-h200/calibration_prior/fresh_layers/validation_measured.csv",
                                  16, FRESH_LAYERS)}


def validate(spec: str, out_dir: Path, sets: dict = VALIDATION_SETS) -> dict[str, str]:
    """Each validation set's summary folder for `spec` (``megasim validate``, one process per set)."""
    dirs = {}
    for name, (measured, mappings, layers) in sets.items():
        folder = out_dir / name
        done = subprocess.run([sys.executable, "-m", "megasim.cli.main", "validate", *layers, "--spec", spec,
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
    ap.add_argument("--fresh", action="store_true", help="validate on the 13 fresh layers too")
    args = ap.parse_args(argv)
    sets = {**VALIDATION_SETS, **(FRESH_SET if args.fresh else {})}
    names = [name for name, _, _ in args.spec]
    if len(set(names)) < len(names):
        ap.error(f"--spec NAME {next(n for n in names if names.count(n) > 1)!r} is given twice: each spec needs its own name")
    specs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec, note in args.spec:
            specs[name] = variant_entry(spec, validate(spec, Path(tmp) / name, sets), note)
            specs[name]["mixed_kinds_sm_factor"] = load_spec(spec).mixed_kinds_sm_factor
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": run_meta({"what": __doc__.splitlines()[0]}), "specs": specs}, indent=1) + "\n")
    for name, entry in specs.items():
        m = entry["mixed_kinds_sm_factor"]
        row = [f"{name:22s}", f"m {m:.3f}" if m is not None else "m -"]
        for s in sets:
            o = entry[s]["overall"]
            row.append(f"{s.removeprefix('mappings_')}: MAPE {100 * o['mape']:.1f}% pairwise {o['pairwise_accuracy_min']:.3f} "
                       f"speedup {100 * o['speedup_error_max']:.1f}% missed {','.join(entry[s]['bars_not_met']) or '-'}")
        print(" | ".join(row))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
