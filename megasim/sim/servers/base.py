"""The machinery every processor-sharing server of the engine shares.

A server holds *jobs*: a block's memory phase on the memory system, its compute phase on its SM. A job
has an amount of *work*, in nanoseconds of the whole resource, and receives it at a *rate* (work per
ns, at most 1) that depends on the jobs present. How the rates follow from the jobs present is a
server's rule, its one method ``_rates`` (``megasim.sim.servers.shared``, ``.readiness``; a rule may also
give ``_rates_next``, the rates and the least delay to a completion in one pass); everything else is
here, once:

- **Rate groups.** Jobs that always receive the same rate form a group: every job of a
  ``SharedServer``; the jobs of one cap or readiness class otherwise; a job alone where every job's rate
  differs (``AgeWeightedReadinessServer``). A group keeps one *virtual time*, the work each of its jobs
  has received, and a heap of its jobs' finish virtual times, so an arrival or a completion costs
  O(log n), not O(n) (the classic virtual-time trick of fair queueing). The rule sets ``_rate[g]`` for
  every group with jobs computing (``_active``); between changes the virtual times advance by
  ``dt * rate``. Which group a job joins is the hook ``_group``.
- **Blocks present.** On an SM a block also counts while it moves its data: ``enter(job)`` ...
  ``leave(job)``, receiving no work; ``start_computing`` turns such a block into a computing one in one
  change. For a rule that follows the blocks present (``counts_blocks``) the hooks ``_arrive`` and
  ``_depart`` say that a block came or went (``add`` or ``enter``; its completion or ``leave``).
- **Completions.** The server's next completion is the earliest finish at the current rates. After a
  change it is scheduled anew (``_schedule``), except that an arrival keeps a pending completion that is
  not later (``keep_earlier``): it may fire early, and ``_fire`` re-arms it, which saves most
  superseded completions where arrivals only slow the others down. A schedule takes its place in the
  SimPy queue's order at once (``ModelEnvironment.reserve``) but adds a queue entry only when it is
  earlier than the server's entry there; an entry that fires before the completion it now stands for
  is queued again in that reserved place (``_on_wake``), so a completion that moves later costs no new
  entry and the order of events is the one of an event per schedule. Jobs of a group whose finish is within
  ``tolerance`` (relative, at least 1 ns of work) of the group's head finish with it (exact ties are
  common: equal jobs added at the same time); they are reported to ``on_done`` in group order.

``add`` and ``_fire`` are the engine's hottest code (every job passes through both), so they are written
out in full (but for the rule's ``_rates_next``) rather than through the helpers that ``enter``, ``leave``
and ``start_computing`` use, and a
server with one group and no blocks to follow (every ``SharedServer``) runs them with the loops over
groups unrolled (``_add_one``, ``_fire_one``; the same arithmetic, bit for bit:
``tests/test_sim_per_job_caps.py`` checks it).
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Callable

INF = float("inf")


class _Wake:
    """A server's entry in the SimPy queue (what ``Environment.step`` reads: ``callbacks``, ``_ok``)."""

    __slots__ = ("callbacks", "_ok", "_value", "eid")
    model_event = True                  # (ModelEnvironment.drop_model_events)

    def __init__(self, on_wake, eid: int) -> None:
        self.callbacks = [on_wake]
        self._ok = True
        self._value = None
        self.eid = eid


class ProcessorSharingServer:
    """Jobs in rate groups, advanced at the rates that ``_rates`` sets; see the module docstring."""

    __slots__ = ("clock", "on_done", "n", "_t", "_seq", "_due", "_due_eid", "_queued", "_queued_eid", "_vt", "_heaps", "_rate",
                 "_active", "add", "_fire", "_keep_earlier", "_counts_blocks", "_tolerance")

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
        self._due = INF                 # time of the next completion (inf: none)
        self._due_eid = -1              # its place in the queue's order (ModelEnvironment.reserve)
        self._queued = INF              # time of this server's live entry in the queue (inf: none)
        self._queued_eid = -1           # and its place
        if groups is None:
            self._vt, self._heaps, self._rate = {}, {}, {}
        else:
            self._vt = [0.0] * groups   # per group: the work each of its jobs has received
            self._heaps = [[] for _ in range(groups)]   # per group: (finish virtual time, seq, job)
            self._rate = [0.0] * groups  # per group with jobs computing: work per ns of each job
        self._active: list = []         # groups with jobs computing, in group order (a rule may reorder)
        # The rule's settings, read in the hot paths (an instance's slot is read faster than a class's attribute).
        self._keep_earlier, self._counts_blocks, self._tolerance = self.keep_earlier, self.counts_blocks, self.tolerance
        # add(job, work_ns): `job` arrives with `work_ns` of work; _fire(): the next completion is due.
        if groups == 1 and not self.counts_blocks:
            self.add, self._fire = self._add_one, self._fire_one
        else:
            self.add, self._fire = self._add, self._fire_groups

    # --- the hooks -------------------------------------------------------------------------------------
    def _rates(self) -> None:
        """Set ``_rate[g]`` for every group in ``_active`` (called after every change while jobs compute)."""
        raise NotImplementedError

    def _group(self, job: int, work_ns: float):
        """The group that `job`, about to compute `work_ns`, joins (with one group: 0)."""
        return 0

    def _arrive(self, job: int) -> None:
        """`job`'s block came onto the server (``add`` or ``enter``; with ``counts_blocks``)."""

    def _depart(self, job: int) -> None:
        """`job`'s block left the server (its completion or ``leave``; with ``counts_blocks``)."""

    # --- blocks present --------------------------------------------------------------------------------
    def enter(self, job: int) -> None:
        """`job`'s block arrives without work (it moves its data): it counts towards the rates only."""
        now = self.clock.now
        self._advance(now)
        if self._counts_blocks:
            self._arrive(job)
        if self.n:
            self._rates()
            self._post(now)

    def leave(self, job: int) -> None:
        """That block goes (it joins with ``add`` when it has work to compute)."""
        now = self.clock.now
        self._advance(now)
        if self._counts_blocks:
            self._depart(job)
        if self.n:
            self._rates()
            self._post(now)

    def start_computing(self, job: int, work_ns: float) -> None:
        """``leave(job)`` then ``add(job, work_ns)`` in one change: the block stays on the server."""
        now = self.clock.now
        self._advance(now)
        g = self._group(job, work_ns)
        heap = self._heaps[g]
        if not heap:
            active = self._active
            active.append(g)
            if len(active) > 1:
                active.sort()
        self._seq += 1
        heappush(heap, (self._vt[g] + work_ns, self._seq, job))
        self.n += 1
        self._rates()
        self._post(now)

    def _advance(self, now: float) -> None:
        """Bring the virtual times up to `now` at the current rates."""
        dt = now - self._t
        if dt > 0.0:
            vt, rate = self._vt, self._rate
            for g in self._active:
                vt[g] += dt * rate[g]
        self._t = now

    def _next_delay(self) -> float:
        """The least time (ns) to a group's next completion at the current rates (jobs are computing)."""
        best = INF
        heaps, vt, rate = self._heaps, self._vt, self._rate
        for g in self._active:
            d = (heaps[g][0][0] - vt[g]) / rate[g]
            if d < best:
                best = d
        return best

    def _rates_next(self) -> float:
        """``_rates``, then ``_next_delay`` (a rule may do both in one pass over its groups)."""
        self._rates()
        return self._next_delay()

    def _post(self, now: float) -> None:
        """Post the next completion anew (jobs are computing)."""
        best = self._next_delay()
        self._schedule(now + (best if best > 0.0 else 0.0))

    def _schedule(self, due: float) -> None:
        """The next completion is at `due`: its place in the queue's order is taken now; the queue gets a
        new entry only if this server's entry there is later (``megasim.sim.clock``)."""
        self._due = due
        self._due_eid = eid = self.clock.reserve()
        if self._queued > due:          # (the entry there, if any, is left to fire for nothing)
            self._queued, self._queued_eid = due, eid
            self.clock.push(due, eid, _Wake(self._on_wake, eid))

    def _on_wake(self, wake: "_Wake") -> None:
        """An entry of this server fired: one an earlier entry superseded (nothing to do); the live one,
        for the next completion (fire), or for one that has since moved later (queue it again, in its
        reserved place), or for none left."""
        eid = wake.eid
        if eid != self._queued_eid:
            return
        self._queued = INF
        self._queued_eid = -1
        if eid == self._due_eid:
            self._fire()
        elif self._due != INF:
            self._queued, self._queued_eid = self._due, self._due_eid
            self.clock.push(self._due, self._due_eid, _Wake(self._on_wake, self._due_eid))

    # --- arrivals and completions, any number of groups ------------------------------------------------
    def _add(self, job: int, work_ns: float) -> None:
        now = self.clock.now
        vt, rate, active = self._vt, self._rate, self._active
        dt = now - self._t                  # _advance
        if dt > 0.0:
            for g in active:
                vt[g] += dt * rate[g]
        self._t = now
        if self._counts_blocks:
            self._arrive(job)
        g = self._group(job, work_ns)
        heap = self._heaps[g]
        if not heap:
            active.append(g)
            if len(active) > 1:
                active.sort()
        self._seq += 1
        heappush(heap, (vt[g] + work_ns, self._seq, job))
        self.n += 1
        best = self._rates_next()           # _post(now), unless an earlier completion is pending
        due = now + (best if best > 0.0 else 0.0)
        if self._due <= due and self._keep_earlier:
            return
        self._schedule(due)

    def _fire_groups(self) -> None:
        now = self.clock.now
        vt, heaps, rate, active = self._vt, self._heaps, self._rate, self._active
        dt = now - self._t
        self._t = now
        tol = self._tolerance
        done = emptied = None
        for g in active:
            if dt > 0.0:                    # _advance
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
                done = [heappop(heap)[2]]
            else:
                done.append(heappop(heap)[2])
            while heap and heap[0][0] <= limit:
                done.append(heappop(heap)[2])
            if not heap:
                if emptied is None:
                    emptied = [g]
                else:
                    emptied.append(g)
        if done is not None:
            self.n -= len(done)
            if emptied is not None:
                for g in emptied:
                    active.remove(g)
            if self._counts_blocks:
                for job in done:
                    self._depart(job)
        if self.n:                          # _post(now), at new rates if jobs ended
            best = self._rates_next() if done is not None else self._next_delay()
            due = now + (best if best > 0.0 else 0.0)
            if done is None and due == now:
                self._snap(now)
            self._schedule(due)
        else:
            self._due = INF
        if done is not None:
            for job in done:
                self.on_done(job)

    def _snap(self, now: float) -> None:
        """A fire that ended no job would fire again at `now` (the least work left, at its rate, takes less
        than the clock's resolution there: a float64 time in ns resolves ~1e-6 ns at 1e10 ns, so a task
        moving ~1e11 bytes gets there): nothing could change before that fire, so it would repeat for
        ever. The groups whose finish rounds to `now` get their head's work; the next fire ends them.
        (Only a run that would not end reaches this: every other prediction is unchanged.)"""
        heaps, vt, rate = self._heaps, self._vt, self._rate
        for g in self._active:
            head = heaps[g][0][0]
            if now + (head - vt[g]) / rate[g] == now:
                vt[g] = head

    # --- arrivals and completions, one group (0) -------------------------------------------------------
    def _add_one(self, job: int, work_ns: float) -> None:
        now = self.clock.now
        vt, heap = self._vt, self._heaps[0]
        if heap:
            dt = now - self._t
            if dt > 0.0:
                vt[0] += dt * self._rate[0]
        else:
            self._active.append(0)
        self._t = now
        self._seq += 1
        heappush(heap, (vt[0] + work_ns, self._seq, job))
        self.n += 1
        self._rates()
        delay = (heap[0][0] - vt[0]) / self._rate[0]
        due = now + (delay if delay > 0.0 else 0.0)
        if self._due <= due and self._keep_earlier:
            return
        self._schedule(due)

    def _fire_one(self) -> None:
        now = self.clock.now
        vt, heap = self._vt, self._heaps[0]
        dt = now - self._t
        self._t = now
        if dt > 0.0:
            vt[0] += dt * self._rate[0]
        v = vt[0]
        head = heap[0][0]
        tolerance = self._tolerance * (head if head > 1.0 else 1.0)
        if head > v + tolerance:            # early: re-arm
            delay = (head - v) / self._rate[0]
            due = now + (delay if delay > 0.0 else 0.0)
            if due == now:                  # (_snap: below the clock's resolution, it would re-fire for ever)
                vt[0] = head
            self._schedule(due)
            return
        if head > v:
            vt[0] = head
        limit = head + tolerance
        job = heappop(heap)[2]
        more = None
        while heap and heap[0][0] <= limit:
            if more is None:
                more = []
            more.append(heappop(heap)[2])
        if heap:
            self.n -= 1 if more is None else 1 + len(more)
            self._rates()
            delay = (heap[0][0] - vt[0]) / self._rate[0]
            self._schedule(now + (delay if delay > 0.0 else 0.0))
        else:
            self.n = 0
            self._active.clear()
            self._due = INF
        self.on_done(job)
        if more is not None:
            for job in more:
                self.on_done(job)
