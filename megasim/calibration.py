"""Turning microbenchmark measurements into a GPU spec: the pure half of `megasim calibrate`.

``gpu.calibrate`` measures on the GPU and hands this module a ``Measurements`` record: the values it
measured directly (bandwidths, FP32 rate, latencies, launch costs), each with the method that gave
it, and the time of each task kind's NON-FUSED kernel run alone on a few calibration layers.
``calibrated_spec`` starts from the preset of the detected GPU, replaces the measured fields (source
``measured <date> on <device> by megasim calibrate (<method>)``) and fits each kind's TaskCost:

- the kind's launch of the non-fused schedule is cut out of the layer's TaskGraph as a graph of its
  own (``kind_subgraph``: its tasks, their memory accesses, no dependency counters: its parents ran
  before, as on the GPU), and simulated alone with the already-measured spec;
- ``compute_efficiency`` and ``fixed_ns`` are chosen to minimise the squared log error of those
  simulated times against the measured ones over the calibration layers (Nelder-Mead on
  log(efficiency) and fixed_ns, a bounded, deterministic search). Two layers and two unknowns per
  kind: the flop-heavy kind (the GEMM) is pinned by its efficiency, the memory-bound transforms by
  their fixed time.

Never fitted to fused or megakernel runs (DESIGN.md: "The model predicts, it does not fit the test").
Everything here is CPU-only; ``refit`` re-runs the fit from a saved measurements file.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from megasim.errors import SpecError
from megasim.hardware.spec import OPTIONAL_FIELDS, GPUSpec, TaskCost, spec_field_names
from megasim.mapping import Launch, Schedule
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.taskgraph import TaskGraph
from megasim.workloads import parse_layer

CALIBRATION_LAYERS = ("resnet-1", "vgg-3")   # small C / large C; the diagnose layers of issue 3
EFF_BOUNDS = (0.005, 1.0)
FIXED_BOUNDS_NS = (0.0, 200_000.0)


@dataclass
class Measurements:
    """What `gpu.calibrate` measured. ``values``: spec field -> {"value", "method"}; ``kind_times``:
    rows {"layer", "kind", "tasks", "median_ms", "min_ms", "max_ms"} of each kind's non-fused kernel alone."""

    device: str
    date: str
    preset: str
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    kind_times: list[dict[str, Any]] = field(default_factory=list)
    plan_params: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Measurements":
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise SpecError(f"measurements: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        return cls(**data)


def source(m: Measurements, method: str) -> str:
    return f"measured {m.date} on {m.device} by megasim calibrate ({method})"


def kind_subgraph(graph: TaskGraph, kind: str, order: np.ndarray) -> tuple[TaskGraph, Schedule]:
    """The tasks of one kind as a graph of their own (no counters: their parents ran before), and
    the one-launch schedule running them in ``order`` (task ids of `graph`)."""
    k = graph.kind_id(kind)
    ids = np.flatnonzero(graph.kind == k)
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
        other_ops=None if graph.other_ops is None else graph.other_ops[ids],
        serial_steps=None if graph.serial_steps is None else graph.serial_steps[ids],
        meta={**graph.meta, "subgraph_of_kind": kind})
    local = new_id[np.asarray(order, np.int64)]
    if (local < 0).any():
        raise SpecError(f"kind_subgraph: the order lists tasks that are not {kind!r} tasks")
    return sub, Schedule(f"{kind}_alone", (Launch(local, name=kind),), {})


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


def simulated_kind_us(spec: GPUSpec, kind: str, cost: TaskCost, cases) -> list[float]:
    s = dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost})
    return [simulate(g, sch, s).predicted_us for _, g, sch in cases]


def fit_kind(spec: GPUSpec, kind: str, cases, measured_us: list[float], max_evals: int = 60) -> dict[str, Any]:
    """Fit (compute_efficiency, fixed_ns) of one kind; returns the cost, the fit's error and its evaluations."""
    from scipy.optimize import minimize

    meas = np.asarray(measured_us, float)

    def cost_of(x) -> TaskCost:
        eff = float(np.clip(math.exp(x[0]), *EFF_BOUNDS))
        fixed = float(np.clip(x[1] * 1000.0, *FIXED_BOUNDS_NS))
        return TaskCost(eff, fixed)

    memo: dict[tuple, float] = {}

    def loss(x) -> float:
        key = tuple(np.round(x, 6))
        if key not in memo:
            sim = np.asarray(simulated_kind_us(spec, kind, cost_of(x), cases))
            memo[key] = float(np.sum(np.log(sim / meas) ** 2))
        return memo[key]

    start = spec.task_cost(kind)
    x0 = np.array([math.log(start.compute_efficiency), start.fixed_ns / 1000.0 + 0.5])
    res = minimize(loss, x0, method="Nelder-Mead",
                   options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6, "initial_simplex":
                            np.array([x0, x0 + [-1.0, 0.0], x0 + [0.0, 2.0]])})
    best = cost_of(res.x)
    sim = simulated_kind_us(spec, kind, best, cases)
    return {"cost": best, "simulated_us": sim, "measured_us": list(map(float, meas)),
            "rms_log_error": float(np.sqrt(np.mean(np.log(np.asarray(sim) / meas) ** 2))),
            "evaluations": len(memo)}


def sanity_rules(values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Physical floors applied to probe results before they enter a spec (each rule says why).

    An atomic executes at L2, so its round trip cannot be shorter than an L2 load's: an
    ``atomic_latency_ns`` below ``l2_latency_ns`` is a probe artefact (on the H200 the dependent-atomic
    chain gave 9.7 ns, the L2 pointer chase 153 ns); the L2 latency is used instead, and said so."""
    values = {k: dict(v) for k, v in values.items()}
    a, l2 = values.get("atomic_latency_ns"), values.get("l2_latency_ns")
    if a and l2 and a["value"] < l2["value"]:
        values["atomic_latency_ns"] = {
            "value": l2["value"],
            "method": (f"the dependent-atomic probe gave {a['value']:.1f} ns, below the L2 load latency, so it is "
                       f"rejected as an artefact; the L2 pointer-chase latency is used (atomics resolve at L2)")}
    return values


def measured_base(preset: GPUSpec, m: Measurements) -> GPUSpec:
    """The preset with the directly measured fields replaced (sources say how they were measured)."""
    names = set(spec_field_names()) | set(OPTIONAL_FIELDS)
    kwargs, sources = {}, dict(preset.sources)
    for name, entry in sanity_rules(m.values).items():
        if name not in names:
            raise SpecError(f"measurements: {name!r} is not a GPU spec field")
        value = entry["value"]
        field_type = next(f.type for f in dataclasses.fields(GPUSpec) if f.name == name)
        kwargs[name] = int(round(value)) if field_type == "int" else float(value)
        sources[name] = source(m, entry["method"])
    return dataclasses.replace(preset, sources=sources, **kwargs)


def calibrated_spec(preset: GPUSpec, m: Measurements, layers: tuple[str, ...] | None = None,
                    max_evals: int = 60) -> tuple[GPUSpec, dict[str, Any]]:
    """The calibrated spec and a report of the per-kind fits."""
    base = measured_base(preset, m)
    layers = tuple(layers or dict.fromkeys(r["layer"] for r in m.kind_times))
    cases = kind_cases(layers, m.plan_params)
    costs: dict[str, TaskCost] = {}
    sources = dict(base.sources)
    report: dict[str, Any] = {"layers": list(layers), "plan_params": m.plan_params, "kinds": {}}
    for kind, kc in cases.items():
        meas = []
        for layer, _, _ in kc:
            rows = [r for r in m.kind_times if r["layer"] == layer and r["kind"] == kind]
            if len(rows) != 1:
                raise SpecError(f"measurements: need one time of kind {kind!r} on layer {layer!r}, found {len(rows)}")
            meas.append(float(rows[0]["median_ms"]) * 1000.0)
        fit = fit_kind(base, kind, kc, meas, max_evals=max_evals)
        costs[kind] = fit["cost"]
        how = (f"{kind}'s non-fused kernel alone on {', '.join(layers)} at --param "
               f"{m.plan_params or 'defaults'}; fitted so that megasim's simulation of that launch matches "
               f"the measured median, rms log error {fit['rms_log_error']:.3f}")
        sources[f"task_costs.{kind}.compute_efficiency"] = source(m, how)
        sources[f"task_costs.{kind}.fixed_ns"] = source(m, how)
        report["kinds"][kind] = {"compute_efficiency": fit["cost"].compute_efficiency,
                                 "fixed_ns": fit["cost"].fixed_ns, "measured_us": fit["measured_us"],
                                 "simulated_us": fit["simulated_us"], "rms_log_error": fit["rms_log_error"],
                                 "evaluations": fit["evaluations"]}
    if "default" in base.task_costs:
        costs["default"] = base.task_costs["default"]
    spec = dataclasses.replace(base, task_costs=costs, sources=sources,
                               description=f"{preset.description}; calibrated {m.date} on {m.device}")
    return spec, report
