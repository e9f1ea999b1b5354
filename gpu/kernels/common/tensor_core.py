"""FP32 products on tensor cores by the 3xTF32 split: the two inline-PTX intrinsics and their simulator forms.

A TF32 number is an FP32 number with its 13 lowest mantissa bits zero (1 sign, 8 exponent, 10 mantissa
bits). An FP32 value ``x`` splits exactly into two TF32 values, ``big = rna(x)`` and
``small = rna(x - big)`` (``rna``: round to nearest, ties away, to TF32; ``x - big`` is exact in FP32),
with ``x - big - small`` below 2^-22 |x|. A product ``a b`` is then
``a_big b_big + a_big b_small + a_small b_big`` up to ``a_small b_small`` (about 2^-22 |a b|), and each
of the three is exact in the FP32 accumulator of a TF32 tensor-core instruction (11 x 11 significant
bits). So three TF32 MMAs give an FP32-accurate product (the "3xTF32" of CUTLASS) at up to
3x fewer instructions per FMA than the FP32 pipe: on GH100, 494 TF32 TFLOP/s against 67 FP32 (dense,
SXM), so a 3xTF32 GEMM's ceiling is ~2.5x an FP32 GEMM's. It is not TF32 (10-bit inputs, ~3e-4
normwise error on these layers): its error is an FP32 GEMM's, and the tests hold it to that.

- ``split_tf32(x)`` -> ``(big, small)``, both uint32 bit patterns for the MMA (``cvt.rna.tf32.f32`` twice,
  one ``sub.f32`` between, sm_80+);
- ``split_tf32_trunc(x)`` -> ``(big, small)``: ``big`` = x with its 13 low bits cleared (one ``and``),
  ``small`` = x - big in full FP32 (one ``sub``), which the MMA truncates to TF32 as it reads it (it uses
  the 19 high bits of each input register). Two full-rate instructions instead of two conversions; the
  dropped parts are below 2^-20 |x|, so the product stays FP32-accurate (the tests bound it);
- ``mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)`` -> ``(d0, d1, d2, d3)``:
  ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``, one warp's D (16 x 8) = A (16 x 8) B (8 x 8)
  + C. Fragments, with ``g = lane // 4`` and ``q = lane % 4`` (PTX ISA, "Matrix Fragments for
  mma.m16n8k8", .tf32): a0 = A[g, q], a1 = A[g + 8, q], a2 = A[g, q + 4], a3 = A[g + 8, q + 4];
  b0 = B[q, g], b1 = B[q + 4, g]; c0/d0 = C[g, 2q], c1 = C[g, 2q + 1], c2 = C[g + 8, 2q],
  c3 = C[g + 8, 2q + 1]. All 32 lanes of the warp must call it together (it is ``.sync.aligned``).

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) both are Python: ``split_tf32`` rounds the bits as
``cvt.rna`` does, and ``mma_tf32`` is a warp collective built on the simulator's one-thread-per-lane
model: each lane leaves its fragments with its warp, waits for the other 31 (a barrier with a time
bound: a warp that does not converge raises instead of hanging), and takes its four outputs of the
float64 product, rounded to FP32. So CI checks the fragment layouts, the split and every index.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import config, types

__all__ = ["mma_tf32", "split_tf32", "split_tf32_trunc", "py_mma_tf32", "py_split_tf32", "py_split_tf32_trunc",
           "tf32_round_bits"]

SIM_WARP_TIMEOUT_S = 120.0


def tf32_round_bits(x) -> int:
    """The bits of ``cvt.rna.tf32.f32 x``: FP32 ``x`` rounded to 10 mantissa bits, ties away from zero."""
    b = int(np.float32(x).view(np.uint32))
    return (b + 0x1000) & 0xFFFFE000


def _f32(bits: int) -> np.float32:
    return np.uint32(bits).view(np.float32)


def py_split_tf32(x):
    """The simulator's split: (rna(x), rna(x - rna(x))) as uint32 bit patterns."""
    big = tf32_round_bits(x)
    small = tf32_round_bits(np.float32(np.float32(x) - _f32(big)))
    return np.uint32(big), np.uint32(small)


def py_split_tf32_trunc(x):
    """The simulator's truncating split: (x with 13 low bits cleared, x - that in FP32) as uint32 bit patterns."""
    big = int(np.float32(x).view(np.uint32)) & 0xFFFFE000
    small = np.float32(np.float32(x) - _f32(big)).view(np.uint32)
    return np.uint32(big), np.uint32(small)


class _Warp:
    """One simulated warp's rendezvous for ``py_mma_tf32``."""

    def __init__(self):
        self.barrier = threading.Barrier(32, timeout=SIM_WARP_TIMEOUT_S)
        self.a = [None] * 32
        self.b = [None] * 32


_WARPS: dict = {}
_WARPS_LOCK = threading.Lock()


def py_mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """The simulator's m16n8k8 TF32 MMA (module docstring): a warp collective over the simulator's threads."""
    th = threading.current_thread()
    tid = th.thread_id
    lane = tid % 32
    key = (id(th._manager), tuple(th.blockIdx), tid // 32)
    with _WARPS_LOCK:
        warp = _WARPS.setdefault(key, _Warp())
    warp.a[lane] = (a0, a1, a2, a3)
    warp.b[lane] = (b0, b1)
    try:
        warp.barrier.wait()
        A = np.zeros((16, 8))
        B = np.zeros((8, 8))
        for ln in range(32):
            g, q = ln >> 2, ln & 3
            fa = [float(_f32(int(v) & 0xFFFFE000)) for v in warp.a[ln]]   # the MMA reads 19 bits
            fb = [float(_f32(int(v) & 0xFFFFE000)) for v in warp.b[ln]]
            A[g, q], A[g + 8, q], A[g, q + 4], A[g + 8, q + 4] = fa
            B[q, g], B[q + 4, g] = fb
        warp.barrier.wait()         # every lane has read the fragments before any lane's next call
    except threading.BrokenBarrierError:
        raise RuntimeError(f"mma_tf32: warp {tid // 32} of block {tuple(th.blockIdx)} did not converge "
                           f"within {SIM_WARP_TIMEOUT_S:.0f} s (all 32 lanes must call it together)") from None
    D = A @ B
    g, q = lane >> 2, lane & 3
    return (np.float32(c0 + D[g, 2 * q]), np.float32(c1 + D[g, 2 * q + 1]),
            np.float32(c2 + D[g + 8, 2 * q]), np.float32(c3 + D[g + 8, 2 * q + 1]))


if config.ENABLE_CUDASIM:
    split_tf32 = py_split_tf32
    split_tf32_trunc = py_split_tf32_trunc
    mma_tf32 = py_mma_tf32
else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    _F32 = ir.FloatType()
    _I32 = ir.IntType(32)

    def _split_intrinsic(ptx: str, doc: str):
        """An intrinsic ``f(x: float32) -> (uint32, uint32)`` running ``ptx`` ($0, $1 out, $2 = x)."""
        @intrinsic
        def split(typingctx, x):
            if x != types.float32:
                return None
            sig = types.UniTuple(types.uint32, 2)(x)

            def codegen(context, builder, sig, args):
                fty = ir.FunctionType(ir.LiteralStructType([_I32, _I32]), [_F32])
                res = builder.call(ir.InlineAsm(fty, ptx, "=r,=r,f"), [args[0]])
                return context.make_tuple(builder, sig.return_type,
                                          [builder.extract_value(res, 0), builder.extract_value(res, 1)])

            return sig, codegen
        split.__doc__ = doc
        return split

    split_tf32 = _split_intrinsic(
        "{ .reg .f32 r; cvt.rna.tf32.f32 $0, $2; sub.f32 r, $2, $0; cvt.rna.tf32.f32 $1, r; }",
        "(rna(x), rna(x - rna(x))) as TF32 bit patterns (uint32): see the module docstring.")
    split_tf32_trunc = _split_intrinsic(
        "{ .reg .f32 r; and.b32 $0, $2, 0xFFFFE000; sub.f32 r, $2, $0; mov.b32 $1, r; }",
        "(x & ~0x1fff, x - that) as uint32 bit patterns: see the module docstring.")

    @intrinsic
    def mma_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """One warp's m16n8k8 TF32 MMA, D = A B + C (fragments: the module docstring)."""
        if not all(v == types.uint32 for v in (a0, a1, a2, a3, b0, b1)):
            return None
        if not all(v == types.float32 for v in (c0, c1, c2, c3)):
            return None
        sig = types.UniTuple(types.float32, 4)(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

        def codegen(context, builder, sig, args):
            fty = ir.FunctionType(ir.LiteralStructType([_F32] * 4), [_I32] * 6 + [_F32] * 4)
            asm = ir.InlineAsm(fty, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                                    "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                               "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3")
            res = builder.call(asm, list(args))
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(4)])

        return sig, codegen
