"""The simulator's block barrier, replaced by an event-driven one (tests/cudasim_block_barrier.py), keeps its meaning."""

import hashlib
import inspect
import os

import numpy as np
import pytest
from numba import cuda     # (a module global: the simulator swaps it for its own inside kernels)

from tests import cudasim_block_barrier

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="simulator only")


def test_installed_exactly_where_the_method_is_the_known_one():
    from numba.cuda.simulator import kernel
    if kernel.BlockManager.run is cudasim_block_barrier._run:
        return                                       # (installed by conftest: the known method was there)
    digest = hashlib.sha256(inspect.getsource(kernel.BlockManager.run).encode()).hexdigest()
    assert digest != cudasim_block_barrier.KNOWN_RUN_SHA256
    assert cudasim_block_barrier.install() is False


def test_barriers_order_shared_memory_and_count():
    @cuda.jit
    def rotate(out, counts):
        sh = cuda.shared.array(64, np.float32)
        i = cuda.threadIdx.x
        for step in range(3):                        # three rounds: each barrier is reused
            sh[i] = i + 100 * step
            cuda.syncthreads()
            out[step, i] = sh[(i + 1) % 64]
            cuda.syncthreads()
        counts[cuda.blockIdx.x, i] = cuda.syncthreads_count(i % 3 == 0)

    out = np.zeros((3, 64), np.float32)
    counts = np.zeros((2, 64), np.int32)
    rotate[2, 64](out, counts)
    expect = np.array([[(i + 1) % 64 + 100 * s for i in range(64)] for s in range(3)], np.float32)
    np.testing.assert_array_equal(out, expect)
    assert (counts == 22).all()                      # 0, 3, ..., 63


def test_a_thread_that_fails_at_a_barrier_is_reported_not_waited_for():
    @cuda.jit
    def fails(a):
        i = cuda.threadIdx.x
        if i == 5:
            a[1000] = 1.0                            # out of bounds: the simulator raises IndexError
        cuda.syncthreads()
        a[i] = 1.0

    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\]"):
        fails[1, 32](np.zeros(32, np.float32))
