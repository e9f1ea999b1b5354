"""Bounded least squares on simulated residuals, the points of each Jacobian simulated as one batch.

A calibration fit (``megasim.calibration.winograd.fit_kind``) minimises the squared log error of
simulated against measured times over a few TaskCost fields. Each residual vector costs a dozen
discrete-event simulations, so the fit's length is the number of points simulated and how many of
them can run side by side. SciPy's ``least_squares`` (trust region reflective, bounds) chooses the
points; its Jacobian is computed here, by the same forward differences SciPy uses for a relative step
(``diff_step * max(1, |x|)``, signed as x, turned backward where it would leave the bounds), but with
the n points of a Jacobian handed to ``residuals_many`` together, so that a process pool can simulate
all n x cases at once instead of one point's cases at a time.

``max_evals`` bounds every point simulated, Jacobian points included (SciPy's ``max_nfev`` counts
only the points it moves to, so a fit of 8 fields could simulate 9 times its budget); when the next
batch would exceed it, the best point simulated so far is returned. A point simulated twice (the
point a Jacobian is taken at, the final point) is looked up, not simulated again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class LsqResult:
    """The best point simulated, its cost (half the sum of squared residuals), how many points were
    simulated, and why the search stopped (``converged``: SciPy's tolerances; ``budget``: max_evals)."""

    x: np.ndarray
    cost: float
    evaluations: int
    stopped: str


class _BudgetSpent(Exception):
    pass


def forward_steps(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, diff_step: float) -> np.ndarray:
    """Per coordinate, the finite-difference step: SciPy's relative step for '2-point'
    (``diff_step * sign(x) * max(1, |x|)``, sign(0) = 1), made backward where x + h leaves the bounds
    and -h does not."""
    sign = np.where(x >= 0, 1.0, -1.0)
    h = diff_step * sign * np.maximum(1.0, np.abs(x))
    h = (x + h) - x
    out = (x + h < lo) | (x + h > hi)
    fits = np.abs(h) <= np.maximum(x - lo, hi - x)
    h[out & fits] *= -1.0
    return h


def least_squares_batched(residuals_many: Callable[[Sequence[np.ndarray]], Sequence[np.ndarray]],
                          x0: Sequence[float], lo: Sequence[float], hi: Sequence[float], *, max_evals: int,
                          diff_step: float, xtol: float, ftol: float, gtol: float,
                          on_evaluation: Callable[[int, float], None] | None = None) -> LsqResult:
    """Minimise 0.5 * |r(x)|^2 within [lo, hi] (SciPy's 'trf'), ``residuals_many(points)`` giving r at
    several points at once. ``on_evaluation(points simulated, best cost)`` after each batch."""
    from scipy.optimize import least_squares

    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    x0 = np.clip(np.asarray(x0, float), lo, hi)
    seen: dict[bytes, np.ndarray] = {}
    best: list = [x0, float("inf")]
    count = [0]

    def run(points: list[np.ndarray]) -> list[np.ndarray]:
        need = list({p.tobytes(): p for p in points if p.tobytes() not in seen}.values())
        if count[0] + len(need) > max_evals:
            raise _BudgetSpent
        if need:
            for p, r in zip(need, residuals_many(need)):
                r = np.asarray(r, float)
                seen[p.tobytes()] = r
                c = 0.5 * float(r @ r)
                if c < best[1]:
                    best[0], best[1] = p.copy(), c
            count[0] += len(need)
            if on_evaluation is not None:
                on_evaluation(count[0], best[1])
        return [seen[p.tobytes()] for p in points]

    def fun(x) -> np.ndarray:
        return run([np.asarray(x, float).copy()])[0]

    def jac(x) -> np.ndarray:
        x = np.asarray(x, float).copy()
        f0 = run([x])[0]
        h = forward_steps(x, lo, hi, diff_step)
        points = []
        for i in range(x.size):
            p = x.copy()
            p[i] += h[i]
            points.append(p)
        fs = run(points)
        return np.column_stack([(f - f0) / h[i] for i, f in enumerate(fs)])

    try:
        least_squares(fun, x0, jac=jac, bounds=(lo, hi), xtol=xtol, ftol=ftol, gtol=gtol,
                      max_nfev=max(1, max_evals))
        stopped = "converged"
    except _BudgetSpent:
        stopped = "budget"
    return LsqResult(best[0], best[1], count[0], stopped)
