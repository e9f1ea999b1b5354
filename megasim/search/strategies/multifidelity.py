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
   point, ``climb`` evaluations at most;
4. the rest of the budget, if the descent stopped early: more screening (the best points'
   neighbours), then the best unconfirmed screened points at full fidelity (FINAL_CONFIRM of the rest),
   a new descent from any that beats the best so far; the budget is spent unless the space runs out.

Without a coarse evaluator (small layers: the full problem is cheap) the screen runs on the full
evaluator, which for the default space is the exhaustive search.
"""

from __future__ import annotations

import numpy as np

from megasim.search.budget import Tracker, check_options

OPTIONS = {"explore": 0.4, "screen": 0.85, "focus": 4, "top": 12, "climb": 12, "batch": 16}
RANGES = {"explore": (0.0, 1.0), "screen": (0.0, 1.0), "focus": (1, 10_000), "top": (1, 10_000), "climb": (0, 10_000), "batch": (1, 100_000)}
FINAL_CONFIRM = 4   # of a budget the descent left over, the evaluations kept for the full fidelity


def _ranked(records):
    return sorted((r for r in records if r.valid), key=lambda r: r.objective())


def _screen(space, tracker, valid, n, opts, rng, coarse, screened=None):
    """Evaluate up to `n` new points (counted by the tracker) and return every screening record so far
    (`screened`, extended). A first call explores at random before it follows the best points'
    neighbours; a later call (`screened` given) goes straight to the neighbours."""
    batch = max(1, int(opts["batch"]))
    first = screened is None
    screened = [] if first else screened
    start = len(tracker.records)

    def take(points):
        room = n - (len(tracker.records) - start)
        recs = tracker.evaluate(points[:max(0, room)], coarse=coarse) if room > 0 else []
        screened.extend(recs)
        return recs

    if first and len(valid) <= n:
        for i in range(0, len(valid), batch):
            take(valid[i:i + batch])
        return screened
    order = rng.permutation(len(valid))
    n_explore = min(len(valid), max(1, int(opts["explore"] * tracker.budget)), n) if first else 0
    for i in range(0, n_explore, batch):
        take([valid[j] for j in order[i:min(i + batch, n_explore)]])
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
    opts = check_options("multifidelity", options, OPTIONS, RANGES)
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
    ranked = _ranked(screened)
    top = int(opts["top"])
    best = (_ranked(tracker.evaluate([dict(r.params) for r in ranked[:top]])) or [None])[0]
    best = _climb(space, tracker, best, opts)
    # budget left (the descent stopped early): screen on, then confirm the best unconfirmed screened
    # points, a few at full fidelity, descending again from any that beats the best
    left = tracker.remaining
    if left > FINAL_CONFIRM:
        screened = _screen(space, tracker, valid, left - FINAL_CONFIRM, opts, rng, coarse, screened)
    for r in _ranked(screened):
        if tracker.exhausted:
            break
        if tracker.seen(r.params) is not None:
            continue
        step = (_ranked(tracker.evaluate([dict(r.params)])) or [None])[0]
        if step is not None and (best is None or step.objective() < best.objective()):
            best = _climb(space, tracker, step, opts)
    return tracker.records


def _climb(space, tracker, best, opts):
    """Steepest descent at full fidelity from `best`, at most ``climb`` evaluations; neighbours tried
    best-coarse-first. Returns the best record reached."""
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
    return best


def _objective(record) -> float:
    return record.objective() if record is not None else float("inf")
