"""Schedules: how a TaskGraph's tasks are ordered into kernel launches, and the validity check.

A Schedule is a sequence of Launches (kernels run one after the other, each waiting for the previous
to finish). A Launch lists task ids in *map order*, the paper's task map: the order in which the
launch's blocks claim tasks. Its execution style says how blocks claim them:

- ``per_task``: one thread block per task, the grid as long as the map (the paper's design). With
  ``dispatch="ticket"`` (default) each block takes the next task through an atomic ticket counter, so
  tasks start in map order whatever order the hardware dispatches blocks in; with
  ``dispatch="blockidx"`` block b runs task map[b], as in the paper (correct only if the hardware
  dispatches in blockIdx order, which it is observed to do but does not promise); with
  ``dispatch="ready"`` a block takes the next task of a queue of runnable ones (the first
  ``ready_window`` roots, then each task as it becomes runnable; ``megasim.ready``), so no
  block holds its slot waiting on a parent.
- ``persistent``: a grid of ``blocks_per_sm`` blocks per SM that loop, each claiming the next task
  (by ticket, or from the ready queue) until the map is used up.

A schedule is valid when every task appears exactly once and every parent (a task that signals a
counter the child waits on) comes before its child: in an earlier launch, or earlier in the same
map. Ticket claiming then never deadlocks: a waiting block only waits on tasks already claimed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from megasim.errors import MappingError
from megasim.taskgraph import TaskGraph

STYLES = ("per_task", "persistent")
DISPATCHES = ("ticket", "blockidx", "ready")
KERNELS = (None, "megakernel")


@dataclass(frozen=True, eq=False)
class Launch:
    order: np.ndarray                 # task ids in map order
    name: str = "kernel"
    style: str = "per_task"
    dispatch: str = "ticket"
    blocks_per_sm: int | None = None  # persistent grids: blocks per SM (None = as many as fit)
    # Which kernel runs the launch: None = the megakernel when the launch mixes kinds or is
    # persistent, else its kind's own kernel; "megakernel" = the megakernel even for one kind's tasks
    # (e.g. a calibration run of one kind inside the megakernel).
    kernel: str | None = None
    # dispatch="ready": roots queued at the start (None = one per SM of the GPU); megasim.ready
    ready_window: int | None = None

    def __post_init__(self) -> None:
        order = np.asarray(self.order)
        if order.size == 0 and order.dtype.kind == "f":     # np.asarray([]) is float64
            order = order.astype(np.int64)
        if order.ndim != 1 or order.dtype.kind not in "iu":
            raise MappingError(f"launch {self.name!r}: order of dtype {order.dtype} and shape {order.shape} is not "
                               f"allowed: give a 1-D array (or list) of integer task ids")
        object.__setattr__(self, "order", order)
        if self.kernel not in KERNELS:
            raise MappingError(f"kernel {self.kernel!r} is not allowed (allowed: None, megakernel)")
        if self.style not in STYLES:
            raise MappingError(f"execution style {self.style!r} is not allowed (allowed: {', '.join(STYLES)})")
        if self.dispatch not in DISPATCHES:
            raise MappingError(f"dispatch {self.dispatch!r} is not allowed (allowed: {', '.join(DISPATCHES)})")
        if self.ready_window is not None and (isinstance(self.ready_window, bool)
                                              or not isinstance(self.ready_window, int) or self.ready_window < 1):
            raise MappingError(f"ready_window={self.ready_window!r} is not allowed: it must be a positive integer")
        if self.blocks_per_sm is not None and (isinstance(self.blocks_per_sm, bool)
                                               or not isinstance(self.blocks_per_sm, int) or self.blocks_per_sm < 1):
            raise MappingError(f"blocks_per_sm={self.blocks_per_sm!r} is not allowed: it must be a positive integer")


@dataclass(frozen=True, eq=False)
class Schedule:
    name: str
    launches: tuple[Launch, ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        h = hashlib.sha256(self.name.encode())
        for launch in self.launches:
            h.update(f"{launch.name}|{launch.style}|{launch.dispatch}|{launch.blocks_per_sm}".encode())
            if launch.kernel is not None:
                h.update(f"|{launch.kernel}".encode())
            if launch.ready_window is not None:
                h.update(f"|w{launch.ready_window}".encode())
            h.update(np.ascontiguousarray(launch.order, dtype=np.int64).tobytes())
        return h.hexdigest()[:16]

    def with_style(self, style: str, dispatch: str = "ticket", blocks_per_sm: int | None = None,
                   ready_window: int | None = None) -> "Schedule":
        """The same task maps run in another execution style."""
        launches = tuple(Launch(l.order, l.name, style, dispatch, blocks_per_sm, l.kernel, ready_window)
                         for l in self.launches)
        params = dict(self.params, style=style, dispatch=dispatch)
        if blocks_per_sm is not None:
            params["blocks_per_sm"] = blocks_per_sm
        if ready_window is not None:
            params["ready_window"] = ready_window
        return Schedule(self.name, launches, params)


def first_violation(graph: TaskGraph, schedule: Schedule) -> str | None:
    """None if the schedule is valid for the graph, else a one-line description of the first problem."""
    t = graph.num_tasks
    position = np.full(t, -1, np.int64)      # global position: launch-major
    launch_of = np.full(t, -1, np.int64)
    offset = 0
    for li, launch in enumerate(schedule.launches):
        order = np.asarray(launch.order, dtype=np.int64)
        if order.size and (order.min() < 0 or order.max() >= t):
            return f"launch {li} lists a task id outside [0, {t})"
        seen = position[order] >= 0
        if seen.any():
            return f"task {int(order[seen][0])} appears more than once"
        here = offset + np.arange(order.size)
        position[order] = here
        if (position[order] != here).any():        # a task listed twice in the launch: its last place won
            dup = order[np.flatnonzero(np.bincount(order) > 1)[0]]
            return f"task {int(dup)} appears more than once"
        launch_of[order] = li
        offset += order.size
    if (position < 0).any():
        return f"task {int(np.flatnonzero(position < 0)[0])} is in no launch ({int((position < 0).sum())} missing)"
    # The latest position of a signaller of each counter must precede every waiter of that counter.
    sig_task = np.repeat(np.arange(t), graph.signal_counters.shape[1])
    sig_c = graph.signal_counters.ravel()
    keep = sig_c >= 0
    last_signal = np.full(graph.num_counters, -1, np.int64)
    np.maximum.at(last_signal, sig_c[keep], position[sig_task[keep]])
    wait_task = np.repeat(np.arange(t), graph.wait_counters.shape[1])
    wait_c = graph.wait_counters.ravel()
    keep = wait_c >= 0
    bad = last_signal[wait_c[keep]] > position[wait_task[keep]]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        child, counter = int(wait_task[keep][i]), int(wait_c[keep][i])
        return (f"task {child} ({graph.kind_names[graph.kind[child]]}) comes before a parent that signals "
                f"counter {counter}")
    return None


def check_valid(graph: TaskGraph, schedule: Schedule) -> None:
    """MappingError unless `schedule` is a Schedule that runs every task of the TaskGraph `graph` once,
    each after the parents it waits on (the check ``megasim.sim.simulate`` makes first)."""
    if not isinstance(graph, TaskGraph):
        raise MappingError(f"graph {graph!r:.60} is not allowed: give a TaskGraph (megasim.taskgraph)")
    if not isinstance(schedule, Schedule):
        raise MappingError(f"schedule {schedule!r:.60} is not allowed: give a Schedule (megasim.schedule, "
                           f"megasim.orders)")
    problem = first_violation(graph, schedule)
    if problem is not None:
        raise MappingError(f"invalid schedule {schedule.name!r}: {problem}")
