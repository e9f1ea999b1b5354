"""Simulated annealing on the discrete neighbourhood (one parameter moved one position).

Each step evaluates up to ``neighbours`` unvisited neighbours of the current point at once (so the
pool has work), moves to the best of them if it is faster, else with the Metropolis probability
exp(-(t_new/t_cur - 1) / T) on the relative slowdown; T starts at ``T0`` and is multiplied by
``alpha`` every step. A point with no unvisited neighbour restarts from a random unvisited point.
"""

from __future__ import annotations

import math

import numpy as np

from megasim.search.budget import Tracker, check_options

OPTIONS = {"T0": 0.05, "alpha": 0.95, "neighbours": 4}
RANGES = {"T0": (1e-9, 1e9), "alpha": (1e-6, 1.0), "neighbours": (1, 10_000)}


def run(space, evaluator, budget, options=None, seed=0):
    opts = check_options("annealing", options, OPTIONS, RANGES)
    rng = np.random.default_rng(seed)
    tracker = Tracker(space, evaluator, budget)
    valid = space.valid_points()
    if not valid:
        return tracker.records

    def restart():
        fresh = [p for p in valid if tracker.seen(p) is None]
        return fresh[int(rng.integers(len(fresh)))] if fresh else None

    current = restart()
    cur = tracker.evaluate([current])[0] if current else None
    temp = float(opts["T0"])
    while not tracker.exhausted and cur is not None:
        cand = [q for q in space.neighbours(current) if space.constraint(q) is None and tracker.seen(q) is None]
        if not cand:
            current = restart()
            if current is None:
                break
            cur = tracker.evaluate([current])[0]
            continue
        pick = rng.permutation(len(cand))[:max(1, int(opts["neighbours"]))]
        recs = tracker.evaluate([cand[i] for i in pick])
        if not recs:
            break
        new = min(recs, key=lambda r: r.objective())
        c_obj, n_obj = cur.objective(), new.objective()
        if n_obj < c_obj or (math.isfinite(n_obj) and not math.isfinite(c_obj)):
            accept = True
        elif math.isfinite(n_obj) and temp > 0:
            accept = rng.random() < math.exp(-(n_obj / c_obj - 1.0) / temp)
        else:
            accept = False
        if accept:
            current, cur = dict(new.params), new
        temp *= float(opts["alpha"])
    return tracker.records
