"""Simple task orders: the non-fused pipeline, the naive fused order (Fig. 3a) and random valid orders.

These work for any TaskGraph whose kinds form a pipeline (each kind's parents are of earlier kinds):
the non-fused schedule launches one kernel per kind in ``graph.kind_names`` order, with a barrier
between kernels; the naive fused schedule runs the same order in one megakernel.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from megasim.errors import MappingError

from megasim.schedule import Launch, Schedule
from megasim.taskgraph import TaskGraph


def nonfused(graph: TaskGraph, kernel_orders: Mapping[str, np.ndarray] | None = None) -> Schedule:
    """One kernel per kind, in ``graph.kind_names`` order, each running its tasks in task-id order
    unless `kernel_orders` gives that kind's order (a permutation of its task ids), e.g. a batched
    GEMM's grid order (``megasim.algorithms.winograd.lowering.gemm_kernel_order``)."""
    kernel_orders = kernel_orders or {}
    launches = []
    for k, name in enumerate(graph.kind_names):
        ids = np.flatnonzero(graph.kind == k)
        if not ids.size:
            continue
        if name in kernel_orders:
            order = np.asarray(kernel_orders[name], dtype=np.int64)
            if order.shape != ids.shape or not np.array_equal(np.sort(order), ids):
                raise MappingError(f"the order given for kernel {name!r} is not a permutation of its tasks")
            ids = order
        launches.append(Launch(ids, name=name))
    return Schedule("nonfused", tuple(launches), {})


def naive_fused(graph: TaskGraph, kernel_orders: Mapping[str, np.ndarray] | None = None) -> Schedule:
    """The non-fused order in one megakernel (the paper's Fig. 3a)."""
    order = np.concatenate([launch.order for launch in nonfused(graph, kernel_orders).launches])
    return Schedule("naive", (Launch(order, name="megakernel"),), {})


def random_order(graph: TaskGraph, seed: int) -> Schedule:
    """A uniformly shuffled valid order: Kahn's algorithm, picking a random ready task each step."""
    rng = np.random.default_rng(seed)
    t = graph.num_tasks
    remaining = graph.counter_init.astype(np.int64).copy()
    waiters: dict[int, list[int]] = {}
    for i, row in enumerate(graph.wait_counters):
        for c in row:
            if c >= 0:
                waiters.setdefault(int(c), []).append(i)
    blocked = np.array([sum(1 for c in row if c >= 0 and remaining[c] > 0) for row in graph.wait_counters])
    ready = list(np.flatnonzero(blocked == 0))
    order = []
    while ready:
        j = int(rng.integers(len(ready)))
        ready[j], ready[-1] = ready[-1], ready[j]
        task = int(ready.pop())
        order.append(task)
        for c in graph.signal_counters[task]:
            if c < 0:
                continue
            remaining[c] -= 1
            if remaining[c] == 0:
                for child in waiters.get(int(c), []):
                    blocked[child] -= 1
                    if blocked[child] == 0:
                        ready.append(child)
    if len(order) != t:
        raise RuntimeError("graph has a dependency cycle")  # a lowering bug, not a user error
    return Schedule(f"random-{seed}", (Launch(np.array(order, np.int64), name="megakernel"),), {"seed": seed})
