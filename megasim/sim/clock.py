"""The engine's event loop: a ``simpy.Environment``, with the model's callbacks posted in batches.

The model needs one thing from the discrete-event kernel: "call fn(value) `delay` ns from now", with
simultaneous events run in the order they were posted. ``ModelEnvironment.after`` does it on SimPy's
own queue, ordered by (time, priority, insertion id) like every SimPy event, and ``env.run()`` is
SimPy's loop: user SimPy processes (``env.process(...)``) run in the same loop as the model, at the
same times (``megasim.sim.engine.Simulation``).

**Batches.** A model event is a ``_Batch``: an ``fn`` and a list of values, run in order when SimPy
pops it. A post whose (time, fn) equal those of the most recently posted event, still pending, with
nothing else posted since, joins that event's list instead of adding a queue entry. The order the
calls run in is the order of one event per call, exactly: the joined call would have come right after
the others (nothing was posted between them, and anything posted while they run comes later in
either case). Blocks dispatched together, and tasks whose memory phases start together (a non-fused
launch's blocks are alike), so cost one queue entry, not one each. Any ``schedule`` by something else
(a user process, a SimPy event) ends the current batch.

**Reserved places.** A server's next completion moves as jobs come and go; each move would post a new
event and leave the old one to fire for nothing. A server instead ``reserve``s the insertion id the new
event would have had and keeps one entry in the queue: it ``push``es a new entry only when the
completion moves earlier; an entry that fires before the completion it stood for is pushed again at
that completion's time with its reserved id, so the order of everything is as if each move had posted
its own event.

``events`` counts the queue entries the model posted, ``calls`` the calls they carried.

**Runaway guard.** A run of T tasks posts O(T) entries (at most ~6 per task on the catalogue's layers);
``event_limit(T)`` is far above that, and a run that passes it (the model circling without time moving
on: a defect, not an input) stops with a one-line ``SimulationError`` instead of running for ever.
"""

from __future__ import annotations

from heapq import heapify, heappush
from typing import Any, Callable

import simpy
from simpy.core import NORMAL

from megasim.errors import SimulationError

# A run of T tasks may post at most EVENTS_PER_TASK * T + EVENTS_BASE queue entries (event_limit).
EVENTS_PER_TASK = 1000
EVENTS_BASE = 1_000_000


def event_limit(tasks: int) -> int:
    """The most queue entries a run of `tasks` tasks may post (module docstring: runaway guard)."""
    return EVENTS_PER_TASK * tasks + EVENTS_BASE


def runaway_error(limit: int, tasks: int, now: float) -> SimulationError:
    """The one-line error of a run that passed its event limit."""
    return SimulationError(f"the model posted more than {limit:,} events for {tasks:,} tasks (at most "
                           f"{EVENTS_PER_TASK:,} per task and {EVENTS_BASE:,} are allowed) and stopped at "
                           f"{now:.6g} ns: it is not converging, a defect of the model (please report it)")


class _Batch:
    """A SimPy-compatible event (what ``Environment.step`` reads: ``callbacks``, ``_ok``) that calls
    ``fn(value)`` for each of its values."""

    __slots__ = ("callbacks", "_ok", "_value", "fn", "time", "values")
    model_event = True

    def __init__(self, run: Callable[["_Batch"], None], fn: Callable[[Any], None], time: float, value: Any) -> None:
        self.callbacks = [run]
        self._ok = True
        self._value = None
        self.fn = fn
        self.time = time
        self.values = [value]


class ModelEnvironment(simpy.Environment):
    """A ``simpy.Environment`` on which the model posts its callbacks (``after``); see the module docstring."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self._batch: _Batch | None = None     # the model's most recent event while it is pending and last
        self.events = 0
        self.calls = 0
        self.event_limit = float("inf")   # set by the run (event_limit); runaway_tasks: its task count
        self.runaway_tasks = 0

    def schedule(self, event, priority=NORMAL, delay=0) -> None:
        """SimPy's ``schedule``; anything scheduled here ends the model's current batch."""
        self._batch = None
        super().schedule(event, priority, delay)

    def after(self, delay: float, fn: Callable[[Any], None], value: Any) -> None:
        """Call ``fn(value)`` ``delay`` ns (>= 0) from now, after everything already posted for that time."""
        t = self._now + delay
        self.calls += 1
        batch = self._batch
        if batch is not None and batch.time == t and batch.fn == fn:    # (bound methods: equal, not identical)
            batch.values.append(value)
            return
        batch = self._batch = _Batch(self._run_batch, fn, t, value)
        self.events += 1
        if self.events > self.event_limit:
            raise runaway_error(self.event_limit, self.runaway_tasks, self._now)
        # SimPy's schedule() without its reset of the batch (the entry is the same).
        heappush(self._queue, (t, NORMAL, next(self._eid), batch))

    def pending(self) -> bool:
        """Whether anything is queued (a user process started, an event scheduled)."""
        return bool(self._queue)

    def reserve(self) -> int:
        """A place in the queue's order, now: the insertion id an event scheduled now would get, for an
        entry ``push``ed later (a server's next completion, ``megasim.sim.servers.base``). Ends the batch."""
        self._batch = None
        return next(self._eid)

    def push(self, time: float, eid: int, event) -> None:
        """Queue ``event`` at ``time`` (ns, >= now) in the place ``eid`` (from ``reserve``)."""
        self.events += 1
        if self.events > self.event_limit:
            raise runaway_error(self.event_limit, self.runaway_tasks, self._now)
        heappush(self._queue, (time, NORMAL, eid, event))

    def drop_model_events(self) -> None:
        """Remove the model's entries still queued (completions superseded before the run ended), so
        that the queue no longer refers to the model's servers; SimPy's own events stay."""
        self._batch = None
        self._queue[:] = [entry for entry in self._queue if getattr(entry[3], "model_event", False) is False]
        heapify(self._queue)

    def _run_batch(self, batch: _Batch) -> None:
        if self._batch is batch:
            self._batch = None
        fn = batch.fn
        for value in batch.values:
            fn(value)
