"""Timing device work with CUDA events: warm-up, many runs, median, rotated inputs.

``time_cuda(fn)`` calls ``fn(i)`` ``warmup`` times untimed, then ``repeats`` times, each between two
CUDA events recorded on the legacy default stream, and returns their median / min / max in
milliseconds. ``i`` is the rotation index, ``run % rotate``: ``fn`` uses input set ``i`` so that
consecutive runs do not find their inputs in L2 (shared/DEVICE.md: rotate inputs when they fit).

Why the legacy default stream: every implementation timed here (torch, cuDNN through ctypes on torch's
stream, cuBLAS through torch.bmm, and the Numba kernels) enqueues there: it is torch's current stream
unless a caller changed it, and Numba launches without a stream argument go to it. The events are
Numba's (one primary context, shared with torch), so timing Numba kernels does not import torch;
``time_cuda`` refuses to run when torch is loaded and its current stream is not the default one: the
events would then not bracket torch's work.

It waits on that stream only, never on the whole device, so work on other (non-blocking) streams, such
as the DRAM hog of ``gpu.probes.dram_hog_kernel``, runs on beside the timed runs.

All event pairs are recorded first and synchronised once at the end, so the host does not stall
the device between runs; a ``fn`` that synchronises internally (a host read-back) still times
correctly, its host gap then being part of its time, as it is for a user.

The statistics (``summarize``) and the rotation arithmetic (``rotation_sets``) are pure Python and
tested on the CPU; only ``time_cuda`` needs a GPU. ``time_host`` times the same way with the host's
clock and a device synchronise per run, for Numba's CUDA simulator (no events there).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from megasim.errors import MegasimError


class TimingError(MegasimError):
    """Timing could not run or its arguments are outside the allowed range."""


@dataclass(frozen=True)
class TimingStats:
    median_ms: float
    min_ms: float
    max_ms: float
    samples: tuple[float, ...]

    @property
    def repeats(self) -> int:
        return len(self.samples)

    @property
    def spread(self) -> float:
        """(max - min) / median: how far apart the runs were (0 = identical)."""
        return (self.max_ms - self.min_ms) / self.median_ms if self.median_ms > 0 else math.inf

    def as_row(self) -> dict[str, float]:
        return {"median_ms": self.median_ms, "min_ms": self.min_ms, "max_ms": self.max_ms}


NAN_STATS = TimingStats(math.nan, math.nan, math.nan, ())


def summarize(samples_ms: Sequence[float]) -> TimingStats:
    """Median, min and max of the per-run times; every sample must be finite and >= 0."""
    samples = tuple(float(s) for s in samples_ms)
    if not samples:
        raise TimingError("no timing samples: repeats must be at least 1")
    bad = [s for s in samples if not math.isfinite(s) or s < 0]
    if bad:
        raise TimingError(f"timing samples must be finite and >= 0 ms, got {bad[:3]}")
    return TimingStats(statistics.median(samples), min(samples), max(samples), samples)


def rotation_sets(bytes_per_set: int, free_bytes: int, *, wanted: int = 3, budget_fraction: float = 0.25) -> int:
    """How many input sets to rotate among: ``wanted`` if they fit in ``budget_fraction`` of the free
    device memory, else as many as fit, at least 1 (then the runs reuse one set)."""
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        raise TimingError(f"wanted={wanted!r} is not allowed: it must be a positive integer")
    if not 0 < budget_fraction <= 1:
        raise TimingError(f"budget_fraction={budget_fraction!r} is not allowed: it must be in (0, 1]")
    if bytes_per_set <= 0:
        return wanted
    fit = int(max(free_bytes, 0) * budget_fraction) // int(bytes_per_set)
    return max(1, min(wanted, fit))


def _check_args(warmup: int, repeats: int, rotate: int | None) -> int:
    for name, value, low in (("warmup", warmup, 0), ("repeats", repeats, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise TimingError(f"{name}={value!r} is not allowed: it must be an integer >= {low}")
    if rotate is None:
        return 1
    if isinstance(rotate, bool) or not isinstance(rotate, int) or rotate < 1:
        raise TimingError(f"rotate={rotate!r} is not allowed: it must be None or an integer >= 1")
    return rotate


def _default_stream_events(count: int) -> tuple[list, list]:
    """``count`` pairs of timing events on the legacy default stream (Numba's), or TimingError why not.

    Numba's events need no torch: a process that times only Numba kernels (a validation sweep's worker)
    does not pay torch's import (2.5 s on the H200 host, experiments/studies/worker_start/). Where torch is
    loaded and has opened CUDA, its current stream must be the legacy default one, where Numba launches and
    these events go; otherwise the events would not bracket the work."""
    from numba import config, cuda
    if config.ENABLE_CUDASIM:
        raise TimingError("time_cuda needs a CUDA device; Numba's CUDA simulator has no device events "
                          "(time_host times with the host's clock there)")
    if not cuda.is_available():
        raise TimingError("time_cuda needs a CUDA device; numba.cuda.is_available() is False")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        stream = torch.cuda.current_stream()
        if stream.cuda_stream != 0:
            raise TimingError("time_cuda times the legacy default stream (where Numba launches go); torch's "
                              f"current stream is {stream.cuda_stream:#x}: run outside `with torch.cuda.stream(...)`")
    return [cuda.event(timing=True) for _ in range(count)], [cuda.event(timing=True) for _ in range(count)]


def time_cuda(fn: Callable[[int], object], *, warmup: int = 5, repeats: int = 30,
              rotate: int | None = None) -> TimingStats:
    """Time ``fn(i)`` (i = run index modulo ``rotate``; always 0 when rotate is None) with CUDA events.

    ``fn`` must enqueue its work on the legacy default stream (Numba's launches without a stream, and
    torch's current stream by default). Warm-up runs rotate too, so every set is touched once before
    timing. Raises TimingError without a CUDA device (or under Numba's CUDA simulator).
    """
    from numba import cuda
    n_sets = _check_args(warmup, repeats, rotate)
    starts, ends = _default_stream_events(repeats)
    for i in range(warmup):
        fn(i % n_sets)
    cuda.default_stream().synchronize()      # the warm-up runs are done before the first timed one starts
    for i in range(repeats):
        starts[i].record()
        fn(i % n_sets)
        ends[i].record()
    ends[repeats - 1].synchronize()
    return summarize([cuda.event_elapsed_time(starts[i], ends[i]) for i in range(repeats)])


def time_cuda_queued(fn: Callable[[int], object], *, inner: int = 10, warmup: int = 3,
                     repeats: int = 20) -> TimingStats:
    """Device time of one ``fn`` call with the host's launch cost hidden: each timed sample enqueues
    ``inner`` calls back to back between two events, and the per-call time is the sample / inner.

    While the device is busy, the host enqueues the next calls, so only the first call's launch cost
    (Numba's dispatch is ~20 us, cuDNN's a few) falls inside a sample, divided by ``inner``. A call
    whose device work is shorter than its own launch cost stays host-bound: its time is then the
    host's, which is what a user running it back to back would see."""
    if isinstance(inner, bool) or not isinstance(inner, int) or inner < 1:
        raise TimingError(f"inner={inner!r} is not allowed: it must be an integer >= 1")

    def batch(i: int) -> None:
        for j in range(inner):
            fn(i * inner + j)

    stats = time_cuda(batch, warmup=max(1, -(-warmup // inner)), repeats=repeats)
    return summarize([s / inner for s in stats.samples])


def time_host(fn: Callable[[int], object], *, warmup: int = 5, repeats: int = 30,
              rotate: int | None = None) -> TimingStats:
    """Wall-clock time of ``fn(i)`` on the host, the device synchronised before and after each run:
    ``time_cuda``'s arguments and rotation, for where there are no CUDA events (Numba's CUDA simulator,
    which the tests run the measuring code on). On a GPU it includes the launch and synchronisation
    cost; use ``time_cuda`` for device times."""
    import time
    from numba import cuda
    n_sets = _check_args(warmup, repeats, rotate)
    for i in range(warmup):
        fn(i % n_sets)
    cuda.synchronize()
    samples = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i % n_sets)
        cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    return summarize(samples)
