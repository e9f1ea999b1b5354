"""Bounded least squares on simulated residuals, the points of each Jacobian simulated as one batch.

A calibration fit (``megasim.calibration.fit.fit_kind``) minimises the squared log error of
simulated against measured times over a few TaskCost fields. Each residual vector costs a dozen
discrete-event simulations, so the fit's length is the number of points simulated and how many of
them can run side by side. SciPy's ``least_squares`` (trust region reflective, bounds) chooses the
points; its Jacobian is computed here, by the same forward differences SciPy uses for a relative step
(``diff_step * max(1, |x|)``, signed as x, turned backward where it would leave the bounds), but with
the n points of a Jacobian handed to ``residuals_many`` together, so that a process pool can simulate
all n x cases at once instead of one point's cases at a time.

Between two such Jacobians, ``refresh`` - 1 are Broyden's rank-one updates of the last one along the
step just taken (one point, the new one, instead of n + 1): the secant over a whole step also sees
through the small jumps that event reorderings put in a simulated time, which a 2% finite difference
only partly does. ``refresh`` = 1 is the plain finite-difference search.

``max_evals`` bounds every point simulated, Jacobian points included (SciPy's ``max_nfev`` counts
only the points it moves to, so a fit of 8 fields could simulate 9 times its budget); when the next
batch would exceed it, the best point simulated so far is returned. The search also stops when the
best cost has fallen by less than ``stall_rtol`` of itself over the last ``stall_points`` points
(``stopped`` = ``stalled``): on a discrete-event simulation SciPy's tolerances are met late, if at
all, and the last points move the fit by less than the runs' own noise. The rule waits until
``stall_points`` points have followed the first Jacobian: a trust region's first step is often
rejected (the region then shrinks), and judging the start point's Jacobian and that step alone stopped
fits where they began. A point simulated twice (the
point a Jacobian is taken at, the final point) is looked up, not simulated again.

**One fit on every machine.** Where a kind's runs leave a direction loose (a field that, at this point,
changes no simulated time: a column of zeros in the Jacobian), SciPy's step along it is what the BLAS's
rounding makes of a zero singular value, and that differs between CPUs' kernels: the same measurements
gave other specs on another machine (docs/findings.md). So the search minimises
``|r(x)|^2 + prior_weight^2 |x - x0|^2``: ``prior_weight`` rows of a prior that holds each field to its start
(the Jacobian's smallest singular value is then ``prior_weight``, not zero), and a loose field stays where it
started. And every point is rounded before it is simulated and every residual before the search sees it
(``megasim.calibration.reproducible``), costs being exact sums, so that the last bits of NumPy's, libm's or
the BLAS's answers round away. With both, a refit of one measurement set is the same bit for bit on a 2-core
AMD VM and on a 16-core Intel host with either OpenBLAS kernel set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from megasim.calibration.reproducible import rounded, sum_of_squares


@dataclass(frozen=True)
class LsqResult:
    """The best point simulated, its cost (half the sum of squared residuals), how many points were
    simulated, and why the search stopped (``converged``: SciPy's tolerances; ``budget``: max_evals;
    ``stalled``: the stall rule)."""

    x: np.ndarray
    cost: float
    evaluations: int
    stopped: str


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
                          diff_step: float, xtol: float, ftol: float, gtol: float, refresh: int = 1,
                          stall_points: int | None = None, stall_rtol: float = 0.0, prior_weight: float = 0.0,
                          on_evaluation: Callable[[int, float], None] | None = None) -> LsqResult:
    """Minimise 0.5 * (|r(x)|^2 + prior_weight^2 * |x - x0|^2) within [lo, hi] (SciPy's 'trf'),
    ``residuals_many(points)`` giving r at several points at once. ``on_evaluation(points simulated, best
    cost)`` after each batch."""
    from scipy.optimize import least_squares

    if refresh < 1:
        raise ValueError(f"refresh={refresh!r} is not allowed: it must be at least 1")
    if not prior_weight >= 0.0:
        raise ValueError(f"prior_weight={prior_weight!r} is not allowed: it must be at least 0")
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    x0 = np.clip(rounded(x0), lo, hi)
    prior_rows = prior_weight * np.eye(x0.size)

    def prior(x: np.ndarray) -> np.ndarray:
        """The prior's residuals at x: prior_weight * (x - x0), rounded as the runs' are (none at weight 0)."""
        return rounded(prior_weight * (x - x0)) if prior_weight > 0.0 else np.zeros(0)

    def with_prior(J: np.ndarray) -> np.ndarray:
        return np.vstack([J, prior_rows]) if prior_weight > 0.0 else J

    seen: dict[bytes, np.ndarray] = {}
    best: list = [x0, float("inf")]
    history: list[float] = []          # the best cost after each point simulated
    count = [0]

    def run(points: list[np.ndarray]) -> list[np.ndarray]:
        """The residuals at `points` (each already ``rounded``), simulating those not seen yet."""
        need = list({p.tobytes(): p for p in points if p.tobytes() not in seen}.values())
        if count[0] + len(need) > max_evals:
            raise _Stop("budget")
        if need:
            for p, r in zip(need, residuals_many(need)):
                r = rounded(r)
                seen[p.tobytes()] = r
                c = 0.5 * sum_of_squares(np.concatenate([r, prior(p)]))
                if c < best[1]:
                    best[0], best[1] = p.copy(), c
                history.append(best[1])
            count[0] += len(need)
            if on_evaluation is not None:
                on_evaluation(count[0], best[1])
            if (stall_points is not None and len(history) > stall_points + x0.size + 1
                    and history[-1 - stall_points] - history[-1] <= stall_rtol * history[-1]):
                raise _Stop("stalled")
        return [seen[p.tobytes()] for p in points]

    def point(x) -> np.ndarray:
        return np.clip(rounded(x), lo, hi)

    def fun(x) -> np.ndarray:
        x = point(x)
        return np.concatenate([run([x])[0], prior(x)])

    last: dict[str, object] = {}        # the last Jacobian: J, and x, f where it holds; updates since a full one

    def jac(x) -> np.ndarray:
        x = point(x)
        f0 = run([x])[0]
        if last and int(last["updates"]) + 1 < refresh:
            J, dx, df = last["J"], x - last["x"], f0 - last["f"]
            if float(dx @ dx) > 0.0:
                J = J + np.outer(df - J @ dx, dx) / float(dx @ dx)
                last.update(J=J, x=x, f=f0, updates=int(last["updates"]) + 1)
                return with_prior(J)
        h = forward_steps(x, lo, hi, diff_step)
        points = []
        for i in range(x.size):
            p = x.copy()
            p[i] += h[i]
            points.append(point(p))
        fs = run(points)
        J = np.column_stack([(f - f0) / (p[i] - x[i]) for i, (p, f) in enumerate(zip(points, fs))])
        last.update(J=J, x=x, f=f0, updates=0)
        return with_prior(J)

    stopped, start = "converged", x0
    for _ in range(3):
        try:
            least_squares(fun, start, jac=jac, bounds=(lo, hi), xtol=xtol, ftol=ftol, gtol=gtol,
                          max_nfev=max(1, max_evals))
        except _Stop as stop:
            stopped = stop.reason
            break
        if not last or int(last["updates"]) == 0:
            break
        # SciPy's tolerances were met on an updated Jacobian: go on from the best point with a fresh one
        last.clear()
        start = best[0]
    return LsqResult(best[0], best[1], count[0], stopped)
