"""The GPU executor's kernel tables: per algorithm, which kernel runs each task kind.

A TaskGraph names its task kinds (``graph.kind_names``: Winograd's ``ftrans``, ``itrans``, ``gemm``,
``otrans``; the sparse family's ``ecr``, ``pecr``, ``relu``, ``maxpool`` ...). An algorithm's GPU side
is a ``KernelTable``, registered under the algorithm's name (the names of ``megasim.algorithms``):

- ``kinds``: task kind -> ``KindKernel``, the kernel that runs a launch holding tasks of that kind only;
- ``megakernel``: optionally, the kernel that runs a launch of any mix of kinds (Winograd's megakernel),
  and ``megakernel_schedules``, the schedules whose launches all run on it (the paper's fused design);
- ``state``: what every launch of one (graph, schedule) shares, made once (parameters, dependency
  counters, compiled kernels); ``workspace``: the device tensors of one run (allocated once, reused by
  every run); ``output``: where a workspace's result lands;
- ``inputs``: device inputs for a measurement of a plan (``megasim validate``), in ``input_layout``, drawn on
  the device where they are plain random values (``gpu.kernels.common.random_fill``).

A ``KindKernel`` prepares one Launch (``prepare(state, launch, index)``: task tables uploaded, grid
fixed) into a ``PreparedLaunch`` whose ``steps(workspace)`` are the ``(configured kernel, args)`` pairs
that enqueue it. A kernel that takes its task from blockIdx (``grid_order=True``, the sparse kernels)
can only run the kind's tasks in the order the lowering laid them out (grid order, ascending task
ids), all in one launch; ``check_order`` refuses any other order in one line instead of running it wrong.

The registry is a plain dict (``KERNEL_TABLES``); registering a name twice raises. The built-in tables
(``gpu.runtime.winograd_kernels``, ``gpu.runtime.sparse_kernels``, ``gpu.runtime.im2win_kernels``) register when imported, which
``kernel_table`` does on first use; a new algorithm registers its table from its own module
(docs/extending.md). ``gpu.runtime.execute`` walks a Schedule through a table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gpu.errors import KernelInputError

BUILTIN_TABLES = ("gpu.runtime.winograd_kernels", "gpu.runtime.sparse_kernels", "gpu.runtime.im2win_kernels",
                  "gpu.runtime.naive_direct_kernels")


class PreparedLaunch(Protocol):
    """One Launch ready to enqueue on any workspace of its run."""

    def steps(self, ws: Any) -> list[tuple[Callable, tuple]]:
        """The (configured kernel, args) pairs that enqueue the launch on workspace ``ws``."""

    def check(self) -> None:
        """Raise (MegakernelError) if the last run of the launch reported an error; may synchronise."""


@dataclass(frozen=True)
class KindKernel:
    """The kernel behind one entry of a table: ``prepare(state, launch, index) -> PreparedLaunch``.

    ``grid_order``: the kernel takes its task from blockIdx (block b runs the kind's b-th task in task
    id order), so it runs one launch per kind holding all of the kind's tasks in ascending order;
    False: it reads a task table (block b runs map position b), so any order runs."""

    name: str
    prepare: Callable[[Any, Any, int], PreparedLaunch]
    grid_order: bool = False

    def check_order(self, graph, launch) -> None:
        """KernelInputError (one line) when the kernel cannot run ``launch``'s order as given."""
        if not self.grid_order:
            return
        order = np.asarray(launch.order, np.int64)
        if order.size == 0:
            return
        kind = int(graph.kind[order[0]])
        expected = np.flatnonzero(graph.kind == kind)
        name = graph.kind_names[kind]
        rule = (f"the {self.name} kernel takes its block from blockIdx, so it runs all {expected.size} {name} "
                f"tasks in one launch in grid order (task ids {expected[0]}..{expected[-1]} ascending)")
        if order.size != expected.size:
            raise KernelInputError(f"launch {launch.name!r} holds {order.size} of the {expected.size} {name} tasks: "
                                   f"{rule}")
        wrong = np.flatnonzero(order != expected)
        if wrong.size:
            i = int(wrong[0])
            raise KernelInputError(f"launch {launch.name!r} puts task {order[i]} at position {i} where grid order has "
                                   f"task {expected[i]}: {rule}")


@dataclass(frozen=True)
class KernelTable:
    """One algorithm's GPU kernels (see the module docstring for each field)."""

    algorithm: str
    kinds: Mapping[str, KindKernel]
    state: Callable[..., Any]        # (problem, plan, graph, schedule, on_megakernel, options) -> state
    workspace: Callable[[Any, Any, Any], Any]      # (state, x, w) -> workspace
    output: Callable[[Any], Any]                   # workspace -> output device array
    inputs: Callable[..., tuple[Any, Any]]         # (problem, plan, set index) -> device (x, w)
    input_layout: str = "NCHW"
    input_key: Callable[[Any], Any] = lambda plan: None    # plans with one key share their inputs
    megakernel: KindKernel | None = None
    megakernel_schedules: tuple[str, ...] = ()
    options: tuple[str, ...] = field(default=())   # the run options ``state`` accepts

    def check_options(self, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise KernelInputError(f"option {unknown[0]!r} is not allowed for the {self.algorithm} kernels "
                                   f"(allowed: {', '.join(self.options) or 'none'})")


KERNEL_TABLES: dict[str, KernelTable] = {}
_loaded = False


def register_kernels(table: KernelTable) -> KernelTable:
    """Add an algorithm's table under its name; ValueError if that name is taken."""
    if table.algorithm in KERNEL_TABLES:
        raise ValueError(f"a kernel table for algorithm {table.algorithm!r} is already registered")
    KERNEL_TABLES[table.algorithm] = table
    return table


def kernel_table(algorithm: str) -> KernelTable:
    """The table of a registered algorithm; a one-line KernelInputError for one without GPU kernels."""
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN_TABLES:
            importlib.import_module(module)
    if algorithm not in KERNEL_TABLES:
        raise KernelInputError(f"algorithm {algorithm!r} has no GPU kernel table (tables: "
                               f"{', '.join(KERNEL_TABLES)}); register one with "
                               "gpu.runtime.table.register_kernels (docs/extending.md)")
    return KERNEL_TABLES[algorithm]
