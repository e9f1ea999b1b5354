"""A lock around Numba's CUDA simulator's shared-array allocation (a simulator race, not ours).

The simulator runs a block's threads as Python threads. ``cuda.shared.array`` there is
``FakeCUDAShared.array``: it looks the array up by its call site (file, line) in a per-block dict and,
when absent, allocates ``np.empty`` and stores it: check-then-set without a lock. When the interpreter
switches threads inside that window, two threads of one block each allocate an array for the same
call site; the first keeps its private copy, every later thread shares the second, and whatever the
first thread stages is lost: the others read ``np.empty`` garbage (a NaN in
``test_conv_matches_float64_reference[2x3-s2-p1-kt4-direct]`` in about one CI run in four).
On a GPU a shared array is one per block by construction, so only the simulator needs this.

``install()`` replaces the method with the same lookup done under one lock (the call site is found
from the caller's frame, as the original does). Numba-cuda 0.30.4's method, otherwise unchanged.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

_LOCK = threading.Lock()


def _locked_array(self, shape, dtype, alignment=None):
    from numba.core import types
    from numba.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    if shape == 0:      # dynamic shared memory: one buffer for every call site, as the original
        count = self._dynshared_size // dtype.itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    frame = sys._getframe(1)
    caller = (frame.f_code.co_filename, frame.f_lineno)
    with _LOCK:
        res = self._allocations.get(caller)
        if res is None:
            res = np.empty(shape, dtype)
            self._allocations[caller] = res
    return res


def install() -> None:
    """Patch ``FakeCUDAShared.array`` (call after NUMBA_ENABLE_CUDASIM is set; idempotent)."""
    from numba.cuda.simulator import kernelapi

    kernelapi.FakeCUDAShared.array = _locked_array
