"""Simulating the calibration's cases on a Dask cluster, every point of a batch at once, each result once.

A kind's fit (``megasim.calibration.fit.fit_kind``) evaluates a candidate TaskCost by simulating every
calibration run of that kind (a dozen or more TaskGraphs: its kernel at several occupancies, the
megakernel per task and persistent). Its least squares asks for points in batches: the point it moves
to, then the finite-difference points of the Jacobian there (one per free field, ``megasim.calibration.lsq``).

``CasePool.simulate_batch`` takes such a batch (several kinds' fits, running in threads of the calling
process, may each send theirs at once) and hands every (point, case) simulation to the cluster's
workers as one Dask task (a case takes 0.1-0.7 s, so a task's millisecond of scheduling is small
beside it), the longest cases first, so that the cores stay busy across the points of a Jacobian (one
point at a time left 1.6 of 16 cores busy on a refit of 2026-11-25: an evaluation waits for its slowest
case). Every kind's cases go to each worker once (scattered, broadcast); a task carries the spec (its
``sources`` and description dropped: 4 KB, not 60) and indices, and returns one float. The cluster is
the ``client`` given (shared with a sweep or the optimiser), else a LocalCluster of ``workers``
processes started by the pool and closed with it (``megasim.sweep.cluster``).

Each simulated time is kept, keyed by (case, kind, cost as the case reads it), and never simulated again:
the point a least squares ends on, a second stage's start, the checks. A launch that is not the
megakernel does not read its kinds' ``megakernel_fixed_ns`` and ``megakernel_claim_ns``
(``megasim.sim.launches``: the megakernel's fixed time and claim price only ``_is_megakernel``
launches), so a Jacobian's megakernel_fixed_ns point costs nothing on the kind's own-kernel runs.

A case's simulation does not depend on where it runs, and results come back in order, so a fit (and the
spec it writes) is the same for any number of workers, one included (which simulates in the calling
process, without a cluster). Worker processes are spawned, so the fitting threads' locks are never
copied into them.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Sequence

import numpy as np

from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec, TaskCost
from megasim.sim import simulate

# The TaskCost fields only a megakernel launch reads (megasim.sim.run_setup, megasim.sim.launches).
MEGAKERNEL_ONLY_FIELDS = ("megakernel_fixed_ns", "megakernel_claim_ns")


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


def runs_megakernel(case: tuple) -> bool:
    """Whether any launch of the case runs the megakernel (the engine's rule, ``_is_megakernel``: the
    megakernel kernel, a persistent grid, or several kinds in one launch)."""
    graph, schedule = case[1], case[2]
    return any(launch.kernel == "megakernel" or launch.style == "persistent"
               or np.unique(graph.kind[np.asarray(launch.order)]).size > 1 for launch in schedule.launches)


def case_work(case: tuple) -> int:
    """A case's expected simulation length, for ordering a batch: its task count."""
    return int(case[1].num_tasks)


def _simulate_indexed(args: tuple[str, int, GPUSpec], cases_by_key: dict[str, Sequence[tuple]]) -> float:
    """One case of the scattered ``cases_by_key`` (resolved to the worker's copy) under one spec."""
    key, index, spec = args
    return simulate_case(cases_by_key[key][index], spec)


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """How many case simulations a pool ran and how many it answered from what it had simulated."""

    simulated: int
    reused: int


class CasePool:
    """Simulates named lists of calibration cases on a Dask cluster: ``client``'s, else a LocalCluster of
    ``workers`` processes (1 and no client: in this process).

    Use as a context manager. ``simulate_batch([(key, spec, kind, cost), ...])`` gives, per request, the
    simulated times of the cases under ``key`` with ``kind``'s cost replaced by ``cost``, in the cases'
    order; every simulation of the batch runs at once over the workers, and none twice (a request's
    ``spec`` must be the same for every request of its ``key``: one pool per fit's base spec).
    ``simulate(key, spec, kind, cost)`` is a batch of one. Safe to call from several threads at once."""

    def __init__(self, cases_by_key: dict[str, Sequence[tuple]], workers: int, client: Any = None) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers!r} is not allowed: it must be at least 1")
        self.cases_by_key = cases_by_key
        self.workers = workers
        self._given = client
        self._client: Any = None
        self._owned: Any = None          # the open_client context this pool entered, if any
        self._cases: Any = None          # the cases, scattered to every worker
        self._mega = {key: [runs_megakernel(c) for c in cases] for key, cases in cases_by_key.items()}
        self._done: dict[tuple, float] = {}
        self._lock = threading.Lock()
        self._simulated = 0
        self._reused = 0

    def __enter__(self) -> "CasePool":
        if self.cases_by_key and (self._given is not None or self.workers > 1):   # no cases: nothing to send
            from megasim.sweep.cluster import open_client
            self._owned = open_client(self._given, workers=None if self._given is not None else self.workers)
            self._client = self._owned.__enter__()
            self._cases = self._client.scatter(self.cases_by_key, broadcast=True, hash=False)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._owned is not None:
            owned, self._owned, self._client, self._cases = self._owned, None, None, None
            owned.__exit__(None, None, None)

    @property
    def stats(self) -> PoolStats:
        return PoolStats(self._simulated, self._reused)

    def _memo_key(self, key: str, index: int, kind: str, cost: TaskCost) -> tuple:
        if not self._mega[key][index]:
            cost = dataclasses.replace(cost, **{f: None if f == "megakernel_claim_ns" else 0.0
                                               for f in MEGAKERNEL_ONLY_FIELDS})
        return (key, index, kind, cost)

    def simulate(self, key: str, spec: GPUSpec, kind: str, cost: TaskCost) -> list[float]:
        return self.simulate_batch([(key, spec, kind, cost)])[0]

    def simulate_batch(self, requests: Sequence[tuple[str, GPUSpec, str, TaskCost]]) -> list[list[float]]:
        memo = [[self._memo_key(key, i, kind, cost) for i in range(len(self.cases_by_key[key]))]
                for key, _, kind, cost in requests]
        todo: dict[tuple, tuple[str, int, GPUSpec]] = {}
        with self._lock:
            for (key, spec, kind, cost), keys in zip(requests, memo):
                for i, mk in enumerate(keys):
                    if mk not in self._done and mk not in todo:
                        s = dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost}, sources={},
                                                description="")
                        todo[mk] = (key, i, s)
            self._reused += sum(len(k) for k in memo) - len(todo)
            self._simulated += len(todo)
        # the longest first, so that a batch's last task is a short one
        order = sorted(todo, key=lambda mk: -case_work(self.cases_by_key[todo[mk][0]][todo[mk][1]]))
        if self._client is None:
            values = [simulate_case(self.cases_by_key[todo[mk][0]][todo[mk][1]], todo[mk][2]) for mk in order]
        else:
            futures = [self._client.submit(_simulate_indexed, todo[mk], self._cases, pure=False) for mk in order]
            values = self._client.gather(futures)
        with self._lock:
            self._done.update(zip(order, values))
            return [[self._done[mk] for mk in keys] for keys in memo]
