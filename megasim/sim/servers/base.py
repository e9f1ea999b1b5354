"""The machinery every processor-sharing server of the engine shares.

A server holds *jobs*: a block's memory phase on the memory system, its compute phase on its SM. A job
has an amount of *work*, in nanoseconds of the whole resource, and receives it at a *rate* (work per
ns, at most 1) that depends on the jobs present. How the rates follow from the jobs present is a
server's rule, its one method ``_rates`` (``megasim.sim.servers.shared``, ``.readiness``); everything
else is here, once:

- **Rate groups.** Jobs that always receive the same rate form a group: every job of a
  ``SharedServer``; the jobs of one cap or readiness class otherwise; a job alone where every job's rate
  differs (``AgeWeightedReadinessServer``). A group keeps one *virtual time*, the work each of its jobs
  has received, and a heap of its jobs' finish virtual times, so an arrival or a completion costs
  O(log n), not O(n) (the classic virtual-time trick of fair queueing). The rule sets ``_rate[g]`` for
  every group with jobs computing (``_active``); between changes the virtual times advance by
  ``dt * rate`` (``_advance``). Which group a job joins is the hook ``_group``.
- **Blocks present.** On an SM a block also counts while it moves its data: ``enter(job)`` ...
  ``leave(job)``, receiving no work; ``start_computing`` turns such a block into a computing one in one
  change. The hooks ``_arrive`` and ``_depart`` tell the rule that a block came or went (through
  ``add`` or ``enter``; through a completion or ``leave``).
- **Completions.** The server keeps one pending event on the engine's clock (``megasim.sim.clock``), at
  the earliest finish at the current rates. After a change the next completion is posted anew, except
  that an arrival keeps a pending event that is not later (``keep_earlier``): it may fire early, and
  ``_fire`` re-arms it, which saves most superseded events where arrivals only slow the others down.
  Superseded events are recognised by a version number. Jobs of a group whose finish is within
  ``tolerance`` (relative, at least 1 ns of work) of the group's head finish with it (exact ties are
  common: equal jobs added at the same time); they are reported to ``on_done`` in group order.
"""

from __future__ import annotations

import heapq
from typing import Callable

INF = float("inf")


class ProcessorSharingServer:
    """Jobs in rate groups, advanced at the rates that ``_rates`` sets; see the module docstring."""

    __slots__ = ("clock", "on_done", "n", "_t", "_seq", "_version", "_due", "_vt", "_heaps", "_rate", "_active")

    keep_earlier = True     # an arrival keeps a pending completion that is not later than the new one
    counts_blocks = False   # the rule follows the blocks present: _arrive and _depart are called
    tolerance = 1e-9        # relative: jobs this close to a group's head finish with it

    def __init__(self, clock, on_done: Callable[[int], None], groups: int | None) -> None:
        """``groups``: the number of rate groups, or None for a group per job, made as jobs come."""
        self.clock = clock
        self.on_done = on_done          # called with the job id when a job finishes
        self.n = 0                      # jobs computing
        self._t = 0.0                   # real time at which the virtual times were last brought up to date
        self._seq = 0                   # arrivals so far: breaks ties in the heaps, first come first
        self._version = 0               # of the pending completion event; older events are ignored
        self._due = INF                 # time of the pending completion event (inf: none)
        if groups is None:
            self._vt, self._heaps, self._rate = {}, {}, {}
        else:
            self._vt = [0.0] * groups   # per group: the work each of its jobs has received
            self._heaps = [[] for _ in range(groups)]   # per group: (finish virtual time, seq, job)
            self._rate = [0.0] * groups  # per group with jobs computing: work per ns of each job
        self._active: list = []         # groups with jobs computing, in group order (a rule may reorder)

    # --- the hooks -------------------------------------------------------------------------------------
    def _rates(self) -> None:
        """Set ``_rate[g]`` for every group in ``_active`` (called after every change while jobs compute)."""
        raise NotImplementedError

    def _group(self, job: int, work_ns: float):
        """The group that `job`, about to compute `work_ns`, joins."""
        return 0

    def _arrive(self, job: int) -> None:
        """`job`'s block came onto the server (``add`` or ``enter``)."""

    def _depart(self, job: int) -> None:
        """`job`'s block left the server (its completion or ``leave``)."""

    # --- changes ---------------------------------------------------------------------------------------
    def add(self, job: int, work_ns: float) -> None:
        """`job` arrives with `work_ns` of work."""
        # _advance, _push and _post, inlined: the engine's hottest path.
        now = self.clock.now
        vt, rate, active = self._vt, self._rate, self._active
        dt = now - self._t
        if dt > 0.0:
            for g in active:
                vt[g] += dt * rate[g]
        self._t = now
        if self.counts_blocks:
            self._arrive(job)
        g = self._group(job, work_ns)
        heaps = self._heaps
        heap = heaps[g]
        if not heap:
            active.append(g)
            if len(active) > 1:
                active.sort()
        self._seq += 1
        heapq.heappush(heap, (vt[g] + work_ns, self._seq, job))
        self.n += 1
        self._rates()
        active = self._active
        best = INF
        for g in active:
            d = (heaps[g][0][0] - vt[g]) / rate[g]
            if d < best:
                best = d
        due = now + (best if best > 0.0 else 0.0)
        if self._due <= due and self.keep_earlier:
            return
        self._version += 1
        self._due = due
        self.clock.after(due - now, self._fire, self._version)

    def enter(self, job: int) -> None:
        """`job`'s block arrives without work (it moves its data): it counts towards the rates only."""
        now = self.clock.now
        self._advance(now)
        if self.counts_blocks:
            self._arrive(job)
        if self.n:
            self._rates()
            self._post(now, False)

    def leave(self, job: int) -> None:
        """That block goes (it joins with ``add`` when it has work to compute)."""
        now = self.clock.now
        self._advance(now)
        if self.counts_blocks:
            self._depart(job)
        if self.n:
            self._rates()
            self._post(now, False)

    def start_computing(self, job: int, work_ns: float) -> None:
        """``leave(job)`` then ``add(job, work_ns)`` in one change: the block stays on the server."""
        now = self.clock.now
        self._advance(now)
        self._push(job, work_ns)
        self._rates()
        self._post(now, False)

    # --- the machinery ---------------------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        dt = now - self._t
        if dt > 0.0:
            vt, rate = self._vt, self._rate
            for g in self._active:
                vt[g] += dt * rate[g]
        self._t = now

    def _push(self, job: int, work_ns: float) -> None:
        g = self._group(job, work_ns)
        heap = self._heaps[g]
        if not heap:
            active = self._active
            active.append(g)
            if len(active) > 1:
                active.sort()
        self._seq += 1
        heapq.heappush(heap, (self._vt[g] + work_ns, self._seq, job))
        self.n += 1

    def _next(self) -> float:
        """Delay to the next completion at the current rates; inf when nothing computes."""
        best = INF
        heaps, vt, rate = self._heaps, self._vt, self._rate
        for g in self._active:
            d = (heaps[g][0][0] - vt[g]) / rate[g]
            if d < best:
                best = d
        return best

    def _post(self, now: float, keep_earlier: bool) -> None:
        """Post the next completion (jobs are computing), or keep a pending one that is not later."""
        delay = self._next()
        due = now + (delay if delay > 0.0 else 0.0)
        if keep_earlier and self._due <= due:
            return
        self._version += 1
        self._due = due
        self.clock.after(due - now, self._fire, self._version)

    def _fire(self, version: int) -> None:
        if version != self._version:
            return
        # _advance, _next and _post, inlined: half the events are completions.
        now = self.clock.now
        vt, heaps, rate, active = self._vt, self._heaps, self._rate, self._active
        dt = now - self._t
        self._t = now
        tol = self.tolerance
        done = emptied = None
        for g in active:
            if dt > 0.0:
                vt[g] += dt * rate[g]
            heap = heaps[g]
            head = heap[0][0]
            tolerance = tol * (head if head > 1.0 else 1.0)
            if head > vt[g] + tolerance:     # early (arrivals since it was posted) or another group's
                continue
            if head > vt[g]:
                vt[g] = head
            limit = head + tolerance
            if done is None:
                done = [heapq.heappop(heap)[2]]
            else:
                done.append(heapq.heappop(heap)[2])
            while heap and heap[0][0] <= limit:
                done.append(heapq.heappop(heap)[2])
            if not heap:
                if emptied is None:
                    emptied = [g]
                else:
                    emptied.append(g)
        self._version += 1
        if done is not None:
            self.n -= len(done)
            if emptied is not None:
                for g in emptied:
                    active.remove(g)
            if self.counts_blocks:
                for job in done:
                    self._depart(job)
            if self.n:
                self._rates()
                active = self._active
        if self.n:
            best = INF
            for g in active:
                d = (heaps[g][0][0] - vt[g]) / rate[g]
                if d < best:
                    best = d
            due = self._due = now + (best if best > 0.0 else 0.0)
            self.clock.after(due - now, self._fire, self._version)
        else:
            self._due = INF
        if done is not None:
            for job in done:
                self.on_done(job)
