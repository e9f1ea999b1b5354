"""Multi-fidelity search: rank the space with a cheap evaluator, then search the most promising part
with the real one. The default strategy of ``megasim optimize``.

The simulator's cost is proportional to the number of tasks, i.e. to the batch. For a large layer the
evaluator offers a coarse problem (``evaluators.coarse_batch``: about N/8, at least 128 groups),
which ranks the points roughly as the full batch does at about an eighth of the cost; roughly,
because the predicted times of the best points differ by ~1% while the smaller batch has larger
tail effects, so the coarse ranking alone does not find the optimum within 1%. Phases, all counted
against the budget:

1. screen (coarse evaluator): every valid point if the space fits in ``screen`` x budget, else
   ``explore`` x budget random points followed by unvisited neighbours of the ``focus`` best, each
   batch topped up with further random points, so the screen's share of the budget is spent even
   when the best points' neighbourhoods are exhausted;
2. confirm (full evaluator): the ``top`` best screened points;
3. climb (full evaluator): steepest descent over unvisited neighbours from the best confirmed
   point, ``climb`` evaluations at most.

Without a coarse evaluator (small layers: the full problem is cheap) the screen runs on the full
evaluator, which for the default space is the exhaustive search.
"""

from __future__ import annotations

import numpy as np

from megasim.search.budget import Tracker, check_options

OPTIONS = {"explore": 0.4, "screen": 0.85, "focus": 4, "top": 12, "climb": 12, "batch": 16}


def _ranked(records):
    return sorted((r for r in records if r.valid), key=lambda r: r.objective())


def _screen(space, tracker, valid, n, opts, rng, coarse):
    batch = max(1, int(opts["batch"]))
    screened: list = []

    def take(points):
        room = n - len(tracker.records)        # every record so far is a screening one
        recs = tracker.evaluate(points[:max(0, room)], coarse=coarse) if room > 0 else []
        screened.extend(recs)
        return recs

    if len(valid) <= n:
        for start in range(0, len(valid), batch):
            take(valid[start:start + batch])
        return screened
    order = rng.permutation(len(valid))
    n_explore = min(len(valid), max(1, int(opts["explore"] * tracker.budget)), n)
    for start in range(0, n_explore, batch):
        take([valid[i] for i in order[start:min(start + batch, n_explore)]])
    rest = iter(order[n_explore:])   # where the exploration goes on when the best have no new neighbours
    while True:
        frontier, keys = [], set()
        for r in _ranked(screened)[:int(opts["focus"])]:
            for q in space.neighbours(r.params):
                k = space.key(q)
                if k not in keys and space.constraint(q) is None and tracker.seen(q, coarse=coarse) is None:
                    keys.add(k)
                    frontier.append(q)
        for i in rest:
            if len(frontier) >= batch:
                break
            if tracker.seen(valid[i], coarse=coarse) is None:
                frontier.append(valid[i])
        if not frontier or not take(frontier[:batch]):
            return screened


def run(space, evaluator, budget, options=None, seed=0):
    opts = check_options("multifidelity", options, OPTIONS)
    rng = np.random.default_rng(seed)
    tracker = Tracker(space, evaluator, budget)
    coarse = tracker.has_coarse
    valid = space.valid_points()
    if not valid:
        return tracker.records
    reserve = int(opts["top"]) + int(opts["climb"]) if coarse else 0
    n_screen = max(1, min(int(opts["screen"] * budget), budget - reserve)) if coarse else budget
    screened = _screen(space, tracker, valid, n_screen, opts, rng, coarse)
    if not coarse:
        return tracker.records
    confirmed = tracker.evaluate([dict(r.params) for r in _ranked(screened)[:int(opts["top"])]])
    # steepest descent at full fidelity; neighbours tried best-coarse-first
    best = (_ranked(confirmed) or [None])[0]
    climbed = 0
    while best is not None and climbed < int(opts["climb"]) and not tracker.exhausted:
        near = [q for q in space.neighbours(best.params) if space.constraint(q) is None and tracker.seen(q) is None]
        if not near:
            break
        near.sort(key=lambda q: _objective(tracker.seen(q, coarse=True)))
        recs = tracker.evaluate(near[:min(len(near), int(opts["climb"]) - climbed, int(opts["batch"]))])
        climbed += len(recs)
        step = (_ranked(recs) or [None])[0]
        if step is None or step.objective() >= best.objective():
            break
        best = step
    return tracker.records


def _objective(record) -> float:
    return record.objective() if record is not None else float("inf")
