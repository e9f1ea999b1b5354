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

import bisect
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


class CappedSharedServer:
    """Processor sharing where each job has its own cap (``caps[class_of[job]]``): water-filling.

    The capacity is split equally among the jobs present, except that a job never receives more than
    its cap; what a capped job leaves is shared equally by the others (max-min fairness: jobs whose cap
    is below the fair share get their cap, the rest share what remains). With one cap for all jobs
    this is ``SharedServer``'s rule, ``min(cap, 1/n)``; the engine uses ``SharedServer`` then (faster)
    and this server only when the jobs present can have different caps (a megakernel launch mixing
    kinds whose ``block_sm_share`` differ).

    Jobs of one cap class always receive the same rate, so each class keeps its own virtual time and
    heap of finish virtual times, as ``SharedServer`` does for all jobs; the rates of the (few)
    classes are recomputed at each arrival and departure, O(classes). An arrival never raises a rate
    (the fair share can only fall), so the pending completion event is kept when it is not later than
    the new one (it may fire early; ``_fire`` re-arms it), as in ``SharedServer``.
    """

    __slots__ = ("clock", "caps", "class_of", "on_done", "_vt", "_heaps", "_n", "_rate", "_order", "_active",
                 "_t", "_seq", "_version", "_due", "n", "_in_order")

    def __init__(self, clock, caps, class_of, on_done: Callable[[int], None]) -> None:
        caps = [float(c) for c in caps]
        if not caps or not all(0.0 < c <= 1.0 for c in caps):
            raise ValueError(f"caps={caps!r} must be in (0, 1]")
        self.clock = clock
        self.caps = caps
        self.class_of = class_of        # job id -> index into caps
        self.on_done = on_done
        k = len(caps)
        self._order = sorted(range(k), key=caps.__getitem__)   # classes by cap, smallest first
        # With caps given in ascending order the active classes (kept sorted by index) are in cap order
        # too, so water-filling visits only them (the engine's many-class memory server).
        self._in_order = self._order == list(range(k))
        self._active: list[int] = []    # classes with jobs present, in class order
        self._vt = [0.0] * k
        self._heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]
        self._n = [0] * k
        self._rate = [0.0] * k
        self._t = 0.0
        self._seq = 0
        self._version = 0
        self._due = float("inf")
        self.n = 0

    def rate(self, cls: int) -> float:
        """Work received per ns by each job of cap class `cls` now."""
        return self._rate[cls] if self._n[cls] else 0.0

    def _one_class_rate(self, c: int) -> float:
        """The rate of each job when all jobs present are of class c: SharedServer's min(cap, 1/n)."""
        fair = 1.0 / self.n
        cap = self.caps[c]
        return fair if fair < cap else cap

    def _rates(self) -> None:
        """Water-filling: the rate of every class with jobs present."""
        active, rate, caps = self._active, self._rate, self.caps
        if len(active) == 1:            # one class: SharedServer's min(cap, 1/n)
            c = active[0]
            rate[c] = self._one_class_rate(c)
            return
        remaining, jobs, n = 1.0, self.n, self._n
        level = 0.0
        for c in (active if self._in_order else self._order):
            if not n[c]:
                continue
            if level:
                rate[c] = level
                continue
            fair = remaining / jobs
            if caps[c] < fair:
                rate[c] = caps[c]
                remaining -= n[c] * caps[c]
                jobs -= n[c]
            else:
                level = rate[c] = fair

    def _advance(self, now: float) -> None:
        dt = now - self._t
        if dt > 0.0:
            vt, rate = self._vt, self._rate
            for c in self._active:
                vt[c] += dt * rate[c]
        self._t = now

    def _next(self) -> float:
        """Delay to the next completion at the current rates; inf when empty."""
        best = float("inf")
        heaps, vt, rate = self._heaps, self._vt, self._rate
        for c in self._active:
            d = (heaps[c][0][0] - vt[c]) / rate[c]
            if d < best:
                best = d
        return best

    def add(self, job: int, work_ns: float) -> None:
        now = self.clock.now
        vt, active = self._vt, self._active
        if self.n:
            dt = now - self._t
            if dt > 0.0:
                rate = self._rate
                for c in active:
                    vt[c] += dt * rate[c]
        self._t = now
        c = self.class_of[job]
        self._seq += 1
        heapq.heappush(self._heaps[c], (vt[c] + work_ns, self._seq, job))
        n = self._n
        if not n[c]:
            active.append(c)
            if len(active) > 1:
                active.sort()
        n[c] += 1
        self.n += 1
        if len(active) == 1:            # one class present: SharedServer's arithmetic
            rate = self._one_class_rate(c)
            self._rate[c] = rate
            delay = (self._heaps[c][0][0] - vt[c]) / rate
        else:
            self._rates()
            delay = self._next()
        due = now + (delay if delay > 0.0 else 0.0)
        if self._due <= due:
            return
        self._version += 1
        self._due = due
        self.clock.after(due - now, self._fire, self._version)

    def _fire(self, version: int) -> None:
        if version != self._version:
            return
        now = self.clock.now
        self._advance(now)
        vt, heaps = self._vt, self._heaps
        done = None
        emptied = False
        for c in self._active:
            heap = heaps[c]
            head = heap[0][0]
            tolerance = 1e-9 * (head if head > 1.0 else 1.0)
            if head > vt[c] + tolerance:
                continue
            # Jobs of this class whose finish virtual time is within rounding of the head finish too.
            if head > vt[c]:
                vt[c] = head
            limit = head + tolerance
            if done is None:
                done = []
            while heap and heap[0][0] <= limit:
                done.append(heapq.heappop(heap)[2])
                self._n[c] -= 1
                self.n -= 1
            if not heap:
                emptied = True
        if emptied:
            self._active = [c for c in self._active if heaps[c]]
        self._version += 1
        if done is not None and self.n:
            self._rates()
        if self.n:
            delay = self._next()
            self._due = now + (delay if delay > 0.0 else 0.0)
            self.clock.after(self._due - now, self._fire, self._version)
        else:
            self._due = float("inf")
        if done is not None:
            for job in done:
                self.on_done(job)


class ReadinessSharedServer(CappedSharedServer):
    """An SM whose blocks stall independently: the SM issues whenever at least one of its blocks is
    ready, and the issue cycles go first to the blocks that ask for least (max-min fairness).

    A block of class c alone keeps the SM busy a fraction ``s_c`` of the time (``caps[c]``: the
    kind's ``block_sm_ready``, < 1 when its few warps cannot hide their own latencies). With n_c
    blocks of each class on the SM, the SM is busy ``U = 1 - prod_c (1 - s_c)^n_c`` of the time, and
    ``U`` is split by water-filling over the blocks' demands ``s_c``: a block that asks for less than
    the fair level receives all it asks for, the others share the rest equally. For one class every
    block receives ``(1 - (1 - s)^n) / n``: throughput grows with each block resident but saturates
    smoothly, as a GPU's does with occupancy, where ``CappedSharedServer``'s ``min(s, 1/n)``
    saturates at n = 1/s. With s = 1 for every class both rules are ``1/n``.

    A class may give a second readiness ``further[c]`` = f_c (session 11; default s_c): the first
    block of the class on the SM is ready ``s_c`` of the time, each further one ``f_c``, so
    ``U = 1 - prod_c (1 - s_c) (1 - f_c)^(n_c - 1)``. One parameter ties the gain of every extra block
    to the first block's stalls: ``U(2)/U(1) = 2 - s`` fixes ``U(3)/U(1)``. The GEMM's kernel, timed
    alone at 1, 2 and 3 blocks per SM on the H200, gains 1.32x and 1.52x, where the one-parameter
    curve through 1.32x gives 1.42x; the second parameter lets both ratios be met. A block's demand
    in the water-filling stays ``s_c``, its rate alone.

    Why max-min across kinds (session 7; sessions 4-6 split ``U`` in proportion to readiness, so a
    rarely-ready transform block beside two GEMM blocks ran ~60% slower than alone): a warp scheduler
    picks among its ready warps in turn, so a warp that is seldom ready issues almost as soon as it
    is, and the blocks that could use every cycle (the GEMM) absorb the contention. On the GPU a
    transform task takes about the same time wherever it sits among GEMMs (``gpu.diagnostics.record_timeline``,
    docs/validation.md). For a single kind the two rules are the same, so the single-kind fit does
    not change.

    The n_c count the blocks that are moving their data as well (``enter(job)`` at the start of a
    task's memory phase, ``leave(job)`` at its end): the kernels overlap their loads with their
    arithmetic (the GEMM stages the next slice while it multiplies), so a block competes for its SM for
    as long as it holds the slot, not only in the engine's compute phase. Without this, blocks whose
    phases happen to be out of step (e.g. GEMMs interleaved with other kinds) would each get a larger
    share than blocks in step, a speed-up the GPU does not show (``gpu.diagnostics.trace_mixed``). A present block
    takes its share of ``U`` like a computing one but receives no work.

    ``mixed`` (session 12; the spec's ``mixed_kinds_sm_factor``, default 1): while blocks of two or
    more classes are on the SM, only that fraction of its busy time does useful work (``U`` above is
    multiplied by it before the split). The engine gives every task kind its own class when it is set.

    Rates are recomputed at every arrival, departure, ``enter`` and ``leave`` (O(classes)); the
    base class keeps a pending completion event only when it is not later than the new one, and
    ``_fire`` re-arms an event that fires early, so correctness does not depend on arrivals never
    raising a rate.
    """

    __slots__ = ("_m", "further", "mixed")

    def __init__(self, clock, caps, class_of, on_done: Callable[[int], None], further=None,
                 mixed: float = 1.0) -> None:
        super().__init__(clock, caps, class_of, on_done)
        self._m = [0] * len(self.caps)   # blocks present (moving data) per class
        further = list(self.caps) if further is None else [float(f) for f in further]
        if len(further) != len(self.caps) or not all(0.0 < f <= 1.0 for f in further):
            raise ValueError(f"further={further!r} must give one readiness in (0, 1] per class of caps={self.caps!r}")
        self.further = further           # readiness of each further block of the class on the SM
        if not 0.0 < mixed <= 1.0:
            raise ValueError(f"mixed={mixed!r} must be in (0, 1]")
        self.mixed = float(mixed)        # useful fraction of the busy time while classes mix

    def _idle(self, counts) -> float:
        """``prod_c (1 - s_c) (1 - f_c)^(k_c - 1)`` over the classes with k_c > 0 blocks: the fraction
        of the time all of them stall at once."""
        idle = 1.0
        for c, k in enumerate(counts):
            if k > 0:
                idle *= (1.0 - self.caps[c]) * (1.0 - self.further[c]) ** (k - 1)
        return idle

    def _one_class_rate(self, c: int) -> float:
        self._rates()
        return self._rate[c]

    def _rates(self) -> None:
        """Water-filling of the busy fraction U over the demands of the blocks computing and present."""
        ready, rate = self.caps, self._rate
        counts = [a + b for a, b in zip(self._n, self._m)]
        blocks = sum(counts)
        remaining = 1.0 - self._idle(counts)
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
        """``prod (1 - ready)`` over the blocks on this SM that are moving data or computing, ``job``'s
        own block left out: the fraction of the time its neighbours leave the SM idle."""
        own = self.class_of[job]
        return self._idle([n + m - (c == own) for c, (n, m) in enumerate(zip(self._n, self._m))])

    def _present(self, job: int, delta: int) -> None:
        now = self.clock.now
        if self.n:
            self._advance(now)
        self._m[self.class_of[job]] += delta
        if not self.n:
            return
        self._rates()
        self._version += 1
        delay = self._next()
        self._due = now + (delay if delay > 0.0 else 0.0)
        self.clock.after(self._due - now, self._fire, self._version)

    def enter(self, job: int) -> None:
        """Task ``job``'s block starts moving its data on this SM (present, receiving no work)."""
        self._present(job, 1)

    def leave(self, job: int) -> None:
        """That block's memory phase ends (it joins with ``add`` when it has work to compute)."""
        self._present(job, -1)


class AgeWeightedReadinessServer:
    """``ReadinessSharedServer``'s SM, with older blocks favoured: the busy fraction ``U`` is split by
    *weighted* water-filling, the k-th oldest block on the SM (k = 0, 1, ...) weighing ``rho**k``.

    Why (session 14, ``docs/notes.md``): traced on the H200, the four GEMM blocks that start together
    on an SM do not end together. Their ends, in order, fall at 0.92, 0.96, 1.02 and 1.10 of their
    mean, the same on every SM (spread across SMs 0.3 us of 61 us) and on every layer: the warp
    schedulers issue the older warps first (greedy-then-oldest), so a block's progress depends on its
    age. So the slots of a wave free one at a time on every SM, and a grid's last partial wave spreads
    over the SMs (96 blocks on 96 SMs on resnet-4), where equal sharing frees an SM's slots at once
    and stacks the last wave three deep on a few SMs (0.2 waves predicted to take 0.8 of a wave).

    A block's age is its key ``age_of[job]`` (the engine's: the sequence number of its block's dispatch,
    so earlier and, at one instant, lower slots first), the same for its memory phase (``enter``/``leave``: present, receiving no work) and its
    compute phase (``add``). Demands are as in ``ReadinessSharedServer`` (``caps``: a class's
    ``block_sm_ready``; ``U = 1 - prod (1 - s_c)(1 - f_c)^(n_c - 1)``, times ``mixed`` while classes
    mix): a block whose demand is below its weighted level ``lambda * w`` receives its demand, the
    others ``lambda * w``. With ``rho = 1`` this is ``ReadinessSharedServer``'s rule; the engine uses
    that server then (it keeps one virtual time per class; this one updates every job on the SM at
    each event, O(blocks on the SM), a few).
    """

    __slots__ = ("clock", "caps", "further", "class_of", "age_of", "on_done", "rho", "mixed", "_jobs",
                 "_by_age", "_ages", "_count", "_rate", "_t", "_version", "n", "_weights", "_weight_sums")

    def __init__(self, clock, caps, class_of, age_of, on_done: Callable[[int], None], further=None,
                 mixed: float = 1.0, rho: float = 1.0) -> None:
        caps = [float(c) for c in caps]
        if not caps or not all(0.0 < c <= 1.0 for c in caps):
            raise ValueError(f"caps={caps!r} must be in (0, 1]")
        further = list(caps) if further is None else [float(f) for f in further]
        if len(further) != len(caps) or not all(0.0 < f <= 1.0 for f in further):
            raise ValueError(f"further={further!r} must give one readiness in (0, 1] per class of caps={caps!r}")
        if not 0.0 < mixed <= 1.0:
            raise ValueError(f"mixed={mixed!r} must be in (0, 1]")
        if not 0.0 < rho <= 1.0:
            raise ValueError(f"rho={rho!r} must be in (0, 1]")
        self.clock = clock
        self.caps, self.further = caps, further
        self.class_of, self.age_of = class_of, age_of
        self.on_done = on_done
        self.rho, self.mixed = float(rho), float(mixed)
        self._jobs: dict[int, float] = {}   # block on the SM -> remaining work (ns), -1.0 while only present
        self._by_age: list[int] = []        # the blocks on the SM, oldest first (ties: first come first)
        self._ages: list[int] = []          # their ages, for bisect
        self._count: dict[int, int] = {}    # blocks on the SM per class present
        self._rate: dict[int, float] = {}   # job computing -> work received per ns
        self._weights = [1.0]               # rho ** k, grown on demand
        self._weight_sums = [0.0, 1.0]      # sum of the first k weights
        self._t = 0.0
        self._version = 0
        self.n = 0                          # jobs computing

    def _idle(self, leave_out_class: int = -1) -> float:
        """``prod (1 - s_c)(1 - f_c)^(k_c - 1)`` over the blocks on the SM, one of class
        ``leave_out_class`` left out."""
        idle = 1.0
        caps, further = self.caps, self.further
        for c, k in self._count.items():
            if c == leave_out_class:
                k -= 1
                if not k:
                    continue
            idle *= (1.0 - caps[c]) * (1.0 - further[c]) ** (k - 1)
        return idle

    def idle_beside(self, job: int) -> float:
        """``prod (1 - ready)`` over the other blocks on this SM (as ``ReadinessSharedServer``)."""
        return self._idle(self.class_of[job] if job in self._jobs else -1)

    def _rates(self) -> None:
        """Weighted water-filling of U over every block on the SM (oldest weighs most)."""
        jobs, by_age, rate = self._jobs, self._by_age, self._rate
        rate.clear()
        n = len(by_age)
        if not n:
            return
        remaining = 1.0 - self._idle()
        if self.mixed < 1.0 and len(self._count) > 1:
            remaining *= self.mixed
        w = self._weights
        while len(w) < n:
            w.append(w[-1] * self.rho)
            self._weight_sums.append(self._weight_sums[-1] + w[-1])
        caps, class_of = self.caps, self.class_of
        # Blocks in order of demand / weight: the first whose demand exceeds its weighted level sets
        # lambda for itself and every block after it. With one class that order is the age order
        # (the weights fall with age).
        if len(self._count) == 1:
            order = range(n)
        else:
            order = sorted(range(n), key=lambda r: caps[class_of[by_age[r]]] / w[r])
        total_w = self._weight_sums[n]
        level = -1.0
        for r in order:
            job = by_age[r]
            if level < 0.0:
                demand = caps[class_of[job]]
                if demand * total_w <= remaining * w[r]:
                    if jobs[job] >= 0.0:
                        rate[job] = demand
                    remaining -= demand
                    total_w -= w[r]
                    continue
                level = remaining / total_w
            if jobs[job] >= 0.0:
                rate[job] = level * w[r]

    def _advance(self, now: float) -> None:
        dt = now - self._t
        if dt > 0.0:
            jobs = self._jobs
            for job, r in self._rate.items():
                jobs[job] -= dt * r
        self._t = now

    def _rearm(self, now: float) -> None:
        """Schedule the next completion at the current rates (superseding any pending one: keeping an
        earlier pending event, as ``SharedServer`` does, saved no events here, since most changes
        move the head earlier or later at random, and it reordered simultaneous events)."""
        self._version += 1
        best = float("inf")
        jobs = self._jobs
        for job, r in self._rate.items():
            d = jobs[job] / r
            if d < best:
                best = d
        if best != float("inf"):
            self.clock.after(best if best > 0.0 else 0.0, self._fire, self._version)

    def _insert(self, job: int) -> None:
        age = self.age_of[job]
        i = bisect.bisect_right(self._ages, age)
        self._ages.insert(i, age)
        self._by_age.insert(i, job)
        c = self.class_of[job]
        self._count[c] = self._count.get(c, 0) + 1

    def _remove(self, job: int) -> None:
        i = self._by_age.index(job)
        del self._by_age[i], self._ages[i]
        c = self.class_of[job]
        k = self._count[c] - 1
        if k:
            self._count[c] = k
        else:
            del self._count[c]

    def add(self, job: int, work_ns: float) -> None:
        """Task ``job``'s block computes ``work_ns`` of whole-SM work."""
        now = self.clock.now
        self._advance(now)
        self.n += 1
        self._jobs[job] = float(work_ns)
        self._insert(job)
        self._rates()
        self._rearm(now)

    def enter(self, job: int) -> None:
        """Task ``job``'s block starts moving its data on this SM (present, receiving no work)."""
        now = self.clock.now
        self._advance(now)
        self._jobs[job] = -1.0
        self._insert(job)
        self._rates()
        self._rearm(now)

    def leave(self, job: int) -> None:
        """That block's memory phase ends (it joins with ``add`` when it has work to compute)."""
        now = self.clock.now
        self._advance(now)
        del self._jobs[job]
        self._remove(job)
        self._rates()
        self._rearm(now)

    def start_computing(self, job: int, work_ns: float) -> None:
        """``leave(job)`` then ``add(job, work_ns)`` in one change: the block stays on the SM, at its age."""
        now = self.clock.now
        self._advance(now)
        self.n += 1
        self._jobs[job] = float(work_ns)
        self._rates()
        self._rearm(now)

    def _fire(self, version: int) -> None:
        if version != self._version:
            return
        now = self.clock.now
        self._advance(now)
        jobs = self._jobs
        done = [job for job in self._rate if jobs[job] <= 1e-6]   # ns of work: the head, within rounding
        for job in done:
            del jobs[job]
            self._remove(job)
        if done:
            self.n -= len(done)
            self._rates()
        self._rearm(now)
        for job in done:
            self.on_done(job)
