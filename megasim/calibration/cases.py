"""What the calibration simulates to compare with each measured run: a kind's launch cut out of a layer.

A measured row times one kind's tasks alone. Its case is the kind's launch of the layer's non-fused
schedule cut out of the layer's TaskGraph as a graph of its own (``kind_subgraph``: its tasks, their
memory accesses, no dependency counters: its parents ran before, as on the GPU), simulated alone with
the spec being fitted (``kind_cases``). The second round's rows (``gpu.calibrate.occupancy``: each
kind's tasks alone at several occupancies, its kernel with forced shared memory, the megakernel
running only that kind, per task and persistent) are each simulated as they were measured
(``variant_case``, ``megasim.calibration.pool.simulated_us``); ``row_label`` names them.
``natural_cases`` builds the cases of every parameter set the rows were measured at, per cost name
(TaskGraph.cost_names: an implementation variant such as gemm@t32 has its own rows), and
``natural_rows`` picks a cost name's rows.

Mixed-kind runs (``MIXED_PAIRS``, ``gpu.calibrate.occupancy --mixed``): two kinds' non-fused launches
interleaved in one per-task megakernel launch (``interleave``, ``mixed_order``, ``mixed_case``),
counters zeroed, to see how co-resident kinds slow each other, which no single-kind run shows. The
transforms are fitted on them beside their own runs (``mixed_fit_case``;
``megasim.calibration.winograd.beside_fits``), and every one is a check of the fitted spec
(``mixed_checks``); with ``--fit-mixed-factor`` they also fit the spec's ``mixed_kinds_sm_factor``
(``megasim.calibration.winograd.fit_mixed_factor``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from megasim.calibration.measurements import Measurements
from megasim.calibration.pool import simulated_us
from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec
from megasim.schedule import Launch, Schedule
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.taskgraph import OPTIONAL_TASK_ARRAYS, TaskGraph
from megasim.workloads import parse_layer


def kind_subgraph(graph: TaskGraph, kind: str, order: np.ndarray) -> tuple[TaskGraph, Schedule]:
    """The tasks of one kind (or of several: kinds joined by '+', e.g. 'itrans+gemm') as a graph of
    their own (no counters: their parents ran before), and the one-launch schedule running them in
    ``order`` (task ids of `graph`)."""
    ks = [graph.kind_id(k) for k in kind.split("+")]
    ids = np.flatnonzero(np.isin(graph.kind, ks))
    new_id = np.full(graph.num_tasks, -1, np.int64)
    new_id[ids] = np.arange(ids.size)
    lo, hi = graph.access_ptr[ids], graph.access_ptr[ids + 1]
    counts = hi - lo
    rows = (np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
            + np.arange(int(counts.sum()))).astype(np.int64)
    sub = dataclasses.replace(
        graph, kind=graph.kind[ids], group=graph.group[ids], index_in_group=graph.index_in_group[ids],
        wait_counters=np.full((ids.size, 1), -1, np.int32), signal_counters=np.full((ids.size, 1), -1, np.int32),
        counter_init=np.zeros(0, np.int32), flops=graph.flops[ids],
        access_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        access_region=graph.access_region[rows], access_part_lo=graph.access_part_lo[rows],
        access_part_hi=graph.access_part_hi[rows], access_part_step=graph.access_part_step[rows],
        access_bytes=graph.access_bytes[rows], access_write=graph.access_write[rows],
        **{name: None if getattr(graph, name) is None else getattr(graph, name)[ids] for name in OPTIONAL_TASK_ARRAYS},
        meta={**graph.meta, "subgraph_of_kind": kind})
    local = new_id[np.asarray(order, np.int64)]
    if (local < 0).any():
        raise SpecError(f"kind_subgraph: the order lists tasks that are not {kind!r} tasks")
    return sub, Schedule(f"{kind}_alone", (Launch(local, name=kind),), {})


# Mixed-kind runs (gpu.calibrate.occupancy --mixed): two kinds' non-fused launches interleaved in one
# per-task megakernel launch, counters zeroed (no waits), to see how co-resident kinds slow each other,
# which no single-kind run shows. The transforms are fitted on them too (winograd.beside_fits).
MIXED_PAIRS = (("itrans", "gemm"), ("gemm", "otrans"))


def interleave(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a and b merged in proportion (each keeps its order; position i of a at (i + 0.5) / len(a) of the
    way, ties to a), so both kinds are in flight throughout the launch."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    key = np.concatenate([(np.arange(a.size) + 0.5) / max(a.size, 1), (np.arange(b.size) + 0.5) / max(b.size, 1)])
    tie = np.concatenate([np.zeros(a.size), np.ones(b.size)])
    return np.concatenate([a, b])[np.lexsort((tie, key))]


def mixed_order(graph: TaskGraph, schedule: Schedule, kinds: tuple[str, str]) -> np.ndarray:
    """The interleaved order (task ids of `graph`) of two kinds' non-fused launches."""
    orders = {}
    for launch in schedule.launches:
        k = graph.kind_names[int(graph.kind[int(launch.order[0])])]
        orders[k] = np.asarray(launch.order, np.int64)
    missing = [k for k in kinds if k not in orders]
    if missing:
        raise SpecError(f"mixed_order: the schedule has no launch of kind {missing[0]!r}")
    return interleave(orders[kinds[0]], orders[kinds[1]])


def mixed_case(layer: str, kinds: tuple[str, str], plan_params: str = "") -> tuple[TaskGraph, Schedule]:
    """The (graph, schedule) of a mixed-kind run: the two kinds' tasks interleaved in one per-task
    megakernel launch, no counters (as gpu.calibrate.occupancy measures it)."""
    graph, schedule, _ = build(parse_layer(layer), Plan.parse("nonfused", plan_params))
    order = mixed_order(graph, schedule, kinds)
    sub, sched = kind_subgraph(graph, "+".join(kinds), order)
    launch = Launch(sched.launches[0].order, "+".join(kinds), "per_task", "ticket", None, "megakernel")
    return sub, Schedule(f"{'+'.join(kinds)}_mixed", (launch,), {})


def mixed_fit_case(row: Mapping[str, Any], plan_params: str = "") -> tuple[str, TaskGraph, Schedule, str]:
    """A mixed-kind row as a fit's case (label, graph, schedule, timing), at its own ``plan_params`` if it
    has them."""
    graph, schedule = mixed_case(row["layer"], tuple(row["kind"].split("+")), row.get("plan_params", plan_params))
    return f"{row['layer']} {row['kind']} mixed", graph, schedule, "queued"


def mixed_us(spec: GPUSpec, case: tuple[TaskGraph, Schedule]) -> float:
    """A mixed-kind case's simulated time as measured (queued timing)."""
    return simulated_us(simulate(case[0], case[1], spec), "queued")


def mixed_checks(spec: GPUSpec, rows: list[dict[str, Any]], plan_params: str = "", cases=None,
                 map_fn: Callable = map) -> list[dict[str, Any]]:
    """Each measured mixed-kind row (at its own ``plan_params`` if it has them) beside the spec's
    simulation of it (queued timing). ``cases``: the rows' ``mixed_case``s, if built already;
    ``map_fn``: how to map ``mixed_us`` over them (``map``, or a process pool's)."""
    cases = cases or [mixed_case(r["layer"], tuple(r["kind"].split("+")), r.get("plan_params", plan_params))
                      for r in rows]
    sims = list(map_fn(mixed_us, [spec] * len(cases), cases))
    out = []
    for r, sim in zip(rows, sims):
        meas = float(r["median_ms"]) * 1000.0
        out.append({"layer": r["layer"], "kinds": r["kind"], "plan_params": r.get("plan_params", plan_params),
                    "measured_us": meas, "simulated_us": sim,
                    "error": sim / meas - 1.0, "sum_of_single_kind_megakernel_us": r.get("single_kind_sum_us")})
    return out


def kind_cases(layers: tuple[str, ...], plan_params: str = "") -> dict[str, list[tuple[str, TaskGraph, Schedule]]]:
    """Per kind, per calibration layer: (layer, subgraph, schedule) of its non-fused launch."""
    out: dict[str, list] = {}
    for layer in layers:
        graph, schedule, _ = build(parse_layer(layer), Plan.parse("nonfused", plan_params))
        for launch in schedule.launches:
            kinds = np.unique(graph.kind[np.asarray(launch.order)])
            assert kinds.size == 1, "a non-fused launch runs one kind"
            kind = graph.kind_names[int(kinds[0])]
            sub, sched = kind_subgraph(graph, kind, launch.order)
            out.setdefault(kind, []).append((layer, sub, sched))
    return out


def variant_case(sub: TaskGraph, sched: Schedule, row: Mapping[str, Any]) -> tuple[TaskGraph, Schedule]:
    """The (graph, schedule) of one measured variant of a kind's launch (``sub``, ``sched``: its
    non-fused launch cut out by ``kind_subgraph``): the per-kind kernel with ``extra_shared_bytes`` of
    dynamic shared memory (fewer blocks per SM), or the megakernel running only these tasks
    (``Launch.kernel="megakernel"``: its registers and dynamic shared memory, its per-task costs),
    per task or as a persistent grid of ``blocks_per_sm``."""
    kernel = row.get("kernel", "per_kind")
    if kernel not in ("per_kind", "megakernel"):
        raise SpecError(f"measurements: kernel {kernel!r} is not allowed (allowed: per_kind, megakernel)")
    extra = int(row.get("extra_shared_bytes", 0) or 0)
    g = sub
    if extra:
        g = dataclasses.replace(sub, kind_shared_bytes=np.maximum(sub.kind_shared_bytes, extra).astype(sub.kind_shared_bytes.dtype))
    style = row.get("style", "per_task") or "per_task"
    bps = row.get("blocks_per_sm")
    launch = sched.launches[0]
    if style != "per_task" or bps is not None or kernel == "megakernel":
        launch = Launch(launch.order, launch.name, style, "ticket", None if bps is None else int(bps),
                        "megakernel" if kernel == "megakernel" else None)
    return g, Schedule(sched.name, (launch,), {})


def row_label(row: Mapping[str, Any]) -> str:
    """A short name of a measured variant, e.g. ``per_kind``, ``per_kind+102400B``, ``megakernel/persistent x1``."""
    kernel = row.get("kernel", "per_kind")
    label = kernel
    if row.get("extra_shared_bytes"):
        label += f"+{int(row['extra_shared_bytes'])}B"
    if row.get("style", "per_task") == "persistent":
        label += f"/persistent x{row.get('blocks_per_sm')}"
    return f"{label} ({row.get('timing', 'events')})"


def natural_cases(m: Measurements, layers: tuple[str, ...]):
    """(natural_of, params_of): for each cost name, (layer, plan params) -> (kind, the kind's graph cut
    out of that layer's non-fused schedule, its schedule), over the parameter sets ``m``'s rows were
    measured at; and a row's plan params. Each row fits the cost of its kind under its graph's cost
    name (TaskGraph.cost_names): an implementation variant (e.g. gemm@t32, the GEMM at t = 32) is
    fitted on its own rows."""
    def params_of(r):
        return r.get("plan_params", m.plan_params)

    param_sets = list(dict.fromkeys([m.plan_params, *(params_of(r) for r in m.kind_times)]))
    natural_of: dict[str, dict[tuple[str, str], tuple[str, TaskGraph, Schedule]]] = {}
    for p in param_sets:
        for kind, subs in kind_cases(layers, p).items():
            for layer, sub, sched in subs:
                name = sub.cost_names[sub.kind_id(kind)]
                natural_of.setdefault(name, {})[(layer, p)] = (kind, sub, sched)
    return natural_of, params_of


def natural_rows(m: Measurements, natural, params_of) -> list[dict[str, Any]]:
    """``m``'s rows of one cost name: those of its kind on a (layer, plan params) of ``natural`` (an
    entry of ``natural_cases``'s natural_of)."""
    return [r for r in m.kind_times
            if (r["layer"], params_of(r)) in natural and natural[(r["layer"], params_of(r))][0] == r["kind"]]
