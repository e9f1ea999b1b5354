"""Launches whose small grids are intended, without Numba's low-occupancy warning.

Numba warns (``NumbaPerformanceWarning``) at every launch of fewer blocks than a rule of thumb wants. A
probe that times one thread's latency, a batch-1 check, or a calibration run at one block per SM
launches such grids on purpose, and a warning per launch there only buries what a user should read.
``intended_small_grids()`` silences that one warning class inside its ``with`` block and nothing else;
numba-cuda >= 0.2x warns with its own class, the older numba with the core one: both are covered.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

from numba.core.errors import NumbaPerformanceWarning

try:  # numba-cuda >= 0.2x warns with its own class
    from numba.cuda.core.errors import NumbaPerformanceWarning as CudaPerformanceWarning
except ImportError:  # pragma: no cover - an older numba-cuda
    CudaPerformanceWarning = NumbaPerformanceWarning

PERFORMANCE_WARNINGS = (NumbaPerformanceWarning, CudaPerformanceWarning)


@contextlib.contextmanager
def intended_small_grids() -> Iterator[None]:
    """Numba's low-occupancy warnings ignored inside the block (every other warning as it was); also a
    decorator (``@intended_small_grids()``), as every ``contextmanager`` is."""
    with warnings.catch_warnings():
        for category in PERFORMANCE_WARNINGS:
            warnings.simplefilter("ignore", category)
        yield
