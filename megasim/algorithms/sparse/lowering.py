"""Lowering sparse (ECR, PECR) and dense direct convolutions to TaskGraphs whose costs follow the zeros.

One task is one thread block of the kernels in ``gpu/sparse.py``, cut as ``sparse_tiling`` says
(read its docstring first). What a block costs depends on the nonzeros its threads meet, so the
lowering counts them from a real feature map (a boolean "nonzero" mask of the input; or a map drawn
from a sparsity parameter, ``megasim.workloads.sparse``):

- **Multiply-adds.** A thread of ``ecr`` loops over the nonzeros of its window, ``k_tile``
  multiply-adds each; ``direct`` over every window element (padding included). A warp issues its
  loop as long as its busiest thread runs (the others idle, predicated off), so per warp and channel
  chunk the issued work is ``32 x k_tile x max over the warp's threads of its count``; a task's
  ``flops`` are twice the sum over its warps and chunks. ``pecr`` / ``direct_fused`` count, per
  nonzero (or element) of the thread's input patch, the convolution outputs of its pooling window
  that use it (1 to pool^2).
- **Scan** (``other_ops``). Every thread reads every element of its window (its patch, for the
  fused kinds) once per chunk, compares it and, for the sparse kinds, stores the nonzeros: one
  operation per element and thread of an active warp, plus the staged weights
  (``c_chunk*R*S*k_tile`` per chunk). ``TaskCost.ns_per_other_op`` of the kind prices them.
- **Serial steps** (``serial_steps``): the channel chunks, each a staged load, a barrier and a
  dependent scan-multiply sequence; ``TaskCost.ns_per_step`` is their latency, which other resident
  blocks hide (it matters where a layer gives few blocks per SM and many channels: deep layers at
  batch 1). **Serial iterations** (``serial_iterations``): within a chunk the block waits for its
  busiest thread's multiply loop (stored nonzeros for the sparse kinds, every element for the
  dense twins), one dependent shared-memory round trip per iteration; summed over the chunks and
  priced by ``TaskCost.ns_per_iteration`` (hidden the same way).
- **Shared-memory replays** (``shared_replays``, ECR only): the multiply loop reads each stored
  nonzero's weight row with 128-bit shared loads; lanes of a warp that read different rows whose
  starts share banks are served in extra wavefronts (``_row_replays``: counted per warp and loop
  iteration from the map; ``TaskCost.ns_per_replay`` of SM time each). On a dense map the lanes read
  one row (a broadcast), so the replays peak at mid sparsity (``gpu.probes.sparse_rows``).
- **Partial pixel tiles** (the last block of each filter tile when the pixels are not a multiple of
  the block's): its multiply-adds, scan and replays are priced per warp slot, i.e. its active warps'
  counts scaled by ``warps / active warps``, as if it were full. Each warp of a block runs on one of
  the SM's four schedulers, next to one warp of every co-resident block, and the block meets at a
  barrier every chunk, so a block with two active warps advances at the rate of its warps, not twice
  as fast: on the GPU it ends with the full blocks of its wave. Priced by its active warps alone it
  would end at about half time in the simulation (one SM server shared by blocks) and free its slot
  early; with a grid just past a whole number of waves the tail blocks then start on those slots at
  half time instead of after the wave (VGG-19 conv3_x at batch 1 and conv5_x at batch 16: 400 blocks,
  3 per SM, last tile 64 of 128 pixels; predicted 21-28% fast without this rule, docs/sparse.md).
- **Bytes.** A block reads the input its windows cover (all channels), its filter tile, and writes
  its outputs. Regions: ``input`` (a part per (image, input row, segment of ``SEGMENT_FLOATS``
  columns: one 128-byte line per channel), ``weights`` (a part per filter tile), the conv output
  planes (a part per (image, filter)), so the L2 model sees that every filter tile re-reads the same
  input. A block's input reads are the segments its windows touch (``_input_footprint``): on a map
  wider than a block's pixels it reads part of each row, not the whole row (reading whole rows, before
  05f4c36, the model had the dense twin 13% slow at width 224 and 30% at 448 against a kernel
  that ran flat: ``gpu.probes.conv_map_shape``, docs/sparse.md). The compressed windows live in shared
  memory: no global traffic.
- **Unfused chains** (``unfused_ecr``, ``unfused_direct``): the conv kernel, then ``relu`` (256
  threads, one element each, into a second buffer) and ``maxpool`` (256 threads, one pooled output each) launches.

The model reads per-kind costs from the GPUSpec (``task_costs['ecr']`` ...), calibrated from each
kernel timed alone on calibration problems (``gpu/calibrate/sparse.py``), never on the problems it is
judged on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megasim.errors import LoweringError
from megasim.algorithms.sparse.tiling import (CONV_KINDS, FUSED_KINDS, PoolSpec, SparseTiling, choose_tiling, grid, patch_hw, pooled_hw, weight_row_floats)
from megasim.schedule import Launch, Schedule
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem
from megasim.workloads.sparse import SparsitySpec, zero_mask

OPS = ("ecr", "direct", "pecr", "direct_fused", "unfused_ecr", "unfused_direct")
ELEMENTWISE_THREADS = 256
WARP = 32
FLOAT_BYTES = 4
SEGMENT_FLOATS = 32     # the input's L2 parts: one 128-byte line of a row of one channel
# Registers per thread of the compiled kernels, keyed (kind, k_tile): the compiler's report on the H200
# (sm_90, numba-cuda 0.30.4, 3x3 filters, stride 1; the regs column of gpu.calibrate.sparse, 2026-11-21,
# kernels of 01af064: weight rows read 4 filters per 128-bit load); the dense twin's with
# each channel's window loaded into registers before multiplying (e60cb6d; gpu.probes.conv_map_shape's
# regs column, H100, same sm_90 code; inline loads took 80 / 70 / 64 / 64); the fused dense twin's with
# each channel's patch loaded into registers (gpu.diagnostics.sparse_check on the H200; it was 78 / 64 /
# 80). A kind or tile not listed is estimated as 2 x accumulators + 40.
KERNEL_REGISTERS: dict[tuple[str, int], int] = {
    ("ecr", 32): 133, ("ecr", 16): 134, ("ecr", 8): 96, ("ecr", 4): 102,
    ("direct", 32): 126, ("direct", 16): 76, ("direct", 8): 68, ("direct", 4): 64,
    ("pecr", 8): 132, ("pecr", 4): 128, ("pecr", 2): 136,
    ("direct_fused", 8): 119, ("direct_fused", 4): 80, ("direct_fused", 2): 100,
}
ELEMENTWISE_REGISTERS = 30      # max-pool's count (ReLU: 12); neither limits occupancy


def kernel_registers(tiling: SparseTiling) -> int:
    return KERNEL_REGISTERS.get((tiling.kind, tiling.k_tile), min(255, 2 * tiling.accumulators() + 40))


@dataclass(frozen=True)
class SparseLowering:
    """What was lowered: the op, its conv kernel's tiling, the pool (fused and unfused chains), and
    the measured sparsity of the map the costs were counted from."""

    op: str
    tiling: SparseTiling
    pool: PoolSpec | None
    sparsity: float


def nonzero_mask(problem: ConvProblem, x=None, sparsity: SparsitySpec | float | None = None) -> np.ndarray:
    """The boolean nonzero mask (N, C, H, W) of a real input `x`, or of a map drawn from `sparsity`."""
    shape = (problem.n, problem.c, problem.h, problem.w)
    if (x is None) == (sparsity is None):
        raise LoweringError("give exactly one of a feature map x or a sparsity")
    if x is not None:
        x = np.asarray(x)
        if x.shape != shape:
            raise LoweringError(f"feature map shape {x.shape} is not allowed: the problem needs {shape}")
        return x != 0
    if not isinstance(sparsity, SparsitySpec):
        sparsity = SparsitySpec(sparsity)
    return ~zero_mask(shape, sparsity)


def _window_counts(nz: np.ndarray, problem: ConvProblem, c_chunk: int, weights: np.ndarray,
                   step: int, out_hw: tuple[int, int]) -> np.ndarray:
    """Per (image, chunk, out row, out col): sum over the chunk's channels and the window of
    ``weights[dy, dx] * nz`` where the window of output (i, j) starts at padded input (i*step, j*step)."""
    n, c, h, w = nz.shape
    pad = problem.padding
    chunks = -(-c // c_chunk)
    per = np.zeros((n, chunks, h + 2 * pad, w + 2 * pad), np.int32)
    summed = np.add.reduceat(nz.astype(np.int32), np.arange(0, c, c_chunk), axis=1)
    per[:, :, pad:pad + h, pad:pad + w] = summed
    wh, ww = weights.shape
    p, q = out_hw
    out = np.zeros((n, chunks, p, q), np.int32)
    for dy in range(wh):
        for dx in range(ww):
            if weights[dy, dx]:
                out += weights[dy, dx] * per[:, :, dy:dy + step * (p - 1) + 1:step, dx:dx + step * (q - 1) + 1:step]
    return out


def _per_warp_max(counts: np.ndarray, pixels: int) -> np.ndarray:
    """counts (chunks, pixels) -> per warp, the sum over chunks of its busiest thread's count."""
    chunks = counts.shape[0]
    warps = -(-pixels // WARP)
    padded = np.zeros((chunks, warps * WARP), counts.dtype)
    padded[:, :pixels] = counts
    return padded.reshape(chunks, warps, WARP).max(axis=2).sum(axis=0).astype(np.float64)


def _conv_counts(problem: ConvProblem, tiling: SparseTiling, nz: np.ndarray, sparse: bool,
                 loop: bool = False) -> np.ndarray:
    """(chunks, pixels) multiply-add iterations per thread (``loop``: iterations of its multiply loop,
    i.e. stored nonzeros or elements, each feeding 1..pool^2 outputs in the fused kinds), pixels
    flattened over (n, out row, out col)."""
    if tiling.kind in CONV_KINDS:
        weights = np.ones((problem.r, problem.s), np.int32)
        out_hw, step = (problem.out_h, problem.out_w), problem.stride
    else:
        ph, pw = patch_hw(problem, tiling.pool)
        pool = tiling.pool.size
        # How many of the pool x pool windows use patch position (py, px) (1 each for ``loop``).
        weights = np.zeros((ph, pw), np.int32)
        for dy in range(pool):
            for dx in range(pool):
                weights[dy * problem.stride:dy * problem.stride + problem.r,
                        dx * problem.stride:dx * problem.stride + problem.s] += 1
        if loop:
            weights = np.ones((ph, pw), np.int32)
        out_hw, step = pooled_hw(problem, tiling.pool), problem.stride * tiling.pool.stride
    if not sparse:
        nz = np.ones_like(nz)
    counts = _window_counts(nz, problem, tiling.c_chunk, weights, step, out_hw)
    if not sparse:      # the dense twins also multiply the padding, and the zeros of a last chunk's
        # missing channels (C not a multiple of c_chunk): their channel loop always runs c_chunk channels
        counts[:] = tiling.c_chunk * int(weights.sum())
    return counts.transpose(1, 0, 2, 3).reshape(counts.shape[1], -1)


def _window_bits(nz: np.ndarray, problem: ConvProblem, c_chunk: int, c0: int) -> np.ndarray:
    """(pixels, c_chunk*R*S) uint64: each conv thread's i-th stored nonzero of the chunk at channel c0
    as the bit (1 << weight row) (rows in the kernel's compression order cc, r, s), 0 past its count."""
    n, c, h, w = nz.shape
    pad, st, r, s = problem.padding, problem.stride, problem.r, problem.s
    p, q = problem.out_h, problem.out_w
    padded = np.zeros((n, c_chunk, h + 2 * pad, w + 2 * pad), bool)
    hi = min(c, c0 + c_chunk)
    padded[:, :hi - c0, pad:pad + h, pad:pad + w] = nz[:, c0:hi]
    window = np.stack([padded[:, cc, rr:rr + st * (p - 1) + 1:st, ss:ss + st * (q - 1) + 1:st].reshape(-1)
                       for cc in range(c_chunk) for rr in range(r) for ss in range(s)], axis=1)
    rank = np.cumsum(window, axis=1, dtype=np.int8) - 1
    bits = np.zeros(window.shape, np.uint64)
    pix, elem = np.nonzero(window)
    bits[pix, rank[pix, elem]] = np.left_shift(np.uint64(1), elem.astype(np.uint64))
    return bits


def _row_replays(problem: ConvProblem, tiling: SparseTiling, nz: np.ndarray, tiles_p: int) -> np.ndarray:
    """Per pixel tile: the shared-memory replays of ECR's 128-bit weight-row loads, summed over its
    warps, chunks and loop iterations and multiplied by the loads per iteration (k_tile / 4).

    Per warp and iteration, a row the same for every active lane costs one wavefront (a broadcast);
    otherwise each quarter warp costs the largest number of its distinct rows that start in one 4-bank
    group (row j starts at word j * weight_row_floats(k_tile)); the replays are the wavefronts beyond
    one. (The rule fits gpu.probes.sparse_rows on the H200, docs/sparse.md.) Rows are handled as bit
    sets (at most 64 rows per chunk). Scalar rows (k_tile not a multiple of 4) are not counted."""
    out = np.zeros(tiles_p)
    elems = tiling.c_chunk * problem.r * problem.s
    if tiling.k_tile % 4 or elems > 64:
        return out
    stride = weight_row_floats(tiling.k_tile)
    group_of = (np.arange(elems) * stride % 32) // 4
    group_masks = [np.uint64(sum(1 << int(j) for j in np.flatnonzero(group_of == g))) for g in range(8)]
    pixels = problem.n * problem.out_h * problem.out_w
    warps = -(-pixels // WARP)
    per_warp = np.zeros(warps)
    for c0 in range(0, problem.c, tiling.c_chunk):
        bits = np.zeros((warps * WARP, elems), np.uint64)
        bits[:pixels] = _window_bits(nz, problem, tiling.c_chunk, c0)
        quarter = np.bitwise_or.reduce(bits.reshape(warps, 4, 8, elems), axis=2)    # (warps, 4, iterations)
        warp = np.bitwise_or.reduce(quarter, axis=1)                                  # (warps, iterations)
        worst = np.zeros(quarter.shape, np.uint8)
        for gm in group_masks:
            np.maximum(worst, np.bitwise_count(quarter & gm), out=worst)
        wavefronts = worst.sum(axis=1, dtype=np.int32)
        wavefronts = np.where(np.bitwise_count(warp) == 1, 1, wavefronts)
        per_warp += np.where(warp != 0, wavefronts - 1, 0).sum(axis=1)
    np.add.at(out, np.arange(warps) * WARP // tiling.threads, per_warp)
    return out * (tiling.k_tile // 4)


class _GraphParts:
    """Accumulates tasks, accesses and regions of a (possibly multi-kernel) plain-kernel graph."""

    def __init__(self) -> None:
        self.kinds: list[tuple[str, int, int, int]] = []
        self.tensors: list[str] = []
        self.regions: list[tuple[int, int, float]] = []
        self.kind: list[np.ndarray] = []
        self.group: list[np.ndarray] = []
        self.index: list[np.ndarray] = []
        self.flops: list[np.ndarray] = []
        self.other: list[np.ndarray] = []
        self.steps: list[np.ndarray] = []
        self.iterations: list[np.ndarray] = []
        self.replays: list[np.ndarray] = []
        self.acc: list[tuple[np.ndarray, ...]] = []     # per kind: task, region, lo, hi, bytes, write

    def add_kind(self, name: str, threads: int, registers: int, shared: int) -> int:
        self.kinds.append((name, threads, registers, shared))
        return len(self.kinds) - 1

    def add_region(self, tensor: str, parts: int, part_bytes: float) -> int:
        if tensor not in self.tensors:
            self.tensors.append(tensor)
        self.regions.append((self.tensors.index(tensor), int(parts), float(part_bytes)))
        return len(self.regions) - 1

    def add_tasks(self, kind: int, group, index, flops, other, accesses, steps=0.0, iterations=0.0,
                  replays=0.0) -> None:
        self.kind.append(np.full(len(group), kind, np.int16))
        self.group.append(np.asarray(group, np.int32))
        self.index.append(np.asarray(index, np.int32))
        self.flops.append(np.asarray(flops, np.float64))
        self.other.append(np.asarray(other, np.float64))
        self.steps.append(np.broadcast_to(np.asarray(steps, np.float64), (len(group),)))
        self.iterations.append(np.broadcast_to(np.asarray(iterations, np.float64), (len(group),)))
        self.replays.append(np.broadcast_to(np.asarray(replays, np.float64), (len(group),)))
        self.acc.append(accesses)

    def build(self, meta: dict, megakernel_registers: int = 0) -> TaskGraph:
        kind = np.concatenate(self.kind)
        t = kind.size
        offset = 0
        task_l, region_l, lo_l, hi_l, bytes_l, write_l = [], [], [], [], [], []
        for k, (task, region, lo, hi, nbytes, write) in zip(self.kind, self.acc):
            task_l.append(task + offset)
            region_l.append(region)
            lo_l.append(lo)
            hi_l.append(hi)
            bytes_l.append(nbytes)
            write_l.append(write)
            offset += k.size
        task = np.concatenate(task_l)
        order = np.argsort(task, kind="stable")
        counts = np.bincount(task, minlength=t)
        ptr = np.zeros(t + 1, np.int64)
        ptr[1:] = np.cumsum(counts)
        a = task.size
        graph = TaskGraph(
            kind_names=tuple(k[0] for k in self.kinds), kind=kind,
            group=np.concatenate(self.group), index_in_group=np.concatenate(self.index),
            wait_counters=np.full((t, 1), -1, np.int32), signal_counters=np.full((t, 1), -1, np.int32),
            counter_init=np.zeros(0, np.int32), flops=np.concatenate(self.flops),
            access_ptr=ptr,
            access_region=np.concatenate(region_l)[order].astype(np.int32),
            access_part_lo=np.concatenate(lo_l)[order].astype(np.int32),
            access_part_hi=np.concatenate(hi_l)[order].astype(np.int32),
            access_part_step=np.ones(a, np.int32),
            access_bytes=np.concatenate(bytes_l)[order].astype(np.float64),
            access_write=np.concatenate(write_l)[order].astype(bool),
            region_parts=np.array([r[1] for r in self.regions], np.int32),
            region_part_bytes=np.array([r[2] for r in self.regions], np.float64),
            region_tensor=np.array([r[0] for r in self.regions], np.int16),
            tensor_names=tuple(self.tensors),
            kind_threads=np.array([k[1] for k in self.kinds], np.int32),
            kind_registers=np.array([k[2] for k in self.kinds], np.int32),
            kind_shared_bytes=np.array([k[3] for k in self.kinds], np.int32),
            megakernel_registers=megakernel_registers,
            other_ops=np.concatenate(self.other), serial_steps=np.concatenate(self.steps),
            serial_iterations=np.concatenate(self.iterations), shared_replays=np.concatenate(self.replays),
            meta=meta)
        graph.validate()
        return graph


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(starts[i], starts[i] + counts[i])`` over i (vectorised)."""
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + offsets


def _input_footprint(problem: ConvProblem, tiling: SparseTiling, tiles_p: int, pixels: int):
    """The input each pixel tile reads, as runs of ``input`` parts (image, input row, column segment).

    A block's threads hold consecutive outputs (row-major over the batch); the input it touches is the
    union of their windows (patches, for the fused kinds): per output row it covers, the input rows of
    that row's windows and the columns from its first window's left edge to its last window's right
    edge, rounded out to segments of ``SEGMENT_FLOATS``. Runs of parts that are consecutive in
    (image, row, segment) order are merged. Returns (tile, part_lo, part_hi, bytes), bytes counting
    the real columns (the last segment of a row can be short) of all channels.
    """
    conv = tiling.kind in CONV_KINDS
    out_p, out_q = (problem.out_h, problem.out_w) if conv else pooled_hw(problem, tiling.pool)
    step = problem.stride * (1 if conv else tiling.pool.stride)
    span_h, span_w = (problem.r, problem.s) if conv else patch_hw(problem, tiling.pool)
    segs = -(-problem.w // SEGMENT_FLOATS)
    first = np.arange(tiles_p) * tiling.threads
    last = np.minimum(first + tiling.threads, pixels) - 1
    g0, g1 = first // out_q, last // out_q                       # global output rows (image, row)
    # One entry per (tile, output row it covers): that row's columns [qa, qb].
    n_rows = g1 - g0 + 1
    tile = np.repeat(np.arange(tiles_p), n_rows)
    g = _ranges(g0, n_rows)
    qa = np.where(g == g0[tile], first[tile] % out_q, 0)
    qb = np.where(g == g1[tile], last[tile] % out_q, out_q - 1)
    img, o = g // out_p, g % out_p
    y0 = np.clip(o * step - problem.padding, 0, problem.h)
    y1 = np.clip(o * step - problem.padding + span_h, 0, problem.h)
    x0 = np.clip(qa * step - problem.padding, 0, problem.w)
    x1 = np.clip(qb * step - problem.padding + span_w, 0, problem.w)
    s0, s1 = x0 // SEGMENT_FLOATS, -(-x1 // SEGMENT_FLOATS)
    # One entry per (tile, input row): the segments [s0, s1) of that row, as flat parts.
    h_rows = np.maximum(y1 - y0, 0)
    keep = (h_rows > 0) & (s1 > s0)
    tile, img, y0, s0, s1, h_rows = tile[keep], img[keep], y0[keep], s0[keep], s1[keep], h_rows[keep]
    e = np.repeat(np.arange(tile.size), h_rows)
    y = _ranges(y0, h_rows)
    row = img[e] * problem.h + y
    lo, hi, tile = row * segs + s0[e], row * segs + s1[e], tile[e]
    # The union per tile: sort by (tile, lo), merge intervals that overlap or touch.
    order = np.lexsort((lo, tile))
    tile, lo, hi = tile[order], lo[order], hi[order]
    total = problem.n * problem.h * segs
    key_lo, key_hi = tile * (total + 1) + lo, tile * (total + 1) + hi
    reach = np.maximum.accumulate(key_hi)
    start = np.ones(tile.size, bool)
    start[1:] = key_lo[1:] > reach[:-1]
    run = np.cumsum(start) - 1
    run_tile, run_lo = tile[start], lo[start]
    run_hi = np.zeros(run_tile.size, np.int64)
    np.maximum.at(run_hi, run, hi)

    def columns_before(part):
        return (part // segs) * problem.w + np.minimum((part % segs) * SEGMENT_FLOATS, problem.w)

    run_bytes = (columns_before(run_hi) - columns_before(run_lo)) * problem.c * FLOAT_BYTES
    return run_tile, run_lo, run_hi, run_bytes.astype(np.float64)


def _conv_tasks(parts: _GraphParts, problem: ConvProblem, tiling: SparseTiling, nz: np.ndarray | None,
                out_region: int, out_plane_px: int) -> None:
    """The conv (or fused) kernel's blocks: group = pixel tile, index = filter tile (grid order).
    ``nz`` None: the multiply-adds, loop iterations and replays are not counted (left at zero)."""
    sparse = tiling.kind in ("ecr", "pecr")
    kid = parts.add_kind(tiling.kind, tiling.threads, kernel_registers(tiling), tiling.shared_bytes(problem))
    pixels = problem.n * problem.out_h * problem.out_w if tiling.kind in CONV_KINDS else \
        problem.n * int(np.prod(pooled_hw(problem, tiling.pool)))
    counts = _conv_counts(problem, tiling, nz, sparse) if nz is not None else \
        np.zeros((-(-problem.c // tiling.c_chunk), pixels), np.int32)                # (chunks, pixels)
    chunks, pixels = counts.shape
    per_warp = _per_warp_max(counts, pixels)
    tiles_p, tiles_k = grid(problem, tiling)
    # The critical path: per chunk, the loop of the block's busiest thread, summed over the chunks.
    loops = np.zeros((chunks, tiles_p * tiling.threads), np.int32)
    # (for the conv kinds the loop count is the multiply-add count itself)
    if nz is not None:
        loops[:, :pixels] = counts if tiling.kind in CONV_KINDS else _conv_counts(problem, tiling, nz, sparse, loop=True)
    iterations_p = loops.reshape(chunks, tiles_p, tiling.threads).max(axis=2).sum(axis=0).astype(np.float64)
    replays_p = _row_replays(problem, tiling, nz, tiles_p) if tiling.kind == "ecr" and nz is not None \
        else np.zeros(tiles_p)
    warps_per_block = tiling.threads // WARP
    padded = np.zeros(tiles_p * warps_per_block)
    padded[:per_warp.size] = per_warp
    issued = padded.reshape(tiles_p, warps_per_block).sum(axis=1)       # per pixel tile
    active_warps = np.minimum(warps_per_block,
                              np.maximum(0, -(-(pixels - np.arange(tiles_p) * tiling.threads) // WARP)))
    # Priced per warp slot: the last pixel tile's block (fewer active warps) costs as a full one (see
    # the module docstring, "Partial pixel tiles"). Every tile holds at least one active warp.
    slot_scale = warps_per_block / np.maximum(active_warps, 1)
    flops_p = 2.0 * WARP * tiling.k_tile * issued * slot_scale
    scan_p = WARP * active_warps * tiling.chunk_elements * chunks * slot_scale
    replays_p = replays_p * slot_scale
    weights_staged = chunks * tiling.weight_rows(problem) * tiling.k_tile
    group = np.repeat(np.arange(tiles_p), tiles_k)
    index = np.tile(np.arange(tiles_k), tiles_p)
    # grid order: x (pixel tile) fastest
    order = np.lexsort((group, index))
    group, index = group[order], index[order]
    flops = flops_p[group]
    other = scan_p[group] + weights_staged
    # Accesses: the input segments the tile's windows cover, the filter tile, the output planes.
    segs = -(-problem.w // SEGMENT_FLOATS)
    in_region = parts.add_region("input", problem.n * problem.h * segs,
                                 problem.c * min(SEGMENT_FLOATS, problem.w) * FLOAT_BYTES)
    w_region = parts.add_region("weights", tiles_k, problem.c * problem.r * problem.s * tiling.k_tile * FLOAT_BYTES)
    run_tile, run_lo, run_hi, run_bytes = _input_footprint(problem, tiling, tiles_p, pixels)
    runs_per_tile = np.bincount(run_tile, minlength=tiles_p)
    run_first = np.cumsum(runs_per_tile) - runs_per_tile
    tasks = np.arange(group.size)
    n_runs = runs_per_tile[group]
    run = _ranges(run_first[group], n_runs)
    acc_task, acc_region, acc_lo, acc_hi, acc_bytes, acc_write = [], [], [], [], [], []
    acc_task.append(np.repeat(tasks, n_runs)); acc_region.append(np.full(run.size, in_region))
    acc_lo.append(run_lo[run]); acc_hi.append(run_hi[run]); acc_bytes.append(run_bytes[run])
    acc_write.append(np.zeros(run.size, bool))
    out_p, out_q = (problem.out_h, problem.out_w) if tiling.kind in CONV_KINDS else pooled_hw(problem, tiling.pool)
    per_img = out_p * out_q
    first = group * tiling.threads
    last = np.minimum(first + tiling.threads, pixels) - 1
    img0, img1 = first // per_img, last // per_img
    k_here = np.minimum(tiling.k_tile, problem.k - index * tiling.k_tile)
    acc_task.append(tasks); acc_region.append(np.full(tasks.size, w_region)); acc_lo.append(index)
    acc_hi.append(index + 1); acc_bytes.append(k_here * problem.c * problem.r * problem.s * FLOAT_BYTES)
    acc_write.append(np.zeros(tasks.size, bool))
    # Output: planes (image, filter) of the images the block covers, k_here filters each.
    plane_lo = img0 * problem.k + index * tiling.k_tile
    plane_hi = img1 * problem.k + index * tiling.k_tile + k_here
    px_here = last - first + 1
    acc_task.append(tasks); acc_region.append(np.full(tasks.size, out_region)); acc_lo.append(plane_lo)
    acc_hi.append(np.maximum(plane_hi, plane_lo + 1)); acc_bytes.append(px_here * k_here * FLOAT_BYTES)
    acc_write.append(np.ones(tasks.size, bool))
    parts.add_tasks(kid, group, index, flops, other,
                    tuple(np.concatenate(v) for v in (acc_task, acc_region, acc_lo, acc_hi, acc_bytes, acc_write)),
                    steps=float(chunks), iterations=iterations_p[group], replays=replays_p[group])


def _elementwise_tasks(parts: _GraphParts, name: str, outputs: int, in_region: int, out_region: int,
                       out_plane: int, reads_per_output: int) -> None:
    """A one-thread-per-output kernel over `outputs` elements laid out as (image, channel) planes of
    `out_plane` elements; it reads `reads_per_output` inputs of the same plane of `in_region` each."""
    kid = parts.add_kind(name, ELEMENTWISE_THREADS, ELEMENTWISE_REGISTERS, 0)
    blocks = -(-outputs // ELEMENTWISE_THREADS)
    first = np.arange(blocks) * ELEMENTWISE_THREADS
    count = np.minimum(ELEMENTWISE_THREADS, outputs - first)
    last = first + count - 1
    tasks = np.arange(blocks)
    out_lo, out_hi = first // out_plane, last // out_plane + 1
    other = count * reads_per_output
    acc = (np.concatenate([tasks, tasks]), np.concatenate([np.full(blocks, in_region), np.full(blocks, out_region)]),
           np.concatenate([out_lo, out_lo]), np.concatenate([out_hi, out_hi]),
           np.concatenate([count * reads_per_output * FLOAT_BYTES, count * FLOAT_BYTES]).astype(np.float64),
           np.concatenate([np.zeros(blocks, bool), np.ones(blocks, bool)]))
    parts.add_tasks(kid, np.zeros(blocks), tasks, np.zeros(blocks), other, acc)


def lower_sparse(problem: ConvProblem, op: str, sm_count: int, *, x=None,
                 sparsity: SparsitySpec | float | None = None, pool: PoolSpec | None = None,
                 k_tile: int | None = None, costed: bool = True) -> tuple[TaskGraph, Schedule, SparseLowering]:
    """The TaskGraph and schedule (one launch per kernel, grid order) of `op` on `problem`, with costs
    counted from the input `x` (its zeros) or from a map drawn from `sparsity`. ``costed=False``: the
    same tasks, launches and accesses with the zero-dependent counts (multiply-adds, loop iterations,
    replays) left at zero: what the GPU executor runs (``gpu.runtime.sparse_kernels``), at a fraction
    of the lowering time; not for predictions."""
    if op not in OPS:
        raise LoweringError(f"op {op!r} is not allowed (allowed: {', '.join(OPS)})")
    pooled = op not in CONV_KINDS
    if pooled and pool is None:
        pool = PoolSpec()
    if not pooled and pool is not None:
        raise LoweringError(f"op {op!r} takes no pool")
    unfused = op.startswith("unfused_")
    kind = op.removeprefix("unfused_")
    if unfused:
        pooled_hw(problem, pool)
    nz = nonzero_mask(problem, x, sparsity) if costed else None
    tiling = choose_tiling(problem, kind, sm_count, pool=pool if kind in FUSED_KINDS else None, k_tile=k_tile)
    parts = _GraphParts()
    p, q = problem.out_h, problem.out_w
    if kind in FUSED_KINDS:
        ph, pw = pooled_hw(problem, pool)
        out = parts.add_region("output", problem.n * problem.k, ph * pw * FLOAT_BYTES)
        _conv_tasks(parts, problem, tiling, nz, out, ph * pw)
    else:
        conv_out = parts.add_region("conv_out", problem.n * problem.k, p * q * FLOAT_BYTES)
        _conv_tasks(parts, problem, tiling, nz, conv_out, p * q)
        if unfused:
            ph, pw = pooled_hw(problem, pool)
            activated = parts.add_region("activated", problem.n * problem.k, p * q * FLOAT_BYTES)
            _elementwise_tasks(parts, "relu", problem.n * problem.k * p * q, conv_out, activated, p * q, 1)
            out = parts.add_region("output", problem.n * problem.k, ph * pw * FLOAT_BYTES)
            _elementwise_tasks(parts, "maxpool", problem.n * problem.k * ph * pw, activated, out, ph * pw,
                               pool.size * pool.size)
    sparsity_measured = (1.0 - float(nz.mean()) if nz.size else 0.0) if costed else float("nan")
    meta = {"op": op, "problem": problem.spec_string(), "k_tile": tiling.k_tile, "c_chunk": tiling.c_chunk,
            "sparsity": sparsity_measured}
    if not costed:
        meta["costed"] = False
    if pool is not None:
        meta["pool"] = [pool.size, pool.stride]
    graph = parts.build(meta)
    launches = []
    start = 0
    for k, name in zip(parts.kind, (kk[0] for kk in parts.kinds)):
        launches.append(Launch(np.arange(start, start + k.size), name=name))
        start += k.size
    schedule = Schedule(op, tuple(launches), {"op": op, "k_tile": tiling.k_tile})
    return graph, schedule, SparseLowering(op, tiling, pool, sparsity_measured)
