"""Lowering im2win and im2col + GEMM convolutions to TaskGraphs.

One task is one thread block of the kernels ``megasim.algorithms.im2win.tiling`` describes (read its
docstring first). A transform, then the conv, each launch after the previous one (a kernel boundary):

- **transform** (``im2win_transform``; ``im2col_transform``): writes the window tensor J (the im2col
  matrix). im2win: block b writes elements ``[b*E, (b+1)*E)`` of J in flat order (E =
  ``TRANSFORM_ELEMENTS``) and reads the input rows they come from. im2col: one block per (image,
  block of ``n_b`` output pixels), writing their ``C*R*S`` values each (torch's ``unfold`` layout is
  (N, C*R*S, P*Q); the model prices its traffic, not its code), in one launch PER IMAGE, as torch's
  ``im2col`` issues it (a host loop over the batch, one kernel per image; ATen's
  ``native/cuda/Im2Col.cu``), so the per-launch costs (``launch_fixed_ns``, the kernel boundary) are paid
  N times. No FLOPs; every element written is
  one ``other_ops`` (priced by the kind's ``ns_per_other_op``, 0 until calibrated), so a transform
  costs its bytes.
- **conv** (``im2win_conv``, or ``im2win_conv_VARIANT`` for a variant of the ablation; ``im2col_gemm``):
  one task per ``m_b x n_b`` output tile, its FLOPs those its block executes (``executed_flops``: the
  whole tile over whole K steps, ``2 * m_b * n_b * k_b * steps``, since the kernel runs its threads in
  full and multiplies the zero-filled edges; Alg. 2's valid outputs only; im2col's GEMM tiles their
  valid outputs), ``serial_steps`` its K steps (``TaskCost.ns_per_step``). Grid order: filter tile
  fastest (``Im2winTiling.grid``).

**Regions** (what the L2 model sees):

- ``window`` (J): a region per image, a part per (channel, output row): one row of ``Wp*R`` values. A conv tile
  reads, for every output row it covers, the same row of every channel (parts ``range(lo, hi, P)``:
  one access per covered row) -- the columns from its first window's start to its last window's
  end, so the window rows one tile reads are read again by the tiles of the other filters (grid x)
  and by the neighbouring output tile that shares the row. im2col's ``columns`` has a part per
  (image, block of ``n_b`` pixels), all ``C*R*S`` rows: a GEMM tile reads exactly one part.
- ``filter``: a part per filter tile (``m_b`` filters x ``C*R*S``): every output tile of that
  filter tile re-reads it.
- ``input``: a region per image, a part per (channel, input row): a transform block reads the rows
  of the windows it writes (per image, one access over the range they span).
- ``output``: a part per (image, filter) plane (NCHW); a tile writes the planes of the images and
  filters it covers.

The footprint (``extra_bytes``) is every tensor the algorithm allocates beyond input, filter and
output: the im2win tensor (``im2win_elements``) or the im2col matrix (``im2col_elements``), 4 bytes
each.
"""

from __future__ import annotations

import numpy as np

from megasim.algorithms.im2win.tiling import (FLOAT_BYTES, TRANSFORM_ELEMENTS, TRANSFORM_THREADS, Im2winTiling,
                                              gemm_dims, im2col_elements, im2win_elements, im2win_shape)
from megasim.schedule import Launch, Schedule
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

TRANSFORM_REGISTERS = 24    # an index computation and one load/store per element; never limits occupancy


class _Graph:
    """Tasks and accesses gathered as NumPy arrays, one add_tasks call per kind, then one TaskGraph."""

    def __init__(self) -> None:
        self.kinds: list[tuple[str, int, int, int]] = []
        self.tensors: list[str] = []
        self.regions: list[tuple[int, int, float]] = []
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in ("kind", "group", "index", "flops", "other", "steps",
                                                                  "replays")}
        self.acc: list[tuple[np.ndarray, ...]] = []
        self.tasks = 0

    def add_kind(self, name: str, threads: int, registers: int, shared: int) -> int:
        self.kinds.append((name, threads, registers, shared))
        return len(self.kinds) - 1

    def add_region(self, tensor: str, parts: int, part_bytes: float) -> int:
        if tensor not in self.tensors:
            self.tensors.append(tensor)
        self.regions.append((self.tensors.index(tensor), int(parts), float(part_bytes)))
        return len(self.regions) - 1

    def add_tasks(self, kind: int, group, index, flops, other, steps, accesses, replays=0.0) -> np.ndarray:
        """Tasks in the order given; ``accesses(first_task_id)`` returns (task, region, lo, hi, step, bytes,
        write) arrays. Returns their ids."""
        n = len(group)
        ids = np.arange(self.tasks, self.tasks + n)
        for key, value in (("kind", np.full(n, kind, np.int16)), ("group", np.asarray(group, np.int32)),
                           ("index", np.asarray(index, np.int32)), ("flops", np.asarray(flops, np.float64)),
                           ("other", np.broadcast_to(np.asarray(other, np.float64), (n,))),
                           ("steps", np.broadcast_to(np.asarray(steps, np.float64), (n,))),
                           ("replays", np.broadcast_to(np.asarray(replays, np.float64), (n,)))):
            self.cols[key].append(value)
        self.acc.append(accesses(ids))
        self.tasks += n
        return ids

    def build(self, meta: dict) -> TaskGraph:
        t = self.tasks
        cat = {k: np.concatenate(v) for k, v in self.cols.items()}
        task, region, lo, hi, step, nbytes, write = (np.concatenate(c) for c in zip(*self.acc))
        order = np.argsort(task, kind="stable")
        ptr = np.zeros(t + 1, np.int64)
        ptr[1:] = np.cumsum(np.bincount(task, minlength=t))
        graph = TaskGraph(
            kind_names=tuple(k[0] for k in self.kinds), kind=cat["kind"], group=cat["group"],
            index_in_group=cat["index"], wait_counters=np.full((t, 1), -1, np.int32),
            signal_counters=np.full((t, 1), -1, np.int32), counter_init=np.zeros(0, np.int32),
            flops=cat["flops"], access_ptr=ptr,
            access_region=region[order].astype(np.int32), access_part_lo=lo[order].astype(np.int32),
            access_part_hi=hi[order].astype(np.int32), access_part_step=step[order].astype(np.int32),
            access_bytes=nbytes[order].astype(np.float64), access_write=write[order].astype(bool),
            region_parts=np.array([r[1] for r in self.regions], np.int32),
            region_part_bytes=np.array([r[2] for r in self.regions], np.float64),
            region_tensor=np.array([r[0] for r in self.regions], np.int16), tensor_names=tuple(self.tensors),
            kind_threads=np.array([k[1] for k in self.kinds], np.int32),
            kind_registers=np.array([k[2] for k in self.kinds], np.int32),
            kind_shared_bytes=np.array([k[3] for k in self.kinds], np.int32),
            other_ops=cat["other"], serial_steps=cat["steps"],
            shared_replays=cat["replays"] if cat["replays"].any() else None, meta=meta)
        graph.validate()
        return graph


def _acc(task, region, lo, hi, nbytes, write, step=1):
    """Access rows of tasks ``task``; ``region`` one id or one per task (the per-image regions)."""
    n = len(task)
    return (np.asarray(task, np.int64), np.broadcast_to(np.asarray(region, np.int64), (n,)), np.asarray(lo, np.int64),
            np.asarray(hi, np.int64), np.broadcast_to(np.asarray(step, np.int64), (n,)),
            np.asarray(nbytes, np.float64), np.full(n, write, bool))


def _cat(*accs):
    return tuple(np.concatenate(c) for c in zip(*accs))


def _tiles(problem: ConvProblem, tiling: Im2winTiling):
    """Per conv task in grid order (filter tile fastest): (filter tile, output tile, first filter, filters,
    first output pixel, pixels)."""
    m, n, _ = gemm_dims(problem)
    tiles_m, tiles_n = tiling.grid(problem)
    mt = np.tile(np.arange(tiles_m), tiles_n)
    nt = np.repeat(np.arange(tiles_n), tiles_m)
    m0, n0 = mt * tiling.tile_m, nt * tiling.tile_n
    return mt, nt, m0, np.minimum(tiling.tile_m, m - m0), n0, np.minimum(tiling.tile_n, n - n0)


def _covered_rows(problem: ConvProblem, n0: np.ndarray, n_here: np.ndarray):
    """Per task, the output rows (image, row) its pixels cover: (task index, global row g, first column,
    last column) per covered row."""
    q = problem.out_w
    first, last = n0, n0 + n_here - 1
    g0, g1 = first // q, last // q
    count = g1 - g0 + 1
    task = np.repeat(np.arange(n0.size), count)
    g = np.repeat(g0, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    qa = np.where(g == g0[task], first[task] % q, 0)
    qb = np.where(g == g1[task], last[task] % q, q - 1)
    return task, g, qa, qb


def _output_access(problem, ids, region, m0, m_here, n0, n_here):
    per_img = problem.out_h * problem.out_w
    img0, img1 = n0 // per_img, (n0 + n_here - 1) // per_img
    return _acc(ids, region, img0 * problem.k + m0, img1 * problem.k + m0 + m_here,
                m_here * n_here * FLOAT_BYTES, True)


def _conv_tasks(g: _Graph, problem: ConvProblem, tiling: Im2winTiling, kind_name: str, cols_region: int,
                window: bool, f_region: int, out_region: int) -> None:
    p = problem
    _, _, kdim = gemm_dims(p)
    kid = g.add_kind(kind_name, tiling.threads, tiling.registers, tiling.shared_bytes)
    mt, nt, m0, m_here, n0, n_here = _tiles(p, tiling)

    def accesses(ids):
        parts = [_acc(ids, f_region, mt, mt + 1, m_here * kdim * FLOAT_BYTES, False),
                 _output_access(p, ids, out_region, m0, m_here, n0, n_here)]
        if window:      # one step access per covered output row: that row of every channel
            task, row, qa, qb = _covered_rows(p, n0, n_here)
            img, oh = row // p.out_h, row % p.out_h
            span = ((qb - qa) * p.stride + p.s) * p.r
            parts.append(_acc(ids[task], cols_region + img, oh, oh + (p.c - 1) * p.out_h + 1,
                              p.c * span * FLOAT_BYTES, False, step=p.out_h))
        else:           # the im2col block of the tile: pixels of one image (tiles do not cross images)
            parts.append(_acc(ids, cols_region, nt, nt + 1, n_here * kdim * FLOAT_BYTES, False))
        return _cat(*parts)

    other, replays = basic_filter_loads(tiling, kdim)
    g.add_tasks(kid, nt, mt, executed_flops(tiling, kdim, m_here, n_here), other, tiling.k_steps(p), accesses,
                replays)


def basic_filter_loads(tiling: Im2winTiling, kdim: int) -> tuple[float, float]:
    """(other_ops, shared_replays) of one Alg. 2 block (0, 0 for the tiled kernels). Its warps hold 32
    filters at one pixel, so each filter load of a warp touches 32 rows of w, ``C*R*S`` floats apart: an
    L1 access of 32 sectors, one ``other_op`` per warp and k. When ``C*R*S`` is a multiple of 32 the 32
    rows start at the same offset of their 128-byte lines (the same L1 set and banks) and the load costs
    more (measured: 0.2 against 0.4-0.7 multiply-adds per ns on the calibration problems and the bench's
    layers alike, whatever C, R and S): the same count again as ``shared_replays``, priced by its own
    ``ns_per_replay``."""
    if tiling.variant != "basic":
        return 0.0, 0.0
    loads = float(tiling.threads // 32 * kdim)
    return loads, loads if kdim % 32 == 0 else 0.0


def executed_flops(tiling: Im2winTiling, kdim: int, m_here, n_here):
    """The FLOPs a conv tile's block executes: the tiled kernels run every thread of the block over whole K
    steps (the zero-filled rows, columns and K padding multiply too), so ``2 * m_b * n_b * k_b * steps``
    per block; Alg. 2's threads outside the output return at once, so its blocks execute their valid outputs
    (``2 * rows * columns * C*R*S``)."""
    if tiling.variant == "basic":
        return 2.0 * m_here * n_here * kdim
    return np.full(np.shape(m_here), 2.0 * tiling.m_b * tiling.n_b * tiling.k_b * -(-kdim // tiling.k_b))


def _per_image(first: np.ndarray, last: np.ndarray, per_image: int):
    """Split inclusive flat ranges [first, last] at image boundaries (``per_image`` units per image): (range
    index, image, first, last) per piece, first/last relative to the image."""
    i0, i1 = first // per_image, last // per_image
    count = i1 - i0 + 1
    which = np.repeat(np.arange(first.size), count)
    img = np.repeat(i0, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    lo = np.maximum(first[which], img * per_image) - img * per_image
    hi = np.minimum(last[which], (img + 1) * per_image - 1) - img * per_image
    return which, img, lo, hi


def _im2win_transform(g: _Graph, problem: ConvProblem, in_region: int, win_region: int) -> None:
    """Block b writes J's flat elements [b*E, (b+1)*E): per image it touches, the J rows (channel, output
    row) of that image and the input rows (channel, y) they read, from the first row's to the last's."""
    p = problem
    _, _, rows, cols = im2win_shape(p)
    total = im2win_elements(p)
    kid = g.add_kind("im2win_transform", TRANSFORM_THREADS, TRANSFORM_REGISTERS, 0)
    blocks = -(-total // TRANSFORM_ELEMENTS)
    e0 = np.arange(blocks, dtype=np.int64) * TRANSFORM_ELEMENTS
    e1 = np.minimum(e0 + TRANSFORM_ELEMENTS, total)
    which, img, r0, r1 = _per_image(e0 // cols, (e1 - 1) // cols, p.c * rows)   # J rows within an image
    base = img * p.c * rows * cols
    elements = np.minimum(e1[which], base + (r1 + 1) * cols) - np.maximum(e0[which], base + r0 * cols)
    c0, c1 = r0 // rows, r1 // rows
    y0 = np.clip((r0 % rows) * p.stride - p.padding, 0, p.h - 1)
    y1 = np.clip((r1 % rows) * p.stride - p.padding + p.r, 1, p.h)
    lo, hi = c0 * p.h + y0, c1 * p.h + y1
    hi = np.maximum(hi, lo + 1)       # rows of padding only still touch one row

    def accesses(ids):
        return _cat(_acc(ids[which], win_region + img, r0, r1 + 1, elements * FLOAT_BYTES, True),
                    _acc(ids[which], in_region + img, lo, hi, (hi - lo) * p.w * FLOAT_BYTES, False))

    g.add_tasks(kid, np.zeros(blocks), np.arange(blocks), np.zeros(blocks), (e1 - e0).astype(np.float64), 1.0,
                accesses)


# torch's unfold (ATen native/cuda/im2col.cuh): per image, one thread per (channel, output pixel) copying its
# R*S values one after another, blocks of 1,024 threads on a grid of ceil(C*P*Q / 128) blocks (GET_BLOCKS'
# default of 128 threads per block, launched with 1,024), so only the first eighth of the blocks has work.
UNFOLD_THREADS = 1024
UNFOLD_GRID_THREADS = 128
UNFOLD_REGISTERS = 32


def _im2col_transform(g: _Graph, problem: ConvProblem, tiling: Im2winTiling, in_region: int,
                      col_region: int) -> None:
    """torch's ``unfold`` as the model's tasks: per image, every block of its grid (those past the image's
    C*P*Q threads empty: a dispatch and ``fixed_ns``, nothing moved), a working block's elements its
    threads' R*S copies each (``other_ops``), done one after another (``serial_steps`` R*S), writing its
    share of the image's im2col matrix and reading the channel planes its threads cover; a task's group
    is its image (its launch: ``launches``)."""
    p = problem
    rs, pq = p.r * p.s, p.out_h * p.out_w
    threads = p.c * pq
    grid = -(-threads // UNFOLD_GRID_THREADS)
    kid = g.add_kind("im2col_transform", UNFOLD_THREADS, UNFOLD_REGISTERS, 0)
    blocks_img = -(-pq // tiling.tile_n)
    b = np.arange(p.n * grid)
    img, j = b // grid, b % grid
    t0 = j * UNFOLD_THREADS
    live = np.clip(threads - t0, 0, UNFOLD_THREADS)
    work = np.flatnonzero(live > 0)
    c0 = np.minimum(t0 // pq, p.c - 1)
    c1 = np.minimum((t0 + np.maximum(live, 1) - 1) // pq, p.c - 1)
    read = np.minimum(live / pq, c1 - c0 + 1) * p.h * p.w * FLOAT_BYTES

    def accesses(ids):
        w = ids[work]
        return _cat(_acc(w, col_region, img[work] * blocks_img, (img[work] + 1) * blocks_img,
                         live[work] * rs * FLOAT_BYTES, True),
                    _acc(w, in_region + img[work], c0[work] * p.h, (c1[work] + 1) * p.h, read[work], False))

    g.add_tasks(kid, img, j, np.zeros(b.size), (live * rs).astype(np.float64), np.where(live > 0, rs, 0), accesses)


def footprint_bytes(problem: ConvProblem, method: str) -> dict[str, int]:
    """Bytes of every tensor the method allocates beyond input, filter and output, by tensor name."""
    if method == "im2win":
        return {"window": im2win_elements(problem) * FLOAT_BYTES}
    if method == "im2col":
        return {"columns": im2col_elements(problem) * FLOAT_BYTES}
    raise ValueError(f"method {method!r}: want im2win or im2col")


def lower_im2win(problem: ConvProblem, tiling: Im2winTiling, method: str = "im2win") -> tuple[TaskGraph, Schedule]:
    """The TaskGraph and Schedule (transform launch, then conv launch, each in grid order) of an im2win
    (``method="im2win"``) or im2col + GEMM (``"im2col"``) convolution under ``tiling``."""
    p = problem
    m, n, kdim = gemm_dims(p)
    g = _Graph()
    # One input region (and one window region) per image: the L2 model keeps a bitmask of parts per region
    # (a region of ~1M parts, conv4's at batch 128, costs it tens of GB of masks).
    in_region = [g.add_region("input", p.c * p.h, p.w * FLOAT_BYTES) for _ in range(p.n)][0]
    tiles_m, tiles_n = tiling.grid(p)
    f_region = g.add_region("filter", tiles_m, tiling.tile_m * kdim * FLOAT_BYTES)
    out_region = g.add_region("output", p.n * p.k, p.out_h * p.out_w * FLOAT_BYTES)
    if method == "im2win":
        _, _, rows, cols = im2win_shape(p)
        cols_region = [g.add_region("window", p.c * rows, cols * FLOAT_BYTES) for _ in range(p.n)][0]
        _im2win_transform(g, p, in_region, cols_region)
        conv_tiling = tiling
    elif method == "im2col":
        per_img = p.out_h * p.out_w
        blocks_img = -(-per_img // tiling.tile_n)
        cols_region = g.add_region("columns", p.n * blocks_img, tiling.tile_n * kdim * FLOAT_BYTES)
        _im2col_transform(g, p, tiling, in_region, cols_region)
        conv_tiling = tiling
    else:
        raise ValueError(f"method {method!r}: want im2win or im2col")
    if method == "im2win":
        _conv_tasks(g, p, conv_tiling, conv_kind(tiling.variant), cols_region, True, f_region, out_region)
    else:
        _im2col_gemm_tasks(g, p, conv_tiling, cols_region, f_region, out_region)
    meta = {"method": method, "problem": p.spec_string(), "m_b": tiling.tile_m, "n_b": tiling.tile_n,
            "k_b": tiling.k_b, "m_t": tiling.m_t, "n_t": tiling.n_t, "variant": tiling.variant, "math": tiling.math,
            "extra_bytes": footprint_bytes(p, method)}
    if method == "im2win":
        name = conv_cost_name(tiling)
        if name != conv_kind(tiling.variant):
            meta["cost_names"] = {conv_kind(tiling.variant): name}
    graph = g.build(meta)
    return graph, Schedule(method, launches(graph), {"method": method, "variant": tiling.variant})


def launches(graph: TaskGraph) -> tuple[Launch, ...]:
    """The launches of a lowered graph, each in grid order: the transform's (one per group of its tasks:
    im2win's one launch, group 0; im2col's one per image, as torch issues them), then the conv's."""
    transform = np.flatnonzero(graph.kind == 0)
    groups = graph.group[transform]
    cuts = np.flatnonzero(np.diff(groups)) + 1
    first = tuple(Launch(part, name=graph.kind_names[0]) for part in np.split(transform, cuts))
    return (*first, Launch(np.flatnonzero(graph.kind == 1), name=graph.kind_names[1]))


def conv_cost_name(tiling: Im2winTiling) -> str:
    """The cost name of a tiling's conv kind: ``im2win_conv@VARIANT`` for a variant of the ablation;
    ``im2win_conv@3xtf32`` for the optimized kernel on tensor cores (``math=3xtf32``, any tile);
    ``im2win_conv@m64`` for the optimized kernel at 64-row tiles (its own calibration rows: a 64-row block
    reuses each window value half as often as a 128-row one, which one cost cannot tell apart); else
    ``im2win_conv``. Each falls back to ``im2win_conv``'s entry where the spec has none."""
    if tiling.variant != "optimized":
        return f"im2win_conv@{tiling.variant}"
    if tiling.math != "fp32":
        return f"im2win_conv@{tiling.math}"
    return "im2win_conv@m64" if tiling.m_b == 64 else "im2win_conv"


def conv_kind(variant: str) -> str:
    """The conv kind of a variant: ``im2win_conv`` (Alg. 3), else ``im2win_conv_VARIANT`` (another kernel, so
    another graph; its cost name ``im2win_conv@VARIANT`` falls back to ``im2win_conv``'s entry)."""
    return "im2win_conv" if variant == "optimized" else f"im2win_conv_{variant}"


def _im2col_gemm_tasks(g: _Graph, problem: ConvProblem, tiling: Im2winTiling, col_region: int, f_region: int,
                       out_region: int) -> None:
    """The batched GEMM's tiles: per image, ``m_b x n_b`` tiles of (filters x that image's pixels), filter
    tile fastest; tile (image, j) reads column block (image, j)."""
    p = problem
    m, _, kdim = gemm_dims(p)
    per_img = p.out_h * p.out_w
    blocks_img = -(-per_img // tiling.tile_n)
    tiles_m = -(-m // tiling.tile_m)
    kid = g.add_kind("im2col_gemm", tiling.threads, tiling.registers, tiling.shared_bytes)
    nb = np.repeat(np.arange(p.n * blocks_img), tiles_m)          # column block (image, j)
    mt = np.tile(np.arange(tiles_m), p.n * blocks_img)
    img, j = nb // blocks_img, nb % blocks_img
    m0 = mt * tiling.tile_m
    m_here = np.minimum(tiling.tile_m, m - m0)
    n0 = img * per_img + j * tiling.tile_n
    n_here = np.minimum(tiling.tile_n, per_img - j * tiling.tile_n)

    def accesses(ids):
        return _cat(_acc(ids, f_region, mt, mt + 1, m_here * kdim * FLOAT_BYTES, False),
                    _acc(ids, col_region, nb, nb + 1, n_here * kdim * FLOAT_BYTES, False),
                    _output_access(p, ids, out_region, m0, m_here, n0, n_here))

    g.add_tasks(kid, nb, mt, 2.0 * m_here * n_here * kdim, 0.0, -(-kdim // tiling.k_b), accesses)


# The paper's naive direct convolution (gpu/kernels/im2win/direct.py: DIRECT_THREADS threads a block)
NAIVE_DIRECT_THREADS = 256
NAIVE_DIRECT_REGISTERS = 32


def lower_naive_direct(problem: ConvProblem) -> tuple[TaskGraph, Schedule]:
    """The naive direct convolution the im2win paper compares with (``gpu.kernels.im2win.direct``): one thread
    per output ``y[n, k, p, q]`` in flat NCHW order, blocks of ``NAIVE_DIRECT_THREADS``, each thread looping
    over c, r, s with one multiply-add per tap into one accumulator (``serial_steps`` C*R*S: the chain of
    dependent adds, each after its two loads), reading x and w through the caches. One launch. A block's
    FLOPs are its outputs' ``2 C R S``; it reads its filters' rows (a part per filter), the input rows its
    output rows need, every channel (the input's parts here are rows of all channels: one range), and
    writes its outputs (a part per (image, filter) plane)."""
    p = problem
    pq, kdim = p.out_h * p.out_w, p.c * p.r * p.s
    total = p.n * p.k * pq
    g = _Graph()
    in_region = [g.add_region("input", p.h, p.c * p.w * FLOAT_BYTES) for _ in range(p.n)][0]   # a part per row
    f_region = g.add_region("filter", p.k, kdim * FLOAT_BYTES)
    out_region = g.add_region("output", p.n * p.k, pq * FLOAT_BYTES)
    kid = g.add_kind("naive_direct", NAIVE_DIRECT_THREADS, NAIVE_DIRECT_REGISTERS, 0)
    blocks = -(-total // NAIVE_DIRECT_THREADS)
    e0 = np.arange(blocks, dtype=np.int64) * NAIVE_DIRECT_THREADS
    e1 = np.minimum(e0 + NAIVE_DIRECT_THREADS, total)
    which, img, lo, hi = _per_image(e0, e1 - 1, p.k * pq)          # per image a block touches: its outputs
    k0, k1 = lo // pq, hi // pq
    oh0 = np.where(k0 == k1, (lo % pq) // p.out_w, 0)
    oh1 = np.where(k0 == k1, (hi % pq) // p.out_w, p.out_h - 1)
    y0 = np.clip(oh0 * p.stride - p.padding, 0, p.h - 1)
    y1 = np.clip(oh1 * p.stride - p.padding + p.r, y0 + 1, p.h)      # input rows [y0, y1)

    def accesses(ids):
        t = ids[which]
        return _cat(_acc(t, f_region, k0, k1 + 1, (k1 - k0 + 1) * kdim * FLOAT_BYTES, False),
                    _acc(t, in_region + img, y0, y1, (y1 - y0) * p.c * p.w * FLOAT_BYTES, False),
                    _acc(t, out_region, img * p.k + k0, img * p.k + k1 + 1, (hi - lo + 1) * FLOAT_BYTES, True))

    count = (e1 - e0).astype(np.float64)
    g.add_tasks(kid, np.zeros(blocks), np.arange(blocks), 2.0 * count * kdim, 0.0, float(kdim), accesses)
    graph = g.build({"method": "naive_direct", "problem": p.spec_string(), "extra_bytes": {}})
    return graph, Schedule("kernel", (Launch(np.arange(blocks), name="naive_direct"),), {"method": "naive_direct"})
