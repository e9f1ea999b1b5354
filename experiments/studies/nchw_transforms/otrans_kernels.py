"""Experimental builds of the NCHW output transform (``gpu.kernels.winograd.nchw.otrans_nchw``), to find
where its time goes against the NHWC kernel (``nchw_variants --set experiments``).

``otrans_variant(m, mode)`` gives a kernel with the runtime kernel's signature ``(prm, M, Y, KC, TX)`` and
launch geometry; ``mode``:

- ``default``: the runtime kernel (phase 1: thread (t, k) loads M, transforms, writes its m x m outputs
  to shared memory; barrier; phase 2: the strip's rows stored to Y);
- ``old``: the runtime kernel's code before its store loop was made lean (a test per row, addresses formed
  per channel: git e45827b);
- ``dummy``: phase 2 stores the same elements from the same threads, but to a contiguous layout (block b's
  channel rows one after another: Y must hold ``blocks * KC * m * TX * m`` floats): the store pattern apart;
- ``nobar``: no barrier between the phases (wrong results: the time of the phase barrier apart);
- ``nostore``: phase 1 only (M read, product, shared stores): the time of the loads and the product;
- ``noload``: phase 2 only (each thread writes zeros for its outputs to shared memory, barrier, the stores);
- ``cap72``, ``cap88``: the runtime kernel with another register cap;
- ``stcs``: phase 2's stores as ``st.global.cs`` (evict-first);
- ``ldcs``: phase 1's loads of M as ``ld.global.cs``;
- ``staged``: phase 1 copies the block's whole M slice (alpha^2 x threads floats) into shared memory by
  cp.async, so that all of a thread's alpha^2 loads are in flight at once (the runtime kernel's product
  loads M a column of alpha at a time: at most alpha loads of a thread in flight); after a barrier every thread
  transforms its tile from shared memory, with a second barrier between its last read and its first output
  store (the outputs alias the input stage); then phase 2 as ``default``. Shared memory: ``staged_shared``;
- ``loop``: signature ``(prm, M, Y, KC, TX, G)``: block b takes the strips b, b + G, b + 2G, ... in turn
  (``loop_kernel``), so that a thread's loads of its next strip follow its stores of the last one at once
  (stores do not wait) and the blocks of an SM do not run their loads and their stores in step; the
  product's barrier before its first output store keeps the next strip's outputs from overwriting the
  shared plane that the last strip's stores still read; every thread runs the product (lanes without a tile
  or channel on clamped inputs, their outputs never stored).

- ``rows``: blocks of one whole tile row (TX = tiles_x, at least 32 threads) whose store phase writes each
  channel's rows as the one contiguous run of Y they are, in 128-byte-aligned warp windows, so that every
  store instruction writes whole 32-byte sectors except at a run's ends, whatever the row length
  (``rows_kernel``; the runtime kernel stores a row at a time, a thread on a column, and a row of Q floats
  with Q not a multiple of 8 starts off a sector boundary). ``nchw_variants --set rows`` times it.
- ``linear``: as ``rows``, but the shared stage of a channel is laid out as the output run itself (rows of
  Q floats, the product's stores past the image's last column dropped), so the store phase is one shared
  load and one global store per element at addresses stepped by 32, with no carries (``linear_kernel``).
- ``linearF``: as ``linear``, the product's stores of a tile whose columns all lie inside the image
  without a test per column (``linear_kernel(..., full_branch=True)``).

Under the CUDA simulator the inline-PTX loads and stores are plain ones.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import config, cuda, float32, types

from gpu.kernels.common.async_copy import cp_async4, cp_async_commit, cp_async_wait_group
from gpu.kernels.common.vector_access import load1, opaque_index, py_load1, py_opaque_index, py_store1, store1
from gpu.kernels.winograd import nchw
from gpu.kernels.winograd.device import P_K, P_N, P_P, P_Q, P_TILES, P_TILES_X, P_TILES_Y
from gpu.kernels.winograd.transforms import _Consts, compile_generated, product_lines
from megasim.algorithms.winograd.winograd_math import matrices

MODES = ("default", "old", "dummy", "nobar", "nostore", "noload", "stcs", "ldcs", "staged", "loop", "cap72", "cap88",
         "rows", "linear", "linearF")

if config.ENABLE_CUDASIM:
    st_cs, ld_cs = py_store1, py_load1
else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    from gpu.kernels.common.async_copy import element_address

    _F32 = ir.FloatType()
    _I64 = ir.IntType(64)

    @intrinsic
    def st_cs(typingctx, a, i, v):
        """st.global.cs.f32 of v to a.flat[i]."""
        def codegen(context, builder, sig, args):
            addr = element_address(context, builder, sig.args[0], args[0], sig.args[1], args[1], 1, _I64)
            val = context.cast(builder, args[2], sig.args[2], types.float32)
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I64, _F32]), "st.global.cs.f32 [$0], $1;",
                               "l,f,~{memory}", side_effect=True)
            builder.call(asm, [addr, val])
            return context.get_dummy_value()
        return types.void(a, i, v), codegen

    @intrinsic
    def ld_cs(typingctx, a, i):
        """ld.global.cs.f32 of a.flat[i]."""
        def codegen(context, builder, sig, args):
            addr = element_address(context, builder, sig.args[0], args[0], sig.args[1], args[1], 1, _I64)
            asm = ir.InlineAsm(ir.FunctionType(_F32, [_I64]), "ld.global.cs.f32 $0, [$1];", "=f,l",
                               side_effect=False)
            return builder.call(asm, [addr])
        return types.float32(a, i), codegen


def staged_shared(m: int, kc: int, tx: int) -> int:
    """Dynamic shared bytes of the staged kernel: the larger of the M stage and the output planes."""
    return 4 * max((m + 2) ** 2 * kc * tx, kc * nchw.otrans_plane(m, tx))


def _gen(m: int, consts: _Consts, sync_before_store: bool) -> str:
    _, _, at = matrices(m)
    a = m + 2
    lines = [f"def otrans_x_m{m}{'_sync' if sync_before_store else ''}(M, src, plane, s, base, row):",
             "    plane = opaque_index(plane)", "    row = opaque_index(row)"]

    def load(i, j):
        return f"    s{i}_{j} = load1(M, src + {i * a + j} * plane)"

    def store_row(i):
        pre = ["    cuda.syncthreads()"] if (sync_before_store and i == 0) else []
        return pre + [f"    store1(s, base + {i} * row + {j}, y{i}_{j})" for j in range(m)]

    lines += product_lines(at, a, m, load, store_row, "s", "y", consts)
    return "\n".join(lines) + "\n"


def _pair(m: int, sync: bool, loader):
    consts = _Consts()
    src = _gen(m, consts, sync)
    _, _, dev_fn = compile_generated(src, consts, "experiments.studies.nchw_transforms.otrans_kernels",
                                     dict(load1=py_load1, store1=py_store1, opaque_index=py_opaque_index, cuda=cuda),
                                     dict(load1=loader, store1=store1, opaque_index=opaque_index, cuda=cuda))
    return dev_fn


@lru_cache(maxsize=None)
def otrans_variant(m: int, mode: str, max_registers: int | None = nchw.OTRANS_MAX_REGISTERS):
    """The otrans kernel of tile m built as ``mode`` (module docstring)."""
    if mode not in MODES:
        raise ValueError(mode)
    if mode == "default":
        return nchw.nchw_kernels_for(m)[1]
    if mode == "loop":
        return loop_kernel(m, max_registers)
    if mode == "rows":
        return rows_kernel(m, max_registers)
    if mode == "linear":
        return linear_kernel(m, max_registers)
    if mode == "linearF":
        return linear_kernel(m, max_registers, True)
    if mode.startswith("cap"):
        return nchw.nchw_kernels_for(m, True, int(mode[3:]))[1]
    pair = _pair(m, mode == "staged", ld_cs if mode == "ldcs" else load1)
    capped = max_registers is not None and not config.ENABLE_CUDASIM
    jit = cuda.jit(max_registers=max_registers) if capped else cuda.jit
    MT = m
    A2 = (m + 2) ** 2
    ZERO = np.float32(0.0)
    BARRIER = mode != "nobar"
    STORE = mode != "nostore"
    DUMMY = mode == "dummy"
    CS = mode == "stcs"
    STAGED = mode == "staged"
    NOLOAD = mode == "noload"
    wait_all = cp_async_wait_group(0)
    block_strip = nchw._block_strip

    @jit
    def otrans_x(prm, M, Y, KC, TX):
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        K = prm[P_K]
        P = prm[P_P]
        Q = prm[P_Q]
        tiles_x = prm[P_TILES_X]
        tiles_y = prm[P_TILES_Y]
        n, ty, tx0, k0 = block_strip(cuda.blockIdx.x, K, KC, tiles_x, tiles_y, TX)
        width = TX * MT
        plane = (MT * width) | 1
        s = cuda.shared.array(0, float32)
        tile0 = (n * tiles_y + ty) * tiles_x + tx0
        kk = tid % KC
        t = tid // KC
        k = k0 + kk
        tx = tx0 + t
        ok = k < K and t < TX and tx < tiles_x
        if STAGED:
            if ok:
                src = (tile0 + t) * K + k
                stride = prm[P_TILES] * K
                for e in range(A2):
                    cp_async4(s, e * nthr + tid, M, src + e * stride, 4)
            else:
                for e in range(A2):
                    store1(s, e * nthr + tid, ZERO)
            cp_async_commit()
            wait_all()
            cuda.syncthreads()
            pair(s, tid, nthr, s, kk * plane + t * MT, width)
        elif NOLOAD:
            for i in range(MT):
                for jj in range(MT):
                    store1(s, kk * plane + t * MT + i * width + jj, ZERO)
        elif ok:
            pair(M, (tile0 + t) * K + k, prm[P_TILES] * K, s, kk * plane + t * MT, width)
        if BARRIER:
            cuda.syncthreads()
        if STORE:
            oy0 = MT * ty
            ox0 = MT * tx0
            if width <= nthr:
                per = nthr // width
                j = tid % width
                first = tid // width
                xx = ox0 + j
                if first < per and xx < Q:
                    i_hi = P - oy0 if P - oy0 < MT else MT
                    for kk in range(first, KC, per):
                        k = k0 + kk
                        if k < K:
                            if DUMMY:
                                gb = (cuda.blockIdx.x * KC + kk) * MT * width + j
                                rs = width
                            else:
                                gb = ((n * K + k) * P + oy0) * Q + xx
                                rs = Q
                            sb = kk * plane + j
                            for i in range(MT):
                                if i < i_hi:
                                    if CS:
                                        st_cs(Y, gb + i * rs, load1(s, sb + i * width))
                                    else:
                                        store1(Y, gb + i * rs, load1(s, sb + i * width))
            else:
                for row in range(KC * MT):
                    kk = row // MT
                    i = row - kk * MT
                    k = k0 + kk
                    yy = oy0 + i
                    if k < K and yy < P:
                        if DUMMY:
                            base = ((cuda.blockIdx.x * KC + kk) * MT + i) * width - ox0
                        else:
                            base = ((n * K + k) * P + yy) * Q
                        for j in range(tid, width, nthr):
                            xx = ox0 + j
                            if xx < Q:
                                if CS:
                                    st_cs(Y, base + xx, load1(s, kk * plane + i * width + j))
                                else:
                                    store1(Y, base + xx, load1(s, kk * plane + i * width + j))

    return otrans_x


def strips_total(p, m: int, kc: int, tx: int) -> int:
    """Strips x chunks of a problem: the runtime kernel's blocks (``nchw._blocks``), the loop kernel's work items."""
    return nchw._blocks(p, m, p.k, kc, tx)


@lru_cache(maxsize=None)
def loop_kernel(m: int, max_registers: int | None = nchw.OTRANS_MAX_REGISTERS):
    """The ``loop`` build (module docstring)."""
    pair = _pair(m, True, load1)
    capped = max_registers is not None and not config.ENABLE_CUDASIM
    jit = cuda.jit(max_registers=max_registers) if capped else cuda.jit
    MT = m
    block_strip = nchw._block_strip

    @jit
    def otrans_loop(prm, M, Y, KC, TX, G):
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        K = prm[P_K]
        P = prm[P_P]
        Q = prm[P_Q]
        tiles_x = prm[P_TILES_X]
        tiles_y = prm[P_TILES_Y]
        total = prm[P_N] * tiles_y * ((tiles_x + TX - 1) // TX) * ((K + KC - 1) // KC)
        width = TX * MT
        plane = (MT * width) | 1
        stride = prm[P_TILES] * K
        s = cuda.shared.array(0, float32)
        kq = tid % KC
        t = tid // KC
        per = nthr // width
        j = tid % width
        first = tid // width
        for b in range(cuda.blockIdx.x, total, G):
            n, ty, tx0, k0 = block_strip(b, K, KC, tiles_x, tiles_y, TX)
            k = k0 + kq
            tx = tx0 + t
            src = 0
            if k < K and t < TX and tx < tiles_x:
                src = ((n * tiles_y + ty) * tiles_x + tx) * K + k
            pair(M, src, stride, s, kq * plane + t * MT, width)
            cuda.syncthreads()
            oy0 = MT * ty
            ox0 = MT * tx0
            if width <= nthr:
                xx = ox0 + j
                if first < per and xx < Q:
                    i_hi = P - oy0 if P - oy0 < MT else MT
                    for kk in range(first, KC, per):
                        kg = k0 + kk
                        if kg < K:
                            gb = ((n * K + kg) * P + oy0) * Q + xx
                            sb = kk * plane + j
                            for i in range(MT):
                                if i < i_hi:
                                    store1(Y, gb + i * Q, load1(s, sb + i * width))
            else:
                for row in range(KC * MT):
                    kk = row // MT
                    i = row - kk * MT
                    kg = k0 + kk
                    yy = oy0 + i
                    if kg < K and yy < P:
                        base = ((n * K + kg) * P + yy) * Q
                        for jj in range(tid, width, nthr):
                            xx = ox0 + jj
                            if xx < Q:
                                store1(Y, base + xx, load1(s, kk * plane + i * width + jj))

    return otrans_loop


@lru_cache(maxsize=None)
def rows_kernel(m: int, max_registers: int | None = nchw.OTRANS_MAX_REGISTERS):
    """The ``rows`` build (module docstring): the runtime kernel's product, then the flat store.

    The block's outputs of channel k are rows oy0 .. oy0 + rr - 1 of its plane, whole: one contiguous run
    of rr * Q floats, and where the tile row is the whole plane (rr = P) the runs of the chunk's channels
    follow each other: one run of nk * P * Q floats (a segment). Warps store windows of 32 consecutive
    floats of a segment, the windows aligned to 128 bytes of Y (the first starts before the segment; lanes
    outside it store nothing). Warp w takes segments w, w + nw, ...; with fewer segments than warps each is
    split into nw // nseg parts of whole windows. A lane's float r of a segment is (channel kq, row i,
    column x) of the shared stage, found once per segment by subtraction (its first r is below 64; a part
    after the first is found by one division per thread) and then stepped by additions: r += 32 is x += 32
    with carries into i and kq. No division per window or per element (the first build, in the runtime kernel
    at 7fbb339, divided per segment and per thread with 64-bit divisions, about ten, and ran up to 4.4x the
    row store's time: experiments/results/nvidia-h200/nchw_transforms/rows_set_7fbb339.csv).

    Measured (H200, experiments/results/nvidia-h200/nchw_transforms/rows_set.csv): the flat store makes the
    time independent of the row's alignment (im2win/conv8's 110-float rows and vgg-1's 112-float rows, 16
    channels x 16 tiles with opted-in shared memory: 379 and 377 us, where the runtime kernel takes 389 and
    332 us), but the store loop costs more than the row store it replaces (the carries are divergent
    branches; at the same geometry vgg-3 126 us against 82, yolov3-3 89 against 68), so it is slower on every
    layer but conv8 (-2.5%, with the opt-in)."""
    pair = _pair(m, False, load1)
    capped = max_registers is not None and not config.ENABLE_CUDASIM
    jit = cuda.jit(max_registers=max_registers) if capped else cuda.jit
    MT = m
    block_strip = nchw._block_strip

    @jit
    def otrans_rows(prm, M, Y, KC, TX):
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        K = prm[P_K]
        P = prm[P_P]
        Q = prm[P_Q]
        tiles_x = prm[P_TILES_X]
        tiles_y = prm[P_TILES_Y]
        n, ty, tx0, k0 = block_strip(cuda.blockIdx.x, K, KC, tiles_x, tiles_y, TX)
        width = TX * MT
        plane = (MT * width) | 1
        s = cuda.shared.array(0, float32)
        tile0 = (n * tiles_y + ty) * tiles_x
        kk = tid % KC
        t = tid // KC
        k = k0 + kk
        if k < K and t < TX:
            pair(M, (tile0 + t) * K + k, prm[P_TILES] * K, s, kk * plane + t * MT, width)
        cuda.syncthreads()
        oy0 = MT * ty
        rr = P - oy0 if P - oy0 < MT else MT                # rows of each channel in this block
        nk = K - k0 if K - k0 < KC else KC                  # channels of the chunk inside K
        run = rr * Q
        nseg = 1 if rr == P else nk
        seg_len = nk * run if rr == P else run
        nw = nthr // 32
        lane = tid % 32
        w = tid // 32
        pps = 1
        part = 0
        sg = w
        step = nw
        if nseg < nw:                                     # few segments: each split among pps warps
            pps = nw // nseg
            sg = w // pps
            part = w - sg * pps
            step = nw * nseg                              # (one segment per warp)
        while sg < nseg:
            g0 = ((n * K + k0 + sg) * P + oy0) * Q
            a0 = g0 - (g0 & 31)
            nwin = (g0 + seg_len - a0 + 31) // 32
            lo = a0 - g0
            hi = lo + nwin * 32
            if pps > 1:
                hi = lo + ((part + 1) * nwin // pps) * 32
                lo += (part * nwin // pps) * 32
            if hi > seg_len:
                hi = seg_len
            r = lo + lane
            if r < 0:
                r += 32
            if r < hi:
                i = 0
                x = r
                kq = sg
                if r >= 64:                               # a later part: divide once
                    i = r // Q
                    x = r - i * Q
                    c = i // rr
                    kq += c
                    i -= c * rr
                while x >= Q:
                    x -= Q
                    i += 1
                while i >= rr:
                    i -= rr
                    kq += 1
                gi = g0 + r
                while r < hi:
                    store1(Y, gi, load1(s, kq * plane + i * width + x))
                    r += 32
                    gi += 32
                    x += 32
                    while x >= Q:
                        x -= Q
                        i += 1
                    while i >= rr:
                        i -= rr
                        kq += 1
            sg += step

    return otrans_rows


def rows_geometry(channels: int, m: int, tiles_x: int, threads: int,
                  max_shared: int = nchw.MAX_SHARED_BYTES) -> tuple[int, int] | None:
    """(KC, TX = tiles_x) of a ``rows_kernel`` launch in blocks of at most ``threads``: the widest chunk of
    channels (a power of two, at most the channels rounded up and the threads over the row's tiles, at least
    8 or the channels) whose whole tile row fits the threads and ``max_shared`` bytes; None where none does
    or the block would have fewer than 32 threads."""
    top = nchw._pow2_at_least(channels)
    chunk = min(top, nchw._pow2_at_most(max(1, threads // tiles_x)))
    while chunk > min(top, 8) and (chunk * tiles_x > threads or 4 * chunk * nchw.otrans_plane(m, tiles_x) > max_shared):
        chunk //= 2
    if (chunk < min(top, 8) or chunk * tiles_x > threads or chunk * tiles_x < 32
            or 4 * chunk * nchw.otrans_plane(m, tiles_x) > max_shared):
        return None
    return chunk, tiles_x


def _gen_linear(m: int, consts: _Consts, full_branch: bool = False) -> str:
    """The product of ``linear_kernel``: the runtime product's, its stores of columns j >= jl dropped (the
    last tile of a row whose columns run past the image; row stride ``row`` = Q). ``full_branch``: a tile
    whose m columns all lie inside the image (jl >= m, every tile of a row but its last one where Q is not a
    multiple of m) stores its rows without a test per column (one uniform branch per row instead of m - 1
    predicated stores)."""
    _, _, at = matrices(m)
    a = m + 2
    suffix = "_fb" if full_branch else ""
    lines = [f"def otrans_linear_m{m}{suffix}(M, src, plane, s, base, row, jl):",
             "    plane = opaque_index(plane)", "    row = opaque_index(row)"]
    if full_branch:
        lines.append(f"    full = jl >= {m}")

    def load(i, j):
        return f"    s{i}_{j} = load1(M, src + {i * a + j} * plane)"

    def checked(i, pad):
        out = [f"{pad}store1(s, base + {i} * row, y{i}_0)"]
        for j in range(1, m):
            out += [f"{pad}if {j} < jl:", f"{pad}    store1(s, base + {i} * row + {j}, y{i}_{j})"]
        return out

    def store_row(i):
        if not full_branch:
            return checked(i, "    ")
        return (["    if full:"] + [f"        store1(s, base + {i} * row + {j}, y{i}_{j})" for j in range(m)]
                + ["    else:"] + checked(i, "        "))

    lines += product_lines(at, a, m, load, store_row, "s", "y", consts)
    return "\n".join(lines) + "\n"


def linear_plane(m: int, q: int) -> int:
    """Odd floats per channel of ``linear_kernel``'s stage: m rows of Q floats."""
    return (m * q) | 1


@lru_cache(maxsize=None)
def linear_kernel(m: int, max_registers: int | None = nchw.OTRANS_MAX_REGISTERS, full_branch: bool = False):
    """The ``linear`` build (module docstring). Launch: TX = tiles_x (one whole tile row a block, at least
    32 threads: ``rows_geometry``), dynamic shared memory 4 * KC * ``linear_plane(m, Q)``.

    Thread (t, kk) writes its tile's m x m outputs to the stage of channel kk at column t * m of rows of Q
    floats (the columns past Q dropped), so channel kk's outputs are the floats kk * plane + r, r < rr * Q,
    in the order of Y's run for that channel (rows oy0 .. oy0 + rr - 1, whole). The store: warp w takes
    channels w, w + nw, ... (with fewer channels than warps, each channel's windows split among nw // nk
    warps) and stores the run in windows of 32 floats aligned to 128 bytes of Y: a lane's shared and global
    addresses step by 32, nothing else.

    Measured (H200, experiments/results/nvidia-h200/nchw_transforms/rows_linear.csv): im2win/conv8 351 us at
    16 x 16 and conv9 52 us at 32 x 8, against the runtime kernel's 387 and 58 at its strips then (16 x 8,
    32 x 4), but slower on the aligned and the 4-tile rows (vgg-1 352 against 331, vgg-3 102 against 83,
    resnet-2 33 against 29), and the runtime kernel's row store at the same whole-row launch is faster still
    (conv8 328 us: experiments/results/nvidia-h200/nchw_transforms/itrans_conv8.csv), so the runtime took the
    whole-row strips (``nchw._whole_rows``), not this store. ``full_branch``: 1.4-1.8x slower than without it,
    at the same 80 registers. ``full_branch``: the product's stores as ``_gen_linear`` says (mode
    ``linearF``)."""
    consts = _Consts()
    _, _, pair = compile_generated(_gen_linear(m, consts, full_branch), consts, "experiments.studies.nchw_transforms.otrans_kernels",
                                   dict(load1=py_load1, store1=py_store1, opaque_index=py_opaque_index),
                                   dict(load1=load1, store1=store1, opaque_index=opaque_index))
    capped = max_registers is not None and not config.ENABLE_CUDASIM
    jit = cuda.jit(max_registers=max_registers) if capped else cuda.jit
    MT = m
    block_strip = nchw._block_strip

    @jit
    def otrans_linear(prm, M, Y, KC, TX):
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        K = prm[P_K]
        P = prm[P_P]
        Q = prm[P_Q]
        tiles_x = prm[P_TILES_X]
        tiles_y = prm[P_TILES_Y]
        n, ty, tx0, k0 = block_strip(cuda.blockIdx.x, K, KC, tiles_x, tiles_y, TX)
        plane = (MT * Q) | 1
        s = cuda.shared.array(0, float32)
        tile0 = (n * tiles_y + ty) * tiles_x
        kk = tid % KC
        t = tid // KC
        k = k0 + kk
        if k < K and t < TX:
            pair(M, (tile0 + t) * K + k, prm[P_TILES] * K, s, kk * plane + t * MT, Q, Q - t * MT)
        cuda.syncthreads()
        oy0 = MT * ty
        rr = P - oy0 if P - oy0 < MT else MT                # rows of each channel in this block
        nk = K - k0 if K - k0 < KC else KC                  # channels of the chunk inside K
        run = rr * Q
        nw = nthr // 32
        lane = tid % 32
        w = tid // 32
        pps = 1
        part = 0
        sg = w
        step = nw
        if nk < nw:                                       # few channels: each run split among pps warps
            pps = nw // nk
            sg = w // pps
            part = w - sg * pps
            step = nw * nk                                # (one channel per warp)
        while sg < nk:
            g0 = ((n * K + k0 + sg) * P + oy0) * Q
            a0 = g0 - (g0 & 31)
            nwin = (g0 + run - a0 + 31) // 32
            lo = a0 - g0
            hi = lo + nwin * 32
            if pps > 1:
                hi = lo + ((part + 1) * nwin // pps) * 32
                lo += (part * nwin // pps) * 32
            if hi > run:
                hi = run
            r = lo + lane
            if r < 0:
                r += 32
            gi = g0 + r
            si = sg * plane + r
            while r < hi:
                store1(Y, gi, load1(s, si))
                r += 32
                gi += 32
                si += 32
            sg += step

    return otrans_linear
