"""Simulating the calibration's cases over a process pool, one case per task.

A kind's fit (``megasim.calibration.winograd.fit_kind``) evaluates a candidate TaskCost by simulating every
calibration run of that kind (a dozen or more TaskGraphs: its kernel at several occupancies, the
megakernel per task and persistent). The evaluations of one fit follow each other, so parallelism
over kinds alone leaves all but one core idle once the short fits are done, and the GEMM's fit with
its hundreds of evaluations set the calibration's length (27 min of 33 on 2 cores, 2026-11-22).

``CasePool`` spreads the simulations of one evaluation over worker processes instead. Each worker
receives every kind's cases once (its initializer), so an evaluation sends only a spec and indices and
gets back one float per case. The kinds' fits run in threads of the calling process, all feeding the
same pool; a case's simulation does not depend on where it runs, and ``map`` returns the results in
order, so the fit (and the spec it writes) is the same for any number of workers, one included
(which simulates in the calling process, without a pool).
The workers are started before the fitting threads (a fork must not copy a thread's held lock).
An evaluation waits for its slowest case, so the gain is bounded by how evenly the cases' lengths
spread: on 16 cores a refit of 2026-11-25 kept about 1.6 busy (the vgg-3 GEMM runs dominate).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Sequence

from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec, TaskCost
from megasim.sim import simulate

# The cases a worker process simulates, keyed as CasePool's ``cases_by_key``: set once per worker.
_WORKER_CASES: dict[str, Sequence[tuple]] = {}


def _init_worker(cases_by_key: dict[str, Sequence[tuple]]) -> None:
    global _WORKER_CASES
    _WORKER_CASES = cases_by_key


def simulated_us(result, timing: str) -> float:
    """What a measurement of ``timing`` sees of a simulated run: ``events`` (CUDA events around
    back-to-back runs) the prediction, host issue time included when it is longer; ``queued`` (the
    measured work queued behind a spin kernel) the device's time only: the last launch's end (its
    first launch starting ``queued_launch_ns`` after the run begins, as the queued gap)."""
    if timing == "events":
        return result.predicted_us
    if timing == "queued":
        return result.launches[-1].end_ns / 1e3
    raise SpecError(f"measurements: timing {timing!r} is not allowed (allowed: events, queued)")


def simulate_case(case: tuple, spec: GPUSpec) -> float:
    """One calibration case's simulated time in us: (label, graph, schedule[, timing])."""
    timing = case[3] if len(case) > 3 else "events"
    return simulated_us(simulate(case[1], case[2], spec), timing)


def simulated_kind_us(spec: GPUSpec, kind: str, cost: TaskCost, cases) -> list[float]:
    """Simulated times of a kind's cases with ``kind``'s cost replaced by ``cost``, in this process."""
    s = dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost})
    return [simulate_case(case, s) for case in cases]


def _simulate_indexed(args: tuple[str, int, GPUSpec]) -> float:
    key, index, spec = args
    return simulate_case(_WORKER_CASES[key][index], spec)


class CasePool:
    """Simulates named lists of calibration cases over ``workers`` processes (1: in this process).

    Use as a context manager; ``simulate(key, spec, kind, cost)`` gives the simulated times of the
    cases under ``key`` with ``kind``'s cost replaced by ``cost``, in the cases' order. Safe to call
    from several threads at once."""

    def __init__(self, cases_by_key: dict[str, Sequence[tuple]], workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers!r} is not allowed: it must be at least 1")
        self.cases_by_key = cases_by_key
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "CasePool":
        if self.workers > 1:
            self._pool = ProcessPoolExecutor(self.workers, initializer=_init_worker, initargs=(self.cases_by_key,))
            # Start the workers now, before the fits' threads exist: where the start method is "fork", a
            # pool starts all its workers at the first submit, and a fork must not copy a thread's held lock.
            self._pool.submit(int).result()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def simulate(self, key: str, spec: GPUSpec, kind: str, cost: TaskCost) -> list[float]:
        cases = self.cases_by_key[key]
        if self._pool is None:
            return simulated_kind_us(spec, kind, cost, cases)
        s = dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost})
        return list(self._pool.map(_simulate_indexed, [(key, i, s) for i in range(len(cases))]))
