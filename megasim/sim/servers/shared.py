"""Equal sharing with per-job caps: the memory system, and the SMs of kinds that give ``block_sm_share``.

``SharedServer`` splits its capacity equally among the jobs present: with n jobs each progresses at
``min(cap, 1/n)`` (cap < 1 models a per-job limit, e.g. the bandwidth one block can sustain with its
loads in flight). The engine uses it for the memory system (cap: the per-block DRAM bandwidth) and for
the SMs (cap: the kind's ``block_sm_share``) while the kinds of a launch agree on the cap.

``CappedSharedServer`` lets each job have its own cap (``caps[class_of[job]]``): water-filling. The
capacity is split equally, except that a job never receives more than its cap; what a capped job leaves
is shared equally by the others (max-min fairness: jobs whose cap is below the fair share get their cap,
the rest share what remains). With one cap for all jobs this is ``SharedServer``'s rule, bit for bit;
the engine uses this server only when the jobs present can have different caps (a megakernel launch
mixing kinds whose caps differ, or the memory system's co-residence classes).

Both are rules on ``ProcessorSharingServer`` (``megasim.sim.servers.base``): all jobs of a
``SharedServer`` form one rate group, the jobs of a cap class one group of a ``CappedSharedServer``. An
arrival never raises a rate (the fair share can only fall), so a pending completion is kept on arrivals.
"""

from __future__ import annotations

from typing import Callable

from megasim.sim.servers.base import INF, ProcessorSharingServer


def check_shares(caps, name: str = "caps") -> list[float]:
    """`caps` as floats, each in (0, 1]."""
    caps = [float(c) for c in caps]
    if not caps or not all(0.0 < c <= 1.0 for c in caps):
        raise ValueError(f"{name}={caps!r} must be in (0, 1]")
    return caps


class SharedServer(ProcessorSharingServer):
    """Processor sharing with one cap for every job: each of n jobs receives ``min(cap, 1/n)``. ``cap``
    may be changed while the server is empty (the engine reuses its servers from launch to launch)."""

    __slots__ = ("cap",)

    def __init__(self, clock, cap: float, on_done: Callable[[int], None]) -> None:
        if not 0.0 < cap <= 1.0:
            raise ValueError(f"cap={cap!r} must be in (0, 1]")
        super().__init__(clock, on_done, 1)
        self.cap = cap

    def _rates(self) -> None:
        fair = 1.0 / self.n
        cap = self.cap
        self._rate[0] = fair if fair < cap else cap


class CappedSharedServer(ProcessorSharingServer):
    """Processor sharing where each job has its own cap, ``caps[class_of[job]]``: water-filling.

    Jobs of one cap class always receive the same rate: each class is a rate group, and the rates of
    the (few) classes are recomputed at each arrival and departure, O(classes).
    """

    __slots__ = ("caps", "class_of", "_order", "_in_order")

    def __init__(self, clock, caps, class_of, on_done: Callable[[int], None]) -> None:
        caps = check_shares(caps)
        super().__init__(clock, on_done, len(caps))
        self.caps = caps
        self.class_of = class_of        # job id -> index into caps
        k = len(caps)
        self._order = sorted(range(k), key=caps.__getitem__)   # classes by cap, smallest first
        # With caps given in ascending order the active classes (kept sorted by index) are in cap order
        # too, so water-filling visits only them (the engine's many-class memory server).
        self._in_order = self._order == list(range(k))

    def _group(self, job: int, work_ns: float) -> int:
        return self.class_of[job]

    def _rates_next(self) -> float:
        """``_rates`` and ``_next_delay`` in one pass: the same rates and the same least delay (a division
        by a positive rate keeps the order of the dividends, so the minimum is the same float)."""
        active, rate, caps, heaps, vt = self._active, self._rate, self.caps, self._heaps, self._vt
        if len(active) == 1:            # one class: SharedServer's min(cap, 1/n)
            c = active[0]
            fair = 1.0 / self.n
            cap = caps[c]
            r = rate[c] = fair if fair < cap else cap
            return (heaps[c][0][0] - vt[c]) / r
        remaining, jobs, best = 1.0, self.n, INF
        classes = iter(active if self._in_order else self._order)
        for c in classes:
            heap = heaps[c]
            n = len(heap)
            if not n:
                continue
            fair = remaining / jobs
            cap = caps[c]
            if cap < fair:              # capped below the fair share: its cap
                rate[c] = cap
                remaining -= n * cap
                jobs -= n
                d = (heap[0][0] - vt[c]) / cap
            else:                       # this class and every later one: the fair share
                rate[c] = fair
                d = (heap[0][0] - vt[c]) / fair
                if d < best:
                    best = d
                for c in classes:
                    rate[c] = fair
                    heap = heaps[c]
                    if heap:
                        d = (heap[0][0] - vt[c]) / fair
                        if d < best:
                            best = d
                return best
            if d < best:
                best = d
        return best

    def _rates(self) -> None:
        """Water-filling: the rate of every class with jobs computing."""
        active, rate, caps = self._active, self._rate, self.caps
        if len(active) == 1:            # one class: SharedServer's min(cap, 1/n)
            c = active[0]
            fair = 1.0 / self.n
            cap = caps[c]
            rate[c] = fair if fair < cap else cap
            return
        remaining, jobs, heaps = 1.0, self.n, self._heaps
        classes = iter(active if self._in_order else self._order)
        for c in classes:
            n = len(heaps[c])           # jobs of class c computing
            if not n:
                continue
            fair = remaining / jobs
            if caps[c] < fair:          # capped below the fair share: its cap
                rate[c] = caps[c]
                remaining -= n * caps[c]
                jobs -= n
            else:                       # this class and every later one: the fair share (a class
                rate[c] = fair          # without jobs computing gets a rate it does not use)
                for c in classes:
                    rate[c] = fair
                return
