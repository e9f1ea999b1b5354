"""Random sampling without replacement over the valid points (seeded), in parallel batches."""

from __future__ import annotations

import numpy as np

from megasim.search.budget import Tracker, check_options

OPTIONS = {"batch": 16}
RANGES = {"batch": (1, 100_000)}


def run(space, evaluator, budget, options=None, seed=0):
    opts = check_options("random", options, OPTIONS, RANGES)
    tracker = Tracker(space, evaluator, budget)
    points = space.valid_points()
    order = np.random.default_rng(seed).permutation(len(points))
    batch = max(1, int(opts["batch"]))
    for start in range(0, len(order), batch):
        if tracker.exhausted:
            break
        tracker.evaluate([points[i] for i in order[start:start + batch]])
    return tracker.records
