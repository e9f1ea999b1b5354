"""The sparse family's kernel tables: ``ecr``, ``direct``, ``pecr``, ``direct_fused``.

Each algorithm's task kinds (``megasim.algorithms.sparse.plugin``: its own kind, and for the pooled two
the unfused chain's conv kind, ``relu`` and ``maxpool``) map to the kernels of
``gpu.kernels.sparse.kernels``:

| kind | kernel | grid, block |
|---|---|---|
| ``ecr`` / ``direct`` | ``conv_kernel(sparse, k_tile, c_chunk, R, S, stride)`` | (pixel tiles, filter tiles), 128 |
| ``pecr`` / ``direct_fused`` | ``fused_kernel(..., pool, pool_stride)`` | (pooled pixel tiles, filter tiles), 128 |
| ``relu`` | ``relu_kernel`` | ceil(N*K*P*Q / 256), 256 |
| ``maxpool`` | ``maxpool_kernel(pool, pool_stride)`` | ceil(N*K*P'*Q' / 256), 256 |

Every one takes its block from blockIdx, and the lowering (``megasim.algorithms.sparse.lowering``)
lays a kind's tasks out in that grid order (pixel tile fastest), so each runs one launch per kind in
its natural order and refuses any other (``KindKernel.grid_order``). The tiling (k_tile, c_chunk, pool)
is read from ``graph.meta``, so the kernels run the grid that was lowered and predicted.

A workspace holds x (N, C, H, W) and w (K, C, R, S) and the buffers the graph's kernels write: the
convolution output (the output itself for ``ecr`` / ``direct``), and for the unfused chain the ReLU'd
map and the pooled output; the fused kernels write the pooled output. ``conv_launch``,
``relu_launch`` and ``maxpool_launch`` are the (configured kernel, args) of one launch, shared with
``gpu.sparse.relu`` / ``maxpool2d``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda

from gpu.errors import KernelInputError
from gpu.kernels.common.random_fill import device_normal
from gpu.kernels.sparse import kernels as sk
from gpu.runtime.table import KernelTable, KindKernel, register_kernels
from megasim.algorithms.registry import get_algorithm
from megasim.algorithms.sparse.tiling import CONV_KINDS, FUSED_KINDS, PoolSpec, SparseTiling, choose_tiling, grid, pooled_hw
from megasim.workloads.sparse import sparse_feature_map

SPARSE_ALGORITHMS = ("ecr", "direct", "pecr", "direct_fused")


@dataclass(frozen=True, eq=False)
class SparseState:
    """What every launch of one sparse graph shares: the op, its conv kernel's tiling and compiled kernel."""

    problem: object
    op: str
    tiling: SparseTiling
    pool: PoolSpec | None
    kernel: object          # the conv or fused kernel (gpu.kernels.sparse.kernels factories)


@dataclass
class SparseWorkspace:
    x: object
    w: object
    conv_out: object        # what the conv (or fused) kernel writes
    activated: object | None
    output: object


def _state(problem, plan, graph, schedule, on_megakernel, options) -> SparseState:
    meta = graph.meta if isinstance(graph.meta, dict) else {}
    if "op" not in meta or "k_tile" not in meta:
        raise KernelInputError("the sparse kernels run graphs of lower_sparse (their meta names op and k_tile)")
    op = meta["op"]
    kind = op.removeprefix("unfused_")
    pool = PoolSpec(*meta["pool"]) if "pool" in meta else None
    tiling = choose_tiling(problem, kind, 1, pool=pool if kind in FUSED_KINDS else None, k_tile=meta["k_tile"])
    if tiling.c_chunk != meta.get("c_chunk", tiling.c_chunk):
        raise KernelInputError(f"graph's c_chunk {meta['c_chunk']} differs from the kernels' {tiling.c_chunk}")
    sparse = kind in ("ecr", "pecr")
    if kind in FUSED_KINDS:
        kernel = sk.fused_kernel(sparse, tiling.k_tile, tiling.c_chunk, problem.r, problem.s, problem.stride,
                                 pool.size, pool.stride)
    else:
        kernel = sk.conv_kernel(sparse, tiling.k_tile, tiling.c_chunk, problem.r, problem.s, problem.stride)
    return SparseState(problem, op, tiling, pool, kernel)


def _workspace(state: SparseState, x, w) -> SparseWorkspace:
    p = state.problem
    n, k, ph, qw = p.n, p.k, p.out_h, p.out_w
    if state.op in FUSED_KINDS:
        out = cuda.device_array((n, k, *pooled_hw(p, state.pool)), np.float32)
        return SparseWorkspace(x, w, out, None, out)
    conv_out = cuda.device_array((n, k, ph, qw), np.float32)
    if state.op in CONV_KINDS:
        return SparseWorkspace(x, w, conv_out, None, conv_out)
    activated = cuda.device_array((n, k, ph, qw), np.float32)
    out = cuda.device_array((n, k, *pooled_hw(p, state.pool)), np.float32)
    return SparseWorkspace(x, w, conv_out, activated, out)


def _blocks(size: int) -> int:
    return -(-size // sk.ELEMENTWISE_THREADS)


def conv_launch(state: SparseState, x, w, out) -> tuple:
    """(configured conv or fused kernel, args) writing ``out``."""
    return state.kernel[grid(state.problem, state.tiling), state.tiling.pixels_per_block], \
        (x, w, out, state.problem.padding)


def relu_launch(src, dst) -> tuple:
    """(configured relu_kernel, args): dst = max(src, 0), both C-contiguous of one size."""
    size = int(np.prod(src.shape))
    return sk.relu_kernel[_blocks(size), sk.ELEMENTWISE_THREADS], (src.reshape(size), dst.reshape(size))


def maxpool_launch(src, dst, pool: PoolSpec) -> tuple:
    """(configured maxpool_kernel, args): dst = max-pool of src (N, K, P, Q) into dst (N, K, P', Q')."""
    return sk.maxpool_kernel(pool.size, pool.stride)[_blocks(int(np.prod(dst.shape))), sk.ELEMENTWISE_THREADS], \
        (src, dst)


class _GridLaunch:
    """A launch of one kind, all its tasks in grid order (checked by the table before preparing)."""

    def __init__(self, state: SparseState, launch, make, blocks: int) -> None:
        tasks = len(launch.order)
        if tasks != blocks:
            raise KernelInputError(f"launch {launch.name!r} holds {tasks} tasks but its kernel's grid has {blocks} "
                                   "blocks: the graph was lowered for another tiling")
        self.make = make

    def steps(self, ws) -> list:
        return [self.make(ws)]

    def check(self) -> None:
        return None


def _conv_entry(kind: str) -> KindKernel:
    def prepare(state: SparseState, launch, index: int):
        tiles_p, tiles_k = grid(state.problem, state.tiling)
        return _GridLaunch(state, launch, lambda ws: conv_launch(state, ws.x, ws.w, ws.conv_out), tiles_p * tiles_k)
    name = "fused_kernel" if kind in FUSED_KINDS else "conv_kernel"
    return KindKernel(f"{kind} {name}", prepare, grid_order=True)


def _relu_prepare(state: SparseState, launch, index: int):
    p = state.problem
    return _GridLaunch(state, launch, lambda ws: relu_launch(ws.conv_out, ws.activated),
                       _blocks(p.n * p.k * p.out_h * p.out_w))


def _maxpool_prepare(state: SparseState, launch, index: int):
    p = state.problem
    ph, pw = pooled_hw(p, state.pool)
    return _GridLaunch(state, launch, lambda ws: maxpool_launch(ws.activated, ws.output, state.pool),
                       _blocks(p.n * p.k * ph * pw))


ENTRIES = {**{kind: _conv_entry(kind) for kind in CONV_KINDS + FUSED_KINDS},
           "relu": KindKernel("relu_kernel", _relu_prepare, grid_order=True),
           "maxpool": KindKernel("maxpool_kernel", _maxpool_prepare, grid_order=True)}


def _inputs(problem, plan, index: int):
    """Device x: the map whose zeros the plan's parameters describe (``sparse_feature_map``, the map the
    model counts its costs from; drawn on the host), the same for every set; w: standard normal, drawn on
    the device, seeded by the set index."""
    x = sparse_feature_map((problem.n, problem.c, problem.h, problem.w), plan.params.sparsity_spec)
    return cuda.to_device(x), device_normal((problem.k, problem.c, problem.r, problem.s), 10000 + index)


def _table(name: str) -> KernelTable:
    return KernelTable(algorithm=name, kinds={kind: ENTRIES[kind] for kind in get_algorithm(name).kinds},
                       state=_state, workspace=_workspace, output=lambda ws: ws.output, inputs=_inputs,
                       input_layout="NCHW", input_key=lambda plan: plan.params.sparsity_spec)


SPARSE_KERNELS = {name: register_kernels(_table(name)) for name in SPARSE_ALGORITHMS}
