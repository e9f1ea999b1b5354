"""Exhaustive: every valid point in the space's order, in parallel batches, until the budget ends."""

from __future__ import annotations

from megasim.search.budget import Tracker, check_options

OPTIONS = {"batch": 32}
RANGES = {"batch": (1, 100_000)}


def run(space, evaluator, budget, options=None, seed=0):
    opts = check_options("exhaustive", options, OPTIONS, RANGES)
    tracker = Tracker(space, evaluator, budget)
    points = space.valid_points()
    step = max(1, int(opts["batch"]))   # batches: a cache-backed evaluator saves after each
    for start in range(0, len(points), step):
        if tracker.exhausted:
            break
        tracker.evaluate(points[start:start + step])
    return tracker.records
