"""Implementation parameters the mapping rule leaves open, chosen in the model.

``gpu.winograd.conv2d`` runs a layer at its ``default_tile`` and Algorithm 1's recommended parameters
(``megasim.mapping.recommended_params``), with the fused schedule's transform tasks at a fixed size
(``DEFAULT_TRANSFORM_PAIRS_PER_THREAD["fused"]``, 4 pairs per thread). How large a transform task should be
depends on the layer: larger tasks pay the megakernel's per-task claim, wait and signal fewer times, smaller
ones give the dispatcher more, shorter tasks to interleave with the GEMMs (the H200 measured 2 pairs
against 4 at 0.925-1.015x per layer on the H200). ``model_pairs`` predicts the fused schedule at each
candidate, each at its own recommended mapping, with a calibrated spec, and returns the fastest: a choice
made by the model before any GPU run, which the GPU bench then measures (``experiments.benchmarks.winograd_bench
--model-pairs SPEC``). ``model_implementation`` chooses the Winograd tile the same way, among the tiles a caller
offers (``--model-tiles``).
"""

from __future__ import annotations

import dataclasses

from megasim.errors import MegasimError
from megasim.hardware.spec import GPUSpec
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES
from megasim.algorithms.winograd.algorithm1 import recommended_params
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
    _, pairs, times = model_implementation(problem, spec, plan, (plan.params.tile,), candidates)
    return pairs, {p: us for (_, p), us in times.items()}


def model_implementation(problem: ConvProblem, spec: GPUSpec, plan: Plan, tiles: tuple[int, ...],
                         pairs: tuple[int, ...] = PAIRS_CANDIDATES) -> tuple[int, int, dict[tuple[int, int], float]]:
    """(tile, pairs per transform thread, the predicted microseconds of each (tile, pairs)): the Winograd tile
    F(m x m) of ``tiles`` and the pairs of ``pairs`` at which ``spec`` predicts ``plan``'s fused schedule fastest,
    each candidate at its own recommended mapping (as ``model_pairs``). On a predicted tie the earlier candidate
    wins (``tiles`` first). Which tiles to offer is the caller's choice: they differ in FP32 error
    (``megasim.algorithms.winograd.winograd_math``; F(7x7)'s is 4-5x F(6x6)'s), which the model does not weigh."""
    if plan.schedule != "fused":
        raise MegasimError(f"model_implementation: schedule {plan.schedule!r} is not allowed: want 'fused' (the "
                           f"non-fused transform kernels run 1 pair per thread)")
    if not tiles or not pairs:
        raise MegasimError(f"model_implementation: no candidates in tiles={tiles!r}, pairs={pairs!r}: want at least "
                           f"one tile and one number of pairs per thread")
    for m in tiles:
        if m not in SUPPORTED_TILES:
            raise MegasimError(f"model_implementation: tile {m!r} is not allowed: want one of {SUPPORTED_TILES}")
    times = {(m, p): predict(problem, spec, candidate_plan(problem, dataclasses.replace(plan, params=dataclasses.replace(plan.params, tile=m)), p))[0].predicted_us
             for m in tiles for p in pairs}
    best = min(times, key=times.get)    # the first of equal minima: the earlier candidate
    return best[0], best[1], times


def candidate_plan(problem: ConvProblem, plan: Plan, pairs: int) -> Plan:
    """``plan`` at ``pairs`` pairs per transform thread, with that graph's recommended Algorithm 1 parameters
    where ``plan`` sets none."""
    params = dataclasses.replace(plan.params, transform_pairs_per_thread=pairs)
    if params.d_ig is None and params.d_go is None and params.m is None:
        from megasim.algorithms import get_algorithm      # the plug-in's lowering, cached: build() reuses it
        rec = recommended_params(get_algorithm("winograd").lower(problem, params))
        params = dataclasses.replace(params, d_ig=rec.d_ig, d_go=rec.d_go, m=rec.m)
    return dataclasses.replace(plan, params=params)
