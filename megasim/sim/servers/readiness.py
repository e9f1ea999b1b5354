"""SMs whose blocks stall independently: the readiness rules (kinds that give ``block_sm_ready``).

The SM issues whenever at least one of its blocks is ready, and the issue cycles go first to the blocks
that ask for least (max-min fairness). A block of class c alone keeps the SM busy a fraction ``s_c`` of
the time (``caps[c]``: the kind's ``block_sm_ready``, < 1 when its few warps cannot hide their own
latencies); each further block of the class on the SM is ready ``f_c`` of the time (``further[c]``: the
kind's ``further_block_sm_ready``, default ``s_c``). With n_c blocks of each class on the SM the SM is
busy ``U = 1 - prod_c (1 - s_c) (1 - f_c)^(n_c - 1)`` of the time, and ``U`` is split by water-filling
over the blocks' demands ``s_c``: a block that asks for less than the fair level receives all it asks
for, the others share the rest equally. For one class every block receives about ``U / n``: throughput
grows with each block resident but saturates smoothly, as a GPU's does with occupancy, where
``CappedSharedServer``'s ``min(s, 1/n)`` saturates at n = 1/s. With s = 1 for every class both rules
are ``1/n``.

Why two readinesses: one parameter ties the gain of every extra block to the first block's stalls
(``U(2)/U(1) = 2 - s`` fixes ``U(3)/U(1)``); the GEMM's kernel, timed alone at 1, 2 and 3 blocks per SM
on the H200, gains 1.32x and 1.52x, where the one-parameter curve through 1.32x gives 1.42x. Why max-min
across kinds, not a split in proportion to readiness (which ran a rarely-ready transform block beside
two GEMM blocks ~60% slower than alone): a warp scheduler picks among its ready warps in turn, so a warp
that is seldom ready issues almost as soon as it is, and the blocks that could use every cycle (the
GEMM) absorb the contention; on the GPU a transform task takes about the same time wherever it sits
among GEMMs (``gpu/diagnostics/record_timeline.py``, ``docs/model.md``). For a single kind the two
splits are the same.

The n_c count the blocks that are moving their data as well (``enter`` at the start of a task's memory
phase, ``leave`` at its end): the kernels overlap their loads with their arithmetic, so a block competes
for its SM for as long as it holds the slot. Without this, blocks whose phases happen to be out of step
would each get a larger share than blocks in step, a speed-up the GPU does not show
(``gpu/diagnostics/trace_mixed.py``). A present block takes its share of ``U`` but receives no work.

``mixed`` (the spec's ``mixed_kinds_sm_factor``, default 1): while blocks of two or more classes are on
the SM, only that fraction of its busy time does useful work (``U`` is multiplied by it before the
split). The engine gives every task kind its own class when it is set.

``ReadinessSharedServer`` keeps a rate group per class. ``AgeWeightedReadinessServer`` favours older
blocks: the k-th oldest block on the SM weighs ``rho**k`` in a weighted water-filling, so every block's
rate differs and each is a rate group of its own (``megasim.sim.servers.base``). Rates are recomputed at
every arrival, departure, ``enter`` and ``leave`` (O(classes), O(blocks on the SM) with ages); an
arrival may raise a neighbour's rate here, which is why ``_fire`` re-arms an event that fires early.
"""

from __future__ import annotations

import bisect
from typing import Callable

from megasim.sim.servers.base import INF, ProcessorSharingServer
from megasim.sim.servers.shared import CappedSharedServer, check_shares


def check_readiness(caps: list[float], further, mixed: float) -> tuple[list[float], float]:
    """The further-block readiness per class (default: ``caps``) and the mixing factor, checked."""
    further = list(caps) if further is None else [float(f) for f in further]
    if len(further) != len(caps) or not all(0.0 < f <= 1.0 for f in further):
        raise ValueError(f"further={further!r} must give one readiness in (0, 1] per class of caps={caps!r}")
    if not 0.0 < mixed <= 1.0:
        raise ValueError(f"mixed={mixed!r} must be in (0, 1]")
    return further, float(mixed)


def idle_fraction(counts, ready: list[float], further: list[float], leave_out: int = -1) -> float:
    """``prod (1 - s_c) (1 - f_c)^(k_c - 1)`` over (class c, k_c blocks) in `counts`, in their order, one
    block of class `leave_out` left out: the fraction of the time all those blocks stall at once."""
    idle = 1.0
    for c, k in counts:
        if c == leave_out:
            k -= 1
        if k > 0:
            idle *= (1.0 - ready[c]) * (1.0 - further[c]) ** (k - 1)
    return idle


class ReadinessSharedServer(CappedSharedServer):
    """The readiness rule (module docstring), a rate group per class; ``caps[c]`` is class c's readiness."""

    __slots__ = ("further", "mixed", "_blocks")

    counts_blocks = True
    _rates_next = ProcessorSharingServer._rates_next     # (not CappedSharedServer's: the rule differs)

    def __init__(self, clock, caps, class_of, on_done: Callable[[int], None], further=None,
                 mixed: float = 1.0) -> None:
        super().__init__(clock, caps, class_of, on_done)
        self.further, self.mixed = check_readiness(self.caps, further, mixed)
        self._blocks = [0] * len(self.caps)     # blocks on the SM (computing or moving data) per class

    def _arrive(self, job: int) -> None:
        self._blocks[self.class_of[job]] += 1

    def _depart(self, job: int) -> None:
        self._blocks[self.class_of[job]] -= 1

    def _rates(self) -> None:
        """Water-filling of the busy fraction U over the demands of the blocks computing and present."""
        ready, rate, counts = self.caps, self._rate, self._blocks
        blocks = sum(counts)
        remaining = 1.0 - idle_fraction(enumerate(counts), ready, self.further)
        if self.mixed < 1.0 and sum(1 for k in counts if k) > 1:
            remaining *= self.mixed
        level = -1.0
        for c in self._order:            # smallest demand first
            k = counts[c]
            if not k:
                continue
            if level < 0.0:
                fair = remaining / blocks
                if ready[c] <= fair:
                    rate[c] = ready[c]
                    remaining -= k * ready[c]
                    blocks -= k
                    continue
                level = fair
            rate[c] = level

    def idle_beside(self, job: int) -> float:
        """``prod (1 - ready)`` over the blocks on this SM beside ``job``'s own (which is on it): the
        fraction of the time its neighbours leave the SM idle."""
        return idle_fraction(enumerate(self._blocks), self.caps, self.further, self.class_of[job])


class AgeWeightedReadinessServer(ProcessorSharingServer):
    """The readiness rule with older blocks favoured: ``U`` is split by *weighted* water-filling, the
    k-th oldest block on the SM (k = 0, 1, ...) weighing ``rho**k``.

    Why (``megasim/calibration/age.py``, ``docs/calibration.md``): traced on the H200, the four GEMM
    blocks that start together on an SM do not end together. Their ends, in order, fall at 0.92, 0.96,
    1.02 and 1.10 of their mean, the same on every SM and on every layer: the warp schedulers issue the
    older warps first (greedy-then-oldest), so a block's progress depends on its age. So the slots of a
    wave free one at a time on every SM, and a grid's last partial wave spreads over the SMs, where
    equal sharing frees an SM's slots at once and stacks the last wave deep on a few SMs.

    A block's age is its key ``age_of[job]`` (the engine's: the sequence number of its block's dispatch,
    so earlier and, at one instant, lower slots first), the same for its memory phase (``enter`` ...
    ``leave``) and its compute phase. A block whose demand ``s_c`` is below its weighted level
    ``lambda * w`` receives its demand, the others ``lambda * w``. With ``rho = 1`` this is
    ``ReadinessSharedServer``'s rule; the engine uses that server then (a group per class, not per block).

    Every block is a rate group of its own, whose virtual time counts from the job's finish: it starts
    at minus the job's work and reaches 0 at the end, so it reads minus the remaining work, exactly. Each
    change posts the next completion anew (keeping an earlier pending event saves nothing here, since
    most changes move the head earlier or later at random), and simultaneous completions are reported
    in the water-filling's order.
    """

    __slots__ = ("caps", "further", "class_of", "age_of", "rho", "mixed", "_by_age", "_ages", "_classes", "_count",
                 "_busy", "_orders", "_weights", "_weight_sums")

    keep_earlier = False
    counts_blocks = True
    tolerance = 1e-6        # ns of work left (the head of a group of one is its finish, 0)

    def __init__(self, clock, caps, class_of, age_of, on_done: Callable[[int], None], further=None,
                 mixed: float = 1.0, rho: float = 1.0) -> None:
        caps = check_shares(caps)
        further, mixed = check_readiness(caps, further, mixed)
        if not 0.0 < rho <= 1.0:
            raise ValueError(f"rho={rho!r} must be in (0, 1]")
        super().__init__(clock, on_done, None)
        self.caps, self.further, self.mixed = caps, further, mixed
        self.class_of, self.age_of = class_of, age_of
        self.rho = float(rho)
        self._by_age: list[int] = []        # the blocks on the SM, oldest first (ties: first come first)
        self._ages: list[int] = []          # their ages, for bisect
        self._count: dict[int, int] = {}    # blocks on the SM per class present, in order of arrival
        self._classes: list[int] = []       # their classes
        self._busy: dict[tuple, float] = {}  # U (times mixed) per state of _count
        self._orders: dict[tuple, list[int]] = {}   # the water-filling's visiting order per _classes
        self._weights = [1.0]               # rho ** k, grown on demand
        self._weight_sums = [0.0, 1.0]      # sum of the first k weights

    # A group per job, of one job: its virtual time is minus its remaining work, and the head of its
    # (one-job) heap would be 0.0, so the group needs no heap. The methods below are the base class's
    # arithmetic with that written in (``_vt`` holds the jobs computing; ``_heaps`` is unused).

    def _add(self, job: int, work_ns: float) -> None:
        # (the block's arrival changes the SM's blocks, not the jobs computing or their rates, so it
        # may come before the virtual times are brought up to now)
        self._arrive(job)
        self.start_computing(job, work_ns)

    def start_computing(self, job: int, work_ns: float) -> None:
        now = self.clock.now
        vt, rate = self._vt, self._rate
        dt = now - self._t
        if dt > 0.0:
            for g in self._active:
                vt[g] += dt * rate[g]
        self._t = now
        vt[job] = -float(work_ns)
        self.n += 1
        self._rates()
        self._post(now)

    def _next_delay(self) -> float:
        best = INF
        vt, rate = self._vt, self._rate
        for g in self._active:
            d = (0.0 - vt[g]) / rate[g]
            if d < best:
                best = d
        return best

    def _fire_groups(self) -> None:
        now = self.clock.now
        vt, rate = self._vt, self._rate
        dt = now - self._t
        self._t = now
        tolerance = self._tolerance             # (a group's head is 0: its tolerance is tolerance * 1.0)
        done = None
        for g in self._active:
            if dt > 0.0:
                vt[g] += dt * rate[g]
            v = vt[g]
            if 0.0 > v + tolerance:
                continue
            if 0.0 > v:
                vt[g] = 0.0
            if done is None:
                done = [g]
            else:
                done.append(g)
        if done is not None:
            self.n -= len(done)
            for job in done:
                self._depart(job)
            if self.n:
                self._rates()
            else:
                self._active = []
        if self.n:
            best = self._next_delay()
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
        """``ProcessorSharingServer._snap``: a job whose finish rounds to `now` gets its work (its head is 0)."""
        vt, rate = self._vt, self._rate
        for g in self._active:
            if now + (0.0 - vt[g]) / rate[g] == now:
                vt[g] = 0.0

    def _arrive(self, job: int) -> None:
        age = self.age_of[job]
        i = bisect.bisect_right(self._ages, age)
        self._ages.insert(i, age)
        self._by_age.insert(i, job)
        c = self.class_of[job]
        self._classes.insert(i, c)
        self._count[c] = self._count.get(c, 0) + 1

    def _depart(self, job: int) -> None:
        i = self._by_age.index(job)
        del self._by_age[i], self._ages[i], self._classes[i]
        c = self.class_of[job]
        k = self._count[c] - 1
        if k:
            self._count[c] = k
        else:
            del self._count[c]
        if job in self._vt:                 # its group (a finished job's; a block leaving has none)
            del self._vt[job]
            self._rate.pop(job, None)

    def idle_beside(self, job: int) -> float:
        """``prod (1 - ready)`` over the other blocks on this SM (as ``ReadinessSharedServer``)."""
        return idle_fraction(self._count.items(), self.caps, self.further,
                             self.class_of[job] if job in self._by_age else -1)

    def _rates(self) -> None:
        """Weighted water-filling of U over every block on the SM (oldest weighs most); ``_active``
        becomes the computing blocks in the order visited."""
        by_age, count = self._by_age, self._count
        n = len(by_age)
        # U follows from the blocks per class present (in order of arrival), and the visiting order
        # from the classes in age order: both are looked up once per distinct state (the same floats).
        counts = tuple(count.items())
        remaining = self._busy.get(counts)
        if remaining is None:
            remaining = 1.0 - idle_fraction(counts, self.caps, self.further)
            if self.mixed < 1.0 and len(count) > 1:
                remaining *= self.mixed
            self._busy[counts] = remaining
        w = self._weights
        while len(w) < n:
            w.append(w[-1] * self.rho)
            self._weight_sums.append(self._weight_sums[-1] + w[-1])
        caps, class_of = self.caps, self.class_of
        # Blocks in order of demand / weight: the first whose demand exceeds its weighted level sets
        # lambda for itself and every block after it. With one class that order is the age order
        # (the weights fall with age).
        if len(count) == 1:
            order = range(n)
        else:
            classes = tuple(self._classes)
            order = self._orders.get(classes)
            if order is None:
                order = self._orders[classes] = sorted(range(n), key=lambda r: caps[classes[r]] / w[r])
        total_w = self._weight_sums[n]
        rate, computing = self._rate, self._vt
        active = []
        level = -1.0
        for r in order:
            job = by_age[r]
            if level < 0.0:
                demand = caps[class_of[job]]
                if demand * total_w <= remaining * w[r]:
                    if job in computing:
                        rate[job] = demand
                        active.append(job)
                    remaining -= demand
                    total_w -= w[r]
                    continue
                level = remaining / total_w
            if job in computing:
                rate[job] = level * w[r]
                active.append(job)
        self._active = active
