"""The GEMM task on tensor cores, FP32-accurate by the 3xTF32 split (``gpu.kernels.common.tensor_core``).

Same contract as ``gpu.kernels.winograd.gemm_vec.make_gemm_staged``: one call computes the task's
M[e, T rows of group g, GK columns of k-tile kt] = V[e, rows, :C] @ U[e, :C, columns], staging its operands
through dynamic shared memory (``shared_bytes``); every thread of the block calls it, the first NT compute.

- The NT / 32 warps tile the T x GK product as a WM x WN grid; a warp's (T / WM) x (GK / WN) piece is
  MT x NN MMA tiles of 16 x 8, its accumulators 4 floats per tile per lane (``gpu.kernels.common.tensor_core``'s C
  fragment).
- Per 8 k, a lane reads its A fragments (4 floats per m-tile) and B fragments (2 per n-tile) from shared
  memory, splits each into TF32 (big, small) once, and issues 3 MMAs per tile: small x big, big x small,
  big x big (the small products first, into the same accumulator). ``split="trunc"`` (what the
  GEMM math "3xtf32" runs) splits with an ``and`` and a ``sub``; "rna" with two ``cvt.rna``,
  which on the H200 made the GEMM 1.2x slower (the conversions' pipe, not the MMAs, was the limit).
- Measured (H200, ``gpu.diagnostics.bench_gemm --tc-variants 64x64x16x128x3t``;
  nvidia-h200/gemm_3xtf32/variants/ (in git at 871d7d7)): 116-117% of cuBLAS FP32
  SGEMM on the 13 Table-2 GEMM phases (geometric mean; 99-132%), rel err <= 4e-6 against float64 (the
  FP32-pipe kernels: <= 3e-7; the tensor cores' FP32 accumulation rounds less carefully). Tried and not
  kept: bigger block tiles (128 x 64, 64 x 128, 128 x 128: slower), KS 24 / 32 (slower), a pass-major MMA
  order (slower), 64-bit paired-k fragment loads (no faster).
- Staging: both operands by ``cp.async`` into a ring of ``stages`` slots (as ``make_gemm_staged``'s "c"):
  A as it lies, As[r, kk] with row stride KS + 4, B as Bs[kk, n] with row stride GK + 8. Those strides put
  a warp's fragment reads (A: rows g, columns q; B: rows q, columns g) on 32 distinct banks. Edges
  (rows past the group, columns past K, channels past C) are zero-filled by the copies; C % 4 or K % 4
  not 0 falls back to 4-byte copies.
- The epilogue writes each lane's accumulators (two adjacent columns per row) to M, edges masked.

Layout rules (``ValueError`` otherwise): NT a multiple of 32 with NT / 32 = WM * WN, T a multiple of 16 WM,
GK of 8 WN, KS of 8.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32

from gpu.kernels.common.async_copy import cp_async4, cp_async16, cp_async_commit, cp_async_wait_group
from gpu.kernels.common.tensor_core import mma_tf32, split_tf32, split_tf32_trunc
from gpu.kernels.common.vector_access import SHARED_ALIGNMENT, load1, store1

ZERO = np.float32(0.0)
# gpu.kernels.winograd.device's P_* indices (repeated to avoid an import cycle; a test checks them equal).
_P_C, _P_K, _P_TILES, _P_KTILES = 3, 4, 10, 13


def gemm_tc_shared_bytes(T: int, GK: int, KS: int, stages: int) -> int:
    """Dynamic shared memory of ``make_gemm_tc``: ``stages`` slots of A (T x (KS + 4)) and B (KS x (GK + 8))."""
    return 4 * stages * (T * (KS + 4) + KS * (GK + 8))


def warp_grid(T: int, GK: int, NT: int) -> tuple[int, int]:
    """(WM, WN) for NT / 32 warps: the squarest grid whose warp tiles are whole 16 x 8 MMA tiles."""
    nw = NT // 32
    best = None
    for wm in range(1, nw + 1):
        if nw % wm:
            continue
        wn = nw // wm
        if T % (16 * wm) or GK % (8 * wn):
            continue
        score = abs(np.log((T / wm) / (GK / wn)))
        if best is None or score < best[0]:
            best = (score, wm, wn)
    if best is None or NT % 32:
        raise ValueError(f"no tensor-core GEMM layout for T={T}, GK={GK}, NT={NT}: want NT a multiple of 32 "
                         f"and a warp grid WM x WN = NT/32 with T a multiple of 16 WM and GK of 8 WN")
    return best[1], best[2]


SPLITS = ("rna", "trunc")


def make_gemm_tc(T: int, GK: int, KS: int, NT: int, stages: int = 4, split: str = "rna"):
    """A GEMM task device function ``gemm(g, j, prm, V, U, M)`` on tensor cores (module docstring).
    ``split``: "rna" (``gpu.kernels.common.tensor_core.split_tf32``, two conversions) or "trunc" (``split_tf32_trunc``,
    an ``and`` and a ``sub``)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: want one of {SPLITS}")
    if stages not in (2, 3, 4):
        raise ValueError(f"stages={stages}: want 2, 3 or 4")
    if KS % 8 or KS <= 0:
        raise ValueError(f"KS={KS}: want a positive multiple of 8")
    WM, WN = warp_grid(T, GK, NT)
    NS = stages
    MT = T // WM // 16            # MMA tiles per warp, rows
    NN = GK // WN // 8            # ... columns
    NACC = MT * NN * 4
    NAF = 4 * MT                  # A fragment registers per lane (per TF32 half)
    NBF = 2 * NN                  # B ...
    AS2 = KS + 4
    BS = GK + 8
    A_ST = T * AS2
    ST = A_ST + KS * BS           # floats per ring slot
    KQ4 = KS // 4
    GQ = GK // 4
    QA = T * KQ4
    QB = KS * GQ
    LA = -(-QA // NT)
    LB = -(-QB // NT)
    K8 = KS // 8
    wait_ring = cp_async_wait_group(NS - 2)
    wait_all = cp_async_wait_group(0)
    split_op = split_tf32 if split == "rna" else split_tf32_trunc

    @cuda.jit(device=True)
    def issue(smem, V, U, tid, v_base, u_base, rows, width, c, C, K, slot, vec_a, vec_b):
        """cp.async of the C-slice [c, c + KS) of A and B into ring slot ``slot``, zero-filled (not committed)."""
        a0 = slot * ST
        for ll in range(LA):
            idx = tid + ll * NT
            if idx < QA:
                r = idx // KQ4
                kq = idx - r * KQ4
                k0 = c + kq * 4
                d = a0 + r * AS2 + kq * 4
                src = v_base + r * C + k0
                rok = r < rows
                if vec_a:
                    if rok and k0 < C:
                        cp_async16(smem, d, V, src, 16)
                    else:
                        cp_async16(smem, d, V, 0, 0)
                else:
                    for i in range(4):
                        if rok and k0 + i < C:
                            cp_async4(smem, d + i, V, src + i, 4)
                        else:
                            cp_async4(smem, d + i, V, 0, 0)
        b0 = a0 + A_ST
        for ll in range(LB):
            idx = tid + ll * NT
            if idx < QB:
                kk = idx // GQ
                n0 = (idx - kk * GQ) * 4
                d = b0 + kk * BS + n0
                krow = c + kk < C
                src = u_base + (c + kk) * K + n0
                if vec_b:
                    if krow and n0 < width:
                        cp_async16(smem, d, U, src, 16)
                    else:
                        cp_async16(smem, d, U, 0, 0)
                else:
                    for i in range(4):
                        if krow and n0 + i < width:
                            cp_async4(smem, d + i, U, src + i, 4)
                        else:
                            cp_async4(smem, d + i, U, 0, 0)

    @cuda.jit(device=True)
    def mma_stage(acc, smem, pa, pb, ah, al, bh, bl):
        """The MMAs of one ring slot: K8 steps of 8 k (A fragments from ``pa``, B from ``pb``)."""
        for k8 in range(K8):
            for mt in range(MT):
                q = pa + mt * (16 * AS2) + k8 * 8
                ah[4 * mt], al[4 * mt] = split_op(load1(smem, q))
                ah[4 * mt + 1], al[4 * mt + 1] = split_op(load1(smem, q + 8 * AS2))
                ah[4 * mt + 2], al[4 * mt + 2] = split_op(load1(smem, q + 4))
                ah[4 * mt + 3], al[4 * mt + 3] = split_op(load1(smem, q + 8 * AS2 + 4))
            for nn in range(NN):
                q = pb + k8 * (8 * BS) + nn * 8
                bh[2 * nn], bl[2 * nn] = split_op(load1(smem, q))
                bh[2 * nn + 1], bl[2 * nn + 1] = split_op(load1(smem, q + 4 * BS))
            for mt in range(MT):
                for nn in range(NN):
                    o = (mt * NN + nn) * 4
                    a = 4 * mt
                    b = 2 * nn
                    d0, d1, d2, d3 = mma_tf32(al[a], al[a + 1], al[a + 2], al[a + 3], bh[b], bh[b + 1],
                                              acc[o], acc[o + 1], acc[o + 2], acc[o + 3])
                    d0, d1, d2, d3 = mma_tf32(ah[a], ah[a + 1], ah[a + 2], ah[a + 3], bl[b], bl[b + 1],
                                              d0, d1, d2, d3)
                    d0, d1, d2, d3 = mma_tf32(ah[a], ah[a + 1], ah[a + 2], ah[a + 3], bh[b], bh[b + 1],
                                              d0, d1, d2, d3)
                    acc[o] = d0
                    acc[o + 1] = d1
                    acc[o + 2] = d2
                    acc[o + 3] = d3

    @cuda.jit(device=True)
    def gemm_tc(g, j, prm, V, U, M):
        tid = cuda.threadIdx.x
        C = prm[_P_C]
        K = prm[_P_K]
        tiles = prm[_P_TILES]
        kts = prm[_P_KTILES]
        e = j // kts
        kt = j - e * kts
        row0 = g * T
        rows = min(T, tiles - row0)
        col0 = kt * GK
        width = min(GK, K - col0)
        nsteps = (C + KS - 1) // KS
        v_base = (e * tiles + row0) * C          # flat index of V[e, row0, 0]
        u_base = e * C * K + col0                # U[e, 0, col0]
        vec_a = C % 4 == 0                       # A rows 16-byte aligned (device arrays are)
        vec_b = K % 4 == 0
        smem = cuda.shared.array(0, float32, alignment=SHARED_ALIGNMENT)
        acc = cuda.local.array(NACC, float32)
        ah = cuda.local.array(NAF, uint32)
        al = cuda.local.array(NAF, uint32)
        bh = cuda.local.array(NBF, uint32)
        bl = cuda.local.array(NBF, uint32)
        active = tid < NT
        warp = tid // 32
        lane = tid - warp * 32
        gq = lane // 4
        tq = lane - gq * 4
        wm = warp // WN
        wn = warp - wm * WN
        a_lane = (wm * (MT * 16) + gq) * AS2 + tq         # As[row g of the warp's first m-tile, k q]
        b_lane = A_ST + tq * BS + wn * (NN * 8) + gq      # Bs[k q, column g of its first n-tile]
        for q in range(NACC):
            acc[q] = ZERO
        for p in range(NS - 1):                  # prologue: stages 0 .. NS-2
            if active and p < nsteps:
                issue(smem, V, U, tid, v_base, u_base, rows, width, p * KS, C, K, p, vec_a, vec_b)
            cp_async_commit()
        wait_ring()
        cuda.syncthreads()
        slot = 0                                 # ring slot read in this step
        wslot = NS - 1                           # ring slot this step's copies write
        for s in range(nsteps):
            if active and s + NS - 1 < nsteps:   # into the slot last read in step s - 1
                issue(smem, V, U, tid, v_base, u_base, rows, width, (s + NS - 1) * KS, C, K, wslot, vec_a, vec_b)
            cp_async_commit()                    # (an empty group past the end keeps the count)
            if active:
                mma_stage(acc, smem, slot * ST + a_lane, slot * ST + b_lane, ah, al, bh, bl)
            wait_ring()                          # this thread's copies of stage s + 1 have landed
            cuda.syncthreads()                   # ... and everyone's
            slot = slot + 1 if slot + 1 < NS else 0
            wslot = wslot + 1 if wslot + 1 < NS else 0
        wait_all()                               # (only empty groups can be left) before smem reuse
        if active:
            m_base = (e * tiles + row0) * K + col0
            for mt in range(MT):
                for nn in range(NN):
                    o = (mt * NN + nn) * 4
                    r = wm * (MT * 16) + mt * 16 + gq
                    n = wn * (NN * 8) + nn * 8 + 2 * tq
                    for h in range(2):
                        rr = r + 8 * h
                        if rr < rows:
                            if n < width:
                                store1(M, m_base + rr * K + n, acc[o + 2 * h])
                            if n + 1 < width:
                                store1(M, m_base + rr * K + n + 1, acc[o + 2 * h + 1])

    gemm_tc.shared_bytes = gemm_tc_shared_bytes(T, GK, KS, NS)
    gemm_tc.layout = dict(T=T, GK=GK, KS=KS, NT=NT, stages=NS, WM=WM, WN=WN, math="3xtf32", split=split)
    return gemm_tc
