"""The four Winograd task device functions: one call runs one TaskGraph task on one thread block.

They follow megasim.algorithms.winograd.lowering (the source of truth for what a task covers) and the paper's
Sec. 2 and 4. Every function takes the task's (group, index), the int32 parameter array ``prm``
(layout: the ``P_*`` constants below, filled by ``gpu.runtime.executor.pack_params``) and the tensors it
touches. Tensor layouts (all float32, C-contiguous):

- ``x``  (N, H, W, C)        input, NHWC
- ``w``  (K, C, 3, 3)        weights, KCRS
- ``U``  (alpha^2, C, K)     transformed filters, k fastest
- ``V``  (alpha^2, tiles, C) transformed inputs, channel fastest (tiles in global raster order)
- ``M``  (alpha^2, tiles, K) GEMM products, k fastest
- ``Y``  (N, P, Q, K)        output, NHWK

Consecutive threads take consecutive channels (itrans) or consecutive k (ftrans, otrans), so the
x, V, M, U and Y accesses of a warp are contiguous (coalesced); only ftrans's 9 weight reads are
strided (a small, one-off tensor).

The GEMM stages its operands through dynamic shared memory (``gemm_shared_bytes`` bytes). Configs
listed in ``_FAST`` (t = 32 and t = 64 with gemm_k_tile 64, k-step 16, 128 threads) run a
compile-time specialised path with an 8 x 8 register tile per thread, 128-bit shared fragments, B
by cp.async copies into a 4-stage ring and A through registers (``gpu.kernels.winograd.gemm_vec.make_gemm_staged``,
staging "a", 4 stages: it fits 128 registers); any other
config runs ``gemm_generic`` (runtime sizes, 4 x 4 register tile, double buffered). With the GEMM math
"3xtf32" (a WinogradConfig's ``gemm_math``; ``gemm_task_for``) the two specialised configs run
``gpu.kernels.winograd.gemm_tc`` instead: tensor cores, FP32-accurate by the 3xTF32 split. A device function may return
early only where noted; a GEMM task calls ``cuda.syncthreads()``, so every thread of the block must
call it (the megakernel does).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from gpu.kernels.winograd.gemm_tc import make_gemm_tc
from gpu.kernels.winograd.gemm_vec import make_gemm_staged
from gpu.kernels.winograd.transforms import pair_functions
from megasim.algorithms.winograd.lowering import GEMM_MATHS, OWN_COST_TILES

# Kind ids: the position in megasim.algorithms.winograd.lowering.KINDS.
FTRANS, ITRANS, GEMM, OTRANS = 0, 1, 2, 3

# Layout of the int32 parameter array.
P_N, P_H, P_W, P_C, P_K, P_P, P_Q, P_PAD = 0, 1, 2, 3, 4, 5, 6, 7
P_M, P_T, P_TILES, P_TILES_Y, P_TILES_X, P_KTILES, P_GK, P_KSTEP = 8, 9, 10, 11, 12, 13, 14, 15
P_TTHR, P_GTHR, P_TPAIRS = 16, 17, 18
NUM_PARAMS = 19

# GEMM register tile per thread (rows x columns of the product).
TILE_R = 4
TILE_C = 4
TILE_RC = 16                  # TILE_R * TILE_C, spelled out: local array sizes must be literals
ZERO = np.float32(0.0)


def gemm_shared_bytes(t: int, gemm_k_tile: int, k_step: int, gemm_threads: int | None = None,
                      gemm_math: str = "fp32") -> int:
    """Dynamic shared memory of a GEMM task. Generic path: two stages of A (k_step x t) and B
    (k_step x width), rows and columns padded up to its register tile. A config with a specialised
    path (``fast_gemm_for``): that path's bytes in ``gemm_math`` (its operand ring, or the k-split
    hand-off if larger); with gemm_threads None, the larger of all candidates."""
    tp = -(-t // TILE_R) * TILE_R
    gp = -(-gemm_k_tile // TILE_C) * TILE_C
    generic = 2 * k_step * (tp + gp) * 4
    if gemm_threads is None:
        return max([generic] + [f.shared_bytes for k, f in _FAST_BY_MATH[gemm_math].items()
                                if k[:3] == (t, gemm_k_tile, k_step)])
    fast = fast_gemm_for(t, gemm_k_tile, k_step, gemm_threads, gemm_math)
    return fast.shared_bytes if fast is not None else generic


@cuda.jit(device=True)
def _tile_coords(tile, prm):
    """(image, tile row, tile column) of a global tile index (tiles are numbered in raster order)."""
    per_image = prm[P_TILES_Y] * prm[P_TILES_X]
    n = tile // per_image
    r = tile - n * per_image
    ty = r // prm[P_TILES_X]
    return n, ty, r - ty * prm[P_TILES_X]


# Opaque strides (``make_transform_tasks(..., opaque=True)``: the F(2x2) and F(4x4) transforms' ``*_opaque`` forms,
# ``gpu.kernels.winograd.transforms``) in the non-fused transform kernels only (gpu.kernels.winograd.megakernel's
# ``_build_transform_kernels``), not in the megakernels; F(5x5), F(6x6) and F(7x7) take them always. One device call
# on the H200 (experiments/results/nvidia-h200/f6x6/call1_*): opaque everywhere made the non-fused pipeline 2.5%
# faster (1.007-1.047x per layer; the input transform's integer instructions 594 -> 393) and the fused best 0.9%
# slower (the megakernel's spills 44 -> 8 bytes, yet slower).
# The tiles that only builds of their own compile (``make_transform_tasks(m)``; gpu.kernels.winograd.megakernel.OWN_BUILD_TILES): the
# lowering's OWN_COST_TILES, whose costs it names apart because their code is these builds' (one list for both).
BIG_TILES = OWN_COST_TILES


def make_transform_tasks(M_FIXED: int = 0, opaque: bool = False):
    """(ftrans_task, itrans_task, otrans_task) device functions. ``M_FIXED`` 0: the output tile m
    is read from ``prm`` at run time (F(4x4) and F(2x2) compiled in); 2, 4, 5, 6 or 7: only that tile size is
    compiled (``gpu.kernels.winograd.megakernel``'s specialised build: 4; its F(5x5), F(6x6) and F(7x7) builds: 5, 6, 7). ``opaque``: the
    F(2x2) and F(4x4) functions' ``*_opaque`` forms.

    F(5x5) and F(6x6) have builds of their own because their input transforms hold a 7 x 7 and an 8 x 8 product:
    compiled into the general build (before their code was streamed with opaque strides), F(6x6) took the
    non-fused input-transform kernel from 72 to 208 registers (fewer blocks per SM for every tile size) and the
    megakernel's spills from 44 to 620 bytes (ptxas, sm_90)."""

    f_m2, i_m2, o_m2 = pair_functions(2, opaque)
    f_m4, i_m4, o_m4 = pair_functions(4, opaque)
    BIG = M_FIXED in BIG_TILES          # a build of one big tile alone (the m4 functions stand in otherwise)
    f_big, i_big, o_big = pair_functions(M_FIXED if BIG else 4, opaque)

    @cuda.jit(device=True)
    def ftrans_task(kt, f, prm, w, U):
        """Filter transform (FTrans, Sec. 2.1) of k-tile kt, task f, which covers pairs [f * P, (f + 1) * P)
        of the k-tile (P = transform_threads * transform_pairs_per_thread; c-major, kk fastest): thread
        i < transform_threads transforms pairs f * P + r * transform_threads + i, r = 0, 1, ... (so a warp's
        pairs are consecutive in every round); the other threads of the block return at once. No shared
        memory, no barrier."""
        tid = cuda.threadIdx.x
        thr = prm[P_TTHR]
        if tid >= thr:
            return
        gk = prm[P_GK]
        width = min(gk, prm[P_K] - kt * gk)
        npairs = prm[P_C] * width
        rounds = prm[P_TPAIRS]
        for r in range(rounds):
            p = (f * rounds + r) * thr + tid
            if p < npairs:
                c = p // width
                k = kt * gk + (p - c * width)
                if BIG:
                    f_big(w, U, k, c)
                elif (prm[P_M] if M_FIXED == 0 else M_FIXED) == 4:
                    f_m4(w, U, k, c)
                else:
                    f_m2(w, U, k, c)

    @cuda.jit(device=True)
    def itrans_task(g, s, prm, x, V):
        """Input transform (ITrans, Sec. 2.1 and 2.3) of group g, task s, which covers (tile, channel)
        pairs [s * P, (s + 1) * P) of the group (P = transform_threads * transform_pairs_per_thread;
        channel fastest): thread i < transform_threads transforms pairs s * P + r * transform_threads + i,
        r = 0, 1, ... (a warp reads 32 consecutive channels of one pixel in every round); the other
        threads return at once. No shared memory, no barrier."""
        tid = cuda.threadIdx.x
        thr = prm[P_TTHR]
        if tid >= thr:
            return
        t = prm[P_T]
        C = prm[P_C]
        m = prm[P_M] if M_FIXED == 0 else M_FIXED
        npairs = min(t, prm[P_TILES] - g * t) * C
        rounds = prm[P_TPAIRS]
        for r in range(rounds):
            p = (s * rounds + r) * thr + tid
            if p < npairs:
                tl = p // C
                c = p - tl * C
                tile = g * t + tl
                n, ty, tx = _tile_coords(tile, prm)
                y0 = m * ty - prm[P_PAD]
                x0 = m * tx - prm[P_PAD]
                if BIG:
                    i_big(x, V, n, y0, x0, c, tile, prm[P_H], prm[P_W])
                elif m == 4:
                    i_m4(x, V, n, y0, x0, c, tile, prm[P_H], prm[P_W])
                else:
                    i_m2(x, V, n, y0, x0, c, tile, prm[P_H], prm[P_W])


    @cuda.jit(device=True)
    def otrans_task(g, s, prm, M, Y):
        """Output transform (OTrans, Sec. 2.1) of group g, task s, which covers (tile, k) pairs
        [s * P, (s + 1) * P) of the group (P = transform_threads * transform_pairs_per_thread; k fastest):
        thread i < transform_threads inverse-transforms pairs s * P + r * transform_threads + i,
        r = 0, 1, ..., writing the m x m outputs that lie inside the P x Q image; the other threads return
        at once. No shared memory, no barrier."""
        tid = cuda.threadIdx.x
        thr = prm[P_TTHR]
        if tid >= thr:
            return
        t = prm[P_T]
        K = prm[P_K]
        m = prm[P_M] if M_FIXED == 0 else M_FIXED
        npairs = min(t, prm[P_TILES] - g * t) * K
        rounds = prm[P_TPAIRS]
        for r in range(rounds):
            q = (s * rounds + r) * thr + tid
            if q < npairs:
                tl = q // K
                k = q - tl * K
                tile = g * t + tl
                n, ty, tx = _tile_coords(tile, prm)
                if BIG:
                    o_big(M, Y, n, m * ty, m * tx, tile, k, prm[P_P], prm[P_Q])
                elif m == 4:
                    o_m4(M, Y, n, m * ty, m * tx, tile, k, prm[P_P], prm[P_Q])
                else:
                    o_m2(M, Y, n, m * ty, m * tx, tile, k, prm[P_P], prm[P_Q])
    return ftrans_task, itrans_task, otrans_task


# The general build's tasks as the megakernels run them, strides not opaque (the non-fused kernels:
# gpu.kernels.winograd.megakernel.transform_kernels_for).
ftrans_task, itrans_task, otrans_task = make_transform_tasks()


@cuda.jit(device=True)
def _gemm_load_stage(smem, a_off, b_off, V, U, e, row0, rows, col0, width, c0, C, ks, tp, gp):
    """Stage the C-slice [c0, c0 + ks) of A = V[e, row0:row0+rows, :] (as As[kk, r]) and of
    B = U[e, :, col0:col0+width] (as Bs[kk, n]) into shared memory, zero-padded. Block-strided:
    A is read with kk fastest, B with n fastest, so global reads are contiguous per row."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    for idx in range(tid, tp * ks, nthr):
        r = idx // ks
        kk = idx - r * ks
        c = c0 + kk
        v = ZERO
        if r < rows and c < C:
            v = V[e, row0 + r, c]
        smem[a_off + kk * tp + r] = v
    for idx in range(tid, ks * gp, nthr):
        kk = idx // gp
        nn = idx - kk * gp
        c = c0 + kk
        v = ZERO
        if nn < width and c < C:
            v = U[e, c, col0 + nn]
        smem[b_off + idx] = v


@cuda.jit(device=True)
def gemm_generic(g, j, prm, V, U, M):
    """The generic GEMM task (any t, gemm_k_tile, gemm_k_step, block size): see ``gemm_task``."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    C = prm[P_C]
    t = prm[P_T]
    gk = prm[P_GK]
    ks = prm[P_KSTEP]
    kts = prm[P_KTILES]
    e = j // kts
    kt = j - e * kts
    row0 = g * t
    rows = min(t, prm[P_TILES] - row0)
    col0 = kt * gk
    width = min(gk, prm[P_K] - col0)
    mtr = (t + TILE_R - 1) // TILE_R
    mtc = (gk + TILE_C - 1) // TILE_C
    tp = mtr * TILE_R
    gp = mtc * TILE_C
    smem = cuda.shared.array(0, float32)
    acc = cuda.local.array(TILE_RC, float32)
    av = cuda.local.array(TILE_R, float32)
    bv = cuda.local.array(TILE_C, float32)
    nsteps = (C + ks - 1) // ks
    ntile = mtr * mtc
    b_base = 2 * ks * tp
    for base in range(0, ntile, nthr):
        q = base + tid
        rt = q // mtc
        ct = q - rt * mtc
        for i in range(TILE_RC):
            acc[i] = ZERO
        _gemm_load_stage(smem, 0, b_base, V, U, e, row0, rows, col0, width, 0, C, ks, tp, gp)
        cuda.syncthreads()
        for s in range(nsteps):
            buf = s & 1
            if s + 1 < nsteps:  # the other buffer: last read in step s-1, which ended with a sync
                nb = 1 - buf
                _gemm_load_stage(smem, nb * ks * tp, b_base + nb * ks * gp, V, U, e, row0, rows, col0,
                                 width, (s + 1) * ks, C, ks, tp, gp)
            if q < ntile:
                a_off = buf * ks * tp + rt * TILE_R
                b_off = b_base + buf * ks * gp + ct * TILE_C
                for kk in range(ks):
                    for i in range(TILE_R):
                        av[i] = smem[a_off + kk * tp + i]
                    for jj in range(TILE_C):
                        bv[jj] = smem[b_off + kk * gp + jj]
                    for i in range(TILE_R):
                        for jj in range(TILE_C):
                            acc[i * TILE_C + jj] += av[i] * bv[jj]
            cuda.syncthreads()
        if q < ntile:
            for i in range(TILE_R):
                r = rt * TILE_R + i
                if r < rows:
                    for jj in range(TILE_C):
                        nn = ct * TILE_C + jj
                        if nn < width:
                            M[e, row0 + r, col0 + nn] = acc[i * TILE_C + jj]


# The compile-time specialised GEMMs. gemm_task runs gemm_fast_a / gemm_fast_b for those configs and
# gemm_generic for any other. (The scalar-fragment make_gemm_fast, 28% of cuBLAS, is in git history
# before commit 4aae690; the register-staged make_gemm_vec stays in gpu.kernels.winograd.gemm_vec for the benchmark.)
# The specialised paths: (T, GK, KS, NT, SK, staging, stages) of ``make_gemm_staged``: B reaches shared
# memory by cp.async into a 4-deep ring, A through registers (two buffers), 16 k per stage ("a4"). Alone, "c3"
# (both operands by cp.async) was a point faster at 64-bit indices (gpu/diagnostics/bench_gemm.py on the H200:
# 76.7% of cuBLAS against 75.6%), but needed ~167 registers; "a4" fits the 128 that let 4 blocks of 128 threads
# share an SM, which made the best fused mappings 6-14% faster on four layers and the non-fused GEMM kernel no
# slower (docs/findings.md; experiments/results/nvidia-h200/register_cap/). At
# 32-bit indices the other stagings measured alone stay at or below the default (c3 83.2%, a 3-deep ring 82.5%,
# against 85.0%; h200_gemm/index32/ (in git at 871d7d7)). make_gemm_staged keeps the other stagings
# (``staging``, ``stages``) for gpu.diagnostics.bench_gemm's variants.
FAST_A = (32, 64, 16, 128, 4, "a", 4)
FAST_B = (64, 64, 16, 128, 2, "a", 4)
# The t = 64 path's k-steps and index arithmetic (make_gemm_staged's ``unroll`` and ``index_bits``): 2 k-steps
# per loop pass, 32-bit indices. The GEMM is issue-bound on instructions other than FFMA (ncu: 83% of cycles
# issue, 60% of what issues is FFMA); writing a stage's k-steps out removes the rolled loop's counter, but at
# 64-bit index arithmetic (Numba types every integer operation int64) the 128-register kernels that compile every
# path spilled (gemm_kernel 24 -> 116 bytes, megakernel 68 -> 144; non-fused 3.9% slower). With its indices in
# int32 (0 B spilled in gemm_kernel at 1, 4 B at 2; megakernel 68 -> 36 / 44 B), H200, one device call
# (h200_gemm/index32/ (in git at 871d7d7)):
#   unroll 1, 64-bit: gemm_kernel 77.3% of cuBLAS; the A/B's reference;
#   unroll 1, 32-bit: 79.0% (both paths 32-bit); fused best and non-fused 0.5% / 0.9% slower;
#   unroll 2, 32-bit: 84.9%; fused best 5.9% faster, non-fused 6.9% faster (adopted);
#   unroll 4, 32-bit: spills 108 B (gemm_kernel) / 140 B (megakernel); not timed there. Alone (one path
#   compiled, bench_gemm's variants): 83.6% at 2, 84.6% at 4, 84.5% at 8.
_UNROLL_B = 2
_INDEX_BITS_B = 32
# The t = 32 path: rolled, 64-bit indices. Alone it measured 64.9% of cuBLAS at 64 bits, 61.9% at 32. At 32 bits
# and 2 k-steps (H200, one call, index32/call4_t32/): that path's gemm_kernel 59.4% -> 65.4% of cuBLAS and
# the non-fused pipeline at t = 32 7.1% faster, but the kernels spill more (megakernel 44 -> 64 B, gemm_kernel
# 4 -> 24 B): the fused best 0.4% slower at t = 32 and 1.3% slower at the default t = 64. So 1 and 64.
_UNROLL_A = 1
_INDEX_BITS_A = 64
# The GEMM maths (megasim.algorithms.winograd.lowering.GEMM_MATHS): "fp32" runs the two configs above on the FP32 pipe;
# "3xtf32" (issue #3) runs them on tensor cores, FP32-accurate by the 3xTF32 split (gpu.kernels.winograd.gemm_tc:
# 3-stage cp.async ring, the truncating split, 1.2x the "rna" split's speed in bench_gemm on the H200).
# Each math has its own gemm_task and so its own compiled GEMM kernel and megakernels
# (gpu.kernels.winograd.megakernel.kernels_for): a WinogradConfig's gemm_math picks them per call.
_FAST_BY_MATH = {
    "fp32": {FAST_A[:4]: make_gemm_staged(*FAST_A, unroll=_UNROLL_A, index_bits=_INDEX_BITS_A),
             FAST_B[:4]: make_gemm_staged(*FAST_B, unroll=_UNROLL_B, index_bits=_INDEX_BITS_B)},
    "3xtf32": {FAST_A[:4]: make_gemm_tc(*FAST_A[:4], stages=3, split="trunc"),
               FAST_B[:4]: make_gemm_tc(*FAST_B[:4], stages=3, split="trunc")},
}
_A_T, _A_GK, _A_KS, _A_NT = FAST_A[:4]
_B_T, _B_GK, _B_KS, _B_NT = FAST_B[:4]


def fast_gemm_for(t: int, gemm_k_tile: int, k_step: int, gemm_threads: int, gemm_math: str = "fp32"):
    """The specialised GEMM device function ``gemm_task_for(gemm_math)`` runs for this config, or None
    (generic)."""
    return _FAST_BY_MATH[gemm_math].get((t, gemm_k_tile, k_step, gemm_threads))


def _make_gemm_task(gemm_fast_a, gemm_fast_b, only_b: bool = False):
    ONLY_B = only_b

    @cuda.jit(device=True)
    def gemm_task(g, j, prm, V, U, M):
        """GEMM task j = e * k_tiles + kt of group g (the batched GEMM of Sec. 2.2): M[e, rows of g,
        kt columns] = V[e, rows, :C] @ U[e, :C, kt columns].

        The two specialised configs run their math's function (compile-time tile sizes, 8 x 8 register
        tile per thread, a cp.async ring; the first gemm_threads threads compute), any other config runs
        ``gemm_generic``. All stage operands through dynamic shared memory (``gemm_shared_bytes``) and
        call ``cuda.syncthreads()``, so every thread of the block must call this (the megakernel does).
        ``only_b``: the second config's function alone, no dispatch (``gemm_task_for(..., only_b=True)``).
        """
        if ONLY_B:
            gemm_fast_b(g, j, prm, V, U, M)
            return
        t = prm[P_T]
        gk = prm[P_GK]
        ks = prm[P_KSTEP]
        nt = prm[P_GTHR]
        if t == _A_T and gk == _A_GK and ks == _A_KS and nt == _A_NT:
            gemm_fast_a(g, j, prm, V, U, M)
        elif t == _B_T and gk == _B_GK and ks == _B_KS and nt == _B_NT:
            gemm_fast_b(g, j, prm, V, U, M)
        else:
            gemm_generic(g, j, prm, V, U, M)
    return gemm_task


_GEMM_TASKS = {(math, only_b): _make_gemm_task(fast[FAST_A[:4]], fast[FAST_B[:4]], only_b)
               for math, fast in _FAST_BY_MATH.items() for only_b in (False, True)}


def gemm_task_for(gemm_math: str, only_b: bool = False):
    """The GEMM task device function ``gemm_task(g, j, prm, V, U, M)`` of a GEMM math (one of GEMM_MATHS);
    ``only_b``: the t = 64 specialised path alone (FAST_B), for a launch that runs nothing else."""
    try:
        return _GEMM_TASKS[(gemm_math, bool(only_b))]
    except KeyError:
        raise ValueError(f"gemm_math={gemm_math!r} is not allowed: it must be one of {GEMM_MATHS}") from None
