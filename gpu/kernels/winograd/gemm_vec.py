"""The GEMM task with 128-bit shared-memory fragments: one task computes M[e, T rows, GK columns].

Same contract as ``gpu.kernels.winograd.device.make_gemm_fast`` (a task is V[e, rows of group g, :C] @
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
- global and staging accesses use flat indices (``gpu.kernels.common.vector_access``: no per-dimension wrap-around or
  stride multiply), full column quads of M are written with one 128-bit store, and the k-split
  hand-off moves 4-float groups.

Every size is a compile-time constant, so the loops unroll and the accumulators stay in registers.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda, float32, int32, types
from numba.cuda.extending import intrinsic

from gpu.kernels.common.async_copy import cp_async4, cp_async16, cp_async_commit, cp_async_wait_group
from gpu.kernels.common.vector_access import SHARED_ALIGNMENT, load1, load4, store1, store4

ZERO = np.float32(0.0)
# Indices of the int32 parameter array (gpu.kernels.winograd.device's P_* layout; repeated here to avoid an
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


# --- staging experiments (issue #3): bench-only variants of make_gemm_vec ------------------------

STAGINGS = ("v", "a", "c")


def gemm_staged_shared_bytes(T: int, GK: int, KS: int, NT: int, SK: int, staging: str = "v",
                             stages: int = 2, thread_cols: int = 8) -> int:
    """Dynamic shared memory of ``make_gemm_staged``: the A and B stage buffers ("v": 2 + 2, "a": 2
    A + ``stages`` B, "c": ``stages`` of each with A rows of KS + 4), or the k-split hand-off if
    larger (``thread_cols`` * 8 partial sums per thread of sets 1 .. SK-1)."""
    if staging == "c":
        stage = stages * (T * (KS + 4) + KS * GK)
    else:
        stage = 2 * KS * (T + 4) + (stages if staging == "a" else 2) * KS * GK
    return 4 * max(stage, (SK - 1) * 8 * thread_cols * (NT // SK))


if config.ENABLE_CUDASIM:
    def _as_is(i):
        """``i`` unchanged (the simulator's form of the intrinsic below)."""
        return i
else:
    @intrinsic
    def _as_is(typingctx, i):
        """``i`` unchanged, with no call in the IR: ``make_gemm_staged``'s index cast at ``index_bits=64``
        leaves the code exactly as Numba types it (int64 arithmetic; the kernels' PTX as before the cast)."""
        if not isinstance(i, types.Integer):
            return None
        plain = types.unliteral(i)

        def codegen(context, builder, sig, args):
            return context.cast(builder, args[0], sig.args[0], plain)
        return plain(i), codegen


@cuda.jit(device=True)
def load_quad(arr, g, avail, ok, vec):
    """arr[g:g + 4] with the elements at or past ``avail`` (all of them when not ``ok``) zero. ``vec``:
    one 128-bit load, for an operand whose quads are all in or all out (a row length % 4 == 0)."""
    v0 = ZERO
    v1 = ZERO
    v2 = ZERO
    v3 = ZERO
    if ok:
        if vec:
            if avail > 0:
                v0, v1, v2, v3 = load4(arr, g)
        else:
            if avail > 0:
                v0 = load1(arr, g)
            if avail > 1:
                v1 = load1(arr, g + 1)
            if avail > 2:
                v2 = load1(arr, g + 2)
            if avail > 3:
                v3 = load1(arr, g + 3)
    return v0, v1, v2, v3


def make_gemm_staged(T: int, GK: int, KS: int, NT: int, SK: int, staging: str = "v", stages: int = 2,
                     unroll: int = 1, index_bits: int = 64, thread_cols: int = 8):
    """``make_gemm_vec``'s GEMM task with another global -> shared staging (issue #3's experiments, the
    benchmark's ``--vec-variants TxGKxKSxNTxSK{v,a2,a3,c2,c3}``; also the executors' two
    specialised FP32 paths, ``gpu.kernels.winograd.device.FAST_A`` / ``FAST_B``). Same
    contract, 8 x 8 register tile, k-split and epilogue; what differs is how a stage reaches shared
    memory:

    - ``"v"``: 128-bit global loads (``load4``: LDG.128). A: a thread loads 4 consecutive k of one
      row (quads k-fastest, so KS/4 threads cover a row's 4*KS contiguous bytes) and stores them
      transposed, As[kk, r] (4 scalar shared stores); B: 4 consecutive columns of one k row, stored
      with one 128-bit shared store (Bs[kk, n] flat is the quad index * 4). Where the operand is not
      16-byte aligned (C % 4 for A, K % 4 for B: a uniform run-time branch) the same quads are
      loaded element by element, each zero-padded. Otherwise as the production kernel: global ->
      registers one stage ahead -> shared after the FMAs, two buffers, one barrier per stage.
    - ``"a"``: B bypasses registers: ``cp.async.cg`` 16-byte copies (``gpu.kernels.common.async_copy``) straight
      into a ring of ``stages`` (2-4) B buffers, issued ``stages - 1`` stages ahead, one
      ``commit_group`` per stage (empty past the end) and ``wait_group(stages - 2)`` + the stage's
      barrier before the next stage is read. Out-of-range rows/columns are zero-filled by the copy
      (src-size 0, source clamped to element 0); K % 4 != 0 falls back to 4-byte ``cp.async.ca`` per
      element. A is staged as in ``"v"`` (registers, one stage ahead, two buffers).
    - ``"c"``: both operands by cp.async into a ``stages``-deep ring, nothing staged through
      registers, no shared stores in the loop. A is copied as it lies, As[r, kk] (row stride KS + 4:
      16-byte rows, and a warp's fragment reads of 4 rows fall in 2 bank groups instead of 1), so a
      fragment read (LDS.128) now gives 4 consecutive k of one row: per 4 k-steps a thread reads its 8
      rows (8 LDS.128, 32 registers) then 2 B fragments per k: the same 4 LDS.128 per 64 FMAs.
      The k-split gives set q the k quads q, q + SK, ... (KS a multiple of 4 * SK). C % 4 != 0 falls
      back to 4-byte copies of A.

    "a" and "c" need sm_80+ (inline PTX). Under the CUDA simulator the copies are synchronous
    (``gpu.kernels.common.async_copy``): indices, edges and the ring rotation are checked there, the asynchronous
    ordering (waits and barriers) only on the GPU.

    ``unroll`` (1, 2, 4 or 8; "v" and "a"): the k-steps of a stage written out ``unroll`` at a time
    instead of one per iteration of a range loop, which LLVM leaves rolled (under ncu the
    production kernel issues 83% of cycles and only 60% of what it issues is FFMA; the loop's own
    counter and branch are 11 of the ~43 other instructions per 64 FFMA).

    ``index_bits`` (64 or 32): the width of the task's index arithmetic. Numba types every integer
    operation int64, so a stage's offsets, bounds tests and loop counters are 64-bit in the PTX; 32 wraps
    each index expression in ``int32(...)`` (LLVM then narrows the arithmetic) and runs the loops on int32
    counters. ptxas had narrowed most of it already (1.9% fewer SASS instructions; h200_gemm/
    index32/, in git at 871d7d7); what 32
    bits buys is registers (the production kernels' spills 24 -> 0 and 68 -> 36 bytes), which is what lets
    ``unroll=2`` fit. Contract at 32: every flat index of V, U and M below 2**31 (``gpu.runtime.executor.make_plan``
    refuses larger tensors).

    ``thread_cols`` (8 or 16; "v" and "a"): the columns of a thread's register tile. 16 gives each thread
    8 x 16 outputs (128 accumulators: its B fragments are 4 quads, ``GK / 4`` columns apart), the
    per-thread tile of cuBLAS's SIMT kernels: per k, 128 FFMA for 6 shared loads instead of 64 for 4, and a
    stage's loads and loop control spread over twice the FFMAs (the 8 x 8 tile is issue-bound on them).
    It needs ~200 registers, so it is for kernels of its own, not the 128-register megakernel.

    Extra layout rule: KS a multiple of 4 (of 4 * SK for "c"), KS / SK a multiple of ``unroll``, GK a
    multiple of ``thread_cols``. Raises ValueError for a layout it cannot tile."""
    if staging not in STAGINGS:
        raise ValueError(f"staging {staging!r}: want one of {STAGINGS}")
    if staging in ("a", "c") and stages not in (2, 3, 4):
        raise ValueError(f"stages={stages}: want 2, 3 or 4")
    if staging == "v" and stages != 2:
        raise ValueError("staging 'v' is double buffered (stages=2)")
    if thread_cols not in (8, 16) or (thread_cols == 16 and staging == "c"):
        raise ValueError(f"thread_cols={thread_cols}: want 8, or 16 with staging 'v' or 'a'")
    TN = thread_cols
    TX = GK // TN
    TY = T // 8
    P = TX * TY
    if (T % 8 or GK % TN or P * SK != NT or KS % SK or KS % 4 or NT > 1024
            or (staging == "c" and KS % (4 * SK))):
        raise ValueError(f"no staged vector GEMM layout for T={T}, GK={GK}, KS={KS}, NT={NT}, SK={SK} "
                         f"(want T a multiple of 8, GK of {TN}, NT = SK * T/8 * GK/{TN}, KS a multiple of SK and 4"
                         f"{', and of 4 * SK' if staging == 'c' else ''})")
    if unroll not in (1, 2, 4, 8) or (KS // SK) % unroll or (unroll > 1 and staging == "c"):
        raise ValueError(f"unroll={unroll}: want 1, 2, 4 or 8 dividing KS / SK = {KS // SK}, and staging 'v' or 'a'")
    if index_bits not in (32, 64):
        raise ValueError(f"index_bits={index_bits}: want 32 or 64")
    IX = int32 if index_bits == 32 else _as_is
    NS = stages if staging != "v" else 2
    ASYNC_B = staging in ("a", "c")
    ASYNC_A = staging == "c"
    KQ = KS // SK
    AS = T + 4                    # transposed A (v, a): As[kk, r]
    AS2 = KS + 4                  # A as it lies (c): As[r, kk]
    A_ST = T * AS2 if ASYNC_A else KS * AS
    NA = NS if ASYNC_A else 2     # A buffers
    B_ST = KS * GK
    B0 = NA * A_ST
    HALF_R = T // 2
    HALF_C = GK // 2
    FRAG_C = GK // (TN // 4)      # columns between a thread's B quads (HALF_C at 8 x 8)
    ACC = 8 * TN                  # accumulators per thread
    QACC = ACC // 4
    KQ4 = KS // 4                 # A quads per row per stage
    GQ = GK // 4                  # B quads per k row
    QA = T * KQ4                  # A quads per stage
    QB = KS * GQ                  # B quads per stage
    LA4 = -(-QA // NT)            # quads per thread
    LB4 = -(-QB // NT)
    RA = 4 * LA4                  # staging registers
    RB = 4 * LB4
    MQ = KQ4 // SK                # k quads per set per stage (c)
    UNROLL = unroll
    wait_ring = cp_async_wait_group(NS - 2)
    wait_all = cp_async_wait_group(0)

    @cuda.jit(device=True)
    def a_to_registers(ra, V, tid, active, v_base, rows, c, C, vec):
        """Quads (r, 4 consecutive k of the C-slice [c, c + KS)) of this task's A rows, zero-padded."""
        for ll in range(IX(LA4)):
            idx = IX(tid + ll * NT)
            r = IX(idx // KQ4)
            k0 = IX(c + (idx - r * KQ4) * 4)
            ok = active and idx < QA and r < rows
            v0, v1, v2, v3 = load_quad(V, IX(v_base + r * C + k0), IX(C - k0), ok, vec)
            ra[4 * ll] = v0
            ra[4 * ll + 1] = v1
            ra[4 * ll + 2] = v2
            ra[4 * ll + 3] = v3

    @cuda.jit(device=True)
    def a_to_stage(smem, ra, tid, buf):
        """Registers into A buffer ``buf``, transposed: As[kk, r]."""
        for ll in range(IX(LA4)):
            idx = IX(tid + ll * NT)
            if idx < QA:
                r = IX(idx // KQ4)
                p = IX(buf * A_ST + (idx - r * KQ4) * (4 * AS) + r)
                for i in range(IX(4)):
                    store1(smem, IX(p + i * AS), ra[4 * ll + i])

    @cuda.jit(device=True)
    def a_async(smem, V, tid, active, v_base, rows, c, C, slot, vec):
        """cp.async of the C-slice [c, c + KS) of this task's A rows into ring slot ``slot`` as
        As[r, kk] (row stride AS2), zero-filled (not committed)."""
        for ll in range(IX(LA4)):
            idx = IX(tid + ll * NT)
            if active and idx < QA:
                r = IX(idx // KQ4)
                kq = IX(idx - r * KQ4)
                k0 = IX(c + kq * 4)
                d = IX(slot * A_ST + r * AS2 + kq * 4)
                g = IX(v_base + r * C + k0)
                rok = r < rows
                if vec:
                    if rok and k0 < C:
                        cp_async16(smem, d, V, g, 16)
                    else:
                        cp_async16(smem, d, V, 0, 0)
                else:
                    for i in range(IX(4)):
                        if rok and IX(k0 + i) < C:
                            cp_async4(smem, IX(d + i), V, IX(g + i), 4)
                        else:
                            cp_async4(smem, IX(d + i), V, 0, 0)

    @cuda.jit(device=True)
    def b_to_registers(rb, U, tid, active, u_base, width, c, C, K, vec):
        """Quads (k row, 4 consecutive columns) of the C-slice [c, c + KS) of this task's B, zero-padded."""
        for ll in range(IX(LB4)):
            idx = IX(tid + ll * NT)
            kk = IX(idx // GQ)
            n0 = IX((idx - kk * GQ) * 4)
            ok = active and idx < QB and IX(c + kk) < C
            v0, v1, v2, v3 = load_quad(U, IX(u_base + (c + kk) * K + n0), IX(width - n0), ok, vec)
            rb[4 * ll] = v0
            rb[4 * ll + 1] = v1
            rb[4 * ll + 2] = v2
            rb[4 * ll + 3] = v3

    @cuda.jit(device=True)
    def b_to_stage(smem, rb, tid, buf):
        """Registers into B buffer ``buf`` (Bs[kk, n] flat is the quad index * 4): 128-bit stores."""
        for ll in range(IX(LB4)):
            idx = IX(tid + ll * NT)
            if idx < QB:
                store4(smem, IX(B0 + buf * B_ST + idx * 4), rb[4 * ll], rb[4 * ll + 1], rb[4 * ll + 2],
                       rb[4 * ll + 3])

    @cuda.jit(device=True)
    def b_async(smem, U, tid, active, u_base, width, c, C, K, slot, vec):
        """cp.async of the C-slice [c, c + KS) of this task's B into ring slot ``slot``, zero-filled
        (not committed)."""
        for ll in range(IX(LB4)):
            idx = IX(tid + ll * NT)
            if active and idx < QB:
                kk = IX(idx // GQ)
                n0 = IX((idx - kk * GQ) * 4)
                d = IX(B0 + slot * B_ST + idx * 4)
                krow = IX(c + kk) < C
                g = IX(u_base + (c + kk) * K + n0)
                if vec:
                    if krow and n0 < width:
                        cp_async16(smem, d, U, g, 16)
                    else:
                        cp_async16(smem, d, U, 0, 0)
                else:
                    for i in range(IX(4)):
                        if krow and IX(n0 + i) < width:
                            cp_async4(smem, IX(d + i), U, IX(g + i), 4)
                        else:
                            cp_async4(smem, IX(d + i), U, 0, 0)

    @cuda.jit(device=True)
    def issue_async(smem, V, U, tid, active, v_base, u_base, rows, width, c, C, K, slot, vec_a, vec_b):
        """One stage's cp.async copies (B, and A for "c"), committed as one group."""
        if ASYNC_A:
            a_async(smem, V, tid, active, v_base, rows, c, C, slot, vec_a)
        b_async(smem, U, tid, active, u_base, width, c, C, K, slot, vec_b)

    @cuda.jit(device=True)
    def k_step(acc, smem, qb, av):
        """One k of "c": the thread's two B fragments at Bs offset ``qb``, times the A column ``av``."""
        b0, b1, b2, b3 = load4(smem, qb)
        b4, b5, b6, b7 = load4(smem, qb + HALF_C)
        bv = (b0, b1, b2, b3, b4, b5, b6, b7)
        for i in range(8):
            for jj in range(8):
                acc[i * 8 + jj] += av[i] * bv[jj]

    @cuda.jit(device=True)
    def k_step_t8(acc, smem, qa, qb):
        """One k of "v" / "a": the thread's two A fragments (transposed A at ``qa``) and two B
        fragments (at ``qb``), 64 FMAs."""
        a0, a1, a2, a3 = load4(smem, qa)
        a4, a5, a6, a7 = load4(smem, qa + HALF_R)
        b0, b1, b2, b3 = load4(smem, qb)
        b4, b5, b6, b7 = load4(smem, qb + HALF_C)
        av = (a0, a1, a2, a3, a4, a5, a6, a7)
        bv = (b0, b1, b2, b3, b4, b5, b6, b7)
        for i in range(8):
            for jj in range(8):
                acc[i * 8 + jj] += av[i] * bv[jj]

    @cuda.jit(device=True)
    def k_step_t16(acc, smem, qa, qb):
        """One k at ``thread_cols=16``: two A fragments and four B fragments (``FRAG_C`` apart), 128 FMAs."""
        a0, a1, a2, a3 = load4(smem, qa)
        a4, a5, a6, a7 = load4(smem, qa + HALF_R)
        b0, b1, b2, b3 = load4(smem, qb)
        b4, b5, b6, b7 = load4(smem, qb + FRAG_C)
        b8, b9, b10, b11 = load4(smem, qb + 2 * FRAG_C)
        b12, b13, b14, b15 = load4(smem, qb + 3 * FRAG_C)
        av = (a0, a1, a2, a3, a4, a5, a6, a7)
        bl = (b0, b1, b2, b3, b4, b5, b6, b7)
        br = (b8, b9, b10, b11, b12, b13, b14, b15)
        # two 8 x 8 nests: LLVM writes out a nest of 64 FMAs, not one of 128 (the accumulators would
        # then live in local memory)
        for i in range(8):
            for jj in range(8):
                acc[i * 16 + jj] += av[i] * bl[jj]
        for i in range(8):
            for jj in range(8):
                acc[i * 16 + 8 + jj] += av[i] * br[jj]

    k_step_t = k_step_t16 if TN == 16 else k_step_t8

    @cuda.jit(device=True)
    def store_quad(M, acc, q, row_base, n0, width, full):
        """acc[q:q + 4] into M at row_base + n0 .. + 3, the columns at or past ``width`` left out."""
        if full:
            store4(M, IX(row_base + n0), acc[q], acc[q + 1], acc[q + 2], acc[q + 3])
        else:
            for jj in range(4):
                if n0 + jj < width:
                    store1(M, IX(row_base + n0 + jj), acc[q + jj])

    @cuda.jit(device=True)
    def store_row(M, acc, q0, r, rows, m_base, K, tx, width, full):
        """A thread's row of 16 outputs at thread_cols=16, acc[q0:q0 + 16], into M's row ``r``."""
        if r < rows:
            for h in range(4):
                store_quad(M, acc, q0 + h * 4, IX(m_base + r * K), IX(tx * 4 + h * FRAG_C), width, full)

    @cuda.jit(device=True)
    def gemm_staged(g, j, prm, V, U, M):
        tid = IX(cuda.threadIdx.x)
        C = IX(prm[_P_C])
        K = IX(prm[_P_K])
        tiles = IX(prm[_P_TILES])
        kts = IX(prm[_P_KTILES])
        e = IX(j // kts)
        kt = IX(j - e * kts)
        row0 = IX(g * T)
        rows = IX(min(T, tiles - row0))
        col0 = IX(kt * GK)
        width = IX(min(GK, K - col0))
        nsteps = IX((C + KS - 1) // KS)
        v_base = IX((e * tiles + row0) * C)      # flat index of V[e, row0, 0]
        u_base = IX(e * C * K + col0)            # U[e, 0, col0]
        vec_a = C % 4 == 0                       # A rows 16-byte aligned (device arrays are)
        vec_b = K % 4 == 0                       # B rows 16-byte aligned
        smem = cuda.shared.array(0, float32, alignment=SHARED_ALIGNMENT)
        acc = cuda.local.array(ACC, float32)
        ra = cuda.local.array(RA, float32)
        rb = cuda.local.array(RB, float32)
        active = tid < NT
        sub = IX(tid // P)
        lt = IX(tid - sub * P)
        tx = IX(lt % TX)
        ty = IX(lt // TX)
        for q in range(64):
            acc[q] = ZERO
        if TN == 16:     # (a second loop of 64: one of 128 stays rolled, see k_step_t16)
            for q in range(64):
                acc[64 + q] = ZERO
        # prologue: stage 0 (and, with a cp.async ring, stages 1 .. NS-2)
        if ASYNC_B:
            for p in range(IX(NS - 1)):
                if p < nsteps:
                    issue_async(smem, V, U, tid, active, v_base, u_base, rows, width, IX(p * KS), C, K, p,
                                vec_a, vec_b)
                cp_async_commit()
        else:
            b_to_registers(rb, U, tid, active, u_base, width, 0, C, K, vec_b)
        if not ASYNC_A:
            a_to_registers(ra, V, tid, active, v_base, rows, 0, C, vec_a)
            if active:
                a_to_stage(smem, ra, tid, 0)
                if not ASYNC_B:
                    b_to_stage(smem, rb, tid, 0)
        if ASYNC_B:
            wait_ring()
        cuda.syncthreads()
        if ASYNC_A:
            a_thr = IX(ty * 4 * AS2 + sub * 4)   # row ty*4, this set's first k quad
            b_thr = IX(B0 + sub * 4 * GK + tx * 4)
        else:
            a_thr = IX(sub * AS + ty * 4)
            b_thr = IX(B0 + sub * GK + tx * 4)
        slot = IX(0)                             # ring slot read in this step (B; A too for "c")
        wslot = IX(NS - 1)                       # ring slot the step's cp.async writes
        for s in range(nsteps):
            buf = IX(s & 1)
            more = IX(s + 1) < nsteps
            if ASYNC_B:   # stage s + NS - 1 into the slot last read in step s - 1
                if IX(s + NS - 1) < nsteps:
                    issue_async(smem, V, U, tid, active, v_base, u_base, rows, width, IX((s + NS - 1) * KS),
                                C, K, wslot, vec_a, vec_b)
                cp_async_commit()                # (an empty group past the end keeps the count)
            if more:  # next stage's register-staged global loads, in flight during the FMAs below
                if not ASYNC_A:
                    a_to_registers(ra, V, tid, active, v_base, rows, IX((s + 1) * KS), C, vec_a)
                if not ASYNC_B:
                    b_to_registers(rb, U, tid, active, u_base, width, IX((s + 1) * KS), C, K, vec_b)
            if active:
                if ASYNC_A:
                    pa = IX(a_thr + slot * A_ST)
                    pb = IX(b_thr + slot * B_ST)
                    for m in range(IX(MQ)):
                        qa = IX(pa + m * (SK * 4))
                        x0 = load4(smem, qa)
                        x1 = load4(smem, qa + AS2)
                        x2 = load4(smem, qa + 2 * AS2)
                        x3 = load4(smem, qa + 3 * AS2)
                        x4 = load4(smem, qa + HALF_R * AS2)
                        x5 = load4(smem, qa + (HALF_R + 1) * AS2)
                        x6 = load4(smem, qa + (HALF_R + 2) * AS2)
                        x7 = load4(smem, qa + (HALF_R + 3) * AS2)
                        qb = IX(pb + m * (SK * 4 * GK))
                        # the 4 k of the quad written out: a tuple indexed by a loop variable
                        # compiles to a branch chain when the loop is not unrolled
                        k_step(acc, smem, qb, (x0[0], x1[0], x2[0], x3[0], x4[0], x5[0], x6[0], x7[0]))
                        k_step(acc, smem, qb + GK, (x0[1], x1[1], x2[1], x3[1], x4[1], x5[1], x6[1], x7[1]))
                        k_step(acc, smem, qb + 2 * GK, (x0[2], x1[2], x2[2], x3[2], x4[2], x5[2], x6[2], x7[2]))
                        k_step(acc, smem, qb + 3 * GK, (x0[3], x1[3], x2[3], x3[3], x4[3], x5[3], x6[3], x7[3]))
                else:
                    pa = IX(a_thr + buf * A_ST)
                    pb = IX(b_thr + slot * B_ST)
                    if UNROLL == 1 and TN == 16:
                        for kq in range(IX(KQ)):
                            k_step_t(acc, smem, IX(pa + kq * (SK * AS)), IX(pb + kq * (SK * GK)))
                    elif UNROLL == 1:   # (written inline, not through k_step_t: ptxas orders the loads
                        for kq in range(IX(KQ)):  # of the two forms differently in the megakernel)
                            a0, a1, a2, a3 = load4(smem, IX(pa + kq * (SK * AS)))
                            a4, a5, a6, a7 = load4(smem, IX(pa + kq * (SK * AS) + HALF_R))
                            b0, b1, b2, b3 = load4(smem, IX(pb + kq * (SK * GK)))
                            b4, b5, b6, b7 = load4(smem, IX(pb + kq * (SK * GK) + HALF_C))
                            av = (a0, a1, a2, a3, a4, a5, a6, a7)
                            bv = (b0, b1, b2, b3, b4, b5, b6, b7)
                            for i in range(8):
                                for jj in range(8):
                                    acc[i * 8 + jj] += av[i] * bv[jj]
                    elif UNROLL == 2:
                        for kq in range(IX(0), IX(KQ), IX(2)):
                            qa = IX(pa + kq * (SK * AS))
                            qb = IX(pb + kq * (SK * GK))
                            k_step_t(acc, smem, qa, qb)
                            k_step_t(acc, smem, qa + SK * AS, qb + SK * GK)
                    elif UNROLL == 4:
                        for kq in range(IX(0), IX(KQ), IX(4)):
                            qa = IX(pa + kq * (SK * AS))
                            qb = IX(pb + kq * (SK * GK))
                            k_step_t(acc, smem, qa, qb)
                            k_step_t(acc, smem, qa + SK * AS, qb + SK * GK)
                            k_step_t(acc, smem, qa + 2 * SK * AS, qb + 2 * SK * GK)
                            k_step_t(acc, smem, qa + 3 * SK * AS, qb + 3 * SK * GK)
                    else:
                        for kq in range(IX(0), IX(KQ), IX(8)):
                            qa = IX(pa + kq * (SK * AS))
                            qb = IX(pb + kq * (SK * GK))
                            k_step_t(acc, smem, qa, qb)
                            k_step_t(acc, smem, qa + SK * AS, qb + SK * GK)
                            k_step_t(acc, smem, qa + 2 * SK * AS, qb + 2 * SK * GK)
                            k_step_t(acc, smem, qa + 3 * SK * AS, qb + 3 * SK * GK)
                            k_step_t(acc, smem, qa + 4 * SK * AS, qb + 4 * SK * GK)
                            k_step_t(acc, smem, qa + 5 * SK * AS, qb + 5 * SK * GK)
                            k_step_t(acc, smem, qa + 6 * SK * AS, qb + 6 * SK * GK)
                            k_step_t(acc, smem, qa + 7 * SK * AS, qb + 7 * SK * GK)
            if more and active:  # register-staged operands into the other buffer (last read in s-1)
                if not ASYNC_A:
                    a_to_stage(smem, ra, tid, 1 - buf)
                if not ASYNC_B:
                    b_to_stage(smem, rb, tid, 1 - buf)
            if ASYNC_B:
                wait_ring()                      # this thread's copies of stage s + 1 have landed
            cuda.syncthreads()                   # ... and everyone's
            slot = IX(slot + 1) if slot + 1 < NS else IX(0)
            wslot = IX(wslot + 1) if wslot + 1 < NS else IX(0)
        if ASYNC_B:
            wait_all()                           # (only empty groups can be left) before smem reuse
        if SK > 1:  # as make_gemm_vec: sets 1..SK-1 hand their sums to set 0
            if active and sub > 0:
                for q4 in range(QACC):
                    store4(smem, (((sub - 1) * QACC + q4) * P + lt) * 4, acc[4 * q4], acc[4 * q4 + 1],
                           acc[4 * q4 + 2], acc[4 * q4 + 3])
            cuda.syncthreads()
            if active and sub == 0:
                for q2 in range(SK - 1):
                    for q4 in range(QACC):
                        h0, h1, h2, h3 = load4(smem, ((q2 * QACC + q4) * P + lt) * 4)
                        acc[4 * q4] += h0
                        acc[4 * q4 + 1] += h1
                        acc[4 * q4 + 2] += h2
                        acc[4 * q4 + 3] += h3
        if active and sub == 0:
            m_base = IX((e * tiles + row0) * K + col0)
            full = width == GK and K % 4 == 0
            if TN == 16:   # the rows written out: a loop over them stays rolled, and the accumulators
                r0 = IX(ty * 4)              # would go to local memory
                store_row(M, acc, 0, r0, rows, m_base, K, tx, width, full)
                store_row(M, acc, 16, IX(r0 + 1), rows, m_base, K, tx, width, full)
                store_row(M, acc, 32, IX(r0 + 2), rows, m_base, K, tx, width, full)
                store_row(M, acc, 48, IX(r0 + 3), rows, m_base, K, tx, width, full)
                store_row(M, acc, 64, IX(r0 + HALF_R), rows, m_base, K, tx, width, full)
                store_row(M, acc, 80, IX(r0 + HALF_R + 1), rows, m_base, K, tx, width, full)
                store_row(M, acc, 96, IX(r0 + HALF_R + 2), rows, m_base, K, tx, width, full)
                store_row(M, acc, 112, IX(r0 + HALF_R + 3), rows, m_base, K, tx, width, full)
            else:
                for i in range(8):
                    r = IX(ty * 4 + (i & 3) + (i >> 2) * HALF_R)
                    if r < rows:
                        for h in range(2):
                            n0 = IX(tx * 4 + h * HALF_C)
                            q = i * 8 + h * 4
                            if full:
                                store4(M, IX(m_base + r * K + n0), acc[q], acc[q + 1], acc[q + 2], acc[q + 3])
                            else:
                                for jj in range(4):
                                    if n0 + jj < width:
                                        store1(M, IX(m_base + r * K + n0 + jj), acc[q + jj])

    gemm_staged.shared_bytes = gemm_staged_shared_bytes(T, GK, KS, NT, SK, staging, NS, TN)
    gemm_staged.layout = dict(T=T, GK=GK, KS=KS, NT=NT, SK=SK, vector=True, staging=staging, stages=NS,
                              unroll=unroll, index_bits=index_bits, thread_cols=TN)
    return gemm_staged
