"""The naive direct convolution's kernel table: the ``naive_direct`` algorithm's one task kind on
``gpu.kernels.im2win.direct``.

| kind | kernel | grid, block |
|---|---|---|
| ``naive_direct`` | ``direct_kernel`` | ceil(N*K*P*Q / 256), 256 |

One thread per output ``y[n, k, p, q]`` (flat NCHW); block b computes outputs ``[256 b, 256 (b + 1))``, the
task the lowering (``megasim.algorithms.im2win.lowering.lower_naive_direct``) lays out at grid position b,
so the launch runs in grid order. A workspace holds x (N, C, H, W), w (K, C, R, S) and y (N, K, P, Q),
float32 NCHW. No run options.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda

from gpu.errors import KernelInputError
from gpu.kernels.common.random_fill import device_normal
from gpu.kernels.im2win.direct import DIRECT_THREADS, direct_blocks, direct_kernel, direct_params
from gpu.runtime.table import KernelTable, KindKernel, register_kernels


@dataclass(frozen=True, eq=False)
class NaiveDirectState:
    problem: object
    d_prm: object           # direct_kernel's int32 parameters on the device


@dataclass
class NaiveDirectWorkspace:
    x: object
    w: object
    output: object


def _state(problem, plan, graph, schedule, on_megakernel, options) -> NaiveDirectState:
    meta = graph.meta if isinstance(graph.meta, dict) else {}
    if meta.get("method") != "naive_direct":
        raise KernelInputError("the naive direct kernel runs graphs of lower_naive_direct")
    return NaiveDirectState(problem, cuda.to_device(direct_params(problem)))


def _workspace(state: NaiveDirectState, x, w) -> NaiveDirectWorkspace:
    p = state.problem
    return NaiveDirectWorkspace(x, w, cuda.device_array((p.n, p.k, p.out_h, p.out_w), np.float32))


class _Launch:
    """The one launch, every block in grid order (checked by the table before preparing)."""

    def __init__(self, state: NaiveDirectState, launch) -> None:
        blocks = direct_blocks(state.problem)
        if len(launch.order) != blocks:
            raise KernelInputError(f"launch {launch.name!r} holds {len(launch.order)} tasks but direct_kernel's grid "
                                   f"has {blocks} blocks: the graph was lowered for another problem")
        self.state, self.blocks = state, blocks

    def steps(self, ws) -> list:
        return [(direct_kernel[self.blocks, DIRECT_THREADS], (ws.x, ws.w, ws.output, self.state.d_prm))]

    def check(self) -> None:
        return None


def _inputs(problem, plan, index: int):
    """Standard-normal device x and w, drawn on the device, seeded by the set index."""
    return (device_normal((problem.n, problem.c, problem.h, problem.w), 4600 + 2 * index),
            device_normal((problem.k, problem.c, problem.r, problem.s), 4601 + 2 * index))


NAIVE_DIRECT_KERNELS = register_kernels(KernelTable(
    algorithm="naive_direct",
    kinds={"naive_direct": KindKernel("direct_kernel", lambda state, launch, index: _Launch(state, launch),
                                      grid_order=True)},
    state=_state, workspace=_workspace, output=lambda ws: ws.output, inputs=_inputs, input_layout="NCHW"))
