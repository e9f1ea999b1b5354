"""SciPy's differential evolution over parameter *indices* with ``integrality`` (every parameter is
an integer index into its value list). The population is evaluated as one batch (``vectorized``,
``updating='deferred'``) so the pool runs it in parallel. Points that cannot run score a penalty;
the run stops when the budget is spent."""

from __future__ import annotations

import numpy as np

from megasim.search.budget import Tracker, check_options

OPTIONS = {"popsize": 4, "mutation": 0.7, "recombination": 0.7}
RANGES = {"popsize": (1, 1_000), "mutation": (0.0, 1.999), "recombination": (0.0, 1.0)}
_PENALTY = 1e12


def run(space, evaluator, budget, options=None, seed=0):
    from scipy.optimize import differential_evolution     # (imported only when this strategy runs)
    opts = check_options("diff_evo", options, OPTIONS, RANGES)
    tracker = Tracker(space, evaluator, budget)
    shape = np.array(space.shape)
    free = np.flatnonzero(shape > 1)
    if free.size == 0:   # one point: nothing to evolve
        tracker.evaluate(space.valid_points())
        return tracker.records

    n_valid = len(space.valid_points())

    def points_of(x):
        out = []
        for col in np.atleast_2d(x.T):
            idx = np.zeros(shape.size, int)
            idx[free] = np.clip(np.rint(col).astype(int), 0, shape[free] - 1)
            out.append(space.point_at(idx))
        return out

    def objective(x):
        pts = points_of(x)
        recs = tracker.evaluate(pts)
        vals = [r.objective() for r in recs] + [_PENALTY] * (len(pts) - len(recs))
        return np.array([v if np.isfinite(v) else _PENALTY for v in vals])

    differential_evolution(objective, [(0, int(shape[d]) - 1) for d in free], integrality=[True] * free.size,
                           popsize=int(opts["popsize"]), mutation=float(opts["mutation"]),
                           recombination=float(opts["recombination"]), seed=seed, polish=False, tol=0,
                           maxiter=10 * budget, vectorized=True, updating="deferred",
                           callback=lambda *a, **k: tracker.exhausted or len(tracker.records) >= n_valid)
    return tracker.records
