"""Standard-normal float32 arrays drawn on the device, the same values for a seed whatever the grid.

A measurement's inputs only have to be fresh random values (never zeros), the same on every run of a
set; drawing them with NumPy and uploading them cost a validation sweep seconds per layer on the host
(vgg-1's two sets are 0.8 GB: about 5 s of ``standard_normal``), where the device writes them in
milliseconds. Element ``i`` of the array drawn with ``seed`` is a function of ``(seed, i)`` alone: the
counters ``2i`` and ``2i + 1``, XORed with the hashed seed, go through Wellons' ``lowbias32`` integer hash
(a bijection of 32-bit words with low bias, https://github.com/skeeto/hash-prospector) to two uniforms
in (0, 1] and [0, 1), and the Box-Muller transform makes one normal value of them (computed in float64,
stored as float32). The arithmetic stays in 32-bit words held in 64-bit integers, so no product
overflows (Numba's CUDA simulator warns on overflow). The draw is not NumPy's, so host and device
inputs of one seed differ; ``normal_values`` computes the same values on the host. The kernel is kept in
the on-disk kernel cache (``gpu.kernels.cache``): a new process loads it instead of compiling it (1.2 s).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, uint64

from gpu.kernels.cache import persist

__all__ = ["MAX_ELEMENTS", "device_normal", "normal_values"]

MAX_ELEMENTS = 2 ** 31            # two 32-bit counters per element
_MASK32 = 0xFFFFFFFF
_THREADS = 256
_MAX_BLOCKS = 4096
_TWO_PI = 2.0 * math.pi
_INV_2_32 = 1.0 / 4294967296.0


@cuda.jit(device=True, inline=True)
def _lowbias32(x):
    """Wellons' lowbias32 on a 32-bit word held in a uint64 (products of two words fit in 64 bits)."""
    x = x ^ (x >> uint64(16))
    x = (x * uint64(0x7FEB352D)) & uint64(_MASK32)
    x = x ^ (x >> uint64(15))
    x = (x * uint64(0x846CA68B)) & uint64(_MASK32)
    return x ^ (x >> uint64(16))


def _normal_fill(out, key):
    """``out[i]`` = the normal value of counters ``2i`` and ``2i + 1`` under ``key``, grid-stride."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = out.size
    while i < n:
        c = uint64(2) * uint64(i)
        a = _lowbias32(c ^ uint64(key))
        b = _lowbias32((c + uint64(1)) ^ uint64(key))
        u1 = (float(a) + 1.0) * _INV_2_32          # (0, 1]: the log stays finite
        u2 = float(b) * _INV_2_32
        out[i] = math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)
        i += stride


_normal_fill = persist(cuda.jit(_normal_fill))      # compiled once per host, not per process (gpu.kernels.cache)


def _lowbias32_host(x):
    """``_lowbias32`` on the host: a Python int or a uint64 NumPy array of 32-bit words."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def _key(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= _MASK32:
        raise ValueError(f"seed={seed!r} is not allowed: it must be an integer in [0, 2**32)")
    return _lowbias32_host(_lowbias32_host(int(seed)) ^ 0x5BD1E995)


def _size(shape: tuple[int, ...]) -> int:
    if not isinstance(shape, tuple) or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
                                               for d in shape):
        raise ValueError(f"shape={shape!r} is not allowed: it must be a tuple of integers >= 0")
    size = math.prod(int(d) for d in shape)       # exact: no int64 wrap-around
    if size > MAX_ELEMENTS:
        raise ValueError(f"shape={tuple(shape)!r} has {size} elements: at most 2**31 are allowed")
    return size


def device_normal(shape: tuple[int, ...], seed: int, stream=0):
    """A new float32 device array of ``shape`` filled with standard-normal values drawn from ``seed`` (an
    integer in [0, 2**32); at most ``MAX_ELEMENTS`` elements)."""
    key = _key(seed)
    size = _size(shape)
    out = cuda.device_array(size, dtype=np.float32, stream=stream)
    if size:
        blocks = min(_MAX_BLOCKS, (size + _THREADS - 1) // _THREADS)
        _normal_fill[blocks, _THREADS, stream](out, key)
    return out.reshape(shape)


def normal_values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The values ``device_normal(shape, seed)`` draws, computed on the host in float64 (vectorised)."""
    key = np.uint64(_key(seed))
    c = np.arange(_size(shape), dtype=np.uint64) * np.uint64(2)
    u1 = (_lowbias32_host(c ^ key).astype(np.float64) + 1.0) * _INV_2_32
    u2 = _lowbias32_host((c + np.uint64(1)) ^ key).astype(np.float64) * _INV_2_32
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(_TWO_PI * u2)).reshape(shape)
