"""Winograd input and output transforms that read and write NCHW tensors directly, staged through shared
memory so that every global access of a warp is contiguous.

The other transforms (``gpu.kernels.winograd.device``) read x as NHWC and write Y as NHWK: one thread per
(tile, channel) pair, consecutive threads on consecutive channels, so a warp's loads and stores are
contiguous runs of channels. On NCHW tensors the same thread mapping would put 32 threads of a warp on 32
channel planes (32 cache lines per load or store instruction; for resnet-1 at F(7x7), about 85 us of
load/store issue time on an H100 against a 200 us convolution), and the opposite mapping (threads on
tiles) would scatter the stores into V instead. So these kernels change the layout on the way through
shared memory:

- ``itrans_nchw(prm, x, V, CC, TX)``: block b takes a strip of TX consecutive tiles of one tile row of one
  image and a chunk of CC channels. Its threads copy the strip's (m + 2) input rows of (TX * m + 2) columns
  of each channel into shared memory (consecutive threads on consecutive columns: contiguous loads; zeros
  outside the image and past C), then thread (t, c), c fastest, transforms tile t of channel c
  from shared memory and writes V[e, tile, c] (consecutive threads on consecutive channels: contiguous
  stores), exactly as the NHWC transform does.
- ``otrans_nchw(prm, M, Y, KC, TX)``: block b takes TX tiles and KC output channels; thread (t, k), k
  fastest, reads M[e, tile, k] (contiguous loads) and writes its m x m outputs into shared memory; the block
  then stores the strip's m output rows of each channel to Y[n, k, :, :] row by row (contiguous stores),
  the outputs inside the P x Q image only.

CC * TX (KC * TX) <= ``NCHW_THREADS`` threads per block (``nchw_geometry``: few channels fill the block with
tiles, narrow images with channels), or ``WIDE_THREADS`` where that puts more tiles in a strip at the same
channel chunk within 48 KiB of shared memory (the otrans kernel: only where one strip then covers the whole
tile row, so its row stores are whole rows): on the H200 the wide blocks took yolov3-2's input transform
from 78 to 72 us and yolov3-3's from 49 to 45 us and its output transform from 81 to 78 us, while wide blocks
that needed a narrower chunk (yolov3-1, vgg-1) were 4-17% slower (``_pick``). The otrans kernel's launch has two
exceptions at the rule's block sizes (``otrans_launch``): strips of 8 tiles on sector-aligned F(7x7) rows
(``_aligned_strips``), and whole-row strips of up to 256 threads, with more than 48 KiB of shared memory where
they need it, on rows off the sectors (``_whole_rows``). In the copies to and from shared memory a thread keeps one column and
every few channels of the chunk, and walks a channel's rows in a loop unrolled over the compile-time row
count: a row's global and shared addresses are the channel's plus a multiple of the row length, so an element
costs a few instructions (with a division and 64-bit products per element, the copies were issue-bound). The
copy into shared memory is by cp.async: a thread's copies are all in flight at once. Shared memory is read
and written by ``load1`` / ``store1`` as global memory is (no negative-index wraparound). The shared planes
are padded to an odd number of floats, so the threads of a warp, on consecutive channels, read and write
distinct banks. Both kernels cover every (tile, channel) pair of their kind in one launch (the grid is the
strips x chunks), so the non-fused schedule's itrans and otrans launches run on them whole
(``gpu.runtime.winograd_kernels``, layout "NCHW").

The transforms' arithmetic is the generated straight-line code of ``gpu.kernels.winograd.transforms``
(``product_lines`` with the same matrices), so their results equal the NHWC transforms' bit for bit.

Speed against the NHWC kernels (H200, each launch alone; experiments/results/nvidia-h200/nchw_transforms/:
set1.csv, set2.csv, final.csv, experiments.csv with its runs' provenance in experiments.json, and ncu_yolov3_1.csv).
The output transform moves the same bytes as the NHWC one (M read, Y written: yolov3-1 747 MB, a floor of
178 us at the 4.2 TB/s of a device-to-device copy), which runs at 188 us; the NCHW kernel ran at 252 us. Its
product is generated with opaque strides (``opaque_index``: without them, ptxas kept the 81 offsets of M and
the 49 of the shared stores in registers, 128 per thread at F(7x7), 4 blocks per SM) and capped at
``OTRANS_MAX_REGISTERS`` (80, no spills: 6 blocks per SM): 233 us. The rest was instructions, not the store
pattern: split into its phases, yolov3-1's output transform took 135 us for the loads and the product alone
and 113 us for the stores alone, and ncu counted 145 M warp instructions against the NHWC kernel's 86 M, 92 M
of them in the store phase (about 18 per element: a 64-bit division for the channel loop's trip count, the
address formed anew and a branch per row). The copy loops of both kernels now step their addresses by
additions and copy a channel's rows without a test per row where they all lie inside the image (about 6
instructions per element): yolov3-1's output transform 216 us and input transform 129-130 us (134 before),
the output transform 4-17% faster on 11 of the 13 Table-2 layers (vgg-2 -1%, vgg-1 +2%). Where an F(7x7)
row splits into strips of 8 tiles exactly (vgg-1's 16 tiles; ``_aligned_strips``), the otrans kernel takes
strips of 8 tiles x 16 channels: rows of 224 bytes, whole sectors (4-tile strips store 112-byte rows, half a
sector at an end of every other one, and L2 saw 24% more write sectors than the NHWC kernel's on yolov3-1):
vgg-1's output transform 369 -> 330 us; on a row that does not split so (yolov3-1, 19 tiles) 8-tile strips
were 14% slower. What was tried and lost: opaque strides uncapped (90 registers, 5 blocks: no faster than 128
registers), caps of 64 (spills: 5-22% slower), 72 (7 blocks: 5-13% slower) and 88, channel chunks of 64
(strips of 2 tiles: 56-byte row stores, 8-48% slower; of 4 tiles with opted-in shared memory: 0-3.5% faster,
not worth the opt-in), an L2 prefetch of the block's whole M at its start (``prefetch.global.L2``: 11-18%
slower; git 3b913a2), stores to a contiguous dummy layout (no faster: the 112-byte rows are not what cost),
no barrier between the phases (no faster), ``st.global.cs`` stores and ``ld.global.cs`` loads (slower), M staged
in shared memory by cp.async with all 81 loads of a thread in flight (up to 33% slower), and blocks looping
over several strips so that one strip's stores overlap the next one's loads (24-79% slower: spills at the
cap). Rows of Q floats with Q not a multiple of 8 start off a 32-byte sector boundary, and the same launch
is slower there (im2win/conv8's 110-float rows 389 us against vgg-1's 112-float rows 332 us, 16 x 8 strips,
1% fewer bytes); blocks of one whole tile row that store each channel's rows as one contiguous run in
128-byte-aligned warp windows take the same time on both (379 and 377 us, 16 channels with opted-in shared
memory), but their store loop costs more than the row store (vgg-3 +53% at the same geometry), so they
were slower everywhere but conv8 (-2.5%; ``otrans_kernels.rows_kernel``; a store without carries,
``otrans_kernels.linear_kernel``: conv8 351 us, vgg-3 +24%). What counts is that a block holds whole tile
rows, not the flat store: this kernel's row store at 16 channels x 16 tiles (one strip the whole tile row,
49.1 KiB of opted-in shared memory) took conv8's output transform from 387 to 328 us, and im2win/conv9's
(54-float rows, 32 x 8) from 54 to 49 us, since a block then writes each channel's rows as one contiguous
run whose two ends alone are sectors shared with other blocks. So where the rows start off the sectors and
the rule's strips would split a tile row, the launch takes whole-row strips (``_whole_rows``), and the 8-tile
strips are kept to rows that are sector-aligned (``_aligned_strips``); the user path on conv8 went from 1.103x
to 1.040x the NHWC harness. The builds measured are ``experiments.studies.nchw_transforms.otrans_kernels``'
(experiments/results/nvidia-h200/nchw_transforms/: rows_set.csv, rows_linear.csv, itrans_conv8.csv,
otrans_conv9.csv).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import config, cuda, float32

from gpu.kernels.cache import persist
from gpu.kernels.common.async_copy import cp_async4, cp_async_commit, cp_async_wait_group
from gpu.kernels.common.vector_access import load1, opaque_index, py_load1, py_opaque_index, py_store1, store1
from gpu.kernels.winograd.device import (P_C, P_H, P_K, P_P, P_PAD, P_Q, P_TILES, P_TILES_X, P_TILES_Y, P_W)
from gpu.kernels.winograd.transforms import _Consts, compile_generated, product_lines
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES, matrices

NCHW_THREADS = 128
WIDE_THREADS = 256
MAX_CHUNK = 32
# Dynamic shared memory per block without the opt-in attribute.
MAX_SHARED_BYTES = 48 * 1024
# The otrans kernel's register cap: 6 blocks of 128 threads per SM, no spills (ptxas sm_90; uncapped with
# opaque strides 90 registers, without them 128; the module docstring says what it gained on the H200).
OTRANS_MAX_REGISTERS = 80
# Tiles per strip of the otrans kernel's sector-aligned launch (``_aligned_strips``).
ALIGNED_TILES = 8
# Floats of a 32-byte sector: an output row of Q floats starts on a sector boundary for every row when Q is
# a multiple of this.
SECTOR_FLOATS = 8
# The narrowest channel chunk of the otrans kernel's whole-row launch (``_whole_rows``).
WHOLE_ROW_MIN_CHUNK = 16
PY_FUNCS: dict = {}


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _pow2_at_most(n: int) -> int:
    p = 1
    while 2 * p <= n:
        p *= 2
    return p


def nchw_geometry(channels: int, m: int, tiles_x: int, threads: int = NCHW_THREADS) -> tuple[int, int, int, int]:
    """(channel chunk CC, tiles per strip TX, padded columns of an input row, odd floats per channel plane)
    of the itrans kernel for ``channels`` input channels, tile m and ``tiles_x`` tiles per tile row, in blocks
    of at most ``threads``; the otrans kernel uses the same rule with ``channels`` = K (its rows are TX * m
    wide: ``otrans_plane``). The chunk starts at the channels rounded up to a power of two, at most 32 (a
    warp's loads from M and stores into V then cover whole 128-byte lines); the strip takes the rest of the
    threads, at most the tile row rounded up to a power of two, then evened out over as many strips (a row
    of 5 tiles in strips of 3, not 4 with 3 idle in the second); on narrow images the chunk grows back into
    the threads the strip leaves, as a power of two. CC * TX <= ``threads``."""
    chunk = min(_pow2_at_least(channels), MAX_CHUNK)
    tx = min(threads // chunk, _pow2_at_least(tiles_x))
    tx = -(-tiles_x // -(-tiles_x // tx))       # as many strips, evened out: 5 tiles as 3 + 2, not 4 + 1
    chunk = min(_pow2_at_least(channels), _pow2_at_most(threads // tx))
    cols = tx * m + 2
    return chunk, tx, cols, ((m + 2) * cols) | 1


def otrans_plane(m: int, tx: int) -> int:
    """Odd floats per output channel's plane of m rows of tx * m outputs in the otrans kernel's shared memory."""
    return (m * tx * m) | 1


def _tiles_x(problem, m: int) -> int:
    return -(-problem.out_w // m)


def _pick(channels: int, m: int, tiles_x: int, plane_of, whole_row: bool, threads: int | None):
    """The geometry of a launch: ``threads`` given, ``nchw_geometry``'s for it; None, the wider block
    (WIDE_THREADS) where it takes more tiles per strip with a chunk no narrower and shared memory within
    MAX_SHARED_BYTES (for the otrans kernel also only where one strip then covers the whole tile row),
    else NCHW_THREADS (the rule the H200 measurements chose: module docstring)."""
    if threads is not None:
        return nchw_geometry(channels, m, tiles_x, threads)
    base = nchw_geometry(channels, m, tiles_x, NCHW_THREADS)
    wide = nchw_geometry(channels, m, tiles_x, WIDE_THREADS)
    if (wide[1] > base[1] and wide[0] >= base[0] and 4 * wide[0] * plane_of(wide) <= MAX_SHARED_BYTES
            and (not whole_row or wide[1] >= tiles_x)):
        return wide
    return base


def itrans_launch(problem, m: int, threads: int | None = None) -> tuple[int, int, int, int, int]:
    """(blocks, threads per block, dynamic shared bytes, CC, TX) of the itrans kernel's launch (``_pick``)."""
    chunk, tx, _, plane = _pick(problem.c, m, _tiles_x(problem, m), lambda g: g[3], False, threads)
    return _blocks(problem, m, problem.c, chunk, tx), chunk * tx, 4 * chunk * plane, chunk, tx


def _aligned_strips(problem, m: int) -> tuple[int, int] | None:
    """(KC, TX) = (16, ``ALIGNED_TILES``) where the otrans kernel's rows start on 32-byte sector boundaries
    (Q a multiple of ``SECTOR_FLOATS``) and split into strips of 8 tiles exactly (at least two), at F(7x7)
    and K >= 16, else None. A strip's row is then 8 * 7 floats = 224 bytes, whole 32-byte sectors, which no
    two blocks share (4-tile strips write 112-byte rows, half a sector at an end of every other one);
    measured at F(7x7) only (vgg-1: module docstring). On rows off the sector boundaries the 224-byte rows
    straddle sectors that two blocks share (``_whole_rows`` applies there)."""
    tiles_x = _tiles_x(problem, m)
    if (m == 7 and problem.k >= 16 and problem.out_w % SECTOR_FLOATS == 0 and tiles_x % ALIGNED_TILES == 0
            and tiles_x >= 2 * ALIGNED_TILES):
        return 16, ALIGNED_TILES
    return None


def _whole_rows(problem, m: int) -> tuple[int, int] | None:
    """(KC, TX = tiles_x) where the otrans kernel's output rows start off 32-byte sector boundaries (Q not a
    multiple of ``SECTOR_FLOATS``) and ``_pick``'s strips would split a tile row: one strip a whole tile row,
    the widest power-of-two chunk of channels (at most K rounded up) whose row fits ``WIDE_THREADS``, at
    least ``WHOLE_ROW_MIN_CHUNK``; else None. Shared memory may then pass 48 KiB (16 channels x 16 tiles at
    F(7x7): 49.1 KiB): the launcher opts in (``gpu.runtime.winograd_kernels``).

    Why: a strip that splits a tile row shares the sectors at its ends with its neighbours, and where the
    rows start off the sector boundaries every row's ends are partial sectors written by two blocks; a block
    of whole tile rows writes each channel's rr * Q outputs as one contiguous run, so only the run's two
    ends are shared. Measured on the H200 (module docstring): im2win/conv8 (110-float rows, 16 tiles)
    387 -> 328 us."""
    if problem.out_w % SECTOR_FLOATS == 0:
        return None
    tiles_x = _tiles_x(problem, m)
    _, tx, _, _ = _pick(problem.k, m, tiles_x, lambda g: otrans_plane(m, g[1]), True, None)
    if tx >= tiles_x:
        return None
    chunk = min(_pow2_at_least(problem.k), _pow2_at_most(max(1, WIDE_THREADS // tiles_x)))
    if chunk < WHOLE_ROW_MIN_CHUNK:
        return None
    return chunk, tiles_x


def otrans_launch(problem, m: int, threads: int | None = None) -> tuple[int, int, int, int, int]:
    """(blocks, threads per block, dynamic shared bytes, KC, TX) of the otrans kernel's launch (``_pick``, or
    ``_aligned_strips`` or ``_whole_rows`` where one applies and ``threads`` is not given; the shared bytes
    pass ``MAX_SHARED_BYTES`` only under ``_whole_rows``)."""
    special = (_aligned_strips(problem, m) or _whole_rows(problem, m)) if threads is None else None
    if special is not None:
        chunk, tx = special
        return _blocks(problem, m, problem.k, chunk, tx), chunk * tx, 4 * chunk * otrans_plane(m, tx), chunk, tx
    chunk, tx, _, _ = _pick(problem.k, m, _tiles_x(problem, m), lambda g: otrans_plane(m, g[1]), True, threads)
    return _blocks(problem, m, problem.k, chunk, tx), chunk * tx, 4 * chunk * otrans_plane(m, tx), chunk, tx


def _blocks(problem, m: int, channels: int, chunk: int, tx: int) -> int:
    """Blocks of one launch: images x tile rows x strips x channel chunks."""
    tiles_y, tiles_x = -(-problem.out_h // m), _tiles_x(problem, m)
    return problem.n * tiles_y * -(-tiles_x // tx) * -(-channels // chunk)


def _gen_itrans_smem(m: int, consts: _Consts) -> str:
    bt, _, _ = matrices(m)
    a = m + 2
    lines = [f"def itrans_smem_m{m}(s, base, row, V, dst, plane):"]

    def load(i, j):
        return f"    d{i}_{j} = load1(s, base + {i} * row + {j})"

    def store(i, j):
        return f"    store1(V, dst + {i * a + j} * plane, v{i}_{j})"

    lines += product_lines(bt, a, a, load, lambda i: [store(i, j) for j in range(a)], "d", "v", consts)
    return "\n".join(lines) + "\n"


def _gen_otrans_smem(m: int, consts: _Consts, opaque: bool = True) -> str:
    _, _, at = matrices(m)
    a = m + 2
    lines = [f"def otrans_smem_m{m}(M, src, plane, s, base, row):"]
    if opaque:
        lines += ["    plane = opaque_index(plane)", "    row = opaque_index(row)"]

    def load(i, j):
        return f"    s{i}_{j} = load1(M, src + {i * a + j} * plane)"

    def store_row(i):
        return [f"    store1(s, base + {i} * row + {j}, y{i}_{j})" for j in range(m)]

    lines += product_lines(at, a, m, load, store_row, "s", "y", consts)
    return "\n".join(lines) + "\n"


def _compile(gen, m: int):
    consts = _Consts()
    name, py_fn, dev_fn = compile_generated(gen(m, consts), consts, "gpu.kernels.winograd.nchw",
                                            dict(load1=py_load1, store1=py_store1, opaque_index=py_opaque_index),
                                            dict(load1=load1, store1=store1, opaque_index=opaque_index))
    PY_FUNCS[name] = py_fn
    return dev_fn


@cuda.jit(device=True)
def _block_strip(b, channels, chunk, tiles_x, tiles_y, TX):
    """(image, tile row, first tile of the strip, first channel) of block b: channel chunks fastest, then
    strips of TX tiles along the row, tile rows, images (``_blocks`` counts them)."""
    chunks = (channels + chunk - 1) // chunk
    strips = (tiles_x + TX - 1) // TX
    cb = b % chunks
    r = b // chunks
    sx = r % strips
    r //= strips
    ty = r % tiles_y
    return r // tiles_y, ty, sx * TX, cb * chunk


@lru_cache(maxsize=None)
def nchw_kernels_for(m: int, opaque: bool = True, otrans_max_registers: int | None = OTRANS_MAX_REGISTERS) -> tuple:
    """(itrans_nchw, otrans_nchw) kernels of tile m (compiled for that m alone, on first use). The otrans
    kernel's build: ``opaque`` strides in its product and its register cap (module docstring); the defaults
    are what the runtime runs, ``opaque=False, otrans_max_registers=None`` the build before them."""
    if m not in SUPPORTED_TILES:
        raise ValueError(f"tile m={m!r} is not allowed: want one of {SUPPORTED_TILES}")
    itrans_pair = _compile(_gen_itrans_smem, m)
    otrans_pair = _compile(lambda mm, consts: _gen_otrans_smem(mm, consts, opaque), m)
    # (the CUDA simulator's jit takes no register cap)
    capped = otrans_max_registers is not None and not config.ENABLE_CUDASIM
    ojit = cuda.jit(max_registers=otrans_max_registers) if capped else cuda.jit
    MT = m
    A = m + 2
    ZERO = np.float32(0.0)
    wait_all = cp_async_wait_group(0)

    @cuda.jit
    def itrans_nchw(prm, x, V, CC, TX):
        """x (N, C, H, W) -> V (alpha^2, tiles, C); see the module docstring. Block: CC * TX threads;
        dynamic shared memory as ``itrans_launch`` gives."""
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        C = prm[P_C]
        H = prm[P_H]
        W = prm[P_W]
        tiles_x = prm[P_TILES_X]
        tiles_y = prm[P_TILES_Y]
        n, ty, tx0, c0 = _block_strip(cuda.blockIdx.x, C, CC, tiles_x, tiles_y, TX)
        y0 = MT * ty - prm[P_PAD]
        x0 = MT * tx0 - prm[P_PAD]
        cols = TX * MT + 2
        plane = (A * cols) | 1
        s = cuda.shared.array(0, float32)
        # rows (cc, i) of ``cols`` values each. A thread keeps one column j and every per-th channel of the
        # chunk, and copies that channel's A rows at j: the global and shared addresses of a row are the
        # channel's plus i times a row (additions in the unrolled loop over the compile-time A), the row
        # bounds are fixed per block, so a copied element costs a few instructions, where a division of the
        # row index and a product of four 64-bit factors per element made the copy issue-bound (NCHW itrans
        # at 2-2.3x the NHWC one on an H100). Every copy is a cp.async (no register, no wait per load): the
        # thread's copies are all in flight together and it waits once. When a row is wider than the
        # block, the threads walk its columns instead.
        # The channel loop steps its addresses by additions, and a thread whose column and rows all lie inside
        # the image copies them without a test per row (as otrans_nchw's store; a range(first, CC, per) cost
        # a 64-bit division and every row a branch of its own).
        if cols <= nthr:
            per = nthr // cols
            j = tid % cols
            first = tid // cols
            if first < per:
                xx = x0 + j
                nc = C - c0 if C - c0 < CC else CC         # channels of the chunk inside C
                gstep = per * H * W
                sstep = per * plane
                gb = ((n * C + c0 + first) * H + y0) * W + xx
                sb = first * plane + j
                q = first
                if 0 <= xx < W and y0 >= 0 and y0 + A <= H:
                    while q < nc:
                        for i in range(A):
                            cp_async4(s, sb + i * cols, x, gb + i * W, 4)
                        q += per
                        gb += gstep
                        sb += sstep
                else:
                    col_ok = 0 <= xx < W
                    i_lo = -y0 if y0 < 0 else 0            # rows y0 + i inside the image: i_lo <= i < i_hi
                    i_hi = H - y0 if H - y0 < A else A
                    while q < nc:
                        for i in range(A):
                            if col_ok and i_lo <= i < i_hi:
                                cp_async4(s, sb + i * cols, x, gb + i * W, 4)
                            else:
                                store1(s, sb + i * cols, ZERO)
                        q += per
                        gb += gstep
                        sb += sstep
                while q < CC:                              # channels past C: zeros
                    for i in range(A):
                        store1(s, sb + i * cols, ZERO)
                    q += per
                    sb += sstep
        else:
            for row in range(CC * A):
                cc = row // A
                i = row - cc * A
                c = c0 + cc
                yy = y0 + i
                row_ok = c < C and 0 <= yy < H
                base = ((n * C + c) * H + yy) * W
                for j in range(tid, cols, nthr):
                    xx = x0 + j
                    if row_ok and 0 <= xx < W:
                        cp_async4(s, cc * plane + i * cols + j, x, base + xx, 4)
                    else:
                        store1(s, cc * plane + i * cols + j, ZERO)
        cp_async_commit()
        wait_all()
        cuda.syncthreads()
        cc = tid % CC
        t = tid // CC
        c = c0 + cc
        tx = tx0 + t
        if c < C and t < TX and tx < tiles_x:
            tile = (n * tiles_y + ty) * tiles_x + tx
            itrans_pair(s, cc * plane + t * MT, cols, V, tile * C + c, prm[P_TILES] * C)

    @ojit
    def otrans_nchw(prm, M, Y, KC, TX):
        """M (alpha^2, tiles, K) -> Y (N, K, P, Q); see the module docstring. Block: CC * TX threads;
        dynamic shared memory as ``otrans_launch`` gives."""
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        K = prm[P_K]
        P = prm[P_P]
        Q = prm[P_Q]
        tiles_x = prm[P_TILES_X]
        tiles_y = prm[P_TILES_Y]
        n, ty, tx0, k0 = _block_strip(cuda.blockIdx.x, K, KC, tiles_x, tiles_y, TX)
        width = TX * MT
        plane = (MT * width) | 1
        s = cuda.shared.array(0, float32)
        tile0 = (n * tiles_y + ty) * tiles_x + tx0
        kk = tid % KC
        t = tid // KC
        k = k0 + kk
        tx = tx0 + t
        if k < K and t < TX and tx < tiles_x:
            tile = tile0 + t
            otrans_pair(M, tile * K + k, prm[P_TILES] * K, s, kk * plane + t * MT, width)
        cuda.syncthreads()
        oy0 = MT * ty
        ox0 = MT * tx0
        # the store: a thread keeps one column j and every per-th output channel of the chunk, and stores
        # that channel's m rows at j (addresses: the channel's plus i times a row; see itrans_nchw's copy).
        # The channel loop steps its global and shared addresses by additions (a range(first, KC, per) cost a
        # 64-bit division for its trip count, and the addresses were formed anew per channel), and a block
        # whose m rows all lie inside the output stores them without a test per row (with one, every row
        # was a branch of its own with its 64-bit address formed again: about 18 instructions per element,
        # the store phase more instructions than the loads and the transform together; ncu, H200).
        if width <= nthr:
            per = nthr // width
            j = tid % width
            first = tid // width
            xx = ox0 + j
            if first < per and xx < Q:
                nk = K - k0 if K - k0 < KC else KC         # channels of the chunk inside K
                gstep = per * P * Q
                sstep = per * plane
                gb = ((n * K + k0 + first) * P + oy0) * Q + xx
                sb = first * plane + j
                kk = first
                if P - oy0 >= MT:
                    while kk < nk:
                        for i in range(MT):
                            store1(Y, gb + i * Q, load1(s, sb + i * width))
                        kk += per
                        gb += gstep
                        sb += sstep
                else:
                    i_hi = P - oy0                         # rows oy0 + i inside the output: i < i_hi
                    while kk < nk:
                        for i in range(MT):
                            if i < i_hi:
                                store1(Y, gb + i * Q, load1(s, sb + i * width))
                        kk += per
                        gb += gstep
                        sb += sstep
        else:
            for row in range(KC * MT):
                kk = row // MT
                i = row - kk * MT
                k = k0 + kk
                yy = oy0 + i
                if k < K and yy < P:
                    base = ((n * K + k) * P + yy) * Q
                    for j in range(tid, width, nthr):
                        xx = ox0 + j
                        if xx < Q:
                            store1(Y, base + xx, load1(s, kk * plane + i * width + j))

    return persist(itrans_nchw, m), persist(otrans_nchw, m, opaque, otrans_max_registers)
