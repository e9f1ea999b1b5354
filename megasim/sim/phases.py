"""A task's memory and compute phases: the L2, the memory system, then its SM.

When a task's dependencies are met (``_ready``) its accesses are resolved in the L2 model
(``megasim.sim.l2``): hits cost L2 bandwidth, misses and writes DRAM bandwidth too. Its memory phase
starts after the latency of its first access (DRAM if any byte misses, else L2) plus the task's fixed
costs, and is a job on the memory system's server, work ``max(dram_bytes / dram_bw, l2_bytes /
l2_bw)`` ns; then its compute phase is a job on its SM's server (``megasim.sim.resources`` picks the
servers' rules). A block on a readiness SM counts there while it moves its data too (``enter`` ...
``leave``; an age-weighted SM turns it into a computing block in one change). A kind with
``memory_overlap`` o moves ``1 - o`` of its memory work first and the rest beside its compute; the task
ends when both have (``_join``). A kind with ``coresident_stretch`` takes its memory class from its
SM's neighbours when its memory phase starts; so does a block whose cap depends on the bytes it missed
(``megasim.sim.resources``: a spec whose ``block_l2_bw_ratio`` is not its bandwidths' own).
"""

from __future__ import annotations

from megasim.sim.resources import hit_level


class _Phases:
    """``_Run``'s memory and compute phases (mixed into ``megasim.sim.engine._Run``)."""

    def _ready(self, task: int, at: float) -> None:
        """The block sees its dependencies met at time `at` (>= now, by at most a claim and an atomic
        round trip): resolve its accesses in the L2 now, schedule its memory phase."""
        self.ready[task] = at
        access = self.l2.access_parts
        acc = self.acc
        misses = self.miss_of
        dram = 0.0
        for j in range(self.rptr[task], self.rptr[task + 1]):
            miss = access(*acc[j])          # (region, parts mask, parts count, nbytes, write)
            misses[j] = miss
            dram += miss
        l2_bytes = self.task_bytes[task]
        work = dram * self.inv_dram_bw
        if l2_bytes * self.inv_l2_bw > work:
            work = l2_bytes * self.inv_l2_bw
        latency = (self.dram_latency if dram > 0.0 else self.l2_latency) if l2_bytes > 0.0 else 0.0
        if self.overlap_on:
            o = self.overlap[self.kind_of[task]]
            if o > 0.0:
                self.mem_rest[task] = o * work
                work -= o * work
        self.mem_work[task] = work
        self.clock.after(at - self.clock.now + latency + self.fixed_ns[task], self._on_mem_start, task)

    def _on_mem_start(self, task: int) -> None:
        work = self.mem_work[task]
        self.mem_start[task] = self.clock.now
        if work > 0.0 or self.mem_rest[task] > 0.0:
            if self.presence:                   # the block competes for its SM while it loads too
                self.sms[self.sm_of[task]].enter(task)
            if self.stretch_on:                 # its memory class (the overlapped rest keeps it)
                sm = self.sms[self.sm_of[task]]
                q = self._hit_q(task) if self.resources.hit_on else 1.0
                self.mem_class_of[task] = self.resources.stretch_class(self.kind_of[task], sm, task, q)
        if work > 0.0:
            self.mem.add(task, work)
        else:
            self._mem_done(task)

    def _hit_q(self, task: int) -> float:
        """The fraction of its kind's largest memory cap that `task`'s memory phase may take, from the
        bytes its accesses missed and moved (``megasim.sim.resources.hit_level``)."""
        dram = 0.0
        for j in range(self.rptr[task], self.rptr[task + 1]):
            dram += self.miss_of[j]
        l2_bytes = self.task_bytes[task]
        work = dram * self.inv_dram_bw
        if l2_bytes * self.inv_l2_bw > work:
            work = l2_bytes * self.inv_l2_bw
        return hit_level(work, dram, l2_bytes, self.resources.hit_scale[self.kind_of[task]],
                         self.spec.block_l2_bw_ratio)

    def _mem_done(self, task: int) -> None:
        if task >= self.num_tasks:          # a user process's transfer (external_transfer)
            self.transfers.pop(task).succeed()
            return
        rest = self.mem_rest[task]
        if rest < 0.0:                      # the overlapped rest of the memory phase ended
            self._join(task)
            return
        self.comp_start[task] = self.clock.now
        sm = self.sms[self.sm_of[task]]
        work = self.compute_ns[task]
        present = self.presence and (self.mem_work[task] > 0.0 or rest > 0.0)
        # The age-weighted SM turns a present block into a computing one in one change (its
        # leave-then-add would post an event that the add at once supersedes).
        if present and not (self.track_age and work > 0.0):
            sm.leave(task)
        if rest > 0.0:                      # the rest of its memory work runs beside its compute
            self.mem_rest[task] = -1.0
            self.pending[task] = 1
            self.mem.add(task, rest)
        if work > 0.0:
            if present and self.track_age:
                sm.start_computing(task, work)
            else:
                sm.add(task, work)
        else:
            self._comp_done(task)

    def external_transfer(self, nbytes: float):
        """A job of ``nbytes / dram_bw`` ns of work on the current memory-system server, as one block's
        memory phase (its cap: the spec's per-block DRAM bandwidth); a SimPy event that succeeds when it
        ends. Job ids after the tasks' tell it apart; a capped server learns its class."""
        job = self.num_tasks + self.transfers_made
        self.transfers_made += 1
        server = self.mem
        class_of = getattr(server, "class_of", None)
        if class_of is not None:
            caps = server.caps
            cls = caps.index(self.mem_cap) if self.mem_cap in caps else len(caps) - 1
            class_of.extend([cls] * (job + 1 - len(class_of)))
            class_of[job] = cls
        event = self.transfers[job] = self.clock.event()
        server.add(job, nbytes * self.inv_dram_bw)
        return event

    def _join(self, task: int) -> None:
        """One of a task's overlapped phases ended; the task ends with the last."""
        if self.pending[task]:
            self.pending[task] -= 1
        else:
            self._finish(task)
