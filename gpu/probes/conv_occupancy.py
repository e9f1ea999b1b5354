"""Times the ECR and direct convolution kernels against how many of their blocks share an SM (a probe).

The cases are ``megasim.calibration.sparse.occupancy_cases()``: per filter tile, one-filter-tile grids of
exactly b blocks per SM in one wave (b = 1 up to what the registers allow) and two waves, every block
doing the same multiply-adds; ECR at sparsity 0, 0.5 and 0.9. Each case is checked against a float64
reference and timed alone exactly as the sparse calibration times its cases (``gpu.calibrate.sparse.measure``:
kernel only, CUDA events around 10 back-to-back launches, median of ``--repeats``). The probe is not part
of the calibration: it tests the model's rule for blocks sharing an SM (``experiments.studies.sparse_model.conv_occupancy``
compares it with the model's predictions, made before it ran). Writes ``conv_occupancy_measured.csv`` and
``.json`` (device, driver, versions, git SHA, date) to ``--out`` (default ``$OUT``).

    bash gpu/on_device.sh python -m gpu.probes.conv_occupancy
"""

from __future__ import annotations

import argparse
import math
import sys

from megasim.calibration.sparse import occupancy_cases

NAME = "conv_occupancy_measured"
WEIGHT_SEED0 = 10_000          # case i's weights: default_rng(1000 + WEIGHT_SEED0 + i), apart from the calibration's
TOL = 1e-5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        print(f"error: --repeats {args.repeats} is not allowed: it must be at least 1", file=sys.stderr)
        return 2

    from experiments.provenance import write_results
    from gpu.calibrate.sparse import measure

    cases = [(WEIGHT_SEED0 + i, c) for i, c in enumerate(occupancy_cases())]
    rows, meta = measure(args.repeats, cases=cases)
    for row in rows:
        row["measured_us"] = row["median_ms"] * 1e3
    bad = [r for r in rows if not (r["rel_err"] <= TOL) or not math.isfinite(r["median_ms"])]
    meta["tolerance"] = TOL
    out = args.out or "experiments/results/conv_occupancy"
    csv_path, _ = write_results(rows, out, NAME, meta)
    print(f"wrote {csv_path}; {len(rows)} cases, {len(bad)} failed the {TOL:g} check")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
