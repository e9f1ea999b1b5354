"""An event-driven block barrier for Numba's CUDA simulator: the same semantics, without its busy poll.

The simulator runs a block's threads as Python threads. Its ``BlockManager.run`` finds out when every
live thread has reached ``syncthreads()`` by polling: a loop over the threads' flags and ``is_alive()``
that never sleeps, so it holds the GIL whenever it can and the block's threads queue for it (under
cProfile, 28 of a 38 s test were that loop). Here each thread reports instead: reaching a barrier or
ending counts it under one condition variable, and the manager sleeps on that condition until every
live thread is at the barrier (it then releases them all, as the original) or one has failed (it then
aborts the others and raises that thread's exception, as the original).

``install()`` patches ``BlockManager.run`` only where the simulator's method is the one this was
written against (numba-cuda 0.30.4's source, checked by hash); elsewhere it leaves the simulator
alone, and the tests run as before, only slower. Only the tests use it: a GPU has real barriers.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading

import numpy as np

#: SHA-256 of ``inspect.getsource(BlockManager.run)`` in numba-cuda 0.30.4, the method replaced.
KNOWN_RUN_SHA256 = "54626c6819f55d514a598517b1467ed1cc2e7c3bf1f3b9814e13ef2a4ba3541f"


class _Barrier:
    """The block's count of live threads and of threads waiting at the barrier, under one condition."""

    def __init__(self, live: int) -> None:
        self.cond = threading.Condition()
        self.live = live
        self.blocked = 0
        self.failed = False


@functools.cache
def _thread_class():
    """The BlockThread subclass (made once: the simulator is imported by then)."""
    from numba.cuda.simulator.kernel import BlockThread

    class ReportingThread(BlockThread):
        """A BlockThread that tells the block's _Barrier when it waits at a barrier and when it ends."""

        def __init__(self, barrier: _Barrier, *args) -> None:
            super().__init__(*args)
            self._barrier = barrier

        def run(self):
            try:
                super().run()       # (BlockThread.run keeps an exception in self.exception)
            finally:
                b = self._barrier
                with b.cond:
                    b.live -= 1
                    b.failed = b.failed or self.exception is not None
                    b.cond.notify()

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            b = self._barrier
            with b.cond:
                self.syncthreads_blocked = True
                b.blocked += 1
                b.cond.notify()
            self.syncthreads_event.wait()
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    return ReportingThread


def _run(self, grid_point, *args):
    """BlockManager.run: start the block's threads, release each barrier once every live thread is at it."""
    thread_class = _thread_class()
    points = list(np.ndindex(*self._block_dim))
    barrier = _Barrier(len(points))

    def target():
        self._f(*args)

    threads = [thread_class(barrier, target, self, grid_point, block_point, self._debug) for block_point in points]
    for t in threads:
        t.start()
    with barrier.cond:
        while barrier.live:
            barrier.cond.wait_for(lambda: barrier.failed or not barrier.live or barrier.blocked == barrier.live)
            if barrier.failed:
                break
            if barrier.live and barrier.blocked == barrier.live:
                for t in threads:
                    if t.syncthreads_blocked:
                        t.syncthreads_blocked = False
                        t.syncthreads_event.set()
                barrier.blocked = 0
    for t in threads:
        if t.exception:
            for t_other in threads:     # abort the others (do not join: as the original, for debugging)
                t_other.abort = True
                t_other.syncthreads_blocked = False
                t_other.syncthreads_event.set()
            raise t.exception[0].with_traceback(t.exception[1])


def install() -> bool:
    """Patch ``BlockManager.run`` if it is the method this replaces; returns whether it did (idempotent)."""
    from numba.cuda.simulator import kernel

    if kernel.BlockManager.run is _run:
        return True
    digest = hashlib.sha256(inspect.getsource(kernel.BlockManager.run).encode()).hexdigest()
    if digest != KNOWN_RUN_SHA256:
        return False
    kernel.BlockManager.run = _run
    return True
