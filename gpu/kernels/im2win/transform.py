"""The im2win transform kernel and its NumPy oracle (Lu et al., Euro-Par 2023, Sec. 3.1, Eq. 2).

``transform_kernel[blocks, TRANSFORM_THREADS](x, J, prm)`` writes the im2win tensor
``J[i, c, m, col*R + u] = Xpad[i, c, m*stride + u, col]`` (``megasim.algorithms.im2win.tiling``), padding
included as zeros, so every element of J is written (the authors' code leaves padded channels
uninitialised; this one does not). Grid: ``ceil(J.size / TRANSFORM_ELEMENTS)`` blocks of
``TRANSFORM_THREADS`` threads; block b writes the flat elements ``[b*E, (b+1)*E)`` of J, thread t the
elements ``b*E + t + j*TRANSFORM_THREADS`` (consecutive threads, consecutive elements: coalesced
stores; the loads of one pass read R input rows at consecutive columns). No shared memory, no
synchronisation. ``prm`` (int32): C, H, W, P (output rows), WW (= Wp*R, J's row length), R, stride,
padding. Flat indices are 32-bit safe for tensors below 2**31 elements (``gpu.im2win`` refuses larger).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from gpu.kernels.common.vector_access import load1, store1
from megasim.algorithms.im2win.tiling import TRANSFORM_ELEMENTS, TRANSFORM_THREADS

PASSES = TRANSFORM_ELEMENTS // TRANSFORM_THREADS


@cuda.jit
def transform_kernel(x, J, prm):
    """See the module docstring. x: (N, C, H, W) float32, J: (N, C, P, WW) float32, both C-contiguous."""
    H, W, P, WW, R, stride, pad = prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7]   # prm[0] = C
    total = J.size
    base = cuda.blockIdx.x * TRANSFORM_ELEMENTS + cuda.threadIdx.x
    for j in range(PASSES):
        e = base + j * TRANSFORM_THREADS
        if e < total:
            row = e // WW                   # (image, channel, output row)
            cu = e - row * WW
            plane = row // P
            oh = row - plane * P
            col = cu // R
            u = cu - col * R
            y = oh * stride + u - pad
            xx = col - pad
            v = float32(0.0)
            if 0 <= y < H and 0 <= xx < W:
                v = load1(x, (plane * H + y) * W + xx)
            store1(J, e, v)


def transform_params(problem) -> np.ndarray:
    """The int32 ``prm`` of ``transform_kernel`` for a ConvProblem."""
    p = problem
    return np.array([p.c, p.h, p.w, p.out_h, (p.w + 2 * p.padding) * p.r, p.r, p.stride, p.padding], np.int32)


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
