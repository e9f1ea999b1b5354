"""Implementation parameters the mapping rule leaves open, chosen in the model.

``gpu.winograd.conv2d`` runs a layer at its ``default_tile`` and Algorithm 1's recommended parameters
(``megasim.mapping.recommended_params``), with the fused schedule's transform tasks at a fixed size
(``DEFAULT_TRANSFORM_PAIRS_PER_THREAD["fused"]``, 4 pairs per thread). How large a transform task should be
depends on the layer: larger tasks pay the megakernel's per-task claim, wait and signal fewer times, smaller
ones give the dispatcher more, shorter tasks to interleave with the GEMMs (session 29 measured 2 pairs
against 4 at 0.925-1.015x per layer on the H200). ``model_pairs`` predicts the fused schedule at each
candidate, each at its own recommended mapping, with a calibrated spec, and returns the fastest: a choice
made by the model before any GPU run, which the GPU bench then measures (``experiments.winograd_bench
--model-pairs SPEC``).
"""

from __future__ import annotations

import dataclasses

from megasim.errors import MegasimError
from megasim.hardware.spec import GPUSpec
from megasim.plan import Plan, predict
from megasim.workloads.problem import ConvProblem

# The default first: on a predicted tie the default stays.
PAIRS_CANDIDATES = (4, 2)


def model_pairs(problem: ConvProblem, spec: GPUSpec, plan: Plan,
                candidates: tuple[int, ...] = PAIRS_CANDIDATES) -> tuple[int, dict[int, float]]:
    """(the pairs per transform thread at which ``spec`` predicts ``plan``'s fused schedule fastest, the predicted
    microseconds at each candidate). ``plan``'s other parameters are kept; its Algorithm 1 parameters, when
    unset, are the recommended ones at each candidate's task sizes."""
    if plan.schedule != "fused":
        raise MegasimError(f"model_pairs: schedule {plan.schedule!r} is not allowed: want 'fused' (the non-fused "
                           f"transform kernels run 1 pair per thread)")
    if not candidates:
        raise MegasimError("model_pairs: no candidates: want at least one number of pairs per thread")
    times = {p: predict(problem, spec, dataclasses.replace(plan, transform_pairs_per_thread=p))[0].predicted_us
             for p in candidates}
    best = min(times, key=lambda p: (times[p], candidates.index(p)))
    return best, times
