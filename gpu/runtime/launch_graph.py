"""A fixed sequence of kernel launches replayed as one CUDA graph: one ``cuGraphLaunch`` per call instead of
one ``cuLaunchKernel`` per kernel.

A prepared convolution launches the same kernels every call; only the device pointers of its input, filter
and output change, and under torch's caching allocator the same few pointers recur (a network's forward
frees and re-allocates its activations in the same order each step). ``LaunchGraphs`` keeps, per key (the
caller's tuple of pointers), a CUDA graph executable of the sequence as ``record(stream_handle)`` enqueues
it with those pointers patched in: made by stream capture on a private stream (``cuStreamBeginCapture``,
thread-local mode, ``cuStreamEndCapture``, ``cuGraphInstantiateWithFlags``), replayed by ``cuGraphLaunch``
on the caller's stream. The graph holds the same kernels with the same parameters, so its results are the
direct launches' bit for bit.

- A key gets a graph the second time it is seen (``launch`` returns False the first time: the caller
  launches directly), so pointers that never recur cost no capture.
- At most ``capacity`` graphs are kept, least recently used dropped first (``cuGraphExecDestroy``); keys
  seen once are remembered up to ``4 * capacity``. Once ``2 * capacity`` graphs have been dropped (more
  recurring keys than graphs kept, which would capture again and again), no more are made; those kept
  still replay.
- A capture or instantiation that fails turns graphs off for good (``enabled`` False; ``launch`` returns
  False and the caller launches directly); a failed ``cuGraphLaunch`` raises RuntimeError, as a failed
  ``cuLaunchKernel`` does.

The driver is libcuda through ctypes (``CudaGraphDriver``); ``driver=`` takes any object with the same
methods (the tests' fake). Under Numba's CUDA simulator there is no driver: ``LaunchGraphs.available()`` is
False and callers do not make one. The caller must not replay a graph while the sequence would differ (e.g.
a filter transform that is sometimes skipped: give each sequence its own LaunchGraphs), nor inside a CUDA
graph capture of its own (launch directly there).
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

from numba import config

__all__ = ["CudaGraphDriver", "LaunchGraphs"]

DEFAULT_CAPACITY = 16
_CU_STREAM_NON_BLOCKING = 1
_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1


class CudaGraphDriver:
    """The driver calls ``LaunchGraphs`` makes, on libcuda through ctypes (handles as ints): ``new_stream()``,
    ``capture(stream, record)`` -> exec, ``graph_launch(exe, stream)`` -> CUresult, ``destroy(exe)``."""

    def __init__(self) -> None:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        vp, u = ctypes.c_void_p, ctypes.c_uint

        def fn(name, *argtypes):
            f = getattr(lib, name)
            f.restype, f.argtypes = ctypes.c_int, list(argtypes)
            return f
        self._ctypes = ctypes
        self._create = fn("cuStreamCreate", ctypes.POINTER(vp), u)
        self._begin = fn("cuStreamBeginCapture_v2", vp, ctypes.c_int)
        self._end = fn("cuStreamEndCapture", vp, ctypes.POINTER(vp))
        self._instantiate = fn("cuGraphInstantiateWithFlags", ctypes.POINTER(vp), vp, ctypes.c_ulonglong)
        self._graph_destroy = fn("cuGraphDestroy", vp)
        self.graph_launch = fn("cuGraphLaunch", vp, vp)     # (exec, stream) -> CUresult: the per-call path
        self.exec_destroy = fn("cuGraphExecDestroy", vp)

    def new_stream(self) -> int:
        s = self._ctypes.c_void_p()
        _check(self._create(self._ctypes.byref(s), _CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        return int(s.value or 0)

    def capture(self, stream: int, record) -> int:
        """``record(stream)`` captured into an instantiated graph; its exec handle (the graph itself freed)."""
        ct = self._ctypes
        _check(self._begin(stream, _CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")
        graph = ct.c_void_p()
        try:
            record(stream)
        finally:
            err = self._end(stream, ct.byref(graph))
        try:
            _check(err, "cuStreamEndCapture")
            exe = ct.c_void_p()
            _check(self._instantiate(ct.byref(exe), graph, 0), "cuGraphInstantiateWithFlags")
            return int(exe.value)
        finally:
            if graph.value:
                self._graph_destroy(graph)

    def destroy(self, exe: int) -> None:
        self.exec_destroy(exe)


def _check(err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what} failed: CUresult {err}")


@lru_cache(maxsize=1)
def _cuda_driver():
    """The process's CudaGraphDriver, or None where libcuda or its graph calls cannot be loaded."""
    try:
        return CudaGraphDriver()
    except (OSError, AttributeError):
        return None


class LaunchGraphs:
    """CUDA graphs of one launch sequence, one per key, bounded (module docstring). ``record(stream_handle)``
    enqueues the sequence with the current key's pointers already patched in by the caller."""

    def __init__(self, record, *, capacity: int = DEFAULT_CAPACITY, driver=None) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.record, self.capacity = record, capacity
        self.driver = driver if driver is not None else _cuda_driver()
        self.enabled = self.driver is not None       # False: no graph is made any more (those made still replay)
        self.graphs: OrderedDict = OrderedDict()     # key -> graph exec handle, least recently used first
        self.seen: OrderedDict = OrderedDict()       # keys seen once, not yet given a graph
        self._stream = None
        self.captures = self.evictions = 0

    @staticmethod
    def available() -> bool:
        """Whether graphs can be made here (a GPU, libcuda loadable by ctypes; never under the simulator)."""
        return not config.ENABLE_CUDASIM and _cuda_driver() is not None

    def launch(self, key, stream: int) -> bool:
        """Replay the graph of ``key`` on ``stream`` and return True; or return False: the caller launches the
        sequence directly (first sight of ``key``, or no graph made). Makes the graph at the second sight."""
        exe = self.graphs.get(key)
        if exe is None:
            exe = self._miss(key)
            if exe is None:
                return False
        else:
            self.graphs.move_to_end(key)
        err = self.driver.graph_launch(exe, stream)
        if err:
            raise RuntimeError(f"cuGraphLaunch failed: CUresult {err}")
        return True

    def _miss(self, key):
        if not self.enabled:
            return None
        seen = self.seen
        if key not in seen:
            seen[key] = None
            if len(seen) > 4 * self.capacity:
                seen.popitem(last=False)
            return None
        del seen[key]
        try:
            if self._stream is None:
                self._stream = self.driver.new_stream()
            exe = self.driver.capture(self._stream, self.record)
        except RuntimeError:
            self.enabled = False      # capture or instantiation refused here: direct launches from now on
            self.clear()
            return None
        self.captures += 1
        graphs = self.graphs
        graphs[key] = exe
        while len(graphs) > self.capacity:
            self.driver.destroy(graphs.popitem(last=False)[1])
            self.evictions += 1
        if self.evictions >= 2 * self.capacity:
            self.enabled = False      # more recurring keys than graphs kept: stop capturing, keep those made
        return exe

    def clear(self) -> None:
        """Destroy every graph and forget the keys seen."""
        while self.graphs:
            self.driver.destroy(self.graphs.popitem(last=False)[1])
        self.seen.clear()

    def __del__(self) -> None:
        try:
            self.clear()
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone already
            pass
