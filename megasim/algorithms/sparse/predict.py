"""Predicting sparse and dense direct convolutions (ECR, PECR, their dense twins, unfused chains).

``megasim.plan.predict`` runs the sparse algorithms on synthetic maps; this module runs them on the zeros
of a real map (``x``) too: lower an op on a problem with
the zeros of a real map or of a sparsity parameter (``megasim.algorithms.sparse.lowering``), simulate it on a
GPUSpec, and report the *kernel time* -- from the first kernel's start to the last one's end, the
span that CUDA events around the launches measure on the GPU (the host's launch cost is outside it).
"""

from __future__ import annotations

from dataclasses import dataclass

from megasim.hardware.spec import GPUSpec
from megasim.algorithms.sparse.plugin import kernel_us
from megasim.algorithms.sparse.lowering import SparseLowering, lower_sparse
from megasim.algorithms.sparse.tiling import PoolSpec
from megasim.sim import SimResult, simulate
from megasim.workloads.problem import ConvProblem
from megasim.workloads.sparse import SparsitySpec


@dataclass(frozen=True)
class SparsePrediction:
    kernel_us: float
    result: SimResult
    lowering: SparseLowering




def predict_sparse(problem: ConvProblem, op: str, spec: GPUSpec, *, x=None,
                   sparsity: SparsitySpec | float | None = None, pool: PoolSpec | None = None,
                   k_tile: int | None = None) -> SparsePrediction:
    graph, schedule, info = lower_sparse(problem, op, spec.sm_count, x=x, sparsity=sparsity, pool=pool,
                                         k_tile=k_tile)
    result = simulate(graph, schedule, spec)
    return SparsePrediction(kernel_us(result), result, info)
