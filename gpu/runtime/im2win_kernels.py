"""The im2win kernel table: the ``im2win`` algorithm's task kinds on the kernels of ``gpu.kernels.im2win``.

| kind | kernel | grid, block |
|---|---|---|
| ``im2win_transform`` | ``transform_kernel`` | ceil(J.size / 4096), 256 |
| ``im2win_conv`` (Alg. 3) | ``make_conv_kernel(m_b, n_b, k_b, m_t, n_t)`` | filter tiles x output tiles, (m_b/m_t)(n_b/n_t) |
| ``im2win_conv_no_vector`` / ``_no_prefetch`` | the same with ``vector=False`` / ``prefetch=False`` | the same |
| ``im2win_conv_no_microkernel`` | the same with m_t = n_t = 1 (the plan's) | filter tiles x output tiles, m_b*n_b |
| ``im2win_conv_basic`` (Alg. 2) | ``make_basic_kernel(BASIC_TILE)`` | ceil(M/32) * ceil(NPQ/32), 1024 |

Run options (``PreparedRun(..., options=)``, ``gpu.im2win.prepare(max_registers=, staging=)``), build
parameters of ``make_conv_kernel``: ``max_registers``, a cap on the conv kernel's registers per thread
(default ``register_cap(threads)``: room for at least two blocks and 12 warps per SM); ``staging``, ``"registers"`` or
``"async"`` (cp.async into a ring of ``ASYNC_STAGES``; default ``DEFAULT_STAGING``); ``unroll``, the
micro-kernel's K loop written out (default True; False: the rolled loop, for comparison); ``math``,
``"fp32"`` or ``"3xtf32"`` (the micro-kernel on TF32 tensor cores by the 3xTF32 split, FP32-accurate; same
grid, threads and staging): by default the plan's ``Im2winParams.math`` (which the model prices as
``im2win_conv@3xtf32``); the run option is for a plan of math fp32 only.

Every kernel takes its block from blockIdx and the lowering (``megasim.algorithms.im2win.lowering``)
lays each kind's tasks out in that grid order, so each runs one launch per kind in its natural order
(``KindKernel.grid_order``). The tiling is read from the plan's parameters (the same
``Im2winTiling`` the lowering used). A workspace holds x (N, C, H, W), w (K, C, R, S), the im2win tensor
J (N, C, P, (W + 2 pad) R) and the output y (N, K, P, Q), all float32 NCHW. Compiled kernels are cached
per layout (``conv_kernel_for``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda

from gpu.errors import KernelInputError
from gpu.kernels.common.random_fill import device_normal
from gpu.kernels.im2win.conv import conv_blocks, conv_offsets, conv_params, make_basic_kernel, make_conv_kernel
from gpu.kernels.im2win.transform import transform_kernel, transform_magic, transform_params
from gpu.runtime.table import KernelTable, KindKernel, register_kernels
from megasim.algorithms.im2win.lowering import conv_kind
from megasim.algorithms.im2win.tiling import (ASYNC_STAGES, BASIC_TILE, DEFAULT_STAGING, TRANSFORM_THREADS, VARIANTS, Im2winTiling, im2win_shape,
                                              transform_blocks)


@lru_cache(maxsize=None)
def conv_kernel_for(tiling: Im2winTiling, max_registers: int | None = None, staging: str | None = None,
                    unroll: bool | None = None, math: str | None = None):
    """The compiled conv kernel of a tiling (its variant picks the build parameters), with an optional
    register cap (the run option ``max_registers``; None: ``register_cap``'s rule), staging (the run
    option ``staging``, "registers" or "async"; None: ``DEFAULT_STAGING``; ``no_prefetch`` always stages
    through registers, one stage), the micro-kernel's K loop written out (the run option ``unroll``;
    None: True; ignored by "3xtf32") and the micro-kernel's math (the run option ``math``, "fp32" or
    "3xtf32"; None: "fp32")."""
    if tiling.variant == "basic":
        return make_basic_kernel(BASIC_TILE)
    staging = "registers" if tiling.variant == "no_prefetch" else (staging or DEFAULT_STAGING)
    return make_conv_kernel(tiling.m_b, tiling.n_b, tiling.k_b, tiling.m_t, tiling.n_t,
                            vector=tiling.variant != "no_vector", prefetch=tiling.variant != "no_prefetch",
                            max_registers=max_registers, staging=staging, stages=ASYNC_STAGES,
                            unroll=True if unroll is None else bool(unroll), math=math or "fp32")


@dataclass(frozen=True, eq=False)
class Im2winState:
    problem: object
    tiling: Im2winTiling
    kernel: object
    d_tprm: object          # transform_kernel's int32 parameters on the device
    d_tmagic: object        # and its uint64 division constants
    d_cprm: object          # the conv kernels'
    d_koff: object          # the tiled conv kernel's per-k offsets (conv_offsets; None for basic)


@dataclass
class Im2winWorkspace:
    x: object
    w: object
    window: object          # J
    output: object


def _state(problem, plan, graph, schedule, on_megakernel, options) -> Im2winState:
    tiling = plan.params.tiling
    meta = graph.meta if isinstance(graph.meta, dict) else {}
    if meta.get("method") != "im2win" or meta.get("variant") != tiling.variant or \
            meta.get("math", "fp32") != tiling.math:
        raise KernelInputError("the im2win kernels run graphs of lower_im2win(method='im2win') of the plan's tiling")
    math = options.get("math")
    if math is not None and tiling.math != "fp32" and math != tiling.math:
        raise KernelInputError(f"run option math={math!r} is not allowed with a plan of math={tiling.math!r}: give one")
    koff = None if tiling.variant == "basic" else cuda.to_device(conv_offsets(problem, tiling.k_b))
    return Im2winState(problem, tiling, conv_kernel_for(tiling, options.get("max_registers"), options.get("staging"),
                                                          options.get("unroll"), math or tiling.math),
                       cuda.to_device(transform_params(problem)), cuda.to_device(transform_magic(problem)),
                       cuda.to_device(conv_params(problem, tiling.tile_m)), koff)


def _workspace(state: Im2winState, x, w) -> Im2winWorkspace:
    p = state.problem
    return Im2winWorkspace(x, w, cuda.device_array(im2win_shape(p), np.float32),
                           cuda.device_array((p.n, p.k, p.out_h, p.out_w), np.float32))


class _GridLaunch:
    """A launch of one kind, all its tasks in grid order (checked by the table before preparing)."""

    def __init__(self, launch, make, blocks: int) -> None:
        if len(launch.order) != blocks:
            raise KernelInputError(f"launch {launch.name!r} holds {len(launch.order)} tasks but its kernel's grid has "
                                   f"{blocks} blocks: the graph was lowered for another tiling")
        self.make = make

    def steps(self, ws) -> list:
        return [self.make(ws)]

    def check(self) -> None:
        return None


def transform_launch(state: Im2winState, x, window) -> tuple:
    """(configured transform_kernel, args) writing the im2win tensor ``window`` from ``x``."""
    return transform_kernel[transform_blocks(state.problem), TRANSFORM_THREADS], (x, window, state.d_tprm,
                                                                                 state.d_tmagic)


def conv_launch(state: Im2winState, window, w, y) -> tuple:
    """(configured conv kernel, args) writing ``y`` from the im2win tensor and the filter."""
    blocks = conv_blocks(state.problem, state.tiling.tile_m, state.tiling.tile_n)
    args = (window, w, y, state.d_cprm) if state.d_koff is None else (window, w, y, state.d_cprm, state.d_koff)
    return state.kernel[blocks, state.kernel.threads], args


def _transform_prepare(state: Im2winState, launch, index: int):
    return _GridLaunch(launch, lambda ws: transform_launch(state, ws.x, ws.window), transform_blocks(state.problem))


def _conv_prepare(state: Im2winState, launch, index: int):
    tiles_m, tiles_n = state.tiling.grid(state.problem)
    return _GridLaunch(launch, lambda ws: conv_launch(state, ws.window, ws.w, ws.output), tiles_m * tiles_n)


def _inputs(problem, plan, index: int):
    """Standard-normal device x and w, drawn on the device, seeded by the set index."""
    return (device_normal((problem.n, problem.c, problem.h, problem.w), 4400 + 2 * index),
            device_normal((problem.k, problem.c, problem.r, problem.s), 4401 + 2 * index))


ENTRIES = {"im2win_transform": KindKernel("transform_kernel", _transform_prepare, grid_order=True),
           **{conv_kind(v): KindKernel(f"{conv_kind(v)} kernel", _conv_prepare, grid_order=True) for v in VARIANTS}}

IM2WIN_KERNELS = register_kernels(KernelTable(algorithm="im2win", kinds=ENTRIES, state=_state, workspace=_workspace,
                                              output=lambda ws: ws.output, inputs=_inputs, input_layout="NCHW",
                                              options=("max_registers", "staging", "unroll", "math")))
