"""Lowering a 3x3 convolution to Winograd F(m x m, 3 x 3) tasks (the megakernel paper, Sec. 2 and 5).

Four task kinds, one thread block each:

A transform task covers P = transform_threads x transform_pairs_per_thread pairs ("P pairs" below):
each of its threads takes transform_pairs_per_thread of them in turn (more work per task, for a
megakernel whose per-task claim, counter reads and fences are a fixed cost; docs/notes.md).

- ``ftrans`` (group = k-tile kt, index = f): transforms P (c, k) filter pairs of k-tile kt,
  reading 9 weights and writing alpha^2 values per pair into U[e, c, k].
- ``itrans`` (group = g, index = s): transforms P (tile, channel) pairs of group g (channel
  fastest, so a block covers whole tiles when C < P), reading each pair's alpha x alpha window
  and writing alpha^2 values into V_g[e, tile, c].
- ``gemm`` (group = g, index = j = e * k_tiles + kt): M_g[e, :, kt] = V_g[e] @ U[e, :, kt], a
  (rows x C) by (C x gemm_k_tile) product, where rows = the tiles of group g (t, fewer in the last);
  its flops are the kernel's issued work (the specialised paths compute the full t x gemm_k_tile tile
  over C rounded up to whole stages of gemm_k_step channels).
  Column j is the paper's "j-th filter matrix"; the M GEMM tasks of one column share it (reuse b).
- ``otrans`` (group = g, index = s): inverse-transforms P (tile, k) pairs (k fastest),
  reading alpha^2 products each and writing the m x m outputs.

Dependency counters (Sec. 6): counter 0 counts the filter transforms; per group g, counter 1+2g counts
its input transforms and 2+2g its GEMMs. A GEMM waits on [0, 1+2g], an output transform on [2+2g].

Memory regions, chosen so the L2 model can see the paper's reuse types (Fig. 5):
- ``input``: one region per (image, tile row) band of m input rows, parts = (tile column, channel).
  A transform reads its tiles' m x m core pixels from the band (type a: each band is read from DRAM
  once); the halo (the window's other alpha^2 - m^2 pixels, shared with neighbouring tiles) is
  on-chip traffic, because neighbours run next to each other in raster order.
- ``weights``: one region, a part per filter-transform task.
- ``transformed_filter``: one region per k-tile, parts (e, filter task): a filter transform writes
  its slice of every e (a strided part set), a GEMM of column (e, kt) reads all of e -- reuse type b
  when M GEMMs of a column run close together.
- ``transformed_input`` V_g: one region per group, parts (e, input task): an input transform writes
  its slice of every e, a GEMM reads all of its e.
- ``products`` M_g: one region per group, parts (tile, kt, e): a GEMM writes its (kt, e) of every
  tile, an output transform reads all e of its tiles' k-range. V and M are written by the parents
  and read by the children (reuse type c when they run close).
Every part is what one task writes for one e, so the L2 model sees exactly which bytes are resident.
- ``output``: one region per group, a part per output-transform task (written once).

Bytes are exact per task (edge tiles move fewer pixels); region sizes use the full-tile size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from megasim.errors import LoweringError
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES, transform_flops
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

KINDS = ("ftrans", "itrans", "gemm", "otrans")
DEFAULT_TILES_PER_GROUP = 64
TENSORS = ("input", "weights", "transformed_filter", "transformed_input", "products", "output")
FLOAT_BYTES = 4


# Resources of gpu/'s kernels, from ptxas for sm_90 (numba-cuda 0.30.4; ``python -m gpu.diagnostics.offline_compile``,
# the same counts the H200's driver reports in gpu/diagnostics/bench_gemm.py). The GEMM: the specialised paths, keyed
# by (t, gemm_k_tile, gemm_k_step, gemm_threads) -> (registers per thread, dynamic shared bytes), and the
# generic path; gpu.kernels.winograd.megakernel.gemm_kernel compiles every path into one kernel, capped at 128 registers
# (4 blocks of 128 threads per SM), so it allocates 128 whichever path runs. Shared bytes follow
# gemm_shared_bytes below; a test checks both against gpu/'s own sizing, so the model's occupancy is the
# real kernel's.
GEMM_FAST_PATHS = {(32, 64, 16, 128): (128, 24576), (64, 64, 16, 128): (128, 25088)}
# The same two configs with gemm_math="3xtf32" (gpu.kernels.winograd.gemm_tc on tensor cores, a 3-slot cp.async ring of
# t x 20 + 16 x 72 floats; the GEMM kernel is still capped at 128 registers).
GEMM_MATHS = ("fp32", "3xtf32")
# The GEMM math of a config that names none: the FP32 pipe. "3xtf32" is asked for explicitly (a Plan's
# ``gemm_math``, a script's ``--gemm-math``), never taken from the environment.
DEFAULT_GEMM_MATH = "fp32"
GEMM_FAST_PATHS_BY_MATH = {"fp32": GEMM_FAST_PATHS,
                           "3xtf32": {(32, 64, 16, 128): (128, 21504), (64, 64, 16, 128): (128, 29184)}}
GEMM_GENERIC_REGISTERS = 128
# The megakernels (gpu/kernels/winograd/megakernel.py): the per-task one capped at 128 registers per thread (4 blocks of
# 128 threads per SM) and the persistent one at 216 (its claim loop keeps more live: 2 blocks per SM).
MEGAKERNEL_REGISTERS = 128
PERSISTENT_MEGAKERNEL_REGISTERS = 216
# The transform kernels (ftrans, itrans, otrans): F(2x2) and F(4x4) share gpu/'s general build, F(5x5), F(6x6)
# and F(7x7) have their own; each value is ptxas's for sm_90 (``CUDA_HOME=/usr/local/cuda-13.0 python -m
# gpu.diagnostics.offline_compile ftrans_kernel itrans_kernel otrans_kernel ftrans_kernel_m5 ...``, no GPU needed;
# the H200's driver runs 12 and 8 blocks per SM of the F(4x4) ftrans and otrans, as these give).
TRANSFORM_REGISTERS = (40, 70, 62)
TRANSFORM_REGISTERS_BY_TILE = {2: TRANSFORM_REGISTERS, 4: TRANSFORM_REGISTERS, 5: (40, 84, 72), 6: (40, 96, 72),
                               7: (32, 128, 96)}
# Tiles whose transforms are priced under cost names of their own (``ftrans@m6``, ...; GPUSpec.task_cost falls
# back to the kind's entry where a spec has none): their code is gpu/'s streamed form in builds of their own
# (3b466c4), whose cost per flop a spec calibrated on F(4x4) bodies does not describe (the model
# overpredicted their fused runs by 10%).
OWN_COST_TILES = (5, 6, 7)
# The tiles ``default_tile`` chooses among (F(2x2), 4 multiplies per output, has fewer than F(4x4) only where a side
# of the output is at most 2 pixels).
DEFAULT_TILE_CHOICES = (4, 5, 6)
MAX_TRANSFORM_PAIRS_PER_THREAD = 16
# Default pairs per transform thread by schedule (measured on the H200, docs/findings.md): in the
# megakernel (3 blocks per SM, a fixed per-task claim/poll/fence cost) 4 pairs per thread made the best
# fused mapping 1.2-1.3x faster than 1 pair; the non-fused transform kernels (7-16 blocks per SM) are
# fastest with 1 (4 pairs: 1-5% slower).
DEFAULT_TRANSFORM_PAIRS_PER_THREAD = {"nonfused": 1, "fused": 4, "naive": 4}
GEMM_REGISTER_TILE = 4          # generic path: rows and columns padded to multiples of 4



@dataclass(frozen=True)
class WinogradConfig:
    """Implementation parameters of the Winograd kernels (what one task of each kind does).

    t = 64 tiles per group is the default because the GEMM task is then a 64 x 64 tile, which runs
    1.34x faster per flop than 32 x 64 on the H200 (docs/notes.md, "GEMM tuning on H200").
    ``gemm_registers`` None means the registers of gpu/'s kernel for this config (GEMM_FAST_PATHS)."""

    m: int = 4                      # output tile m of F(m x m, 3x3): 2, 4, 5, 6 or 7 (``default_tile``)
    tiles_per_group: int = DEFAULT_TILES_PER_GROUP   # t: tiles per task group (rows of each GEMM task)
    transform_threads: int = 128    # threads per transform block
    transform_pairs_per_thread: int = 1   # (tile, channel) pairs each transform thread takes in turn
    gemm_k_tile: int = 64           # columns of K per GEMM task
    gemm_threads: int = 128
    gemm_k_step: int = 16           # C-slice per shared-memory stage of the GEMM
    transform_registers: int | None = None   # None: each transform kernel's own (TRANSFORM_REGISTERS)
    gemm_registers: int | None = None
    megakernel_registers: int = MEGAKERNEL_REGISTERS
    persistent_megakernel_registers: int = PERSISTENT_MEGAKERNEL_REGISTERS
    # the GEMM's arithmetic: "fp32" (FP32 pipe) or "3xtf32" (tensor cores, FP32-accurate split: gpu.kernels.winograd.gemm_tc);
    # it picks gpu/'s kernels and the GEMM's footprint here.
    gemm_math: str = DEFAULT_GEMM_MATH

    def __post_init__(self) -> None:
        if self.gemm_math not in GEMM_MATHS:
            raise LoweringError(f"gemm_math={self.gemm_math!r} is not allowed: it must be one of {GEMM_MATHS}")
        if self.m not in SUPPORTED_TILES:
            raise LoweringError(f"m={self.m!r} is not allowed: Winograd output tile must be one of {SUPPORTED_TILES}")
        if (isinstance(self.transform_pairs_per_thread, bool) or not isinstance(self.transform_pairs_per_thread, int)
                or not 1 <= self.transform_pairs_per_thread <= MAX_TRANSFORM_PAIRS_PER_THREAD):
            raise LoweringError(f"transform_pairs_per_thread={self.transform_pairs_per_thread!r} is not allowed: "
                                f"it must be an integer in [1, {MAX_TRANSFORM_PAIRS_PER_THREAD}]")
        for name in ("tiles_per_group", "gemm_k_tile", "gemm_k_step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise LoweringError(f"{name}={v!r} is not allowed: it must be a positive integer")
        for name in ("transform_threads", "gemm_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 32 or v > 1024 or v % 32:
                raise LoweringError(f"{name}={v!r} is not allowed: it must be a multiple of 32 in [32, 1024]")
        for name in ("transform_registers", "gemm_registers", "megakernel_registers",
                     "persistent_megakernel_registers"):
            v = getattr(self, name)
            if v is None and name in ("gemm_registers", "transform_registers"):
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 16 <= v <= 255:
                raise LoweringError(f"{name}={v!r} is not allowed: it must be an integer in [16, 255]")

    @property
    def alpha(self) -> int:
        return self.m + 2

    @property
    def pairs_per_transform_task(self) -> int:
        """Pairs one transform task covers: transform_threads x transform_pairs_per_thread."""
        return self.transform_threads * self.transform_pairs_per_thread

    @property
    def gemm_key(self) -> tuple[int, int, int, int]:
        """(t, gemm_k_tile, gemm_k_step, gemm_threads): what picks the GEMM's code path (GEMM_FAST_PATHS)."""
        return (self.tiles_per_group, self.gemm_k_tile, self.gemm_k_step, self.gemm_threads)

    @property
    def transform_registers_used(self) -> tuple[int, int, int]:
        """Registers of the (ftrans, itrans, otrans) kernels: ``transform_registers`` for all three, or
        gpu/'s kernels' own (TRANSFORM_REGISTERS)."""
        if self.transform_registers is not None:
            return (self.transform_registers,) * 3
        return TRANSFORM_REGISTERS_BY_TILE[self.m]

    @property
    def gemm_registers_used(self) -> int:
        if self.gemm_registers is not None:
            return self.gemm_registers
        return GEMM_FAST_PATHS_BY_MATH[self.gemm_math].get(self.gemm_key, (GEMM_GENERIC_REGISTERS, 0))[0]

    @property
    def gemm_shared_bytes(self) -> int:
        """Dynamic shared memory of a GEMM block: the specialised path's, or two stages of A (k_step x t)
        and B (k_step x gemm_k_tile), padded to the register tile."""
        paths = GEMM_FAST_PATHS_BY_MATH[self.gemm_math]
        if self.gemm_key in paths:
            return paths[self.gemm_key][1]
        pad = GEMM_REGISTER_TILE
        rows = -(-self.tiles_per_group // pad) * pad
        cols = -(-self.gemm_k_tile // pad) * pad
        return 2 * self.gemm_k_step * (rows + cols) * FLOAT_BYTES


@dataclass(frozen=True)
class WinogradShape:
    """Counts derived from a problem and a config (the paper's N_F, S_I, S_G, S_O, N_G)."""

    tiles_y: int
    tiles_x: int
    tiles: int
    groups: int        # N_G
    k_tiles: int
    n_f: int           # N_F
    s_i: int           # per full group
    s_g: int
    s_o: int


def winograd_shape(problem: ConvProblem, cfg: WinogradConfig) -> WinogradShape:
    check_supported(problem)
    ty = -(-problem.out_h // cfg.m)
    tx = -(-problem.out_w // cfg.m)
    tiles = problem.n * ty * tx
    t = cfg.tiles_per_group
    k_tiles = -(-problem.k // cfg.gemm_k_tile)
    widths = np.minimum(cfg.gemm_k_tile, problem.k - cfg.gemm_k_tile * np.arange(k_tiles))
    per_task = cfg.pairs_per_transform_task
    n_f = int(np.sum(-(-(problem.c * widths) // per_task)))
    rows = min(t, tiles)
    return WinogradShape(ty, tx, tiles, -(-tiles // t), k_tiles, n_f, -(-rows * problem.c // per_task),
                         cfg.alpha ** 2 * k_tiles, -(-rows * problem.k // per_task))


def gemm_multiplies(problem: ConvProblem, m: int) -> int:
    """Multiplies of the batched GEMM of F(m x m, 3x3) per (input, output) channel pair: alpha^2 per tile,
    the tiles that overhang the image's edge counted whole."""
    return (m + 2) ** 2 * problem.n * -(-problem.out_h // m) * -(-problem.out_w // m)


def default_tile(problem: ConvProblem) -> int:
    """The output tile ``gpu.winograd.conv2d`` uses for a layer unless told: of F(4x4), F(5x5) and F(6x6) (2.25,
    1.96 and 1.78 multiplies per output), the one whose GEMM has the fewest multiplies with the tiles that
    overhang the image counted whole; on a tie the smaller tile (fewer transform flops, a smaller FP32 error).
    On the 13 Table-2 layers: F(6x6) on 8 (0.82-0.91x F(4x4)'s multiplies), F(5x5) on the 14 x 14 one (0.77x),
    F(4x4) on the 16 x 16, 32 x 32, 7 x 7 and 8 x 8 ones. Measured on the H200
    (docs/findings.md): F(6x6) ran the fused schedule 1.05-1.22x faster where it has fewer multiplies, 0.95-1.00x
    on the ties (14, 16 and 32) and 0.6x on the 7 x 7 and 8 x 8 layers."""
    counts = {m: gemm_multiplies(problem, m) for m in DEFAULT_TILE_CHOICES}
    return min(DEFAULT_TILE_CHOICES, key=lambda m: (counts[m], m))


def check_supported(problem: ConvProblem) -> None:
    if (problem.r, problem.s) != (3, 3):
        raise LoweringError(f"{problem.name or 'layer'}: Winograd lowering needs a 3x3 filter, got R={problem.r}, S={problem.s}")
    if problem.stride != 1:
        raise LoweringError(f"{problem.name or 'layer'}: Winograd lowering needs stride 1, got stride={problem.stride}")


def _span(lo: int, length: int, hi: int, start: np.ndarray) -> np.ndarray:
    """Length of [start, start+length) intersected with [lo, hi), elementwise."""
    return np.clip(np.minimum(start + length, hi) - np.maximum(start, lo), 0, None)


def _pair_prefix(per_tile: np.ndarray, width: int):
    """F(P) = sum of per_tile[pair // width] over pairs < P, for pairs laid out tile-major."""
    cum = np.concatenate([[0], np.cumsum(per_tile, dtype=np.int64)])

    def f(p: np.ndarray) -> np.ndarray:
        tile = p // width
        within = p - tile * width
        safe = np.minimum(tile, per_tile.shape[0] - 1)
        return cum[tile] * width + within * np.where(tile < per_tile.shape[0], per_tile[safe], 0)
    return f


def _ranges(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For counts [a, b, ...]: (owner index repeated, position within owner) of sum(counts) items."""
    owner = np.repeat(np.arange(counts.shape[0]), counts)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return owner, np.arange(owner.shape[0]) - start[owner]


def lower_winograd(problem: ConvProblem, cfg: WinogradConfig | None = None) -> TaskGraph:
    """The TaskGraph of a Winograd F(m x m, 3 x 3) convolution (see the module docstring)."""
    cfg = cfg or WinogradConfig()
    sh = winograd_shape(problem, cfg)
    n, c, k, h, w, pad = problem.n, problem.c, problem.k, problem.h, problem.w, problem.padding
    m, a2, t = cfg.m, cfg.alpha ** 2, cfg.tiles_per_group
    thr, gk = cfg.pairs_per_transform_task, cfg.gemm_k_tile      # thr: pairs per transform task
    p_out, q_out = problem.out_h, problem.out_w
    tflops = transform_flops(m)
    groups = sh.groups
    g_idx = np.arange(groups)
    rows = np.minimum(t, sh.tiles - g_idx * t)                        # tiles per group

    # Per-tile pixel counts (same for every image): core (own band), window, valid outputs.
    tyv, txv = np.arange(sh.tiles_y), np.arange(sh.tiles_x)
    # Core = the window's pixels inside the tile's own band of m rows / columns (reuse type a). The
    # last band runs to the image edge: without padding the last windows reach up to 2 rows / columns
    # beyond m * tiles, and those pixels must still come from DRAM once.
    row_end = np.where(tyv == sh.tiles_y - 1, h, m * tyv + m)
    col_end = np.where(txv == sh.tiles_x - 1, w, m * txv + m)
    row_core = np.clip(np.minimum.reduce([row_end, m * tyv - pad + cfg.alpha, np.full_like(tyv, h)])
                       - np.maximum.reduce([m * tyv, m * tyv - pad, np.zeros_like(tyv)]), 0, None)
    col_core = np.clip(np.minimum.reduce([col_end, m * txv - pad + cfg.alpha, np.full_like(txv, w)])
                       - np.maximum.reduce([m * txv, m * txv - pad, np.zeros_like(txv)]), 0, None)
    core = np.outer(row_core, col_core)
    window = np.outer(_span(0, cfg.alpha, h, m * tyv - pad), _span(0, cfg.alpha, w, m * txv - pad))
    outpx = np.outer(np.minimum(m, p_out - m * tyv), np.minimum(m, q_out - m * txv))
    core_t, window_t, out_t = (np.tile(a.ravel(), n).astype(np.int64) for a in (core, window, outpx))

    acc_task, acc_region, acc_lo, acc_hi, acc_step, acc_bytes, acc_write = [], [], [], [], [], [], []

    def add_acc(task, region, lo, hi, nbytes, write, step=1):
        size = np.broadcast(task, region, lo, hi, nbytes).shape
        for lst, v in ((acc_task, task), (acc_region, region), (acc_lo, lo), (acc_hi, hi), (acc_step, step),
                       (acc_bytes, nbytes)):
            lst.append(np.broadcast_to(v, size).astype(np.float64 if lst is acc_bytes else np.int64))
        acc_write.append(np.full(size, write, bool))

    # Regions: weights | U per k-tile | input bands | V per group | M per group | Y per group.
    r_weights = 0
    r_u = 1
    r_band = r_u + sh.k_tiles
    bands = n * sh.tiles_y
    r_v = r_band + bands
    r_m = r_v + groups
    r_y = r_m + groups
    widths = np.minimum(gk, k - gk * np.arange(sh.k_tiles))
    f_per_kt = -(-(c * widths) // thr)                             # filter transforms per k-tile
    s_i = -(-rows * c // thr)                                      # input transforms per group
    # Parts are what one task writes for one e, so every write and read is an exact part set:
    # U_kt (e, filter task f) e-major; V_g (e, input task s) e-major; M_g (tile, kt, e) e fastest.
    region_parts = np.concatenate([[sh.n_f], a2 * f_per_kt, np.full(bands, sh.tiles_x * c),
                                   a2 * s_i, rows * sh.k_tiles * a2, np.full(groups, sh.s_o)])
    region_part_bytes = np.concatenate([[thr * 9 * FLOAT_BYTES], np.full(sh.k_tiles, thr * FLOAT_BYTES),
                                        np.full(bands, m * m * FLOAT_BYTES), np.full(groups, thr * FLOAT_BYTES),
                                        np.full(groups, gk * FLOAT_BYTES), np.full(groups, thr * m * m * FLOAT_BYTES)])
    region_tensor = np.concatenate([[1], np.full(sh.k_tiles, 2), np.full(bands, 0), np.full(groups, 3),
                                    np.full(groups, 4), np.full(groups, 5)])

    # --- filter transforms -------------------------------------------------------------------
    f_kt, f_idx = _ranges(f_per_kt)
    f_pairs = np.minimum(thr, c * widths[f_kt] - f_idx * thr)
    n_f = f_kt.shape[0]
    ftask = np.arange(n_f)
    add_acc(ftask, r_weights, ftask, ftask + 1, f_pairs * 9 * FLOAT_BYTES, False)
    add_acc(ftask, r_u + f_kt, f_idx, a2 * f_per_kt[f_kt], f_pairs * a2 * FLOAT_BYTES, True, step=f_per_kt[f_kt])

    # --- input transforms --------------------------------------------------------------------
    i_g, i_s = _ranges(s_i)
    p0 = i_g * t * c + i_s * thr                                   # global (tile, channel) pair range
    p1 = np.minimum(p0 + thr, (i_g * t + rows[i_g]) * c)
    i_pairs = p1 - p0
    itask = n_f + np.arange(i_g.shape[0])
    core_f, window_f = _pair_prefix(core_t, c), _pair_prefix(window_t, c)
    band_len = sh.tiles_x * c                                      # pairs per band
    b0, b1 = p0 // band_len, (p1 - 1) // band_len
    owner, j = _ranges(b1 - b0 + 1)
    b = b0[owner] + j
    lo = np.maximum(p0[owner], b * band_len)
    hi = np.minimum(p1[owner], (b + 1) * band_len)
    add_acc(itask[owner], r_band + b, lo - b * band_len, hi - b * band_len,
            (core_f(hi) - core_f(lo)) * FLOAT_BYTES, False)
    halo = (window_f(p1) - window_f(p0)) - (core_f(p1) - core_f(p0))
    add_acc(itask, -1, 0, 1, halo * FLOAT_BYTES, False)
    add_acc(itask, r_v + i_g, i_s, a2 * s_i[i_g], i_pairs * a2 * FLOAT_BYTES, True, step=s_i[i_g])

    # --- GEMMs -------------------------------------------------------------------------------
    n_gemm = groups * sh.s_g
    gtask = n_f + itask.shape[0] + np.arange(n_gemm)
    gg = np.repeat(g_idx, sh.s_g)
    gj = np.tile(np.arange(sh.s_g), groups)
    ge, gkt = gj // sh.k_tiles, gj % sh.k_tiles
    gw = widths[gkt]
    grows = rows[gg]
    add_acc(gtask, r_v + gg, ge * s_i[gg], (ge + 1) * s_i[gg], grows * c * FLOAT_BYTES, False)
    add_acc(gtask, r_u + gkt, ge * f_per_kt[gkt], (ge + 1) * f_per_kt[gkt], c * gw * FLOAT_BYTES, False)
    # A GEMM writes part (tile, kt, e) of every tile: parts kt*a2 + e, stepping by k_tiles*a2.
    add_acc(gtask, r_m + gg, gkt * a2 + ge, grows * sh.k_tiles * a2, grows * gw * FLOAT_BYTES, True,
            step=sh.k_tiles * a2)

    # --- output transforms -------------------------------------------------------------------
    s_o = -(-rows * k // thr)
    o_g, o_s = _ranges(s_o)
    q0 = o_g * t * k + o_s * thr                                   # global (tile, k) pair range
    q1 = np.minimum(q0 + thr, (o_g * t + rows[o_g]) * k)
    o_pairs = q1 - q0
    otask = n_f + itask.shape[0] + n_gemm + np.arange(o_g.shape[0])
    # Products parts are (tile, k-tile, e), tile-major: a contiguous (tile, k) pair range reads a
    # contiguous part range, all e.
    first = (q0 - o_g * t * k) // k * sh.k_tiles + (q0 % k) // gk
    last = (q1 - 1 - o_g * t * k) // k * sh.k_tiles + ((q1 - 1) % k) // gk
    out_f = _pair_prefix(out_t, k)
    add_acc(otask, r_m + o_g, first * a2, (last + 1) * a2, o_pairs * a2 * FLOAT_BYTES, False)
    add_acc(otask, r_y + o_g, o_s, o_s + 1, (out_f(q1) - out_f(q0)) * FLOAT_BYTES, True)

    # --- task table ----------------------------------------------------------------------------
    num = n_f + itask.shape[0] + n_gemm + otask.shape[0]
    kind = np.concatenate([np.zeros(n_f), np.ones(itask.shape[0]), np.full(n_gemm, 2), np.full(otask.shape[0], 3)])
    group = np.concatenate([f_kt, i_g, gg, o_g])
    index = np.concatenate([f_idx, i_s, gj, o_s])
    # The GEMM's work is what its kernel issues: a specialised path computes its whole t x gemm_k_tile
    # tile over whole stages of gemm_k_step channels, zero-filled at the edges (a last group of fewer
    # tiles; K not a multiple of gemm_k_tile: densenet-1's K = 48 runs 64 columns; C not a multiple of
    # gemm_k_step: a C = 3 layer's one stage multiplies 16 channels, 13 of them zeros); the generic path
    # is counted by its useful work.
    if cfg.gemm_key in GEMM_FAST_PATHS:
        c_issued = -(-c // cfg.gemm_k_step) * cfg.gemm_k_step
        gemm_flops = 2.0 * t * c_issued * np.full(n_gemm, gk, np.float64)
    else:
        gemm_flops = 2.0 * grows * c * gw
    flops = np.concatenate([f_pairs * tflops["ftrans"], i_pairs * tflops["itrans"],
                            gemm_flops, o_pairs * tflops["otrans"]])
    waits = np.full((num, 2), -1, np.int32)
    sigs = np.full((num, 1), -1, np.int32)
    sigs[:n_f, 0] = 0
    sigs[itask, 0] = 1 + 2 * i_g
    waits[gtask, 0] = 0
    waits[gtask, 1] = 1 + 2 * gg
    sigs[gtask, 0] = 2 + 2 * gg
    waits[otask, 0] = 2 + 2 * o_g
    counter_init = np.zeros(1 + 2 * groups, np.int32)
    counter_init[0] = n_f
    counter_init[1::2] = s_i
    counter_init[2::2] = sh.s_g

    at = np.concatenate(acc_task)
    order = np.argsort(at, kind="stable")
    ptr = np.zeros(num + 1, np.int64)
    ptr[1:] = np.cumsum(np.bincount(at, minlength=num))
    meta = {"lowering": "winograd", "problem": asdict(problem), "config": asdict(cfg), "shape": asdict(sh)}
    cost_names = {}
    if cfg.tiles_per_group != DEFAULT_TILES_PER_GROUP:
        # Another GEMM specialisation (a t x gemm_k_tile tile): priced as its own variant where a spec
        # calibrated it, else as the GEMM (GPUSpec.task_cost).
        cost_names["gemm"] = f"gemm@t{cfg.tiles_per_group}"
    if m in OWN_COST_TILES:
        cost_names.update({kind: f"{kind}@m{m}" for kind in ("ftrans", "itrans", "otrans")})
    if cost_names:
        meta["cost_names"] = cost_names
    graph = TaskGraph(
        kind_names=KINDS, kind=kind.astype(np.int16), group=group.astype(np.int32),
        index_in_group=index.astype(np.int32), wait_counters=waits, signal_counters=sigs,
        counter_init=counter_init, flops=flops.astype(np.float64), access_ptr=ptr,
        access_region=np.concatenate(acc_region)[order].astype(np.int32),
        access_part_lo=np.concatenate(acc_lo)[order].astype(np.int32),
        access_part_hi=np.concatenate(acc_hi)[order].astype(np.int32),
        access_part_step=np.concatenate(acc_step)[order].astype(np.int32),
        access_bytes=np.concatenate(acc_bytes)[order],
        access_write=np.concatenate(acc_write)[order],
        region_parts=region_parts.astype(np.int32), region_part_bytes=region_part_bytes.astype(np.float64),
        region_tensor=region_tensor.astype(np.int16), tensor_names=TENSORS,
        kind_threads=np.array([cfg.transform_threads] * 2 + [cfg.gemm_threads, cfg.transform_threads], np.int32),
        kind_registers=np.array([*cfg.transform_registers_used[:2], cfg.gemm_registers_used,
                                 cfg.transform_registers_used[2]], np.int32),
        kind_shared_bytes=np.array([0, 0, cfg.gemm_shared_bytes, 0], np.int32),
        megakernel_registers=cfg.megakernel_registers,
        persistent_registers=cfg.persistent_megakernel_registers,
        meta=meta,
    )
    return graph


def gemm_kernel_order(graph: TaskGraph) -> np.ndarray:
    """The GEMM tasks in the grid order of a batched-GEMM kernel: element e outer, then group, then
    k-tile, so consecutive blocks share V_{g,e} (across k-tiles) and one e's filter slices U_e stay
    hot (reuse b) -- the order the non-fused GEMM kernel runs in."""
    ids = graph.tasks_of_kind("gemm")
    k_tiles = int(graph.meta["shape"]["k_tiles"])
    j = graph.index_in_group[ids]
    return ids[np.lexsort((j % k_tiles, graph.group[ids], j // k_tiles))]
