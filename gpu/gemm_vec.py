"""The GEMM task with 128-bit shared-memory fragments: one task computes M[e, T rows, GK columns].

Same contract as ``gpu.winograd_device.make_gemm_fast`` (a task is V[e, rows of group g, :C] @
U[e, :C, k-tile columns], staged through dynamic shared memory, all block threads call it), with the
inner loop rebuilt after the PTX of that kernel showed ~100 integer instructions per 64 FMAs
(docs/notes.md, "GEMM tuning"):

- each thread owns an 8 x 8 register tile made of four 4 x 4 quadrants: rows ``ty*4 + [0, 4)`` and
  ``T/2 + ty*4 + [0, 4)``, columns ``tx*4 + [0, 4)`` and ``GK/2 + tx*4 + [0, 4)``; per k it reads two
  4-float A fragments and two 4-float B fragments with ``load4`` (LDS.128, no wrap-around index code):
  4 shared loads per 64 FMAs instead of 16;
- a warp's fragment reads touch 8 distinct B addresses (128 contiguous bytes) and 4 distinct A
  addresses (broadcast): no bank conflicts;
- A is staged transposed, As[kk, r] with row stride AS = T + 4 (a multiple of 4 for the vector reads;
  the +4 spreads a warp's kk-fastest scalar stores over 32 banks for KS = 8), B as Bs[kk, n] (stride GK);
- SK > 1 splits the k-steps of a stage between SK thread sets (set q takes kk = q, q + SK, ...), so
  NT = SK * (T / 8) * (GK / 8); sets 1..SK-1 hand their sums to set 0 through shared memory at the end;
- software pipelined: the next stage's global loads go to registers before this stage's FMAs and to
  the other shared buffer after them, one barrier per stage;
- edges (rows < T, width < GK, C not a multiple of KS) are zero-filled in the stage loads only;
- global and staging accesses use flat indices (``gpu.vector_access``: no per-dimension wrap-around or
  stride multiply), full column quads of M are written with one 128-bit store, and the k-split
  hand-off moves 4-float groups.

Every size is a compile-time constant, so the loops unroll and the accumulators stay in registers.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from gpu.vector_access import SHARED_ALIGNMENT, load1, load4, store1, store4

ZERO = np.float32(0.0)
# Indices of the int32 parameter array (gpu.winograd_device's P_* layout; repeated here to avoid an
# import cycle, checked equal by a test).
_P_C, _P_K, _P_TILES, _P_KTILES = 3, 4, 10, 13


def gemm_vec_shared_bytes(T: int, GK: int, KS: int, NT: int, SK: int) -> int:
    """Dynamic shared memory of ``make_gemm_vec(T, GK, KS, NT, SK)``: two stages of A and B, or the
    k-split hand-off if larger."""
    AS = T + 4
    P = NT // SK
    return 4 * max(2 * KS * AS + 2 * KS * GK, (SK - 1) * 64 * P)


def make_gemm_vec(T: int, GK: int, KS: int, NT: int, SK: int):
    """A GEMM task device function ``gemm(g, j, prm, V, U, M)`` for t = T rows, gemm_k_tile = GK
    columns, gemm_k_step = KS, NT threads, k-split SK (see the module docstring). Raises ValueError
    for a layout it cannot tile."""
    TX = GK // 8
    TY = T // 8
    P = TX * TY
    if (T % 8 or GK % 8 or P * SK != NT or KS % SK or (T * KS) % NT or (KS * GK) % NT or NT > 1024):
        raise ValueError(f"no vector GEMM layout for T={T}, GK={GK}, KS={KS}, NT={NT}, SK={SK} "
                         f"(want T, GK multiples of 8, NT = SK * T/8 * GK/8, KS a multiple of SK, "
                         f"T*KS and KS*GK multiples of NT)")
    KQ = KS // SK
    AS = T + 4
    A_ST = KS * AS
    B_ST = KS * GK
    B0 = 2 * A_ST
    HALF_R = T // 2
    HALF_C = GK // 2
    LA = T * KS // NT
    LB = KS * GK // NT

    @cuda.jit(device=True)
    def stage_to_registers(ra, rb, V, U, tid, active, v_base, u_base, rows, width, c, C, K):
        """The C-slice [c, c + KS) of this task's A rows and B columns into registers (zero-padded)."""
        for ll in range(LA):
            idx = tid + ll * NT
            r = idx // KS
            kk = idx - r * KS
            v = ZERO
            if active and r < rows and c + kk < C:
                v = load1(V, v_base + r * C + c + kk)
            ra[ll] = v
        for ll in range(LB):
            idx = tid + ll * NT
            kk = idx // GK
            nn = idx - kk * GK
            v = ZERO
            if active and nn < width and c + kk < C:
                v = load1(U, u_base + (c + kk) * K + nn)
            rb[ll] = v

    @cuda.jit(device=True)
    def registers_to_stage(smem, ra, rb, tid, buf):
        """Registers into stage buffer ``buf``: As[kk, r] (transposed) and Bs[kk, n]."""
        for ll in range(LA):
            idx = tid + ll * NT
            r = idx // KS
            kk = idx - r * KS
            store1(smem, buf * A_ST + kk * AS + r, ra[ll])
        for ll in range(LB):
            store1(smem, B0 + buf * B_ST + tid + ll * NT, rb[ll])

    @cuda.jit(device=True)
    def gemm_vec(g, j, prm, V, U, M):
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
        smem = cuda.shared.array(0, float32, alignment=SHARED_ALIGNMENT)
        acc = cuda.local.array(64, float32)
        ra = cuda.local.array(LA, float32)
        rb = cuda.local.array(LB, float32)
        active = tid < NT
        sub = tid // P
        lt = tid - sub * P
        tx = lt % TX
        ty = lt // TX
        for q in range(64):
            acc[q] = ZERO
        stage_to_registers(ra, rb, V, U, tid, active, v_base, u_base, rows, width, 0, C, K)
        if active:
            registers_to_stage(smem, ra, rb, tid, 0)
        cuda.syncthreads()
        a_thr = sub * AS + ty * 4
        b_thr = B0 + sub * GK + tx * 4
        for s in range(nsteps):
            buf = s & 1
            more = s + 1 < nsteps
            if more:  # next stage's global loads, in flight during the FMAs below
                stage_to_registers(ra, rb, V, U, tid, active, v_base, u_base, rows, width, (s + 1) * KS, C, K)
            if active:
                pa = a_thr + buf * A_ST
                pb = b_thr + buf * B_ST
                for kq in range(KQ):
                    a0, a1, a2, a3 = load4(smem, pa + kq * (SK * AS))
                    a4, a5, a6, a7 = load4(smem, pa + kq * (SK * AS) + HALF_R)
                    b0, b1, b2, b3 = load4(smem, pb + kq * (SK * GK))
                    b4, b5, b6, b7 = load4(smem, pb + kq * (SK * GK) + HALF_C)
                    av = (a0, a1, a2, a3, a4, a5, a6, a7)
                    bv = (b0, b1, b2, b3, b4, b5, b6, b7)
                    for i in range(8):
                        for jj in range(8):
                            acc[i * 8 + jj] += av[i] * bv[jj]
            if more and active:  # the other buffer: last read in step s-1, which ended with a sync
                registers_to_stage(smem, ra, rb, tid, 1 - buf)
            cuda.syncthreads()
        if SK > 1:  # sets 1..SK-1 hand their sums to set 0 (the stages are free: last sync above);
            # 4-float groups, thread-fastest: a warp's 128-bit stores and loads are contiguous
            if active and sub > 0:
                for q4 in range(16):
                    store4(smem, (((sub - 1) * 16 + q4) * P + lt) * 4, acc[4 * q4], acc[4 * q4 + 1],
                           acc[4 * q4 + 2], acc[4 * q4 + 3])
            cuda.syncthreads()
            if active and sub == 0:
                for q2 in range(SK - 1):
                    for q4 in range(16):
                        h0, h1, h2, h3 = load4(smem, ((q2 * 16 + q4) * P + lt) * 4)
                        acc[4 * q4] += h0
                        acc[4 * q4 + 1] += h1
                        acc[4 * q4 + 2] += h2
                        acc[4 * q4 + 3] += h3
        if active and sub == 0:
            m_base = (e * tiles + row0) * K + col0   # flat index of M[e, row0, col0]
            full = width == GK and K % 4 == 0          # every column quad inside and 16-byte aligned
            for i in range(8):
                r = ty * 4 + (i & 3) + (i >> 2) * HALF_R
                if r < rows:
                    for h in range(2):
                        n0 = tx * 4 + h * HALF_C
                        q = i * 8 + h * 4
                        if full:
                            store4(M, m_base + r * K + n0, acc[q], acc[q + 1], acc[q + 2], acc[q + 3])
                        else:
                            for jj in range(4):
                                if n0 + jj < width:
                                    store1(M, m_base + r * K + n0 + jj, acc[q + jj])

    gemm_vec.shared_bytes = gemm_vec_shared_bytes(T, GK, KS, NT, SK)
    gemm_vec.layout = dict(T=T, GK=GK, KS=KS, NT=NT, SK=SK, vector=True)
    return gemm_vec
