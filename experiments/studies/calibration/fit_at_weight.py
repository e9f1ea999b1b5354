"""`megasim calibrate` (a fit from scratch) with another prior weight than ``megasim.calibration.fit.PRIOR_WEIGHT``:
the specs ``prior_spread`` compares across weights.

    python -m experiments.studies.calibration.fit_at_weight 0.3 --algo winograd --from-measurements FILE --out SPEC

Every argument after the weight is ``megasim calibrate``'s. The weight replaces the one the kinds' fits (and the own
kernels' fits) are held to their starts by; ``update-spec``'s is not changed.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        weight = float(argv[0])
    except (IndexError, ValueError):
        raise SystemExit("fit_at_weight: give the prior weight first (a number, e.g. 0.3), then megasim calibrate's "
                         "arguments") from None
    if not weight > 0.0:
        raise SystemExit(f"fit_at_weight: weight {weight!r} is not allowed: it must be > 0")
    import megasim.calibration.winograd as winograd
    from megasim.cli.main import main as megasim_main
    winograd.PRIOR_WEIGHT = weight
    return megasim_main(["calibrate", *argv[1:]])


if __name__ == "__main__":       # (the fit's Dask workers are spawned: they import this module)
    raise SystemExit(main())
