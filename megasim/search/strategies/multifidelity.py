"""Multi-fidelity search: screen many points with a cheap evaluator, re-evaluate the best few with
the real one. The default strategy of ``megasim optimize``.

The simulator's cost is proportional to the number of tasks, i.e. to the batch; the mapping
parameters act per group of tiles, so a smaller batch (about N/16, but never fewer than 16 groups at
the largest t; see ``evaluators.coarse_batch``) ranks the points nearly as the full batch does, at
about a tenth of the cost. Phases, all counted against the budget:

1. screen (coarse evaluator): ``explore`` x budget random valid points, then, up to ``screen`` x
   budget, the unvisited neighbours of the ``focus`` best screened points (a greedy local search on
   the cheap model, which finds the basin of the optimum);
2. confirm (full evaluator): the ``top`` best screened points;
3. polish (full evaluator): the unvisited neighbours of the best confirmed point, ``polish`` at most.

Without a coarse evaluator (small layers, where the full batch already has few groups and is cheap)
the screen runs on the full evaluator and phase 2 costs nothing.
"""

from __future__ import annotations

import numpy as np

from megasim.search.budget import Tracker, check_options

OPTIONS = {"explore": 0.4, "screen": 0.85, "focus": 4, "top": 6, "polish": 4, "batch": 16}


def _best_points(records, k):
    ranked = sorted((r for r in records if r.valid), key=lambda r: r.objective())
    return [dict(r.params) for r in ranked[:k]]


def run(space, evaluator, budget, options=None, seed=0):
    opts = check_options("multifidelity", options, OPTIONS)
    rng = np.random.default_rng(seed)
    tracker = Tracker(space, evaluator, budget)
    coarse = tracker.has_coarse
    valid = space.valid_points()
    if not valid:
        return tracker.records
    batch = max(1, int(opts["batch"]))
    n_confirm = int(opts["top"]) + int(opts["polish"]) if coarse else 0
    screen_budget = min(len(valid), max(1, min(int(opts["screen"] * budget), budget - n_confirm)))
    screened: list = []

    def screen(points):
        room = screen_budget - len(tracker.records)   # every record so far is a screening one
        if room <= 0:
            return []
        recs = tracker.evaluate(points[:room], coarse=True)
        screened.extend(recs)
        return recs

    # 1a. random exploration
    order = rng.permutation(len(valid))
    n_explore = min(len(valid), max(1, int(opts["explore"] * budget)), screen_budget)
    for start in range(0, n_explore, batch):
        screen([valid[i] for i in order[start:min(start + batch, n_explore)]])
    # 1b. greedy local search around the best screened points
    while True:
        seen_keys: set[str] = set()
        frontier = []
        for p in _best_points(screened, int(opts["focus"])):
            for q in space.neighbours(p):
                key = space.key(q)
                if key not in seen_keys and space.constraint(q) is None and tracker.seen(q, coarse=True) is None:
                    seen_keys.add(key)
                    frontier.append(q)
        if not frontier or not screen(frontier[:batch]):
            break
    if not coarse:
        return tracker.records
    # 2. confirm the best screened points at full fidelity
    confirmed = tracker.evaluate(_best_points(screened, int(opts["top"])))
    # 3. polish around the best confirmed point
    best = _best_points(confirmed, 1)
    if best and int(opts["polish"]) > 0:
        near = [q for q in space.neighbours(best[0]) if space.constraint(q) is None and tracker.seen(q) is None]
        # the nearest in the coarse ranking first
        near.sort(key=lambda q: (tracker.seen(q, coarse=True) or _INF).objective())
        tracker.evaluate(near[:int(opts["polish"])])
    return tracker.records


class _Inf:
    @staticmethod
    def objective() -> float:
        return float("inf")


_INF = _Inf()
