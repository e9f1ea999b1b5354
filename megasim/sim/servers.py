"""Shared resources as processor-sharing servers.

A SharedServer models a resource whose capacity is split equally among the jobs using it: an SM's
FP32 pipes among the blocks computing on it, the memory system among the blocks moving data. Each
job has an amount of *work*, in nanoseconds of the whole resource; with n jobs each progresses at
``min(cap, 1/n)`` (cap < 1 models a per-job limit, e.g. the bandwidth one block can sustain with its
loads in flight). Because every job runs at the same rate, the server keeps one *virtual time*, the
work each job has received, and a heap of the virtual times at which jobs finish: arrivals and
departures cost O(log n), not O(n) (the classic virtual-time trick of fair queueing).

The server schedules its next completion as a SimPy event; when jobs arrive or leave, the pending
event is superseded (its version no longer matches) and a new one is scheduled.
"""

from __future__ import annotations

import heapq
from typing import Callable

import simpy


class SharedServer:
    __slots__ = ("env", "cap", "on_done", "on_change", "_vt", "_t", "_heap", "_seq", "_version", "n")

    def __init__(self, env: simpy.Environment, cap: float, on_done: Callable[[int], None],
                 on_change: Callable[[float, int, int], None] | None = None) -> None:
        if not 0.0 < cap <= 1.0:
            raise ValueError(f"cap={cap!r} must be in (0, 1]")
        self.env = env
        self.cap = cap
        self.on_done = on_done          # called with the job id when a job finishes
        self.on_change = on_change      # called with (now, old n, new n) whenever the number of jobs changes
        self._vt = 0.0                  # virtual time: work received by every job present
        self._t = 0.0                   # real time at which _vt was last brought up to date
        self._heap: list[tuple[float, int, int]] = []
        self._seq = 0
        self._version = 0
        self.n = 0

    def rate(self) -> float:
        """Work received per ns by each job now."""
        return min(self.cap, 1.0 / self.n) if self.n else 0.0

    def _advance(self, now: float) -> None:
        if self.n:
            self._vt += (now - self._t) * min(self.cap, 1.0 / self.n)
        self._t = now

    def add(self, job: int, work_ns: float) -> None:
        now = self.env.now
        self._advance(now)
        self._seq += 1
        heapq.heappush(self._heap, (self._vt + work_ns, self._seq, job))
        self.n += 1
        if self.on_change is not None:
            self.on_change(now, self.n - 1, self.n)
        self._reschedule()

    def _reschedule(self) -> None:
        self._version += 1
        if not self._heap:
            return
        delay = (self._heap[0][0] - self._vt) / min(self.cap, 1.0 / self.n)
        ev = self.env.timeout(delay if delay > 0.0 else 0.0)
        ev.callbacks.append(self._make_fire(self._version))

    def _make_fire(self, version: int):
        def fire(_event) -> None:
            if version == self._version:
                self._complete()
        return fire

    def _complete(self) -> None:
        now = self.env.now
        self._advance(now)
        heap = self._heap
        done = []
        # The head finishes now by construction; others whose finish virtual time is within
        # rounding of it finish together (exact ties are common: equal jobs added together).
        vt_head = heap[0][0]
        self._vt = max(self._vt, vt_head)
        limit = vt_head + 1e-9 * max(1.0, abs(vt_head))
        while heap and heap[0][0] <= limit:
            done.append(heapq.heappop(heap)[2])
        self.n -= len(done)
        if self.on_change is not None:
            self.on_change(now, self.n + len(done), self.n)
        self._reschedule()
        for job in done:
            self.on_done(job)
