"""The simulator's shared-array allocation is serialised (tests/cudasim_shared_lock.py)."""

import contextlib
import os
import threading
import time

import numpy as np
import pytest

from tests import cudasim_shared_lock

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="simulator only")


class _SlowNumpy:
    """np with an ``empty`` that yields the interpreter for 5 ms: it widens the check-then-set window
    that the unpatched simulator leaves open, so a race there shows up on every run."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype):
        time.sleep(0.005)
        return np.empty(shape, dtype)


def _allocate_from_threads(shared, threads=16):
    got, start = [None] * threads, threading.Barrier(threads)

    def body(i):
        start.wait()
        got[i] = shared.array((4, 8), np.float32)     # one call site for every thread, as in a kernel

    workers = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return got


def test_every_thread_of_a_block_gets_the_same_shared_array(monkeypatch):
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    assert FakeCUDAShared.array is cudasim_shared_lock._locked_array        # conftest installed it
    monkeypatch.setattr(cudasim_shared_lock, "np", _SlowNumpy())
    got = _allocate_from_threads(FakeCUDAShared(0))
    assert len({id(a) for a in got}) == 1


def test_the_slowed_allocation_does_race_without_the_lock(monkeypatch):
    # The contrast: the same threads, the same slowed allocation, the lock taken away.
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    monkeypatch.setattr(cudasim_shared_lock, "np", _SlowNumpy())
    monkeypatch.setattr(cudasim_shared_lock, "_LOCK", contextlib.nullcontext())
    got = _allocate_from_threads(FakeCUDAShared(0))
    assert len({id(a) for a in got}) > 1


def test_distinct_call_sites_get_distinct_arrays():
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    shared = FakeCUDAShared(0)
    a = shared.array((2, 2), np.float32)
    b = shared.array((2, 2), np.float32)
    assert a is not b and a.shape == (2, 2) and a.dtype == np.float32
