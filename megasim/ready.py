"""Ready-queue dispatch: a launch's blocks take runnable tasks from a queue, never waiting on a parent.

With ticket dispatch (the paper's design) a block takes the next map position and, if that task's
parents have not finished, holds its SM slot while it polls their counters. On the H200 the recorded
resnet-1 megakernel at the default Algorithm 1 parameters spends about half of its block-slot time
polling (docs/winograd_gpu.md). Ready-queue dispatch (``Launch.dispatch = "ready"``) instead hands a
free block the oldest task of a FIFO queue of runnable tasks:

- the queue starts with the launch's first ``ready_window`` *roots* in map order (tasks that wait on no
  counter signalled in this launch; default window: one per SM);
- a block that finishes a root queues the next root in map order, so about ``ready_window`` roots are
  queued or running until the roots run out (the window plays the part of Algorithm 1's lag);
- a block whose signal completes the last counter a task waits on queues that task (*released*).

A block takes a slot with one atomic, as a ticket does; every task passes through the queue once, so
the i-th slot is written when the i-th task becomes runnable, and a block whose slot is not yet
written polls it (the only wait left: nothing is runnable). No block ever holds a slot on a parent,
so ready-queue dispatch runs any order of the tasks without deadlock.

Release without a per-task fan-out: tasks that wait on the same set of in-launch counters form a
*wait group* (a Winograd graph's GEMMs of one tile group all wait on the filter transforms' counter
and their group's input-transform counter), with a pending count = the size of that set. The block
whose signal takes a counter to zero decrements the pending count of each wait group on that
counter; the one that takes a group's count to zero queues the group's tasks (map order). The
filter-transform counter's release then costs one decrement per tile group, not one per GEMM.

``ready_lists`` computes these lists once per launch; the simulator (``megasim.sim.engine``) and the
GPU megakernel (``gpu.kernels.winograd.megakernel``, packed by ``gpu.runtime.executor``) both read them, so the model and
the kernel run the same policy. Positions are map positions (indices into ``launch.order``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megasim.taskgraph import TaskGraph


@dataclass(frozen=True, eq=False)
class ReadyLists:
    """The release structure of one launch; every array int32 except where noted.

    - ``roots``: map positions of the tasks that wait on no in-launch counter, in map order.
    - ``counter_ptr`` (num_counters + 1) / ``counter_groups``: CSR, the wait groups on each counter.
    - ``group_pending`` (n_groups): a wait group's count of in-launch counters (its initial pending).
    - ``group_ptr`` (n_groups + 1) / ``group_positions``: CSR, each wait group's map positions, in map
      order.
    """

    roots: np.ndarray
    counter_ptr: np.ndarray
    counter_groups: np.ndarray
    group_pending: np.ndarray
    group_ptr: np.ndarray
    group_positions: np.ndarray

    @property
    def num_groups(self) -> int:
        return int(self.group_pending.size)

    @property
    def num_released(self) -> int:
        """Tasks that are queued on release (the launch's tasks that are not roots)."""
        return int(self.group_positions.size)


def _live_waits(graph: TaskGraph, order: np.ndarray) -> np.ndarray:
    """Per map position, its wait counters that a task of this launch signals (-1 elsewhere)."""
    signalled = np.zeros(graph.num_counters, bool)
    sig = graph.signal_counters[order].ravel()
    signalled[sig[sig >= 0]] = True
    waits = graph.wait_counters[order]
    return np.where((waits >= 0) & signalled[np.maximum(waits, 0)], waits, -1)


def root_mask(graph: TaskGraph, order: np.ndarray) -> np.ndarray:
    """Per map position of a launch running ``order``, True where the task is a root (waits on no
    counter a task of this launch signals)."""
    return (_live_waits(graph, np.asarray(order, np.int64)) < 0).all(axis=1)


def ready_lists(graph: TaskGraph, order: np.ndarray) -> ReadyLists:
    """The ReadyLists of a launch running ``order`` (task ids in map order) of ``graph``.

    A counter is *in-launch* when a task of this launch signals it; counters signalled only by
    earlier launches are zero when this one starts and are not waited on."""
    live = _live_waits(graph, np.asarray(order, np.int64))
    live.sort(axis=1)                                 # a wait set's canonical key (-1 first)
    is_root = (live < 0).all(axis=1)
    roots = np.flatnonzero(is_root).astype(np.int32)
    pos = np.flatnonzero(~is_root)
    if pos.size:
        keys, group_of = np.unique(live[pos], axis=0, return_inverse=True)
        group_of = group_of.ravel()
    else:
        keys, group_of = np.zeros((0, live.shape[1]), live.dtype), np.zeros(0, np.int64)
    n_groups = keys.shape[0]
    by_group = np.argsort(group_of, kind="stable")    # map order within a group
    group_ptr = np.zeros(n_groups + 1, np.int64)
    group_ptr[1:] = np.cumsum(np.bincount(group_of, minlength=n_groups))
    pending = (keys >= 0).sum(axis=1)
    gi, slot = np.nonzero(keys >= 0)
    counters = keys[gi, slot]
    by_counter = np.lexsort((gi, counters))
    counter_ptr = np.zeros(graph.num_counters + 1, np.int64)
    counter_ptr[1:] = np.cumsum(np.bincount(counters, minlength=graph.num_counters))
    return ReadyLists(roots=roots, counter_ptr=counter_ptr.astype(np.int32),
                      counter_groups=gi[by_counter].astype(np.int32), group_pending=pending.astype(np.int32),
                      group_ptr=group_ptr.astype(np.int32), group_positions=pos[by_group].astype(np.int32))
