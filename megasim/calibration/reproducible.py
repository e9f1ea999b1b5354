"""Rounding that keeps a calibration fit on one path whatever machine runs it.

A fit's search (``megasim.calibration.lsq``, SciPy's bounded scalar and simplex searches) chooses each point
from the residuals of the last ones, and where the calibration runs leave a direction loose a difference in
the last bits of a residual carries it to another minimum of about the same error. Those bits differ between
machines: NumPy's logarithm and the BLAS pick kernels by CPU, libm by its build, SciPy's solvers by version.
Points and residuals are therefore rounded to ``DIGITS`` significant digits before the search sees them, and
sums of squares are summed exactly (``math.fsum``): a machine's last-bit differences then round to the same
values unless one falls within about 1e-15 of a rounding boundary (a chance of about 1e-6 per value). The rounding is 1e-10 of a value, far
below the 1-2% that a fit's steps and the runs' noise move them.
"""

from __future__ import annotations

import math

import numpy as np

DIGITS = 10
ZERO_BELOW = 1e-12


def rounded(values) -> np.ndarray:
    """`values` (any shape) rounded to ``DIGITS`` significant decimal digits, through Python's correctly
    rounded decimal conversion (the same on every machine, unlike NumPy's vectorised log10 and power);
    values smaller than ``ZERO_BELOW`` in magnitude become 0 (a residual of a last bit is no residual)."""
    a = np.asarray(values, dtype=float)
    return np.array([0.0 if abs(v) < ZERO_BELOW else float(f"{v:.{DIGITS}g}") for v in a.ravel().tolist()],
                    dtype=float).reshape(a.shape)


def rounded_scalar(value: float) -> float:
    """One value rounded as ``rounded`` does."""
    return float(rounded([value])[0])


def sum_of_squares(residuals) -> float:
    """The exact sum of the squared residuals, rounded (``math.fsum``: no order or vector width in it)."""
    r = np.asarray(residuals, dtype=float).ravel()
    return rounded_scalar(math.fsum((r * r).tolist()))
