"""Claims and dependency waits: how a block gets its next task, and how tasks wait on their parents.

A block that frees its slot takes the next task of the launch's map (``_claim``), in map order, or, under
ready-queue dispatch (``Launch.dispatch == "ready"``, ``megasim.ready``), the oldest task of a FIFO queue
of runnable tasks, idling while the queue is empty. Taking a task costs its kind's claim
(``megasim.sim.launches``: dispatch, ticket and counter look, or the measured megakernel claim); a task
whose counters are not all zero keeps its slot and polls, and resumes an atomic round trip after its
last parent signals (``_release``; the paper's Listing 2). A task that ends (``_finish``) signals its
counters, releasing their waiters; under ready-queue dispatch it queues the wait groups it completed
(and, after a root, the next root), its block waiting on the atomics that takes; then its block claims
again. The last task of a launch starts the next launch.
"""

from __future__ import annotations


class _Claims:
    """``_Run``'s claims, waits and task ends (mixed into ``megasim.sim.engine._Run``)."""

    def _on_slot_free(self, where: tuple[int, int]) -> None:
        self._claim(*where)

    def _claim(self, sm: int, slot: int) -> None:
        """The block in (sm, slot) takes the next task of the map, or exits if none is left.

        Taking a task costs the claim (dispatch or ticket) and one atomic round trip to read its
        counters. If its parents are already done, nothing can change that, so its accesses are
        resolved now and its memory phase is scheduled directly (one event instead of two)."""
        if self.ready_dispatch:
            self._claim_ready(sm, slot)
            return
        if self.cur_next >= self.cur_len:
            return
        task = self.cur_order[self.cur_next]
        self.cur_next += 1
        self._take(task, sm, slot)

    def _claim_ready(self, sm: int, slot: int) -> None:
        """Ready-queue: the oldest queued task, else the slot idles until one is queued."""
        if self.r_queue:
            pos = self.r_queue.popleft()
        else:
            if self.cur_done < self.cur_len:
                self.r_idle.append((sm, slot))
            return
        self.r_pos_of[self.cur_order[pos]] = pos
        self._take(self.cur_order[pos], sm, slot)

    def _take(self, task: int, sm: int, slot: int) -> None:
        """The block in (sm, slot) has claimed `task`: its claim cost, then its wait or its start."""
        now = self.clock.now
        self.claim[task] = now
        self.sm_of[task] = sm
        self.slot_of[task] = slot
        if self.track_age:
            self._record_age(task, sm, slot)
        cost = self.cur_check_ns[self.kind_of[task]]
        self.claim_cost[task] = cost
        checked = now + cost
        remaining = self.remaining
        for c in self.waits[task]:
            if c >= 0 and remaining[c] > 0:
                self.waiters.setdefault(c, []).append(task)
                self.check_at[task] = checked
                return
        self._ready(task, checked)

    def _record_age(self, task: int, sm: int, slot: int) -> None:
        """``age_of[task]``: its block's dispatch sequence number (a persistent block keeps its first)."""
        if self.cur.style == "persistent":
            age = self.block_age.get((sm, slot))
            if age is None:
                age = self.block_age[(sm, slot)] = self.blocks_dispatched
                self.blocks_dispatched += 1
        else:
            age = self.blocks_dispatched
            self.blocks_dispatched += 1
        self.age_of[task] = age

    def _release(self, task: int, now: float) -> None:
        """A counter task waits on reached zero at `now`. If its other counters are zero too, the
        polling block sees it an atomic round trip later (or at its first poll, if that is later)."""
        remaining = self.remaining
        for c in self.waits[task]:
            if c >= 0 and remaining[c] > 0:
                self.waiters.setdefault(c, []).append(task)
                return
        resume = now + self.spec.atomic_latency_ns
        check = self.check_at[task]
        self._ready(task, resume if resume > check else check)

    def _finish(self, task: int) -> None:
        now = self.clock.now
        self.end[task] = now
        remaining = self.remaining
        released = []
        for c in self.signals[task]:
            if c < 0:
                continue
            remaining[c] -= 1
            if remaining[c] == 0:
                for waiter in self.waiters.pop(c, ()):
                    self._release(waiter, now)
                if self.ready_dispatch:
                    released.extend(self._complete_groups(c))
        self.cur_done += 1
        if self.cur_done == self.report_at:
            self._report_progress()
        if self.cur_done == self.cur_len:
            self.launch_log[-1]["end_ns"] = now
            self._start_next_launch(self.spec.kernel_boundary_ns)
        elif self.ready_dispatch:
            # The block waits for its decrement's result; if that completed wait groups it queues them.
            atomic = self.spec.atomic_latency_ns
            signalled = any(c >= 0 for c in self.signals[task])
            delay = (atomic if signalled else 0.0) + (2.0 * atomic if released else 0.0)
            if self.r_pos_of[task] in self.r_is_root:       # a root: the root ticket, then the tail
                delay += 2.0 * atomic
                if self.cur_next < len(self.r_roots):
                    released.append(-1 - self.r_roots[self.cur_next])
                    self.cur_next += 1
            self.clock.after(delay, self._on_ready_signal, (task, released))
        else:
            self._claim(self.sm_of[task], self.slot_of[task])

    def _complete_groups(self, counter: int) -> list[int]:
        """Ready-queue: counter reached zero; the wait groups whose last pending counter it was."""
        done = []
        pending = self.r_pending
        for j in range(self.r_counter_ptr[counter], self.r_counter_ptr[counter + 1]):
            g = self.r_counter_groups[j]
            pending[g] -= 1
            if pending[g] == 0:
                done.append(g)
        return done

    def _on_ready_signal(self, value: tuple[int, list[int]]) -> None:
        """Ready-queue: the block of `task` queues the groups it released and, after a root, the next
        root (``-1 - position`` in ``released``); idle slots claim first (they were polling), then the
        block itself."""
        task, released = value
        ptr, positions = self.r_group_ptr, self.r_group_positions
        for g in released:
            if g >= 0:
                self.r_queue.extend(positions[ptr[g]:ptr[g + 1]])
            else:
                self.r_queue.append(-1 - g)
        while self.r_idle and self.r_queue:
            self._claim_ready(*self.r_idle.popleft())
        self._claim_ready(self.sm_of[task], self.slot_of[task])
