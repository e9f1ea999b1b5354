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
from megasim.lowering.winograd import lower_winograd
from megasim.mapping import recommended_params
from megasim.plan import Plan, predict
from megasim.workloads.problem import ConvProblem

# The default first: on a predicted tie the default stays.
PAIRS_CANDIDATES = (4, 2)


def model_pairs(problem: ConvProblem, spec: GPUSpec, plan: Plan,
                candidates: tuple[int, ...] = PAIRS_CANDIDATES) -> tuple[int, dict[int, float]]:
    """(the pairs per transform thread at which ``spec`` predicts ``plan``'s fused schedule fastest, the predicted
    microseconds at each candidate). ``plan``'s other parameters are kept; its Algorithm 1 parameters, when
    all unset, are each candidate's ``recommended_params`` (conv2d's default mapping: D_IG and D_GO scale with
    the transform tasks' size)."""
    if plan.schedule != "fused":
        raise MegasimError(f"model_pairs: schedule {plan.schedule!r} is not allowed: want 'fused' (the non-fused "
                           f"transform kernels run 1 pair per thread)")
    if not candidates:
        raise MegasimError("model_pairs: no candidates: want at least one number of pairs per thread")
    times = {p: predict(problem, spec, candidate_plan(problem, plan, p))[0].predicted_us for p in candidates}
    best = min(times, key=lambda p: (times[p], candidates.index(p)))
    return best, times


def candidate_plan(problem: ConvProblem, plan: Plan, pairs: int) -> Plan:
    """``plan`` at ``pairs`` pairs per transform thread, with that graph's recommended Algorithm 1 parameters
    where ``plan`` sets none."""
    cand = dataclasses.replace(plan, transform_pairs_per_thread=pairs)
    if cand.d_ig is None and cand.d_go is None and cand.m is None:
        rec = recommended_params(lower_winograd(problem, cand.config))
        cand = dataclasses.replace(cand, d_ig=rec.d_ig, d_go=rec.d_go, m=rec.m)
    return cand
