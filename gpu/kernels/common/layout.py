"""Layout conversions of device tensors (NCHW <-> NHWC) for ``conv2d`` on device arrays.

One thread per element of the destination, so the writes are coalesced and the reads strided by the
source's channel (or pixel) stride. Host arrays are converted with NumPy instead.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

THREADS = 128


@cuda.jit
def _nchw_to_nhwc(src, dst):
    """dst[n, h, w, c] = src[n, c, h, w]. Grid: ceil(dst.size / THREADS) blocks of THREADS threads,
    one element per thread. No shared memory."""
    i = cuda.grid(1)
    n, h, w, c = dst.shape
    if i < n * h * w * c:
        ci = i % c
        r = i // c
        wi = r % w
        r //= w
        hi = r % h
        ni = r // h
        dst[ni, hi, wi, ci] = src[ni, ci, hi, wi]


@cuda.jit
def _nhwc_to_nchw(src, dst):
    """dst[n, c, h, w] = src[n, h, w, c]. Grid: ceil(dst.size / THREADS) blocks of THREADS threads,
    one element per thread. No shared memory."""
    i = cuda.grid(1)
    n, c, h, w = dst.shape
    if i < n * c * h * w:
        wi = i % w
        r = i // w
        hi = r % h
        r //= h
        ci = r % c
        ni = r // c
        dst[ni, ci, hi, wi] = src[ni, hi, wi, ci]


def nchw_to_nhwc(src):
    n, c, h, w = src.shape
    dst = cuda.device_array((n, h, w, c), np.float32)
    if dst.size:
        _nchw_to_nhwc[-(-dst.size // THREADS), THREADS](src, dst)
    return dst


def nhwc_to_nchw(src):
    n, h, w, c = src.shape
    dst = cuda.device_array((n, c, h, w), np.float32)
    if dst.size:
        _nhwc_to_nchw[-(-dst.size // THREADS), THREADS](src, dst)
    return dst
