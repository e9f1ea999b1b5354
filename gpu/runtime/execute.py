"""The GPU executor: runs ``megasim.plan.build(problem, plan)``'s (graph, schedule) on device tensors,
launch by launch, through the algorithm's kernel table (``gpu.runtime.table``).

    run = PreparedRun(problem, plan, graph, schedule)    # tables uploaded, kernels picked, orders checked
    ws = run.workspace(x, w)                              # device tensors, allocated once
    run.run(ws); run.check(); y = run.output(ws)          # enqueue only; check reads error records
    y = execute(problem, plan, x, w)                      # all of it, for one call

Which kernel runs a Launch: with ``kernels=None`` (the default), every launch of a schedule the table
lists in ``megakernel_schedules`` runs on its megakernel (any mix of kinds); any other launch runs on
the kernel of its one task kind (a launch mixing kinds there is refused). The schedule's name is the
plan's (``plan.schedule``); the Schedule holds the task maps. ``kernels="megakernel"`` or
``"per_kind"`` forces one or the other for every launch. A graph kind missing from the table, a
launch order its kernel cannot honour (``KindKernel.check_order``) and a run option the table does not
take are refused in one line (KernelInputError) before anything is uploaded.

``run(ws)`` enqueues on the default stream with no allocation, host copy or synchronisation: each
launch's (configured kernel, args) pairs are built once per workspace and reused, so a timing loop
measures the kernels. ``check()`` reads the launches' error records (megakernel dependency waits that
gave up) and raises MegakernelError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpu.errors import KernelInputError
from gpu.runtime.table import KernelTable, KindKernel, kernel_table
from megasim.schedule import Schedule, check_valid
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

KERNEL_CHOICES = (None, "megakernel", "per_kind")


def launch_kernels(table: KernelTable, graph: TaskGraph, schedule: Schedule, schedule_name: str,
                   kernels: str | None = None) -> list[tuple[KindKernel, bool]]:
    """Per launch of ``schedule`` (the plan's schedule ``schedule_name``), (the table's kernel that runs
    it, whether it is the megakernel); KernelInputError when a kind has no kernel, a launch mixes kinds without a megakernel, or a
    kernel cannot run the launch's order."""
    if kernels not in KERNEL_CHOICES:
        raise KernelInputError(f"kernels={kernels!r} is not allowed (allowed: None, megakernel, per_kind)")
    missing = [graph.kind_names[k] for k in np.unique(graph.kind) if graph.kind_names[k] not in table.kinds]
    if missing and (table.megakernel is None or kernels == "per_kind"):
        raise KernelInputError(f"task kind {missing[0]!r} has no kernel in the {table.algorithm} table "
                               f"(kinds: {', '.join(table.kinds)})")
    use_mk = kernels == "megakernel" or (kernels is None and schedule_name in table.megakernel_schedules)
    if use_mk and table.megakernel is None:
        raise KernelInputError(f"the {table.algorithm} table has no megakernel: kernels='megakernel' is not allowed")
    out = []
    for launch in schedule.launches:
        order = np.asarray(launch.order, np.int64)
        if use_mk:
            entry = table.megakernel
        else:
            kinds = np.unique(graph.kind[order]) if order.size else np.zeros(0, np.int64)
            if kinds.size > 1:
                names = ", ".join(graph.kind_names[k] for k in kinds)
                raise KernelInputError(f"launch {launch.name!r} mixes task kinds ({names}); the {table.algorithm} "
                                       "table runs such launches only on a megakernel "
                                       f"(schedules {', '.join(table.megakernel_schedules) or 'none'})")
            if kinds.size == 0:
                out.append((None, False))
                continue
            name = graph.kind_names[int(kinds[0])]
            if name not in table.kinds:
                raise KernelInputError(f"task kind {name!r} has no kernel in the {table.algorithm} table "
                                       f"(kinds: {', '.join(table.kinds)})")
            entry = table.kinds[name]
        entry.check_order(graph, launch)
        out.append((entry, use_mk))
    return out


class PreparedRun:
    """One (graph, schedule) of a plan, ready to run repeatedly on workspaces of it (module docstring).

    ``check=False`` skips the host-side validity check of the schedule (``megasim.schedule.check_valid``);
    ``options`` are the table's run options (Winograd: ``poll_limit``, ``specialise``)."""

    def __init__(self, problem: ConvProblem, plan, graph: TaskGraph, schedule: Schedule, *,
                 kernels: str | None = None, check: bool = True, options: Mapping[str, Any] | None = None) -> None:
        self.table = kernel_table(plan.algorithm)
        options = dict(options or {})
        self.table.check_options(options)
        if check:
            check_valid(graph, schedule)
        self.problem, self.plan, self.graph, self.schedule = problem, plan, graph, schedule
        entries = launch_kernels(self.table, graph, schedule, plan.schedule, kernels)
        on_mk = tuple(mk for _, mk in entries)
        self.state = self.table.state(problem, plan, graph, schedule, on_mk, options)
        self.kernels = tuple(e.name if e is not None else None for e, _ in entries)
        self.launches = [e.prepare(self.state, launch, i) if e is not None else None
                         for i, ((e, _), launch) in enumerate(zip(entries, schedule.launches))]
        self._steps: dict[int, tuple[Any, list]] = {}   # id(workspace) -> (workspace, steps)

    def workspace(self, x, w):
        """The device tensors of one run on inputs x and w (device arrays in the table's input layout)."""
        return self.table.workspace(self.state, x, w)

    def steps(self, ws) -> list[tuple[Any, tuple]]:
        """Every (configured kernel, args) pair of the schedule on ``ws``, in launch order (built once)."""
        entry = self._steps.get(id(ws))
        if entry is None or entry[0] is not ws:
            steps = [s for pl in self.launches if pl is not None for s in pl.steps(ws)]
            entry = (ws, steps)
            self._steps[id(ws)] = entry
        return entry[1]

    def run(self, ws) -> None:
        """Enqueue the whole schedule on the default stream (asynchronous)."""
        for fn, args in self.steps(ws):
            fn(*args)

    def check(self) -> None:
        """Raise if the last run's launches reported an error (may synchronise)."""
        for pl in self.launches:
            if pl is not None:
                pl.check()

    def output(self, ws):
        return self.table.output(ws)


def execute(problem: ConvProblem, plan, x, w, *, graph: TaskGraph | None = None, schedule: Schedule | None = None,
            kernels: str | None = None, options: Mapping[str, Any] | None = None):
    """Run a plan once on device inputs x, w and return its output device array (synchronises to read
    the error records). ``graph`` and ``schedule`` default to ``megasim.plan.build(problem, plan)``'s,
    which then also resolves the plan's defaults."""
    if (graph is None) != (schedule is None):
        raise KernelInputError("give both graph and schedule, or neither")
    if graph is None:
        from megasim.plan import build
        graph, schedule, plan = build(problem, plan)
    run = PreparedRun(problem, plan, graph, schedule, kernels=kernels, options=options)
    ws = run.workspace(x, w)
    run.run(ws)
    run.check()
    return run.output(ws)
