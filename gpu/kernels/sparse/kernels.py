"""The Numba CUDA kernels behind ``gpu.sparse``: ECR / PECR sparse convolution (Xu et al., "Accelerating
convolutional neural network by exploiting sparsity on GPUs", Sec. IV and V), their dense twins, and
the ReLU and max-pool kernels of the unfused chain.

Block shapes follow ``megasim.algorithms.sparse.tiling`` (the contract with the model): every sparse or
direct kernel runs ``PIXELS_PER_BLOCK`` = 128 threads, one output pixel (or one pooled output) each,
on a grid (pixel tiles, filter tiles). Each factory closes over Python ints (k_tile, c_chunk, R, S,
stride, pool), so every loop that indexes the accumulators has a compile-time trip count, unrolls,
and the accumulators stay in registers; the dense twin is the same code with ``SPARSE`` False, a
compile-time constant whose dead branches Numba prunes (so the twin declares no compression buffers).
Compiled kernels are cached per configuration; tensor sizes (N, C, H, W, K) and the padding are
runtime values read from the arrays' shapes and one scalar argument.

Factories return the ``cuda.jit`` kernel with two attributes: ``shared_bytes`` (static shared memory
of one block, computed from the same constants that size its shared arrays) and ``config`` (a dict of
those constants).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32

from gpu.kernels.common.vector_access import SHARED_ALIGNMENT, load4, store4
from megasim.algorithms.sparse.tiling import PIXELS_PER_BLOCK, weight_row_floats

ELEMENTWISE_THREADS = 256
ZERO = np.float32(0.0)

_CONV: dict[tuple, object] = {}
_FUSED: dict[tuple, object] = {}
_POOL: dict[tuple, object] = {}


def conv_shared_bytes(sparse: bool, k_tile: int, c_chunk: int, r: int, s: int) -> int:
    """W_sh [c_chunk*R*S][weight_row_floats(k_tile)] float32, plus F_val float32 and F_idx int32
    [c_chunk*R*S][128]."""
    rows = c_chunk * r * s
    return rows * weight_row_floats(k_tile) * 4 + (rows * PIXELS_PER_BLOCK * 8 if sparse else 0)


def fused_shared_bytes(sparse: bool, k_tile: int, c_chunk: int, r: int, s: int, stride: int, pool: int) -> int:
    """W_sh [c_chunk*R*S][weight_row_floats(k_tile)] float32, plus F_val / F_idx [c_chunk*PH*PW][128]
    (PECR only)."""
    ph, pw = (pool - 1) * stride + r, (pool - 1) * stride + s
    elems = c_chunk * ph * pw
    return c_chunk * r * s * weight_row_floats(k_tile) * 4 + (elems * PIXELS_PER_BLOCK * 8 if sparse else 0)


MAX_TWO_PHASE_CHUNK = 4     # channels per chunk the two-phase scan unrolls (3x3 convs: 4; PECR's 4x4 patch: 2)
_COMPRESSORS: dict[tuple, object] = {}
_LOADERS: dict[tuple, object] = {}
DENSE_LOADS = ("inline", "chunk", "channel")
DENSE_TWIN_LOADS = "channel"       # the dense twin the benchmarks and the calibration run
_STAGERS: dict[tuple, object] = {}


def _window_loader(c_chunk: int, rows: int, cols: int):
    """A device function ``f(win, x, n, c0, C, ih0, iw0, H, W, active)``: loads the thread's ``c_chunk``
    windows of ``rows x cols`` pixels into ``win`` (registers), 0 outside the map, for a channel >= C
    or an inactive thread. One call per channel with a constant channel index (at most
    MAX_TWO_PHASE_CHUNK), so every loop unrolls and all the loads can be in flight together."""
    key = (c_chunk, rows, cols)
    if key in _LOADERS:
        return _LOADERS[key]
    assert c_chunk <= MAX_TWO_PHASE_CHUNK, "the loader unrolls at most MAX_TWO_PHASE_CHUNK channels"
    CC, RR, CS, PC = c_chunk, rows, cols, rows * cols

    @cuda.jit(device=True, inline="always")
    def load(win, x, n, c, C, ih0, iw0, H, W, active, cc):
        for rr in range(RR):
            for ss in range(CS):
                ih = ih0 + rr
                iw = iw0 + ss
                v = ZERO
                if active and c < C and ih >= 0 and ih < H and iw >= 0 and iw < W:
                    v = x[n, c, ih, iw]
                win[cc * PC + rr * CS + ss] = v

    @cuda.jit(device=True, inline="always")
    def load_window(win, x, n, c0, C, ih0, iw0, H, W, active):
        load(win, x, n, c0, C, ih0, iw0, H, W, active, 0)
        if CC > 1:
            load(win, x, n, c0 + 1, C, ih0, iw0, H, W, active, 1)
        if CC > 2:
            load(win, x, n, c0 + 2, C, ih0, iw0, H, W, active, 2)
        if CC > 3:
            load(win, x, n, c0 + 3, C, ih0, iw0, H, W, active, 3)

    _LOADERS[key] = load_window
    return load_window


def _compressor(c_chunk: int, rows: int, cols: int):
    """A device function ``cnt = f(win, F_val, F_idx, x, n, c0, C, ih0, iw0, H, W, active, t)``: the
    two-phase ECR/PECR compression of one channel chunk. It loads the thread's ``c_chunk`` windows of
    ``rows x cols`` pixels (0 outside the map, for a channel >= C or an inactive thread) into ``win``,
    then appends each nonzero and its window index e = cc*rows*cols + row*cols + col to the thread's
    column of F_val / F_idx, and returns their count. All window loads come first: a load after a
    shared-memory store cannot be hoisted above it (the compiler cannot rule out that x's generic
    pointer aliases shared memory), so interleaving them would expose one load latency per element.
    The per-channel loads are separate calls with a constant channel (at most MAX_TWO_PHASE_CHUNK),
    so every loop unrolls and ``win`` stays in registers; a larger chunk gets a one-pass scan."""
    key = (c_chunk, rows, cols)
    if key in _COMPRESSORS:
        return _COMPRESSORS[key]
    CC, RR, CS, PC = c_chunk, rows, cols, rows * cols
    ELEMS = c_chunk * rows * cols

    if c_chunk > MAX_TWO_PHASE_CHUNK:
        # Too many channels to unroll (small windows, e.g. 1x1): one pass, loads and stores
        # interleaved; ``win`` is not used.
        @cuda.jit(device=True, inline="always")
        def scan_and_compress(win, F_val, F_idx, x, n, c0, C, ih0, iw0, H, W, active, t):
            cnt = 0
            if active:
                for cc in range(CC):
                    if c0 + cc < C:
                        for rr in range(RR):
                            ih = ih0 + rr
                            if ih >= 0 and ih < H:
                                for ss in range(CS):
                                    iw = iw0 + ss
                                    if iw >= 0 and iw < W:
                                        v = x[n, c0 + cc, ih, iw]
                                        if v != ZERO:
                                            F_val[cnt, t] = v
                                            F_idx[cnt, t] = cc * PC + rr * CS + ss
                                            cnt += 1
            return cnt

        _COMPRESSORS[key] = scan_and_compress
        return scan_and_compress

    load_window = _window_loader(c_chunk, rows, cols)

    @cuda.jit(device=True, inline="always")
    def load_and_compress(win, F_val, F_idx, x, n, c0, C, ih0, iw0, H, W, active, t):
        load_window(win, x, n, c0, C, ih0, iw0, H, W, active)
        cnt = 0
        for e in range(ELEMS):
            v = win[e]
            if v != ZERO:
                F_val[cnt, t] = v
                F_idx[cnt, t] = e
                cnt += 1
        return cnt

    _COMPRESSORS[key] = load_and_compress
    return load_and_compress


def _weight_stager(k_tile: int, c_chunk: int, r: int, s: int):
    """A device function ``f(W_sh, w, k0, c0, K, C, t)``: the block's threads copy the filter tile
    w[k0:k0+k_tile, c0:c0+c_chunk] into W_sh[j][kk] (j = cc*R*S + r*S + s; 0 where k >= K or c >= C);
    consecutive threads read consecutive j of one filter (coalesced). With k_tile a multiple of 4 a
    thread reads the same j of 4 consecutive filters and writes them with one 128-bit store (rows of
    k_tile + 4 floats: 8 consecutive j of a quarter-warp land on 8 distinct 4-bank groups, no
    conflict); otherwise one scalar store each (rows of k_tile + 1). The caller synchronises."""
    key = (k_tile, c_chunk, r, s)
    if key in _STAGERS:
        return _STAGERS[key]
    RS, S, ROWS = r * s, s, c_chunk * r * s
    WLOAD, PPB = ROWS * k_tile, PIXELS_PER_BLOCK
    WS = weight_row_floats(k_tile)

    @cuda.jit(device=True, inline="always")
    def slot(idx):
        """idx -> (filter slot, weight row j, its channel cc, filter row rr, filter column ss), j fastest."""
        f = idx // ROWS
        j = idx - f * ROWS
        cc = j // RS
        rs = j - cc * RS
        rr = rs // S
        return f, j, cc, rr, rs - rr * S

    if k_tile % 4 == 0:
        QLOAD = ROWS * (k_tile // 4)

        @cuda.jit(device=True, inline="always")
        def stage(W_sh, w, k0, c0, K, C, t):
            for idx in range(t, QLOAD, PPB):
                kq, j, cc, rr, ss = slot(idx)
                k = k0 + 4 * kq
                c_ok = c0 + cc < C
                v0 = w[k, c0 + cc, rr, ss] if c_ok and k < K else ZERO
                v1 = w[k + 1, c0 + cc, rr, ss] if c_ok and k + 1 < K else ZERO
                v2 = w[k + 2, c0 + cc, rr, ss] if c_ok and k + 2 < K else ZERO
                v3 = w[k + 3, c0 + cc, rr, ss] if c_ok and k + 3 < K else ZERO
                store4(W_sh, j * WS + 4 * kq, v0, v1, v2, v3)
    else:
        @cuda.jit(device=True, inline="always")
        def stage(W_sh, w, k0, c0, K, C, t):
            for idx in range(t, WLOAD, PPB):
                kk, j, cc, rr, ss = slot(idx)
                v = ZERO
                if k0 + kk < K and c0 + cc < C:
                    v = w[k0 + kk, c0 + cc, rr, ss]
                W_sh[j, kk] = v

    _STAGERS[key] = stage
    return stage


_ROW_FMAS: dict[int, object] = {}


def _row_fma(k_tile: int):
    """A device function ``f(acc, base, W_sh, j, v)``: acc[base + kk] += v * W_sh[j, kk] for kk <
    k_tile, the weight row read 4 filters per 128-bit shared load when k_tile is a multiple of 4
    (one LDS.128 per 4 multiply-adds instead of one load each). Inlined with constant ``base`` so
    that acc is indexed by constants and stays in registers."""
    if k_tile in _ROW_FMAS:
        return _ROW_FMAS[k_tile]
    KT, WS = k_tile, weight_row_floats(k_tile)

    if k_tile % 4 == 0:
        @cuda.jit(device=True, inline="always")
        def row_fma(acc, base, W_sh, j, v):
            row = j * WS
            for q in range(KT // 4):
                w0, w1, w2, w3 = load4(W_sh, row + 4 * q)
                acc[base + 4 * q] += v * w0
                acc[base + 4 * q + 1] += v * w1
                acc[base + 4 * q + 2] += v * w2
                acc[base + 4 * q + 3] += v * w3
    else:
        @cuda.jit(device=True, inline="always")
        def row_fma(acc, base, W_sh, j, v):
            for kk in range(KT):
                acc[base + kk] += v * W_sh[j, kk]

    _ROW_FMAS[k_tile] = row_fma
    return row_fma


@cuda.jit(device=True, inline="always")
def store8(y, acc, kt, lo, n, k0, K, oh, ow):
    """y[n, k0 + kk, oh, ow] = acc[kk] for kk in lo .. lo+7 with kk < kt and k0 + kk < K. Called with
    constant kt and lo, so that after inlining the loop unrolls and acc is indexed by constants."""
    for q in range(8):
        kk = lo + q
        if kk < kt and k0 + kk < K:
            y[n, k0 + kk, oh, ow] = acc[kk]


def conv_kernel(sparse: bool, k_tile: int, c_chunk: int, r: int, s: int, stride: int, *,
                probe_same_row: bool = False, dense_loads: str = DENSE_TWIN_LOADS):
    """The ECR (``sparse``) or direct convolution kernel for one block shape (cached).

    ``probe_same_row`` (a timing probe, its output is WRONG): ECR multiplies every stored nonzero
    with weight row 0, so all lanes of a warp read the same row each iteration (the row index is still
    loaded, ``min(j, 0)``); timed beside the real kernel it prices the replays of the 128-bit weight
    loads when lanes read different rows (``gpu.probes.sparse_rows``).

    ``dense_loads`` (the dense twin only; every choice computes the same convolution): where its window
    loads go. "channel" (the twin; docs/sparse.md): one channel's R*S window elements loaded into
    registers, then multiplied, channel after channel; "inline": one load per element inside the
    multiply loop (the earlier twin: its load latency sits on the multiply loop, and its time
    moved 0.98-1.11x with the map's width on a fixed grid); "chunk": the chunk's whole window loaded
    first by ECR's loader. ``gpu.probes.conv_map_shape`` times them against each other (H100: "channel"
    0.69-0.82x of "inline" on VGG-19 but for conv5_x at batch 1, 1.03x).

    Launch: ``kern[(ceil(N*P*Q / 128), ceil(K / k_tile)), 128](x, w, y, padding)``; x (N, C, H, W),
    w (K, C, R, S), y (N, K, P, Q), all float32 C-contiguous. Thread t of block (bx, by) owns output
    pixel g = bx*128 + t of the flattened (n, oh, ow) index and filters by*k_tile .. +k_tile (one
    register accumulator each). Threads with g >= N*P*Q take part in every barrier and do nothing else.

    Per chunk of ``c_chunk`` input channels: (1) the block stages w[k0:k0+k_tile, c0:c0+c_chunk] into
    W_sh[j][kk], j = cc*R*S + r*S + s (rows of ``weight_row_floats(k_tile)`` floats), zero where
    k >= K or c >= C; consecutive threads read consecutive j of one filter (coalesced); barrier.
    (2) ECR (Sec. IV-C, Algorithm 1): the thread loads its window (cc, r, s) from global memory into
    registers (padding and channels >= C read as 0), then appends every nonzero to its column of F_val[cnt][t] with its
    weight row in F_idx[cnt][t]; then (Sec. IV-D, Algorithm 2) for each stored nonzero it does k_tile
    multiply-adds with W_sh[j]. Zeros cost one load and one compare, no multiply. Direct: every
    window element (0 for padding) times its weight row. (3) Barrier (W_sh is restaged next chunk).
    Finally acc[kk] -> y[n, k0+kk, oh, ow] for k < K. F_val / F_idx are written and read by their
    own thread only; the barriers order W_sh. Shared memory: ``conv_shared_bytes``.
    """
    if dense_loads not in DENSE_LOADS:
        raise ValueError(f"dense_loads={dense_loads!r} is not allowed (allowed: {', '.join(DENSE_LOADS)})")
    if sparse and dense_loads != DENSE_TWIN_LOADS:
        raise ValueError(f"dense_loads={dense_loads!r} is for the dense twin (the ECR kernel loads its own way)")
    if dense_loads == "chunk" and c_chunk > MAX_TWO_PHASE_CHUNK:
        raise ValueError(f"dense_loads='chunk' needs c_chunk <= {MAX_TWO_PHASE_CHUNK}, got {c_chunk}")
    key = (("ecr" if sparse else "direct", k_tile, c_chunk, r, s, stride) + (("same_row",) if probe_same_row else ())
           + (() if sparse else (dense_loads,)))
    if key in _CONV:
        return _CONV[key]
    SAME_ROW = bool(probe_same_row)
    PRELOAD_CHUNK = not sparse and dense_loads == "chunk"
    PRELOAD_CHANNEL = not sparse and dense_loads == "channel"
    assert 1 <= k_tile <= 32, "the output stores cover at most 32 filters (four store8 calls)"
    SPARSE = bool(sparse)
    PPB = PIXELS_PER_BLOCK
    KT = k_tile
    WS = weight_row_floats(k_tile)
    CC = c_chunk
    R = r
    S = s
    RS = r * s
    ROWS = c_chunk * r * s
    ST = stride
    WIN = ROWS if CC <= MAX_TWO_PHASE_CHUNK else 1        # the two-phase scan's registers
    compress = _compressor(CC if SPARSE else 1, R, S)              # unused by the dense twin
    load_window = _window_loader(min(CC, MAX_TWO_PHASE_CHUNK), R, S)   # dense_loads="chunk" only
    load_channel = _window_loader(1, R, S)                             # dense_loads="channel" only
    stage_weights = _weight_stager(k_tile, c_chunk, r, s)
    row_fma = _row_fma(k_tile)

    @cuda.jit
    def conv(x, w, y, pad):
        t = cuda.threadIdx.x
        N = x.shape[0]
        C = x.shape[1]
        H = x.shape[2]
        W = x.shape[3]
        K = w.shape[0]
        P = y.shape[2]
        Q = y.shape[3]
        k0 = cuda.blockIdx.y * KT
        g = cuda.blockIdx.x * PPB + t
        active = g < N * P * Q
        n = 0
        oh = 0
        ow = 0
        if active:
            n = g // (P * Q)
            rem = g - n * (P * Q)
            oh = rem // Q
            ow = rem - oh * Q
        ih0 = oh * ST - pad
        iw0 = ow * ST - pad
        W_sh = cuda.shared.array((ROWS, WS), float32, alignment=SHARED_ALIGNMENT)
        if SPARSE:
            F_val = cuda.shared.array((ROWS, PPB), float32)
            F_idx = cuda.shared.array((ROWS, PPB), int32)
        if SPARSE or PRELOAD_CHUNK:
            win = cuda.local.array(WIN, float32)
        if PRELOAD_CHANNEL:
            win = cuda.local.array(RS, float32)
        acc = cuda.local.array(KT, float32)
        for kk in range(KT):
            acc[kk] = ZERO
        for c0 in range(0, C, CC):
            stage_weights(W_sh, w, k0, c0, K, C, t)
            cuda.syncthreads()
            if SPARSE:
                cnt = compress(win, F_val, F_idx, x, n, c0, C, ih0, iw0, H, W, active, t)
                for i in range(cnt):
                    j = F_idx[i, t]
                    if SAME_ROW:
                        j = min(j, 0)
                    row_fma(acc, 0, W_sh, j, F_val[i, t])
            elif PRELOAD_CHUNK:
                load_window(win, x, n, c0, C, ih0, iw0, H, W, active)
                if active:
                    for e in range(ROWS):
                        row_fma(acc, 0, W_sh, e, win[e])
            elif PRELOAD_CHANNEL:
                for cc in range(CC):
                    load_channel(win, x, n, c0 + cc, C, ih0, iw0, H, W, active)
                    if active:
                        for e in range(RS):
                            row_fma(acc, 0, W_sh, cc * RS + e, win[e])
            else:
                if active:
                    for cc in range(CC):
                        for rr in range(R):
                            ih = ih0 + rr
                            for ss in range(S):
                                iw = iw0 + ss
                                v = ZERO
                                if c0 + cc < C and ih >= 0 and ih < H and iw >= 0 and iw < W:
                                    v = x[n, c0 + cc, ih, iw]
                                row_fma(acc, 0, W_sh, cc * RS + rr * S + ss, v)
            cuda.syncthreads()
        if active:
            # Four calls covering at most 8 filters each, not one loop over KT: a loop of 32 stores
            # is above LLVM's full-unroll threshold, and a partly unrolled loop indexes acc with a
            # variable, which sends acc to local memory (checked with upstream LLVM -O3).
            store8(y, acc, KT, 0, n, k0, K, oh, ow)
            if KT > 8:
                store8(y, acc, KT, 8, n, k0, K, oh, ow)
            if KT > 16:
                store8(y, acc, KT, 16, n, k0, K, oh, ow)
            if KT > 24:
                store8(y, acc, KT, 24, n, k0, K, oh, ow)

    conv.shared_bytes = conv_shared_bytes(SPARSE, KT, CC, R, S)
    conv.config = {"kind": key[0], "k_tile": KT, "c_chunk": CC, "r": R, "s": S, "stride": ST, "weight_rows": ROWS,
                   "compressed_rows": ROWS if SPARSE else 0}
    _CONV[key] = conv
    return conv


FUSED_DENSE_LOADS = ("inline", "channel")


def fused_kernel(sparse: bool, k_tile: int, c_chunk: int, r: int, s: int, stride: int, pool: int,
                 pool_stride: int, *, dense_loads: str = DENSE_TWIN_LOADS):
    """The PECR (``sparse``) or dense fused convolution + ReLU + max-pool kernel (cached).

    ``dense_loads`` (the dense twin only; both compute the same result), as ``conv_kernel``'s:
    "channel" (the twin; docs/sparse.md): one channel's PH x PW patch loaded into registers, then
    scattered; "inline" (the earlier twin): one load per patch element inside the scatter loop.

    Launch: ``kern[(ceil(N*PO*QO / 128), ceil(K / k_tile)), 128](x, w, out, padding)``; out is
    (N, K, PO, QO), the floor-mode pooled map of the P x Q convolution output (pool window ``pool``,
    step ``pool_stride``, no padding). Thread t owns pooled output g = bx*128 + t of the flattened
    (n, ph, pw) index: the pool x pool convolution outputs (ph*pool_stride + dy, pw*pool_stride + dx),
    read from one patch of PH x PW = ((pool-1)*stride + R) x ((pool-1)*stride + S) pixels per channel
    starting at row ph*pool_stride*stride - padding, column pw*pool_stride*stride - padding (Sec. V-B,
    Fig. 7). It keeps pool*pool*k_tile register accumulators.

    Per chunk of ``c_chunk`` channels: (1) weights staged into W_sh as in ``conv_kernel``; barrier.
    (2) PECR (Sec. V-C, Algorithm 3): the thread scans its patch once and appends each nonzero to
    F_val[cnt][t], with its patch position e = cc*PH*PW + py*PW + px in F_idx[cnt][t]; then (Sec. V-D,
    Algorithm 4) each stored nonzero feeds every convolution output (dy, dx) whose window holds it:
    r = py - dy*stride, s = px - dx*stride, 0 <= r < R, 0 <= s < S -> k_tile multiply-adds with
    W_sh[cc*R*S + r*S + s]. Dense twin: the same scatter for every patch element. (3) Barrier.
    Finally out[n, k, ph, pw] = max(0, max over (dy, dx) of acc) (ReLU then max-pool) for k < K.
    Shared memory: ``fused_shared_bytes``.
    """
    if dense_loads not in FUSED_DENSE_LOADS:
        raise ValueError(f"dense_loads={dense_loads!r} is not allowed for the fused kernel "
                         f"(allowed: {', '.join(FUSED_DENSE_LOADS)})")
    if sparse and dense_loads != DENSE_TWIN_LOADS:
        raise ValueError(f"dense_loads={dense_loads!r} is for the dense twin (the PECR kernel loads its own way)")
    key = ("pecr" if sparse else "direct_fused", k_tile, c_chunk, r, s, stride, pool, pool_stride) + (
        () if sparse else (dense_loads,))
    if key in _FUSED:
        return _FUSED[key]
    assert 1 <= k_tile <= 8, "the output stores cover at most 8 filters (one store8 call)"
    assert 1 <= pool <= 6, "a patch of at most 36 elements holds at most a 6 x 6 pool (six scatter rows)"
    SPARSE = bool(sparse)
    PPB = PIXELS_PER_BLOCK
    KT = k_tile
    WS = weight_row_floats(k_tile)
    CC = c_chunk
    R = r
    S = s
    RS = r * s
    ROWS = c_chunk * r * s
    ST = stride
    POOL = pool
    PS = pool_stride
    PH = (pool - 1) * stride + r
    PW = (pool - 1) * stride + s
    PP = PH * PW
    ELEMS = c_chunk * PP
    NACC = pool * pool * k_tile
    WIN = ELEMS if CC <= MAX_TWO_PHASE_CHUNK else 1
    PRELOAD_CHANNEL = not sparse and dense_loads == "channel"
    compress = _compressor(CC if SPARSE else 1, PH, PW)            # unused by the dense twin
    load_channel = _window_loader(1, PH, PW)                       # dense_loads="channel" only
    stage_weights = _weight_stager(k_tile, c_chunk, r, s)
    row_fma = _row_fma(k_tile)

    @cuda.jit(device=True, inline="always")
    def scatter_row(acc, W_sh, v, cc, py, px, dy):
        rr = py - dy * ST
        if rr >= 0 and rr < R:
            for dx in range(POOL):
                ss = px - dx * ST
                if ss >= 0 and ss < S:
                    row_fma(acc, (dy * POOL + dx) * KT, W_sh, cc * RS + rr * S + ss, v)

    @cuda.jit(device=True, inline="always")
    def scatter(acc, W_sh, v, cc, py, px):
        # Patch element (cc, py, px) with value v into every convolution output (dy, dx) whose window
        # holds it. One call per pooling row instead of a loop over dy: with pool 3 the dy loop is
        # above LLVM's full-unroll threshold, and a variable dy would send acc to local memory.
        scatter_row(acc, W_sh, v, cc, py, px, 0)
        if POOL > 1:
            scatter_row(acc, W_sh, v, cc, py, px, 1)
        if POOL > 2:
            scatter_row(acc, W_sh, v, cc, py, px, 2)
        if POOL > 3:
            scatter_row(acc, W_sh, v, cc, py, px, 3)
        if POOL > 4:
            scatter_row(acc, W_sh, v, cc, py, px, 4)
        if POOL > 5:
            scatter_row(acc, W_sh, v, cc, py, px, 5)

    @cuda.jit
    def fused(x, w, out, pad):
        t = cuda.threadIdx.x
        N = x.shape[0]
        C = x.shape[1]
        H = x.shape[2]
        W = x.shape[3]
        K = w.shape[0]
        PO = out.shape[2]
        QO = out.shape[3]
        k0 = cuda.blockIdx.y * KT
        g = cuda.blockIdx.x * PPB + t
        active = g < N * PO * QO
        n = 0
        ph = 0
        pw = 0
        if active:
            n = g // (PO * QO)
            rem = g - n * (PO * QO)
            ph = rem // QO
            pw = rem - ph * QO
        ih0 = ph * PS * ST - pad
        iw0 = pw * PS * ST - pad
        W_sh = cuda.shared.array((ROWS, WS), float32, alignment=SHARED_ALIGNMENT)
        if SPARSE:
            F_val = cuda.shared.array((ELEMS, PPB), float32)
            F_idx = cuda.shared.array((ELEMS, PPB), int32)
        if SPARSE:
            win = cuda.local.array(WIN, float32)
        if PRELOAD_CHANNEL:
            win = cuda.local.array(PP, float32)
        acc = cuda.local.array(NACC, float32)
        for q in range(NACC):
            acc[q] = ZERO
        for c0 in range(0, C, CC):
            stage_weights(W_sh, w, k0, c0, K, C, t)
            cuda.syncthreads()
            if SPARSE:
                cnt = compress(win, F_val, F_idx, x, n, c0, C, ih0, iw0, H, W, active, t)
                for i in range(cnt):
                    v = F_val[i, t]
                    e = F_idx[i, t]
                    cc = e // PP
                    e2 = e - cc * PP
                    py = e2 // PW
                    scatter(acc, W_sh, v, cc, py, e2 - py * PW)
            elif PRELOAD_CHANNEL:
                for cc in range(CC):
                    load_channel(win, x, n, c0 + cc, C, ih0, iw0, H, W, active)
                    if active:
                        for py in range(PH):
                            for px in range(PW):
                                scatter(acc, W_sh, win[py * PW + px], cc, py, px)
            else:
                if active:
                    for cc in range(CC):
                        for py in range(PH):
                            ih = ih0 + py
                            for px in range(PW):
                                iw = iw0 + px
                                v = ZERO
                                if c0 + cc < C and ih >= 0 and ih < H and iw >= 0 and iw < W:
                                    v = x[n, c0 + cc, ih, iw]
                                scatter(acc, W_sh, v, cc, py, px)
            cuda.syncthreads()
        if active:
            # ReLU and max-pool in registers (acc[kk] becomes max(0, max_q acc), the result), then the stores; two short
            # loops rather than one that reduces and stores, which LLVM would not unroll for pool 3.
            for kk in range(KT):
                m = ZERO
                for q in range(POOL * POOL):
                    a = acc[q * KT + kk]
                    if a > m:  # noqa: PLR1730  (a compare and select; max() is an fmaxf call, which blocks the unroll)
                        m = a
                acc[kk] = m
            store8(out, acc, KT, 0, n, k0, K, ph, pw)

    fused.shared_bytes = fused_shared_bytes(SPARSE, KT, CC, R, S, ST, POOL)
    fused.config = {"kind": key[0], "k_tile": KT, "c_chunk": CC, "r": R, "s": S, "stride": ST, "pool": POOL,
                    "pool_stride": PS, "weight_rows": ROWS, "compressed_rows": ELEMS if SPARSE else 0}
    _FUSED[key] = fused
    return fused


@cuda.jit
def relu_kernel(y, out):
    """out[i] = max(y[i], 0) over flat C-contiguous 1-D views; one thread per element,
    ``ELEMENTWISE_THREADS`` per block, grid ceil(size / 256). No shared memory."""
    i = cuda.grid(1)
    if i < y.shape[0]:
        out[i] = max(y[i], ZERO)


def maxpool_kernel(pool: int, pool_stride: int):
    """Max-pool (floor mode, no padding) of y (N, K, P, Q) into out (N, K, PO, QO) (cached): one thread
    per output of the flattened (n, k, ph, pw) index, 256 per block; the thread reads its
    pool x pool window y[n, k, ph*pool_stride + dy, pw*pool_stride + dx]. No shared memory."""
    key = (pool, pool_stride)
    if key in _POOL:
        return _POOL[key]
    POOL = pool
    PS = pool_stride

    @cuda.jit
    def maxpool(y, out):
        i = cuda.grid(1)
        K = out.shape[1]
        PO = out.shape[2]
        QO = out.shape[3]
        if i < out.shape[0] * K * PO * QO:
            pw = i % QO
            rest = i // QO
            ph = rest % PO
            rest = rest // PO
            k = rest % K
            n = rest // K
            h0 = ph * PS
            w0 = pw * PS
            m = y[n, k, h0, w0]
            for dy in range(POOL):
                for dx in range(POOL):
                    m = max(m, y[n, k, h0 + dy, w0 + dx])
            out[n, k, ph, pw] = m

    _POOL[key] = maxpool
    return maxpool
