"""Event queues for the engine: SimPy's, and a plain heap with the same ordering.

The engine needs one thing from a discrete-event kernel: "call fn(value) `delay` ns from now", with
simultaneous events run in the order they were scheduled. ``SimPyClock`` does it with SimPy
(a Timeout whose callback calls fn; SimPy orders its queue by (time, priority, insertion id), and all
these events share one priority). ``HeapClock`` does the same on a bare ``heapq`` of
(time, insertion id, fn, value) tuples: identical order, so identical results (a test checks), at
about a third of SimPy's cost per event (SimPy allocates an Event object per timeout and steps
through its generic callback machinery). ``HeapClock`` is the default; ``SimPyClock`` is the
reference and lets the engine be combined with SimPy processes (e.g. a host-side model).
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any, Callable

import simpy


def _dispatch(event: simpy.Event) -> None:
    fn, value = event.value
    fn(value)


class SimPyClock:
    def __init__(self) -> None:
        self.env = simpy.Environment()
        self.events = 0

    @property
    def now(self) -> float:
        return self.env.now

    def after(self, delay: float, fn: Callable[[Any], None], value: Any) -> None:
        self.events += 1
        self.env.timeout(delay, (fn, value)).callbacks.append(_dispatch)

    def run(self) -> None:
        self.env.run()


class HeapClock:
    __slots__ = ("now", "events", "_queue")

    def __init__(self) -> None:
        self.now = 0.0
        self.events = 0
        self._queue: list[tuple[float, int, Callable[[Any], None], Any]] = []

    def after(self, delay: float, fn: Callable[[Any], None], value: Any) -> None:
        if delay < 0.0:
            raise ValueError(f"negative delay {delay}")
        self.events += 1
        heappush(self._queue, (self.now + delay, self.events, fn, value))

    def run(self) -> None:
        queue = self._queue
        pop = heappop
        while queue:
            t, _, fn, value = pop(queue)
            self.now = t
            fn(value)


CLOCKS = {"heap": HeapClock, "simpy": SimPyClock}
