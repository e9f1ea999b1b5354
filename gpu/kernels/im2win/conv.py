"""The im2win convolution kernels (Lu et al., Euro-Par 2023): the tiled kernel of Alg. 3, its
ablation variants and its tensor-core (3xTF32) build, built by ``make_conv_kernel``, and the basic kernel of Alg. 2 (``make_basic_kernel``).

Both compute the GEMM view of ``megasim.algorithms.im2win.tiling`` (read its docstring): ``y[i, m, p, q] =
sum_k A[m, k] B[k, n]`` with ``n = (i*P + p)*Q + q``, ``k = c*R*S + v*R + u``, ``A[m, k] = w[m, c, u, v]``
(the filter is read in place) and ``B[k, n] = J[i, c, p, q*stride*R + v*R + u]`` (the im2win tensor,
``gpu.kernels.im2win.transform``). ``prm`` (int32, ``conv_params``): C, P, Q, R, S, stride, WW (J's row
length), M (filters), N*P*Q, C*R*S, filter tiles. Grids are 1-D (``conv_blocks``): block b runs filter
tile ``b % tiles_m`` of output tile ``b // tiles_m`` (the lowering's task order; a 2-D grid's y
would stop at 65,535 output tiles, which the basic kernel's 32-pixel tiles pass at conv7, batch 128).

**Tiled kernel** ``make_conv_kernel(m_b, n_b, k_b, m_t, n_t, vector, prefetch, prologue, epilogue,
max_registers, staging, stages, unroll)``, launched as ``conv(J, w, y, prm, koff)`` (``koff``: ``conv_offsets``):
grid ceil(M/m_b) * ceil(NPQ/n_b), filter tile fastest; block ``NT = (m_b/m_t) * (n_b/n_t)`` threads (1-D).
Thread ``tid`` holds the ``m_t x n_t`` outputs of rows ``row(i)`` and columns ``col(j)``: with
``tx = tid % (n_b/n_t)``, ``ty = tid // (n_b/n_t)``, in quads when the tile is a multiple of 4
(``row(i) = (i//4) * 4*TY + ty*4 + i%4``: a warp's fragment reads are broadcasts for A and
consecutive 16-byte quads for B, no bank conflicts), else ``ty*m_t + i``. Per K step of ``k_b``:

- *staging*: thread ``tid`` loads ``ceil(m_b*k_b/NT)`` filter values and ``ceil(k_b*n_b/NT)`` window
  values, all at ``k = step*k_b + tid % k_b`` (NT a multiple of k_b), so one pair of offsets per step
  serves every load: ``koff[k]`` (the filter's, within a filter row) and ``koff[KDP + k]`` (the
  window's, from a pixel's window start), read from the per-problem table instead of dividing k by R*S
  and R; each thread keeps the int32 row bases of its filters and pixels (-1 outside). Consecutive
  threads read consecutive k (a window run is contiguous in J). An interior tile (all its filters and
  pixels in range) loads untested before its last K step (``stage_fast``); edge tiles and the last step
  test every load (filter row < M, pixel < NPQ, k < C*R*S) and zero-fill (``stage_checked``), so any
  shape runs (the authors' kernel is wrong for C_out not a multiple of 128). Stored transposed into
  shared memory, ``As[kk][m]`` and ``Bs[kk][n]`` (rows of ``m_b + 4`` / ``n_b + 4`` floats);
  ``staging="async"`` copies them straight there with 4-byte ``cp.async`` (zero-filled), a ring of
  ``stages`` buffers, one barrier per step (no ``prologue``: the values bypass the registers);
- *micro-kernel*: for each kk, the thread reads its A and B fragments (``vector``: 128-bit ``load4``
  per quad, else four 32-bit loads) and accumulates their outer product into ``m_t * n_t`` registers
  (``m_t = n_t = 1``: no micro-kernel, one output per thread); the k_b rows are written out one after
  another (``unroll``, default) or looped over;
- *prefetch*: with ``prefetch`` the shared memory holds two stages: the next step's global loads
  are issued into registers before this step's multiply-adds and stored into the other stage after
  them, one barrier per step (Alg. 3, lines 13-16); without, one stage: load, barrier, multiply-add,
  barrier. The register double buffer of Alg. 3 (lines 10-11) is left to the compiler: with the kk
  rows written out and the loops over i and j unrolled (compile-time bounds), the scheduler hoists the
  next fragment's loads above the current FMAs.

All index arithmetic is int32 (Numba types integer operations int64 unless each is cast back: at
64 bits the 128 x 128 kernel took 143 registers, one block per SM; at 32, 128), except the micro-kernel's
two shared-memory bases: with ``unroll`` (default) its k_b rows are written out (generated source) and
every fragment load is ``ld.shared.v4`` at an immediate offset from one 64-bit base (NVVM leaves the
loop over kk rolled, with a 64-bit counter and ~8 integer instructions of address arithmetic per 64 FMAs;
written out: 1.10-1.20x faster at the 128 x 128 tile, H200). Registers are capped at ``register_cap(NT)``
unless ``max_registers`` says otherwise (at least two blocks and 12 warps per SM: 128 registers at 256
threads, 168 at 128, where the 64 x 128 tile written out takes 189 uncapped and no spills at 168).
Outputs are stored 128 bits at a time (a quad of columns) when P*Q is a multiple of 4.

**Tensor-core build** (``math="3xtf32"``): the same kernel with the micro-kernel, output store and staged
layout of ``_make_tc_parts``: the threads are warps tiling the block's outputs with m16n8k8 TF32 MMAs, each
FP32 operand split into big + small TF32 parts, three MMAs per product (FP32-accurate; each 8-k slice's
MMAs chained from zero and their sum added to the accumulators in FP32). The staging stores each value where
its MMA fragment wants it (``TcOptions.fragments="packed"``: one 128-bit shared load per A fragment and per
two B fragments). Grid, threads, global loads, bounds checks, zero fill, the NCHW store's indexing and
both hooks are shared; needs k_b a multiple of 8, whole warps and (packed) threads / k_b a power of two.

Shared memory: ``stages * k_b * (m_b + 4 + n_b + 4) * 4`` bytes (packed 3xTF32: ``+ 2`` for ``+ 4``), static (at most 48 KiB). Extension points:
``prologue(value, k)`` transforms every window value staged (k: its GEMM row; padding zeros included),
``epilogue(value, m)`` every output stored (m: its filter) -- e.g. a batch norm folded in. Both default
to the identity.

**Basic kernel** ``make_basic_kernel(tile)`` (Alg. 2): grid ceil(M/tile) * ceil(NPQ/tile), block
``tile * tile`` threads (32 x 32 in the paper); thread (tx, ty) = (tid % tile, tid // tile) computes
output (m = bx*tile + tx, n = by*tile + ty) straight from global memory, no shared memory.

No kernel synchronises with another block; no atomics. Flat indices are 32-bit safe for tensors
below 2**31 elements (``gpu.im2win`` refuses larger).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import config as numba_config
from numba import cuda, float32, int32, int64, uint32

from gpu.errors import KernelInputError
from gpu.kernels.common.async_copy import cp_async4, cp_async_commit, cp_async_wait_group
from gpu.kernels.common.tensor_core import mma_tf32, split_tf32_trunc
from gpu.kernels.common.vector_access import SHARED_ALIGNMENT, load1, load4, store1, store4
from gpu.kernels.winograd.gemm_tc import warp_grid
from megasim.algorithms.im2win.tiling import MATHS, STAGINGS, k_offsets, register_cap

ZERO = np.float32(0.0)
PAD = 4
MAX_STATIC_SHARED_BYTES = 48 * 1024


@cuda.jit(device=True)
def identity_prologue(value, k):
    return value


@cuda.jit(device=True)
def identity_epilogue(value, m):
    return value


def conv_params(problem, tile_m: int) -> np.ndarray:
    """The int32 ``prm`` of the conv kernels for a ConvProblem and a block tile of ``tile_m`` filters."""
    p = problem
    return np.array([p.c, p.out_h, p.out_w, p.r, p.s, p.stride, (p.w + 2 * p.padding) * p.r, p.k,
                     p.n * p.out_h * p.out_w, p.c * p.r * p.s, -(-p.k // tile_m)], np.int32)


def conv_offsets(problem, k_b: int) -> np.ndarray:
    """The int32 ``koff`` of the conv kernels for a ConvProblem and a K step (``tiling.k_offsets``)."""
    return k_offsets(problem, k_b)


def conv_blocks(problem, tile_m: int, tile_n: int) -> int:
    """The 1-D grid of the conv kernels: filter tiles x output tiles (block b: filter tile b % tiles_m)."""
    p = problem
    return -(-p.k // tile_m) * -(-(p.n * p.out_h * p.out_w) // tile_n)


def _fragment(m_t: int, tile: int):
    """(groups, group spacing, quads): a thread's m_t rows of a tile of `tile` rows as quads 4*tile/m_t apart
    (the tile's threads along it, times 4), or one run."""
    if m_t % 4 == 0:
        return m_t // 4, tile * 4 // m_t, True
    return 1, 0, False


def _make_fragment(groups: int, spacing: int, quads: bool, count: int, vec: bool):
    """A device function ``frag(smem, f, base)``: ``count`` values of a stage row from ``base`` into ``f``,
    as quads ``spacing`` apart (128-bit loads when ``vec``, else four 32-bit loads), or one run."""
    if quads and vec:
        @cuda.jit(device=True)
        def frag(smem, f, base):
            for g in range(groups):
                f0, f1, f2, f3 = load4(smem, base + g * spacing)
                f[4 * g] = f0
                f[4 * g + 1] = f1
                f[4 * g + 2] = f2
                f[4 * g + 3] = f3
    elif quads:
        @cuda.jit(device=True)
        def frag(smem, f, base):
            for g in range(groups):
                for h in range(4):
                    f[4 * g + h] = load1(smem, base + g * spacing + h)
    else:
        @cuda.jit(device=True)
        def frag(smem, f, base):
            for i in range(count):
                f[i] = load1(smem, base + i)
    return frag


def _make_multiply(k_b: int, AS: int, BS: int, A_ST: int, B_ST: int, B0: int, frag_a, frag_b, outer, unroll: bool):
    """The micro-kernel of one K step, ``multiply(smem, acc, fa, fb, buf, a_thr, b_thr)``: for each of the
    ``k_b`` rows of stage ``buf``, the thread's A and B fragments and their outer product into ``acc``.
    ``unroll``: the k_b rows written out one after another (generated source) from one 64-bit base per
    operand, so every fragment load is a shared load at an immediate offset and nothing else (NVVM leaves
    a 16-step loop of 64 FMAs rolled, with a 64-bit counter and 8 integer instructions of address
    arithmetic per step); else the loop."""
    if not unroll:
        @cuda.jit(device=True)
        def multiply(smem, acc, fa, fb, buf, a_thr, b_thr):
            pa = int32(buf * A_ST + a_thr)
            pb = int32(B0 + buf * B_ST + b_thr)
            for kk in range(k_b):
                frag_a(smem, fa, int32(pa + kk * AS))
                frag_b(smem, fb, int32(pb + kk * BS))
                outer(acc, fa, fb)
        return multiply
    lines = ["def multiply(smem, acc, fa, fb, buf, a_thr, b_thr):",
             f"    pa = int64(int32(buf * {A_ST} + a_thr))",
             f"    pb = int64(int32({B0} + buf * {B_ST} + b_thr))"]
    for kk in range(k_b):
        lines += [f"    frag_a(smem, fa, pa + {kk * AS})", f"    frag_b(smem, fb, pb + {kk * BS})",
                  "    outer(acc, fa, fb)"]
    scope = {"int32": int32, "int64": int64, "frag_a": frag_a, "frag_b": frag_b, "outer": outer}
    exec(compile("\n".join(lines), f"<im2win multiply k_b={k_b}>", "exec"), scope)     # noqa: S102 - generated above
    return cuda.jit(device=True)(scope["multiply"])


@dataclass(frozen=True)
class TcOptions:
    """How the 3xTF32 micro-kernel (``make_conv_kernel(math="3xtf32")``, ``_make_tc_parts``) stages, reads and
    sums its operands.

    ``fragments``: ``"packed"`` (default): each stage is staged in MMA fragment order, so a lane's A fragment
    of an m-tile (4 values) is one 128-bit shared load and its B fragments of two n-tiles (2 values each) one
    more; ``"rows"``: the FP32 kernel's ``As[kk][m]`` / ``Bs[kk][n]`` rows, one 32-bit load per value.
    ``chain_k``: the k summed by one chain of MMAs from zero before its sum is added to the accumulators on
    the FP32 pipe (a multiple of 8 dividing k_b; None: k_b, one add per stage; default 8, one slice: on
    the H200 chains of 16 k were 1.06x slower, their 6 dependent MMAs per tile exposing the MMA latency)."""
    fragments: str = "packed"
    chain_k: int | None = 8


TC_FRAGMENTS = ("packed", "rows")


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _make_tc_parts(m_b: int, n_b: int, k_b: int, NT: int, AS: int, BS: int, A_ST: int, B_ST: int, B0: int, EPI,
                   RSTEP: int, opts: TcOptions):
    """The 3xTF32 micro-kernel, output store and staging layout of ``make_conv_kernel(math="3xtf32")``:
    (lane_bases, multiply, store_tile, stage_bases, slot_a, slot_b, warp grid).

    **MMAs.** The NT / 32 warps tile the block's m_b x n_b outputs as a WM x WN grid (``gemm_tc.warp_grid``:
    the squarest with whole 16 x 8 MMA tiles); a warp's (m_b/WM) x (n_b/WN) piece is MT x NN m16n8k8 tiles,
    4 FP32 accumulators per tile per lane (``gpu.kernels.common.tensor_core``'s C fragment), so a lane
    holds m_b*n_b/NT = m_t*n_t accumulators, as the FP32 kernel's thread does. Each FP32 operand is split
    once per read (``split_tf32_trunc``: big = 13 low bits cleared, small = the rest) and each product is 3
    MMAs: small x big, big x small, big x big. Per chain of ``chain_k`` k (``TcOptions``; default 8, one
    slice) a tile's MMAs are chained from zero and the chain's sum is then added to the accumulators on the
    FP32 pipe (round to nearest). Chaining into the accumulators across all of K instead (as the Winograd
    GEMM does over C <= 512) lets the tensor cores' FP32 accumulation, which truncates, bias the sum by
    ~7e-9 K: measured on the H200 (build 6cf7dc0) 1.7e-5 at C*R*S = 2400 (im2win/conv5) and 3.3e-5 at
    4608 (conv12) against ~1e-6 for the FP32 kernel; chains of 8-16 k keep it at FP32's level whatever
    K. Order per chain: the B fragments of its slices (all n-tiles), then per m-tile its A fragments and,
    per n-tile, the chain's MMAs and the 4 adds (ptxas reorders within the register cap: writing the next
    m-tile's loads first gave the same SASS). The whole stage is written out (generated source): every
    shared load is at an immediate offset from one 64-bit base per operand (the rolled loop over 8-k
    slices cost 2-3 integer instructions of 64-bit address arithmetic per load, ptxas sm_90).

    **k order.** The MMA's k index kappa (0-7) of slice s is the stage's row kk = 8 s + kappa; a lane
    (g, q) reads kappa = q and q + 4 (A and B share the order, which is all a product needs).

    **Packed fragments** (``fragments="packed"``, default): a stage holds, per slice s, A as m-tiles of
    128 floats, lane L = 4 g + q's 16 bytes at 4 L: (a0, a1, a2, a3) = (A[g, q], A[g + 8, q], A[g, q + 4],
    A[g + 8, q + 4]), and B as pairs of n-tiles, lane L's 16 bytes (b0, b1) of the even tile then the odd
    one (b0 = B[q, g], b1 = B[q + 4, g]); a warp's 128-bit reads are conflict-free (8 lanes a phase, 128
    consecutive bytes). Odd NN: B as single n-tiles, 8 bytes per lane (two 32-bit loads). The MMA tile's
    rows are the block's filter rows with bits 0 and 3 of the row index swapped (row g + 8 h of an m-tile
    is filter 2 (g // 2) + 8 (g % 2) + h), and likewise its columns (paired n-tiles only); the store of
    the outputs undoes it. The staging stores each value where its fragment wants it (``slot_a`` /
    ``slot_b``): with NT / k_b a power of two, a thread's rows r0 + RSTEP ll split into disjoint bits, so
    each store is a per-thread base plus a constant. Why the swap: at the default 128 threads and k_b =
    16, a warp stores k = 0-15 of two adjacent rows r0 = 2w, 2w + 1 per instruction; swapped, the two rows
    are elements 0 and 1 (B: 1 and 2) of a 16-byte chunk instead of lanes 16 floats apart, and with slices
    8 (m_b + 2) floats apart (16 banks of padding) the two slices land on opposite bank halves: 32
    distinct banks, against 16 banks twice unswapped and unpadded.

    **Rows** (``fragments="rows"``): the FP32 kernel's staged layout ``As[kk][m]``, ``Bs[kk][n]``, rows of
    ``m_b + 4`` / ``n_b + 4`` floats, kappa read from stage row ``2 kappa`` (kappa < 4) or ``2 (kappa - 4)
    + 1`` (a lane's k = q and q + 4 are rows 2q and 2q + 1, 8 banks apart: conflict-free)."""
    WM, WN = warp_grid(m_b, n_b, NT)
    MT = m_b // WM // 16
    NN = n_b // WN // 8
    NBF = 2 * NN
    K8 = k_b // 8
    CK = k_b if opts.chain_k is None else opts.chain_k
    if opts.fragments not in TC_FRAGMENTS:
        raise ValueError(f"fragments={opts.fragments!r} is not allowed (allowed: {', '.join(TC_FRAGMENTS)})")
    if CK % 8 or k_b % CK:
        raise ValueError(f"chain_k={opts.chain_k} is not allowed with k_b={k_b}: a multiple of 8 dividing k_b")
    CH = CK // 8
    PACKED = opts.fragments == "packed"
    if PACKED and not _is_pow2(RSTEP):
        raise ValueError(f"fragments='packed' needs threads / k_b a power of two (here {NT} / {k_b})")
    PAIR = NN % 2 == 0
    IX = int32
    A_SL, B_SL = 8 * AS, 8 * BS                        # floats per 8-k slice of a stage
    if PACKED:
        a_lane, b_lane = 4, (4 if PAIR else 2)         # floats per lane per chunk
        a_warp, b_warp = MT * 128, NN * 64             # floats between warps' first chunks
        b_chunk = 128 if PAIR else 64

    @cuda.jit(device=True)
    def lane_bases(tid):
        """(A's, B's) offset of this lane's first fragment in a stage (slice 0, its warp's first tile)."""
        warp = IX(tid // 32)
        lane = IX(tid - warp * 32)
        g = IX(lane // 4)
        q = IX(lane - g * 4)
        wm = IX(warp // WN)
        wn = IX(warp - wm * WN)
        if PACKED:
            return IX(wm * a_warp + lane * a_lane), IX(wn * b_warp + lane * b_lane)
        return IX(2 * q * AS + wm * (MT * 16) + g), IX(2 * q * BS + wn * (NN * 8) + g)

    # ---- the staging's slots: a per-thread base plus a constant per staged row (docstring) ----
    @cuda.jit(device=True)
    def stage_bases(kk, r0):
        """(A's, B's) slot in a stage of this thread's staged k row kk and first row r0."""
        if not PACKED:
            return IX(kk * AS + r0), IX(kk * BS + r0)
        s = IX(kk >> 3)
        q = IX(kk & 3)
        h = IX((kk >> 2) & 1)
        a = IX(s * A_SL + q * 4 + h * 2 + (r0 >> 4) * 128 + ((r0 & 6) | ((r0 >> 3) & 1)) * 16 + (r0 & 1))
        if PAIR:
            b = IX(s * B_SL + q * 4 + h + (r0 >> 4) * 128 + ((r0 & 6) | ((r0 >> 3) & 1)) * 16 + (r0 & 1) * 2)
        else:
            b = IX(s * B_SL + q * 2 + h + (r0 >> 3) * 64 + (r0 & 7) * 8)
        return a, b

    @cuda.jit(device=True)
    def slot_a(d, ll):
        """Stage offset of this thread's staged filter row r0 + RSTEP ll (``d``: ``stage_bases``' A)."""
        c = IX(ll * RSTEP)
        if not PACKED:
            return IX(d + c)
        return IX(d + (c >> 4) * 128 + ((c & 6) | ((c >> 3) & 1)) * 16 + (c & 1))

    @cuda.jit(device=True)
    def slot_b(d, ll):
        """Stage offset of this thread's staged pixel r0 + RSTEP ll (``d``: ``stage_bases``' B)."""
        c = IX(ll * RSTEP)
        if not PACKED:
            return IX(d + c)
        if PAIR:
            return IX(d + (c >> 4) * 128 + ((c & 6) | ((c >> 3) & 1)) * 16 + (c & 1) * 2)
        return IX(d + (c >> 3) * 64 + (c & 7) * 8)

    # ---- the micro-kernel, written out ----
    def a_reads(s, mt):
        """Source lines reading the raw a0..a3 of slice s, m-tile mt into ``ar{s}_{mt}_{i}``."""
        names = [f"ar{s}_{mt}_{i}" for i in range(4)]
        if PACKED:
            return [f"{', '.join(names)} = load4(smem, pa + {s * A_SL + mt * a_lane * 32})"]
        base = s * A_SL + mt * 16
        return [f"{nm} = load1(smem, pa + {base + off})" for nm, off in zip(names, (0, 8, AS, AS + 8))]

    def b_reads(s):
        """Source lines reading the raw b0, b1 of slice s for the warp's NN n-tiles into ``br{s}_{nn}_{h}``."""
        out = []
        if PACKED and PAIR:
            for j in range(NN // 2):
                out.append(f"br{s}_{2 * j}_0, br{s}_{2 * j}_1, br{s}_{2 * j + 1}_0, br{s}_{2 * j + 1}_1 = "
                           f"load4(smem, pb + {s * B_SL + j * b_chunk})")
        else:
            for nn in range(NN):
                for h in range(2):
                    off = s * B_SL + (nn * b_chunk + h if PACKED else nn * 8 + h * BS)
                    out.append(f"br{s}_{nn}_{h} = load1(smem, pb + {off})")
        return out

    # steps (chain group, m-tile): loads (the group's B at its first m-tile, the m-tile's A), splits, MMAs, adds
    steps = [(grp, mt) for grp in range(K8 // CH) for mt in range(MT)]

    def loads(step):
        grp, mt = step
        out = []
        for s in range(grp * CH, grp * CH + CH):
            if mt == 0:
                out += b_reads(s)
            out += a_reads(s, mt)
        return out

    def splits(step):
        grp, mt = step
        out = []
        for s in range(grp * CH, grp * CH + CH):
            if mt == 0:
                out += [f"bh{s}_{nn}_{h}, bl{s}_{nn}_{h} = split(br{s}_{nn}_{h})" for nn in range(NN) for h in range(2)]
            out += [f"ah{s}_{mt}_{i}, al{s}_{mt}_{i} = split(ar{s}_{mt}_{i})" for i in range(4)]
        return out

    def mmas(step):
        grp, mt = step
        out, adds = [], []
        for nn in range(NN):
            d = "ZERO, ZERO, ZERO, ZERO"
            for s in range(grp * CH, grp * CH + CH):
                ah = ", ".join(f"ah{s}_{mt}_{i}" for i in range(4))
                al = ", ".join(f"al{s}_{mt}_{i}" for i in range(4))
                bh = f"bh{s}_{nn}_0, bh{s}_{nn}_1"
                bl = f"bl{s}_{nn}_0, bl{s}_{nn}_1"
                for x, y in ((al, bh), (ah, bl), (ah, bh)):
                    out.append(f"d{nn}_0, d{nn}_1, d{nn}_2, d{nn}_3 = mma({x}, {y}, {d})")
                    d = f"d{nn}_0, d{nn}_1, d{nn}_2, d{nn}_3"
            o = (mt * NN + nn) * 4
            adds += [f"acc[{o + i}] += d{nn}_{i}" for i in range(4)]
        return out, adds

    body = []
    for st in steps:
        m, a = mmas(st)
        body += loads(st) + splits(st) + m + a
    L = ["def multiply(smem, acc, fa, fb, buf, a_thr, b_thr):",
         f"    pa = int64(int32(buf * {A_ST} + a_thr))",
         f"    pb = int64(int32({B0} + buf * {B_ST} + b_thr))"] + ["    " + x for x in body]
    scope = {"int32": int32, "int64": int64, "load1": load1, "load4": load4, "split": split_tf32_trunc,
             "mma": mma_tf32, "ZERO": ZERO}
    exec(compile("\n".join(L), f"<im2win 3xtf32 multiply k_b={k_b} {opts}>", "exec"), scope)  # noqa: S102
    multiply = cuda.jit(device=True)(scope["multiply"])

    @cuda.jit(device=True)
    def store_tile(y, acc, tid, m0, n0, M, NPQ, PQ):
        """Each accumulator to y[img, m, p, q] (C fragment: rows g, g + 8, columns 2q, 2q + 1 of each
        tile), bounds-checked, through ``EPI``."""
        warp = IX(tid // 32)
        lane = IX(tid - warp * 32)
        g = IX(lane // 4)
        q = IX(lane - g * 4)
        wm = IX(warp // WN)
        wn = IX(warp - wm * WN)
        obase = cuda.local.array(NBF, int32)
        for j in range(NBF):
            if PACKED and PAIR:     # column bits 0 and 3 swapped (docstring)
                n = IX(n0 + wn * (NN * 8) + ((j // 2) & ~1) * 8 + (j % 2) * 8 + 2 * q + ((j // 2) & 1))
            else:
                n = IX(n0 + wn * (NN * 8) + (j // 2) * 8 + 2 * q + (j % 2))
            ob = IX(-1)
            if n < NPQ:
                img = IX(n // PQ)
                ob = IX(IX(img * M) * PQ + (n - img * PQ))
            obase[j] = ob
        for mt in range(MT):
            for h in range(2):
                if PACKED:          # row bits 0 and 3 swapped (docstring)
                    m = IX(m0 + wm * (MT * 16) + mt * 16 + (g & 6) + 8 * (g & 1) + h)
                else:
                    m = IX(m0 + wm * (MT * 16) + mt * 16 + g + 8 * h)
                if m < M:
                    mo = IX(m * PQ)
                    for nn in range(NN):
                        for e in range(2):
                            if obase[2 * nn + e] >= 0:
                                store1(y, IX(obase[2 * nn + e] + mo), EPI(acc[(mt * NN + nn) * 4 + 2 * h + e], m))

    return lane_bases, multiply, store_tile, stage_bases, slot_a, slot_b, (WM, WN)


def make_conv_kernel(m_b: int, n_b: int, k_b: int, m_t: int, n_t: int, vector: bool = True,
                     prefetch: bool = True, prologue=None, epilogue=None, max_registers: int | None = None,
                     staging: str = "registers", stages: int = 2, unroll: bool = True, math: str = "fp32",
                     tc: TcOptions | None = None):
    """The tiled im2win convolution kernel ``conv(J, w, y, prm, koff)`` (module docstring). ``max_registers``:
    a cap on the registers per thread the compiler may use (None: ``register_cap(threads)``, the rule that
    leaves room for at least two blocks and 12 warps per SM; 255: no cap; ignored by the CUDA simulator).
    ``unroll``: the micro-kernel's K loop written out (``_make_multiply``; False: rolled, for comparison). ``staging``:
    ``"registers"`` (global -> registers -> shared, ``prefetch``: two stages) or ``"async"`` (cp.async
    straight into a ring of ``stages`` (2-4) shared stages; no ``prologue``). ``math``: ``"fp32"`` (the
    outer-product micro-kernel on the FP32 pipe) or ``"3xtf32"`` (m16n8k8 TF32 MMAs by the 3xTF32 split,
    FP32-accurate: ``_make_tc_parts``; the same staging, grid, threads and hooks; the thread tile m_t x n_t
    only fixes the thread count, and needs NT a multiple of 32, k_b of 8 and a warp grid of whole 16 x 8
    tiles; ``tc``: its ``TcOptions``, None: the defaults). Raises KernelInputError (one line) for a layout it
    cannot tile."""
    if max_registers is not None and (isinstance(max_registers, bool) or not isinstance(max_registers, int)
                                      or not 32 <= max_registers <= 255):
        raise KernelInputError(f"max_registers={max_registers!r} is not allowed: None or an integer from 32 to 255")
    for name, v in (("m_b", m_b), ("n_b", n_b), ("k_b", k_b), ("m_t", m_t), ("n_t", n_t)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise KernelInputError(f"{name}={v!r} is not allowed: it must be a positive integer")
    if m_b % m_t or n_b % n_t:
        raise KernelInputError(f"m_b={m_b}, n_b={n_b}, m_t={m_t}, n_t={n_t}: m_b must be a multiple of m_t and n_b of n_t")
    if staging not in STAGINGS:
        raise KernelInputError(f"staging={staging!r} is not allowed (allowed: {', '.join(STAGINGS)})")
    if math not in MATHS:
        raise KernelInputError(f"math={math!r} is not allowed (allowed: {', '.join(MATHS)})")
    TC = math == "3xtf32"
    ASYNC = staging == "async"
    if ASYNC and (prologue is not None or not prefetch or stages not in (2, 3, 4)):
        raise KernelInputError(f"staging='async' with stages={stages}, prefetch={prefetch}, prologue="
                               f"{'given' if prologue is not None else None} is not allowed: it needs 2-4 stages, "
                               f"prefetch and no prologue (cp.async bypasses the registers)")
    TX, TY = n_b // n_t, m_b // m_t
    NT = TX * TY
    if NT > 1024 or NT % k_b:
        raise KernelInputError(f"m_b={m_b}, n_b={n_b}, m_t={m_t}, n_t={n_t}, k_b={k_b} give {NT} threads: at most 1024 "
                               f"and a multiple of k_b are allowed")
    if TC and (k_b % 8 or NT % 32):
        raise KernelInputError(f"math='3xtf32' with k_b={k_b} and {NT} threads is not allowed: k_b must be a multiple "
                               f"of 8 and the threads of 32 (whole warps of m16n8k8 MMAs)")
    if max_registers is None:
        max_registers = register_cap(NT)
    STAGES = stages if ASYNC else (2 if prefetch else 1)
    TC_OPTS = tc if tc is not None else TcOptions()
    if TC and not isinstance(TC_OPTS, TcOptions):
        raise KernelInputError(f"tc={tc!r} is not allowed: None or a TcOptions")
    RSTEP = NT // k_b           # rows (pixels) between a thread's consecutive staged loads
    # the 3xTF32 build's packed fragments: 8-k slices of 8 (m_b + 2) / 8 (n_b + 2) floats (``_make_tc_parts``)
    PACKED_STAGE = TC and TC_OPTS.fragments == "packed"      # staged slots from slot_a / slot_b (else rows)
    AS, BS = (m_b + 2, n_b + 2) if PACKED_STAGE else (m_b + PAD, n_b + PAD)
    A_ST, B_ST = k_b * AS, k_b * BS
    B0 = STAGES * A_ST
    SMEM = STAGES * (A_ST + B_ST)
    if 4 * SMEM > MAX_STATIC_SHARED_BYTES:
        raise KernelInputError(f"m_b={m_b}, n_b={n_b}, k_b={k_b} with {STAGES} stages need {4 * SMEM:,} bytes of "
                               f"shared memory: at most {MAX_STATIC_SHARED_BYTES:,} are allowed (static)")
    LA, LB = -(-m_b * k_b // NT), -(-k_b * n_b // NT)
    A_EXACT = LA * RSTEP == m_b         # every staged filter row inside the tile (no row test)
    B_EXACT = LB * RSTEP == n_b
    MG, MSP, MQ = _fragment(m_t, m_b)
    NG, NSP, NQ = _fragment(n_t, n_b)
    VEC = bool(vector)
    PRO = prologue if prologue is not None else identity_prologue
    EPI = epilogue if epilogue is not None else identity_epilogue
    ACC = m_t * n_t
    IX = int32
    wait_ring = cp_async_wait_group(max(STAGES - 2, 0))

    @cuda.jit(device=True)
    def stage_fast(ra, rb, J, w, abase, nbase, koff, k, KDP):
        """Interior tile, k < C*R*S: this thread's filter and window values at GEMM row k, no tests."""
        a_off = koff[k]
        b_off = koff[KDP + k]
        for ll in range(IX(LA)):
            if A_EXACT or abase[ll] >= 0:
                ra[ll] = load1(w, IX(abase[ll] + a_off))
        for ll in range(IX(LB)):
            if B_EXACT or nbase[ll] >= 0:
                rb[ll] = PRO(load1(J, IX(nbase[ll] + b_off)), k)

    @cuda.jit(device=True)
    def stage_checked(ra, rb, J, w, abase, nbase, koff, k, KD, KDP):
        """Any tile: the same, zero outside the filters, the pixels and C*R*S."""
        kk_ok = k < KD
        a_off = koff[k]
        b_off = koff[KDP + k]
        for ll in range(IX(LA)):
            val = ZERO
            if kk_ok and abase[ll] >= 0:
                val = load1(w, IX(abase[ll] + a_off))
            ra[ll] = val
        for ll in range(IX(LB)):
            val = ZERO
            if kk_ok and nbase[ll] >= 0:
                val = PRO(load1(J, IX(nbase[ll] + b_off)), k)
            rb[ll] = val

    @cuda.jit(device=True)
    def registers_to_stage(smem, ra, rb, r0, a_dst, b_dst, buf):
        for ll in range(IX(LA)):
            if A_EXACT or IX(r0 + ll * RSTEP) < m_b:
                store1(smem, IX(buf * A_ST + (slot_a(a_dst, ll) if PACKED_STAGE else a_dst + ll * RSTEP)), ra[ll])
        for ll in range(IX(LB)):
            if B_EXACT or IX(r0 + ll * RSTEP) < n_b:
                store1(smem, IX(B0 + buf * B_ST + (slot_b(b_dst, ll) if PACKED_STAGE else b_dst + ll * RSTEP)), rb[ll])

    @cuda.jit(device=True)
    def stage_async(smem, J, w, abase, nbase, koff, k, KD, KDP, r0, a_dst, b_dst, slot):
        """cp.async of this thread's filter and window values at GEMM row k into ring slot ``slot``,
        zero-filled outside the filters, the pixels and C*R*S (not committed)."""
        kk_ok = k < KD
        a_off = koff[k]
        b_off = koff[KDP + k]
        for ll in range(IX(LA)):
            d = slot_a(a_dst, ll) if PACKED_STAGE else IX(a_dst + ll * RSTEP)
            if A_EXACT or IX(r0 + ll * RSTEP) < m_b:
                if kk_ok and abase[ll] >= 0:
                    cp_async4(smem, IX(slot * A_ST + d), w, IX(abase[ll] + a_off), 4)
                else:
                    cp_async4(smem, IX(slot * A_ST + d), w, 0, 0)
        for ll in range(IX(LB)):
            d = slot_b(b_dst, ll) if PACKED_STAGE else IX(b_dst + ll * RSTEP)
            if B_EXACT or IX(r0 + ll * RSTEP) < n_b:
                if kk_ok and nbase[ll] >= 0:
                    cp_async4(smem, IX(B0 + slot * B_ST + d), J, IX(nbase[ll] + b_off), 4)
                else:
                    cp_async4(smem, IX(B0 + slot * B_ST + d), J, 0, 0)

    frag_a = _make_fragment(MG, MSP, MQ, m_t, VEC)
    frag_b = _make_fragment(NG, NSP, NQ, n_t, VEC)

    @cuda.jit(device=True)
    def outer(acc, fa, fb):
        for i in range(m_t):
            for j in range(n_t):
                acc[i * n_t + j] += fa[i] * fb[j]

    @cuda.jit(device=True)
    def lane_bases_fp32(tid):
        """(A's, B's) offset of this thread's first fragment in a stage."""
        tx = IX(tid % TX)
        ty = IX(tid // TX)
        return (IX(ty * 4) if MQ else IX(ty * m_t)), (IX(tx * 4) if NQ else IX(tx * n_t))

    @cuda.jit(device=True)
    def store_tile_fp32(y, acc, tid, m0, n0, M, NPQ, PQ):
        """Each output of the register tile to y[img, m, p, q], bounds-checked, through ``EPI``."""
        tx = IX(tid % TX)
        ty = IX(tid // TX)
        obase = cuda.local.array(n_t, int32)
        for j in range(n_t):
            col = IX((j // 4) * NSP + tx * 4 + (j % 4)) if NQ else IX(tx * n_t + j)
            n = IX(n0 + col)
            ob = IX(-1)
            if n < NPQ:
                img = IX(n // PQ)
                ob = IX(IX(img * M) * PQ + (n - img * PQ))
            obase[j] = ob
        # A quad of columns (n0 + col a multiple of 4) lies in one image and 16-byte aligned when P*Q is a
        # multiple of 4: one 128-bit store when all four are in range.
        quad_ok = NQ and (PQ & 3) == 0
        for i in range(m_t):
            row = IX((i // 4) * MSP + ty * 4 + (i % 4)) if MQ else IX(ty * m_t + i)
            m = IX(m0 + row)
            if m < M:
                mo = IX(m * PQ)
                if NQ:
                    for g in range(NG):
                        j0 = 4 * g
                        if quad_ok and obase[j0 + 3] >= 0:
                            store4(y, IX(obase[j0] + mo), EPI(acc[i * n_t + j0], m), EPI(acc[i * n_t + j0 + 1], m),
                                   EPI(acc[i * n_t + j0 + 2], m), EPI(acc[i * n_t + j0 + 3], m))
                        else:
                            for h in range(4):
                                if obase[j0 + h] >= 0:
                                    store1(y, IX(obase[j0 + h] + mo), EPI(acc[i * n_t + j0 + h], m))
                else:
                    for j in range(n_t):
                        if obase[j] >= 0:
                            store1(y, IX(obase[j] + mo), EPI(acc[i * n_t + j], m))

    # the row layout's slots (the FP32 kernel and fragments="rows" compute them inline; these only type the
    # branches that PACKED_STAGE leaves dead, so the FP32 kernel's code is as it was)
    @cuda.jit(device=True)
    def stage_bases_fp32(kk, r0):
        """This thread's first staged slot in a stage, A's and B's."""
        return IX(kk * AS + r0), IX(kk * BS + r0)

    @cuda.jit(device=True)
    def slot_a_fp32(d, ll):
        return IX(d + ll * RSTEP)

    @cuda.jit(device=True)
    def slot_b_fp32(d, ll):
        return IX(d + ll * RSTEP)

    if TC:
        try:
            lane_bases, multiply, store_tile, stage_bases, slot_a, slot_b, WARPS = _make_tc_parts(
                m_b, n_b, k_b, NT, AS, BS, A_ST, B_ST, B0, EPI, RSTEP, TC_OPTS)
        except ValueError as exc:
            raise KernelInputError(f"math='3xtf32': {exc}") from None
        FA = FB = 1                 # the micro-kernel's fragments are its own locals
        FRAG = uint32
    else:
        lane_bases, store_tile, FA, FB, WARPS, FRAG = lane_bases_fp32, store_tile_fp32, m_t, n_t, None, float32
        stage_bases, slot_a, slot_b = stage_bases_fp32, slot_a_fp32, slot_b_fp32
        multiply = _make_multiply(k_b, AS, BS, A_ST, B_ST, B0, frag_a, frag_b, outer, unroll)

    jit = cuda.jit(max_registers=max_registers) if max_registers and not numba_config.ENABLE_CUDASIM else cuda.jit

    @jit
    def conv(J, w, y, prm, koff):
        C, P, Q, stride, WW, M, NPQ, KD = (IX(prm[0]), IX(prm[1]), IX(prm[2]), IX(prm[5]), IX(prm[6]), IX(prm[7]),
                                           IX(prm[8]), IX(prm[9]))
        tid = cuda.threadIdx.x
        tiles_m = IX(prm[10])
        R = IX(prm[3])
        bid = cuda.blockIdx.x
        nt = IX(bid // tiles_m)
        m0 = IX((bid - nt * tiles_m) * m_b)
        n0 = IX(nt * n_b)
        PQ = IX(P * Q)
        steps = IX((KD + (k_b - 1)) // k_b)
        KDP = IX(steps * k_b)
        interior = IX(m0 + m_b) <= M and IX(n0 + n_b) <= NPQ
        fast_steps = IX(KD // k_b) if interior else IX(0)     # steps whose loads need no test
        smem = cuda.shared.array(SMEM, float32, alignment=SHARED_ALIGNMENT)
        acc = cuda.local.array(ACC, float32)
        fa = cuda.local.array(FA, FRAG)
        fb = cuda.local.array(FB, FRAG)
        ra = cuda.local.array(LA, float32)
        rb = cuda.local.array(LB, float32)
        abase = cuda.local.array(LA, int32)
        nbase = cuda.local.array(LB, int32)
        for q in range(ACC):
            acc[q] = ZERO
        kk_lane = IX(tid % k_b)
        r0 = IX(tid // k_b)
        if PACKED_STAGE:                        # this thread's staged slots' bases in a stage (slot_a, slot_b)
            a_dst, b_dst = stage_bases(kk_lane, r0)
        else:                                   # its first staged slot in a stage (A, then B)
            a_dst = IX(kk_lane * AS + r0)
            b_dst = IX(kk_lane * BS + r0)
        # Per staged filter row: w's flat index of its row (-1: outside the tile or M); per staged pixel:
        # J's flat index of its window start at channel 0 (-1: outside the tile or N*P*Q).
        for ll in range(IX(LA)):
            mrow = IX(r0 + ll * RSTEP)
            m = IX(m0 + mrow)
            ab = IX(-1)
            if mrow < m_b and m < M:
                ab = IX(m * KD)
            abase[ll] = ab
        for ll in range(IX(LB)):
            ncol = IX(r0 + ll * RSTEP)
            n = IX(n0 + ncol)
            nb = IX(-1)
            if ncol < n_b and n < NPQ:
                img = IX(n // PQ)
                pq = IX(n - img * PQ)
                oh = IX(pq // Q)
                ow = IX(pq - oh * Q)
                nb = IX(IX(IX(img * C) * P + oh) * WW + ow * stride * R)
            nbase[ll] = nb
        a_thr, b_thr = lane_bases(tid)
        if ASYNC:
            for st in range(STAGES - 1):        # the ring's first stages in flight
                if st < steps:
                    stage_async(smem, J, w, abase, nbase, koff, IX(st * k_b + kk_lane), KD, KDP, r0, a_dst, b_dst, st)
                cp_async_commit()
            for s in range(steps):
                wait_ring()                     # this thread's copies of step s have landed ...
                cuda.syncthreads()              # ... and everyone's; slot (s-1) % STAGES is read by no one
                nxt = IX(s + (STAGES - 1))
                if nxt < steps:
                    stage_async(smem, J, w, abase, nbase, koff, IX(nxt * k_b + kk_lane), KD, KDP, r0, a_dst, b_dst,
                                IX(nxt % STAGES))
                cp_async_commit()
                multiply(smem, acc, fa, fb, IX(s % STAGES), a_thr, b_thr)
        else:
            if fast_steps > 0:
                stage_fast(ra, rb, J, w, abase, nbase, koff, kk_lane, KDP)
            else:
                stage_checked(ra, rb, J, w, abase, nbase, koff, kk_lane, KD, KDP)
            registers_to_stage(smem, ra, rb, r0, a_dst, b_dst, 0)
            cuda.syncthreads()
            for s in range(steps):
                more = IX(s + 1) < steps
                k = IX((s + 1) * k_b + kk_lane)
                if STAGES == 2:
                    buf = IX(s & 1)
                    if more:    # the next step's global loads, in flight during the multiply-adds below
                        if IX(s + 1) < fast_steps:
                            stage_fast(ra, rb, J, w, abase, nbase, koff, k, KDP)
                        else:
                            stage_checked(ra, rb, J, w, abase, nbase, koff, k, KD, KDP)
                    multiply(smem, acc, fa, fb, buf, a_thr, b_thr)
                    if more:    # the other stage: last read in step s-1, which ended with a barrier
                        registers_to_stage(smem, ra, rb, r0, a_dst, b_dst, IX(1 - buf))
                    cuda.syncthreads()
                else:
                    multiply(smem, acc, fa, fb, 0, a_thr, b_thr)
                    cuda.syncthreads()
                    if more:
                        if IX(s + 1) < fast_steps:
                            stage_fast(ra, rb, J, w, abase, nbase, koff, k, KDP)
                        else:
                            stage_checked(ra, rb, J, w, abase, nbase, koff, k, KD, KDP)
                        registers_to_stage(smem, ra, rb, r0, a_dst, b_dst, 0)
                        cuda.syncthreads()
        store_tile(y, acc, tid, m0, n0, M, NPQ, PQ)

    conv.threads = NT
    conv.shared_bytes = 4 * SMEM
    conv.layout = dict(m_b=m_b, n_b=n_b, k_b=k_b, m_t=m_t, n_t=n_t, vector=VEC, prefetch=bool(prefetch),
                       max_registers=max_registers, staging=staging, stages=STAGES, math=math, warps=WARPS,
                       tc=TC_OPTS if TC else None)
    return conv


def make_basic_kernel(tile: int = 32):
    """Alg. 2's kernel ``basic(J, w, y, prm)``: one output per thread, ``tile x tile`` threads per block."""
    if isinstance(tile, bool) or not isinstance(tile, int) or not 1 <= tile <= 32:
        raise KernelInputError(f"tile={tile!r} is not allowed: it must be an integer from 1 to 32")

    @cuda.jit
    def basic(J, w, y, prm):
        C, P, Q, R, S, stride, WW, M, NPQ, KD = (prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7],
                                                 prm[8], prm[9])
        tid = cuda.threadIdx.x
        tiles_m = prm[10]
        nt = cuda.blockIdx.x // tiles_m
        m = (cuda.blockIdx.x - nt * tiles_m) * tile + tid % tile
        n = nt * tile + tid // tile
        if m < M and n < NPQ:
            PQ = P * Q
            RS = R * S
            img = n // PQ
            pq = n - img * PQ
            oh = pq // Q
            ow = pq - oh * Q
            jb = (img * C * P + oh) * WW + ow * stride * R
            acc = float32(0.0)
            for c in range(C):
                for v in range(S):
                    for u in range(R):
                        acc += load1(w, m * KD + c * RS + u * S + v) * load1(J, jb + c * P * WW + v * R + u)
            store1(y, img * M * PQ + m * PQ + pq, acc)

    basic.threads = tile * tile
    basic.shared_bytes = 0
    basic.layout = dict(tile=tile)
    return basic


def reference_conv_from_im2win(J: np.ndarray, w: np.ndarray, stride: int, out_w: int) -> np.ndarray:
    """The convolution read from an im2win tensor J (N, C, P, WW) in float64 (the oracle of the GEMM
    view; compare with ``gpu.sparse.reference_conv2d`` on the input itself)."""
    n, c, p, _ = J.shape
    k, _, r, s = w.shape
    J64, w64 = J.astype(np.float64), w.astype(np.float64)
    y = np.zeros((n, k, p, out_w))
    for q in range(out_w):
        for v in range(s):
            for u in range(r):
                col = q * stride * r + v * r + u
                y[:, :, :, q] += np.einsum("ncp,kc->nkp", J64[:, :, :, col], w64[:, :, u, v])
    return y
