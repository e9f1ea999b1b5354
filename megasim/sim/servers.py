"""Shared resources as processor-sharing servers.

A SharedServer models a resource whose capacity is split equally among the jobs using it: an SM's
FP32 pipes among the blocks computing on it, the memory system among the blocks moving data. Each
job has an amount of *work*, in nanoseconds of the whole resource; with n jobs each progresses at
``min(cap, 1/n)`` (cap < 1 models a per-job limit, e.g. the bandwidth one block can sustain with its
loads in flight). Because every job runs at the same rate, the server keeps one *virtual time*, the
work each job has received, and a heap of the virtual times at which jobs finish: arrivals and
departures cost O(log n), not O(n) (the classic virtual-time trick of fair queueing).

The server schedules its next completion on the engine's clock (``megasim.sim.clock``). An arrival
only moves that completion later (unless the newcomer is the new head), so the pending event is
kept and, if it fires early, re-armed; a departure schedules the next one. Superseded events are
recognised by a version number.
"""

from __future__ import annotations

import heapq
from typing import Callable



class SharedServer:
    __slots__ = ("clock", "cap", "on_done", "_vt", "_t", "_heap", "_seq", "_version", "_due", "n")

    def __init__(self, clock, cap: float, on_done: Callable[[int], None]) -> None:
        if not 0.0 < cap <= 1.0:
            raise ValueError(f"cap={cap!r} must be in (0, 1]")
        self.clock = clock
        self.cap = cap
        self.on_done = on_done          # called with the job id when a job finishes
        self._vt = 0.0                  # virtual time: work received by every job present
        self._t = 0.0                   # real time at which _vt was last brought up to date
        self._heap: list[tuple[float, int, int]] = []
        self._seq = 0
        self._version = 0
        self._due = float("inf")        # time of the pending completion event (inf: none)
        self.n = 0

    def rate(self) -> float:
        """Work received per ns by each job now."""
        return min(self.cap, 1.0 / self.n) if self.n else 0.0

    def add(self, job: int, work_ns: float) -> None:
        now = self.clock.now
        n = self.n
        cap = self.cap
        if n:
            rate = 1.0 / n
            self._vt += (now - self._t) * (rate if rate < cap else cap)
        self._t = now
        self._seq += 1
        heap = self._heap
        heapq.heappush(heap, (self._vt + work_ns, self._seq, job))
        n += 1
        self.n = n
        # A new job never makes the head finish earlier unless it is the head: when the pending
        # completion event is not later than the new head time, keep it (it may fire early; _fire
        # then re-arms it). This saves most superseded events.
        rate = 1.0 / n
        due = now + (heap[0][0] - self._vt) / (rate if rate < cap else cap)
        if due < now:      # the head is due now (within rounding) and its event is still pending
            due = now
        if self._due <= due:
            return
        self._version += 1
        self._due = due
        self.clock.after(due - now, self._fire, self._version)

    def _fire(self, version: int) -> None:
        if version != self._version:
            return
        now = self.clock.now
        cap = self.cap
        rate = 1.0 / self.n
        if rate > cap:
            rate = cap
        vt = self._vt + (now - self._t) * rate
        self._t = now
        heap = self._heap
        head = heap[0][0]
        tolerance = 1e-9 * (head if head > 1.0 else 1.0)
        if head > vt + tolerance:      # early: jobs arrived since this event was set; re-arm
            self._vt = vt
            self._version += 1
            self._due = now + (head - vt) / rate
            self.clock.after(self._due - now, self._fire, self._version)
            return
        # The head finishes now; others whose finish virtual time is within rounding of it finish
        # together (exact ties are common: equal jobs added at the same time).
        self._vt = head if head > vt else vt
        limit = head + tolerance
        job = heapq.heappop(heap)[2]
        n = self.n - 1
        more = None
        while heap and heap[0][0] <= limit:
            if more is None:
                more = []
            more.append(heapq.heappop(heap)[2])
            n -= 1
        self.n = n
        self._version += 1
        if heap:
            rate = 1.0 / n
            if rate > cap:
                rate = cap
            delay = (heap[0][0] - self._vt) / rate
            self._due = now + (delay if delay > 0.0 else 0.0)
            self.clock.after(self._due - now, self._fire, self._version)
        else:
            self._due = float("inf")
        self.on_done(job)
        if more is not None:
            for job in more:
                self.on_done(job)
