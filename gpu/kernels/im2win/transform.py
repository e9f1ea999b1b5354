"""The im2win transform kernel and its NumPy oracle (Lu et al., Euro-Par 2023, Sec. 3.1, Eq. 2).

``transform_kernel[blocks, TRANSFORM_THREADS](x, J, prm)`` writes the im2win tensor
``J[i, c, m, col*R + u] = Xpad[i, c, m*stride + u, col]`` (``megasim.algorithms.im2win.tiling``), padding
included as zeros, so every element of J is written (the authors' code leaves padded channels
uninitialised; this one does not). Grid: ``ceil(J.size / TRANSFORM_ELEMENTS)`` blocks of
``TRANSFORM_THREADS`` threads; block b writes the flat elements ``[b*E, (b+1)*E)`` of J, thread t the
elements ``b*E + t + j*TRANSFORM_THREADS`` (consecutive threads, consecutive elements: coalesced
stores; the loads of one pass read R input rows at consecutive columns). No shared memory, no
synchronisation. ``prm`` (int32): C, H, W, P (output rows), WW (= Wp*R, J's row length), R, stride,
padding; ``magic`` (uint64, ``transform_magic``): the multiply-shift constants that replace the three
divisions of an element's flat index (by WW, P and R; an integer division is ~20 instructions at 32
bits and a call of ~70 at 64, more than the element's load and store). All index arithmetic is 32-bit:
safe for tensors below 2**31 elements (``gpu.im2win`` refuses larger).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32, uint64

from gpu.kernels.common.vector_access import load1, store1
from megasim.algorithms.im2win.tiling import TRANSFORM_ELEMENTS, TRANSFORM_THREADS

PASSES = TRANSFORM_ELEMENTS // TRANSFORM_THREADS


def division_magic(d: int) -> tuple[int, int]:
    """(m, l) with ``n // d == (n * m) >> l`` for every ``0 <= n < 2**31`` (``l = 31 + ceil(log2 d)``,
    ``m = ceil(2**l / d) < 2**33``: the error ``n (m - 2**l / d) / 2**l < 2**31 / 2**l <= 1 / d``; the product
    stays below 2**64)."""
    if d < 1:
        raise ValueError(f"divisor {d}: want >= 1")
    shift = 31 + max(0, math.ceil(math.log2(d)))
    return -(-(1 << shift) // d), shift


@cuda.jit(device=True)
def _div(n, m, shift):
    """n // d for 0 <= n < 2**31 by the multiply-shift of ``division_magic(d)`` (no integer division)."""
    return int32((uint64(n) * m) >> shift)


@cuda.jit
def transform_kernel(x, J, prm, magic):
    """See the module docstring. x: (N, C, H, W) float32, J: (N, C, P, WW) float32, both C-contiguous;
    magic: uint64 (m, l) of ``division_magic`` for WW, P and R (``transform_magic``)."""
    H, W, P, WW, R, stride, pad = (int32(prm[1]), int32(prm[2]), int32(prm[3]), int32(prm[4]), int32(prm[5]),
                                   int32(prm[6]), int32(prm[7]))       # prm[0] = C
    m_ww, l_ww, m_p, l_p, m_r, l_r = magic[0], magic[1], magic[2], magic[3], magic[4], magic[5]
    total = int32(J.size)
    base = int32(cuda.blockIdx.x * TRANSFORM_ELEMENTS + cuda.threadIdx.x)
    for j in range(int32(PASSES)):
        e = int32(base + j * TRANSFORM_THREADS)
        if e < total:
            row = _div(e, m_ww, l_ww)           # (image, channel, output row)
            cu = int32(e - row * WW)
            plane = _div(row, m_p, l_p)
            oh = int32(row - plane * P)
            col = _div(cu, m_r, l_r)
            u = int32(cu - col * R)
            y = int32(oh * stride + u - pad)
            xx = int32(col - pad)
            v = float32(0.0)
            if 0 <= y < H and 0 <= xx < W:
                v = load1(x, int32(int32(plane * H + y) * W + xx))
            store1(J, e, v)


def transform_params(problem) -> np.ndarray:
    """The int32 ``prm`` of ``transform_kernel`` for a ConvProblem."""
    p = problem
    return np.array([p.c, p.h, p.w, p.out_h, (p.w + 2 * p.padding) * p.r, p.r, p.stride, p.padding], np.int32)


def transform_magic(problem) -> np.ndarray:
    """The uint64 ``magic`` of ``transform_kernel``: ``division_magic`` of J's row length, P and R."""
    p = problem
    out = []
    for d in ((p.w + 2 * p.padding) * p.r, p.out_h, p.r):
        out.extend(division_magic(d))
    return np.array(out, np.uint64)


def reference_im2win(x: np.ndarray, r: int, stride: int, padding: int) -> np.ndarray:
    """The im2win tensor of x (N, C, H, W) for R filter rows (NumPy, x's dtype): (N, C, P, Wp*R)."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    hp, wp = h + 2 * padding, w + 2 * padding
    rows = (hp - r) // stride + 1
    out = np.empty((n, c, rows, wp, r), x.dtype)
    for m in range(rows):
        for u in range(r):
            out[:, :, m, :, u] = xp[:, :, m * stride + u, :]
    return out.reshape(n, c, rows, wp * r)
