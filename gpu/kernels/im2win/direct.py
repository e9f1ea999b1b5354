"""The naive direct convolution the im2win paper compares with (its Sec. 2.2 and Table 1: "a naive direct
convolution implemented in CUDA"): the bench's ``direct`` baseline, for any filter size (the sparse family's
dense ``direct`` kernel holds at most 36 window elements per channel, so it cannot run the 7x7 and 11x11 layers).

``direct_kernel[ceil(N*K*P*Q / DIRECT_THREADS), DIRECT_THREADS](x, w, y, prm)``: one thread per output
``y[n, k, p, q]`` (flat NCHW index, consecutive threads consecutive q), looping over c, r, s and reading
x and w from global memory with a bounds test per tap (zero padding). No shared memory, no
synchronisation. ``prm`` (int32, ``direct_params``): C, H, W, K, P, Q, R, S, stride, padding.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from gpu.kernels.common.vector_access import load1, store1

DIRECT_THREADS = 256


@cuda.jit
def direct_kernel(x, w, y, prm):
    """See the module docstring. x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q): float32, C-contiguous."""
    C, H, W, K, P, Q, R, S, stride, pad = (prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7],
                                           prm[8], prm[9])
    e = cuda.blockIdx.x * DIRECT_THREADS + cuda.threadIdx.x
    if e < y.size:
        q = e % Q
        t = e // Q
        p = t % P
        t = t // P
        k = t % K
        n = t // K
        acc = float32(0.0)
        for c in range(C):
            for r in range(R):
                yy = p * stride + r - pad
                if 0 <= yy < H:
                    for s in range(S):
                        xx = q * stride + s - pad
                        if 0 <= xx < W:
                            acc += load1(x, ((n * C + c) * H + yy) * W + xx) * load1(w, ((k * C + c) * R + r) * S + s)
        store1(y, e, acc)


def direct_params(problem) -> np.ndarray:
    p = problem
    return np.array([p.c, p.h, p.w, p.k, p.out_h, p.out_w, p.r, p.s, p.stride, p.padding], np.int32)


def direct_blocks(problem) -> int:
    p = problem
    return -(-(p.n * p.k * p.out_h * p.out_w) // DIRECT_THREADS)
