"""Exhaustive: every valid point in the space's order, in parallel batches, until the budget ends."""

from __future__ import annotations

from megasim.search.budget import Tracker, check_options

OPTIONS: dict = {}


def run(space, evaluator, budget, options=None, seed=0):
    check_options("exhaustive", options, OPTIONS)
    tracker = Tracker(space, evaluator, budget)
    tracker.evaluate(space.valid_points())
    return tracker.records
