"""Turning microbenchmark measurements into a GPU spec: the pure half of `megasim calibrate`.

``gpu.calibrate.measure`` measures on the GPU and hands this module a ``Measurements`` record: the values it
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

Round 2 (``gpu.calibrate.occupancy``): each kind's tasks alone at several occupancies (its kernel with
forced shared memory, the megakernel running only that kind, per task and persistent), timed with the
host's launch cost hidden; ``calibrated_spec`` then fits five costs per kind on those runs
(efficiency, fixed time, ``block_sm_ready``, ``block_dram_bw_gbps``, ``megakernel_fixed_ns``),
simulating each run as it was measured (``variant_case``, ``simulated_us``). The runs of a kind's own
kernel at forced lower occupancy are checks, not fitted, for the transforms (``forced_occupancy``).

Each kind's ``megakernel_claim_ns`` (a megakernel block's claim of a task: ticket, table row,
counter look, acquire fence) is not fitted: it is the mean claim -> ready time of the kind's traced
persistent run of 1 block per SM, so the fitted ``megakernel_fixed_ns`` is what the megakernel adds
once the task is ready (the whole overhead after ready would also delay tasks whose claim overlaps a
wait on their parents).

Never fitted to fused runs (DESIGN.md: "The model predicts, it does not fit the test"): the only
megakernel runs used hold one kind's tasks.
Everything here is CPU-only; ``refit`` re-runs the fit from a saved measurements file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from megasim.calibration.age import end_order_checks, fit_age_weight
from megasim.calibration.pool import CasePool, simulated_kind_us, simulated_us
from megasim.errors import SpecError
from megasim.hardware.spec import (
    OPTIONAL_FIELDS,
    GPUSpec,
    TaskCost,
    base_kind,
    spec_field_names,
)
from megasim.schedule import Launch, Schedule
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.taskgraph import OPTIONAL_TASK_ARRAYS, TaskGraph
from megasim.workloads import parse_layer

CALIBRATION_LAYERS = ("resnet-1", "vgg-3")   # small C / large C; the diagnose layers of issue 3
EFF_BOUNDS = (0.005, 1.0)
FIXED_BOUNDS_NS = (0.0, 200_000.0)
SHARE_BOUNDS = (0.02, 1.0)


@dataclass
class Measurements:
    """What `gpu.calibrate.measure` measured. ``values``: spec field -> {"value", "method"}; ``kind_times``:
    rows {"layer", "kind", "tasks", "median_ms", "min_ms", "max_ms"} of each kind's non-fused kernel alone,
    at ``plan_params`` or at a row's own ``"plan_params"`` (e.g. the transforms at 4 pairs per thread,
    the fused schedule's default, beside the non-fused default of 1)."""

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
    def from_dict(cls, data: Any, origin: str = "measurements") -> "Measurements":
        """Measurements from parsed JSON, every field checked (one-line SpecError naming `origin` and the
        field): device, date, preset and plan_params strings; values {field: {"value": finite number}};
        kind_times rows with layer and kind strings and finite positive times."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{origin} is not allowed: it must hold one JSON object (gpu.calibrate.measure's "
                            f"Measurements), not a {type(data).__name__}")
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise SpecError(f"{origin}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        missing = [k for k in ("device", "date", "preset", "values") if k not in data]
        if missing:
            raise SpecError(f"{origin} is not allowed: it has no {missing[0]!r} (gpu.calibrate.measure's "
                            f"Measurements have device, date, preset, values)")
        for key in ("device", "date", "preset", "plan_params"):
            if key in data and not isinstance(data[key], str):
                raise SpecError(f"{origin}: {key}={data[key]!r} is not allowed: it must be a string")
        for key, kind in (("values", dict), ("kind_times", list), ("extra", dict)):
            if key in data and not isinstance(data[key], kind):
                raise SpecError(f"{origin}: {key} is not allowed as a {type(data[key]).__name__}: it must be a "
                                f"JSON {'object' if kind is dict else 'list'}")
        for name, entry in data["values"].items():
            value = entry.get("value") if isinstance(entry, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SpecError(f"{origin}: values.{name} = {entry!r} is not allowed: it must be an object whose "
                                f"'value' is a finite number")
        for i, row in enumerate(data.get("kind_times", [])):
            if not isinstance(row, dict):
                raise SpecError(f"{origin}: kind_times[{i}] is not allowed: it must be an object")
            for key in ("layer", "kind"):
                if not isinstance(row.get(key), str):
                    raise SpecError(f"{origin}: kind_times[{i}].{key}={row.get(key)!r} is not allowed: it must be a string")
            for key in ("median_ms", "min_ms", "max_ms"):
                v = row.get(key)
                if key in row and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                   or v <= 0):
                    raise SpecError(f"{origin}: kind_times[{i}].{key}={v!r} is not allowed: it must be a finite "
                                    f"number > 0")
            if "median_ms" not in row:
                raise SpecError(f"{origin}: kind_times[{i}] has no 'median_ms' (each row times one kind)")
        return cls(**data)


def source(m: Measurements, method: str, by: str = "megasim calibrate") -> str:
    return f"measured {m.date} on {m.device} by {by} ({method})"


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
# which no single-kind run shows. Reported as checks of the fitted spec, never fitted.
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


# Free parameters of a kind's TaskCost in the second round, their bounds and starting points; fitted
# in log space except those in LINEAR (in us).
# How a block shares its SM: ``block_sm_ready`` (independent stalls, throughput saturating smoothly
# with the blocks resident; megasim.sim.servers.ReadinessSharedServer). Not
# ``block_sm_share`` (a hard cap, min(share, 1/n)), which the first specs fitted: it saturates at 1/share
# blocks, so a block of another kind in a saturated SM's free slot costs the others nothing, and the
# mixed-kind runs show otherwise (b7e0e92).
# ``coresident_stretch``: how a block's memory phase slows with the other blocks on its SM;
# its single-kind runs at 1, 2 and 3 blocks per SM pin it, and how kinds slow each other follows from it.
FREE_ROUND2 = ("compute_efficiency", "fixed_ns", "block_sm_ready", "block_dram_bw_gbps", "megakernel_fixed_ns",
               "coresident_stretch")
# ``memory_overlap``: the kinds whose kernel pipelines its loads (the GEMM's cp.async double
# buffer loads the next k-step while it computes this one) also fit how much of their memory phase runs
# beside their compute phase; the transforms load, then compute.
PIPELINED_KINDS = ("gemm",)
# ``further_block_sm_ready``: the readiness of a kind's blocks after the first on an SM, so
# that the gains of a second and of a third block are fitted apart (one parameter ties them together:
# the GEMM's kernel gains 1.32x and 1.52x at 2 and 3 blocks per SM, the one-parameter curve through
# 1.32x gives 1.42x). Fitted for the GEMMs in a second stage, started from the first stage's fit with
# the curve unchanged (further = first), so it can only lower the fit's error: freed from the start for
# every kind, the least squares stopped in worse minima (gemm@t32 rms 0.027 -> 0.063, itrans 0.069 ->
# 0.074) and the transforms gained nothing (ftrans 0.097, otrans 0.153 either way).
FURTHER_READY_KINDS = ("gemm",)
# Fields fitted in a second stage, each started at the first stage's value of the field named beside it.
STAGE2 = {"further_block_sm_ready": "block_sm_ready"}
BOUNDS = {"compute_efficiency": EFF_BOUNDS, "fixed_ns": FIXED_BOUNDS_NS, "block_sm_share": SHARE_BOUNDS,
          "block_sm_ready": SHARE_BOUNDS, "block_dram_bw_gbps": (0.5, 1000.0), "megakernel_fixed_ns": (0.0, 100_000.0),
          "coresident_stretch": (0.0, 0.95), "memory_overlap": (0.0, 1.0), "further_block_sm_ready": SHARE_BOUNDS}
START = {"compute_efficiency": 0.5, "fixed_ns": 500.0, "block_sm_share": 0.5, "block_sm_ready": 0.5,
         "block_dram_bw_gbps": None, "megakernel_fixed_ns": 1000.0, "coresident_stretch": 0.3,
         "memory_overlap": 0.5, "further_block_sm_ready": 0.5}
LINEAR = ("fixed_ns", "megakernel_fixed_ns")
# The least squares' stopping rule (SciPy's xtol, ftol and gtol) and each stage's budget of points
# simulated, Jacobian points included (``megasim.calibration.lsq``).
FIT_TOL = 1e-8
ROUND2_MAX_EVALS = 150
ROUND1_MAX_EVALS = 60
# Every JACOBIAN_REFRESH-th Jacobian by finite differences, Broyden updates between; a stage stops when its
# best squared error has fallen by less than STALL_RTOL over the points of STALL_JACOBIANS Jacobians
# (fields + 1 points: its rms log error by less than 1%, while the runs' medians repeat to about 1%).
JACOBIAN_REFRESH = 3
STALL_JACOBIANS = 1
STALL_RTOL = 0.02


@dataclass(frozen=True)
class CalibrationProgress:
    """What a calibration is doing, for a progress display: its ``stage`` (``STAGES``), what in it (the
    cost name being fitted, the probe being measured; ``""`` for a stage that fits one spec field), the
    points it has simulated so far and its budget, and the rms log error of its best point (None before
    the first)."""

    stage: str
    kind: str = ""
    evaluations: int = 0
    max_evaluations: int = 0
    rms_log_error: float | None = None
    done: bool = False


STAGES = ("measuring", "first pass", "younger_block_weight", "kinds", "mixed_kinds_sm_factor", "checks")


def least_squares_cost(start: TaskCost, free, bounds, starts, linear, residuals_of, max_evals: int, *,
                       diff_step: float, tol: float | None = None,
                       residuals_many: Callable[[list[TaskCost]], list[np.ndarray]] | None = None,
                       on_evaluation: Callable[[int, float], None] | None = None, refresh: int = 1,
                       stall_rtol: float | None = None) -> TaskCost:
    """``start`` with its ``free`` fields chosen by SciPy's bounded least squares on
    ``residuals_of(cost)`` (e.g. log simulated / measured times). Fields in ``linear`` are searched
    linearly in thousands (us for ns fields), the others in log space; each is clipped to its
    ``bounds`` and started at ``starts``. Shared by the Winograd and the sparse calibrations.

    With ``residuals_many`` (the residuals of several costs at once), the search is
    ``megasim.calibration.lsq.least_squares_batched``: each Jacobian's points in one batch, ``max_evals``
    counting every point simulated, ``on_evaluation(points, best half sum of squares)`` after each batch;
    ``tol`` is then SciPy's xtol, ftol and gtol, ``refresh`` the finite-difference Jacobians' period
    (Broyden updates between) and ``stall_rtol`` the stall rule's over ``STALL_JACOBIANS`` Jacobians."""
    from scipy.optimize import least_squares

    def to_x(name, v):
        return v / 1000.0 if name in linear else math.log(v)

    def cost_of(x) -> TaskCost:
        kw = {}
        for name, v in zip(free, x):
            lo, hi = bounds[name]
            kw[name] = float(np.clip(v * 1000.0 if name in linear else math.exp(v), lo, hi))
        return dataclasses.replace(start, **kw)

    x0 = [to_x(n, starts[n]) for n in free]
    lo = [to_x(n, bounds[n][0]) if bounds[n][0] > 0 or n in linear else -50.0 for n in free]
    hi = [to_x(n, bounds[n][1]) for n in free]
    if residuals_many is not None:
        from megasim.calibration.lsq import least_squares_batched
        tol = 1e-8 if tol is None else tol
        res = least_squares_batched(lambda xs: residuals_many([cost_of(x) for x in xs]), x0, lo, hi,
                                    max_evals=max_evals, diff_step=diff_step, xtol=tol, ftol=tol, gtol=tol,
                                    refresh=refresh, on_evaluation=on_evaluation,
                                    stall_points=None if stall_rtol is None else STALL_JACOBIANS * (len(free) + 1),
                                    stall_rtol=stall_rtol or 0.0)
        return cost_of(res.x)
    tols = {} if tol is None else {"xtol": tol, "ftol": tol, "gtol": tol}
    res = least_squares(lambda x: residuals_of(cost_of(x)), x0, bounds=(lo, hi), max_nfev=max_evals,
                        diff_step=diff_step, **tols)
    return cost_of(res.x)


def fit_kind(spec: GPUSpec, kind: str, cases, measured_us: list[float], max_evals: int = 60,
             free: tuple[str, ...] = ("compute_efficiency", "fixed_ns"),
             simulate_cost: Callable[[TaskCost], list[float]] | None = None,
             start_values: Mapping[str, float] | None = None,
             simulate_costs: Callable[[list[TaskCost]], list[list[float]]] | None = None,
             on_evaluation: Callable[[int, float], None] | None = None,
             tol: float | None = None) -> dict[str, Any]:
    """Fit the ``free`` TaskCost fields of one kind so that the simulated times of ``cases`` match
    ``measured_us`` (least squares in log time); returns the cost, the fit's error and its evaluations.

    (compute_efficiency, fixed_ns), the first round: Nelder-Mead on log(efficiency) and fixed_ns,
    bounded by clipping. More free fields (the second round): scipy's bounded least_squares (trust
    region) in log space (fixed times in us, linearly), started from ``START`` or, for the fields it
    names, from ``start_values`` (``megasim.calibration.update``: a spec's own values); each of its
    stages simulates at most ``max_evals`` points, Jacobian points included, and stops at ``tol``
    (``FIT_TOL``; ``megasim.calibration.lsq``).

    ``simulate_costs(costs)`` gives the cases' simulated times for several costs at once (``kind_fits``
    passes a ``CasePool``'s: the points of a Jacobian simulated side by side); ``simulate_cost(cost)``
    one cost's; default: ``simulated_kind_us`` here. ``on_evaluation(points simulated, rms log error
    of the best point)`` reports progress."""
    meas = np.asarray(measured_us, float)
    start = spec.task_cost(kind)
    evals = [0]
    if simulate_costs is None:
        if simulate_cost is None:
            def simulate_cost(cost: TaskCost) -> list[float]:
                return simulated_kind_us(spec, kind, cost, cases)

        def simulate_costs(costs: list[TaskCost]) -> list[list[float]]:
            return [simulate_cost(c) for c in costs]

    def sims_of(costs: list[TaskCost]) -> list[np.ndarray]:
        evals[0] += len(costs)
        return [np.asarray(v, float) for v in simulate_costs(list(costs))]

    def report(n: int, half_sse: float) -> None:
        if on_evaluation is not None:
            on_evaluation(evals[0], math.sqrt(2.0 * half_sse / meas.size))

    if tuple(free) == ("compute_efficiency", "fixed_ns"):
        from scipy.optimize import minimize

        def cost_of(x) -> TaskCost:
            eff = float(np.clip(math.exp(x[0]), *EFF_BOUNDS))
            fixed = float(np.clip(x[1] * 1000.0, *FIXED_BOUNDS_NS))
            return dataclasses.replace(start, compute_efficiency=eff, fixed_ns=fixed)

        memo: dict[tuple, float] = {}

        def loss(x) -> float:
            key = tuple(np.round(x, 6))
            if key not in memo:
                memo[key] = float(np.sum(np.log(sims_of([cost_of(x)])[0] / meas) ** 2))
                report(len(memo), 0.5 * min(memo.values()))
            return memo[key]

        x0 = np.array([math.log(start.compute_efficiency), start.fixed_ns / 1000.0 + 0.5])
        res = minimize(loss, x0, method="Nelder-Mead",
                       options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6, "initial_simplex":
                                np.array([x0, x0 + [-1.0, 0.0], x0 + [0.0, 2.0]])})
        best = cost_of(res.x)
        evaluations = len(memo)
    else:
        # (a dict merge, not dict(**): start_values may name block_dram_bw_gbps too)
        starts = {**START, "block_dram_bw_gbps": spec.tb_max_dram_bw_gbps, **(start_values or {})}

        def residuals_many(costs: list[TaskCost]) -> list[np.ndarray]:
            return [np.log(s / meas) for s in sims_of(costs)]

        # Finite differences of a discrete-event simulation: a step of 2% (of the log or linear
        # parameter) sees through the small jumps that event reorderings cause.
        first = tuple(f for f in free if f not in STAGE2)
        tol = FIT_TOL if tol is None else tol
        search = {"diff_step": 2e-2, "tol": tol, "residuals_many": residuals_many, "on_evaluation": report,
                  "refresh": JACOBIAN_REFRESH, "stall_rtol": STALL_RTOL}
        best = least_squares_cost(start, first, BOUNDS, starts, LINEAR, None, max_evals, **search)
        if first != tuple(free):          # the second stage: all free, from the first stage's fit
            starts = {f: getattr(best, STAGE2.get(f, f)) for f in free}
            best = least_squares_cost(best, free, BOUNDS, starts, LINEAR, None, max_evals, **search)
        evaluations = evals[0]
    sim = list(simulate_costs([best])[0])
    return {"cost": best, "simulated_us": sim, "measured_us": list(map(float, meas)),
            "rms_log_error": float(np.sqrt(np.mean(np.log(np.asarray(sim) / meas) ** 2))),
            "evaluations": evaluations}


# The kinds whose own kernel at forced lower occupancy is fitted all the same: the GEMMs. Their own kernel
# and the megakernel's GEMM agree at equal occupancy once the megakernel's per-task costs are counted (one
# TaskCost fits both, rms 0.013-0.019), and their eight parameters need those rows: without them, 8 runs
# for 8 parameters, the t = 32 GEMM fitted a curve that left the fused t = 32 runs 7.5% fast (150ee9f).
FORCED_FITTED_KINDS = ("gemm",)


def forced_occupancy(row: Mapping[str, Any]) -> bool:
    """A run of a kind's non-fused kernel held below its natural occupancy by dynamic shared memory.

    For the transforms (not ``FORCED_FITTED_KINDS``) these runs are simulated and reported
    as checks, not fitted. The non-fused schedule
    only ever runs a kind's kernel at its natural occupancy; the occupancy curve the predictions of
    fused schedules use is the megakernel's, and the megakernel runs (per task, persistent grids of 1
    and 2 blocks per SM) pin it. The two kernels' curves differ: at 1 block per SM the output
    transform takes 208 us in its own kernel and 135 us in the megakernel (resnet-1, pairs=4), a
    per-byte difference one TaskCost cannot express, and fitting both left the megakernel's output
    transform 10-35% slow (rms 0.153; 0.052 without them). Shared memory that leaves the occupancy
    unchanged slows the kernel by at most 5% (gpu.probes.l1_carveout), so the forced runs do
    measure occupancy, of a kernel the fused predictions do not run."""
    return row.get("kernel") == "per_kind" and int(row.get("extra_shared_bytes") or 0) > 0


def row_label(row: Mapping[str, Any]) -> str:
    """A short name of a measured variant, e.g. ``per_kind``, ``per_kind+102400B``, ``megakernel/persistent x1``."""
    kernel = row.get("kernel", "per_kind")
    label = kernel
    if row.get("extra_shared_bytes"):
        label += f"+{int(row['extra_shared_bytes'])}B"
    if row.get("style", "per_task") == "persistent":
        label += f"/persistent x{row.get('blocks_per_sm')}"
    return f"{label} ({row.get('timing', 'events')})"


def sanity_rules(values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Physical floors applied to probe results before they enter a spec (each rule says why).

    An atomic executes at L2, so its round trip cannot be shorter than an L2 load's: an
    ``atomic_latency_ns`` below ``l2_latency_ns`` is a probe artefact (on the H200 the dependent-atomic
    chain gave 9.7 ns, the L2 pointer chase 153 ns); the L2 latency is used instead, and said so.
    Every measured-values path goes through here, so the entries' form is checked here too: each is
    ``{"value": number, "method": text}`` (a measurements file edited by hand gets a one-line error)."""
    for k, entry in values.items():
        if not isinstance(entry, dict) or "value" not in entry:
            raise SpecError(f"measurements: {k}={entry!r} is not allowed: each value is {{\"value\": number, \"method\": text}}")
        if isinstance(entry["value"], bool) or not isinstance(entry["value"], (int, float)):
            raise SpecError(f"measurements: {k}={entry['value']!r} is not allowed: it must be a number")
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


def with_measured_claim(spec: GPUSpec, kind: str, rows: list[dict[str, Any]]) -> tuple[GPUSpec, dict[str, Any] | None]:
    """``spec`` with ``kind``'s ``megakernel_claim_ns`` set to the mean claim -> ready time of its
    traced megakernel rows (``trace_claim_ns``, gpu.calibrate.occupancy.traced_parts), and how it was
    measured; ``spec`` unchanged and None when no row was traced (measurements taken before 6ffb6b1)."""
    traced = [r for r in rows if r.get("trace_claim_ns") is not None]
    if not traced:
        return spec, None
    value = float(np.mean([r["trace_claim_ns"] for r in traced]))
    where = ", ".join(f"{r['layer']}{' [' + r['plan_params'] + ']' if r.get('plan_params') else ''}" for r in traced)
    method = (f"mean over the tasks of {kind}'s traced megakernel runs alone as a persistent grid of 1 block per "
              f"SM ({where}; counters at zero) of ready - claim: ticket, task-table row, counter look and acquire "
              f"fence (globaltimer, gpu.calibrate.occupancy.traced_parts)")
    cost = dataclasses.replace(spec.task_cost(kind), megakernel_claim_ns=value)
    return dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost}), {"value": value, "method": method}


def _fit_job(job: dict[str, Any], pool: CasePool, stage: str,
             progress: Callable[[CalibrationProgress], None] | None) -> dict[str, Any]:
    """One kind's fit and its check simulations (a thread's unit of work; the simulations run on ``pool``,
    under the keys ``kind`` and ``kind + " checks"``)."""
    spec, kind = job["spec"], job["kind"]
    budget = job["evals"] * (2 if any(f in STAGE2 for f in job["free"]) else 1)

    def on_evaluation(n: int, rms: float) -> None:
        if progress is not None:
            progress(CalibrationProgress(stage, kind, n, budget, rms))

    fit = fit_kind(spec, kind, job["cases"], job["measured_us"], max_evals=job["evals"], free=job["free"],
                   simulate_costs=lambda costs: pool.simulate_batch([(kind, spec, kind, c) for c in costs]),
                   start_values=job.get("start_values"), on_evaluation=on_evaluation)
    fit["check_simulated_us"] = pool.simulate(f"{kind} checks", spec, kind, fit["cost"]) if job["checks"] else []
    if progress is not None:
        progress(CalibrationProgress(stage, kind, fit["evaluations"], budget, fit["rms_log_error"], done=True))
    return fit


def kind_fits(base: GPUSpec, m: Measurements, layers, natural_of, params_of, max_evals, workers,
              only: set[str] | None = None, refit: tuple[str, ...] | None = None,
              progress: Callable[[CalibrationProgress], None] | None = None, stage: str = "kinds",
              start_costs: Mapping[str, TaskCost] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(jobs, fits): each cost name's fit on its rows (``only``: these cost names alone). The fits run
    in threads, their simulations over ``workers`` processes (``CasePool``: the result does not depend
    on ``workers``). ``refit`` (``megasim.calibration.update``): only these second-round fields are
    free (``"field"`` for every kind, ``"field@name"`` for cost name ``name`` alone), started from
    ``base``'s values, and the kinds without second-round rows are not fitted. ``start_costs``: a cost
    name's second-round fit starts from the values of its entry there, or of its kind's (a variant
    such as gemm@t32 from gemm's), instead of ``START``. ``progress`` receives a
    ``CalibrationProgress`` of ``stage`` after each batch of simulations of each fit (from the fits' threads)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    jobs = []
    for name, natural in natural_of.items():
        if only is not None and name not in only:
            continue
        rows = natural_rows(m, natural, params_of)
        if not rows and ("@" in name or refit is not None):
            continue                      # a variant the measurements do not time: priced as its kind (or, in
            #                               an update, a kind not re-measured: kept as the spec has it)
        queued = [r for r in rows if r.get("timing") == "queued"]
        forced_fitted = base_kind(name) in FORCED_FITTED_KINDS
        fitted_rows = ([r for r in queued if forced_fitted or not forced_occupancy(r)]
                       or [r for r in rows if r.get("timing", "events") == "events"])
        for layer in layers:
            if not any(r["layer"] == layer for r in fitted_rows):
                raise SpecError(f"measurements: no time of kind {name!r} on layer {layer!r}")
        if not queued:
            for layer in layers:
                if sum(r["layer"] == layer for r in fitted_rows) != 1:
                    raise SpecError(f"measurements: need one time of kind {name!r} on layer {layer!r}")

        def case_of(r, natural=natural):
            g, sch = variant_case(*natural[(r["layer"], params_of(r))][1:], r)
            at = f" [{params_of(r)}]" if params_of(r) != m.plan_params else ""
            return (f"{r['layer']} {row_label(r)}{at}", g, sch, r.get("timing", "events"))

        round2 = bool(queued)
        if refit is not None and not round2:
            continue
        free = (tuple(f for f in FREE_ROUND2 if f != "megakernel_fixed_ns"
                      or any(r.get("kernel") == "megakernel" for r in fitted_rows))
                + (("memory_overlap",) if base_kind(name) in PIPELINED_KINDS else ())
                + (("further_block_sm_ready",) if base_kind(name) in FURTHER_READY_KINDS else ())
                if round2 else ("compute_efficiency", "fixed_ns"))
        start_values = None
        if refit is not None:
            free = tuple(f for f in free if f in refit or f"{f}@{name}" in refit)
            if not free:
                continue
            own = base.task_cost(name)
            # each field from the spec's own value (one unset, or at 0 in log space, from START's)
            start_values = {f: v for f in free if (v := getattr(own, f)) is not None and (v > 0 or f in LINEAR)}
        elif round2 and start_costs and (own := start_costs.get(name, start_costs.get(base_kind(name)))):
            start_values = {f: v for f in free if (v := getattr(own, f)) is not None and (v > 0 or f in LINEAR)}
        checks = [r for r in rows if r not in fitted_rows]
        kind_spec, claim = with_measured_claim(base, name, rows)
        jobs.append({"spec": kind_spec, "kind": name, "claim": claim, "cases": [case_of(r) for r in fitted_rows],
                     "params": " and ".join(dict.fromkeys(params_of(r) or "defaults" for r in fitted_rows)),
                     "measured_us": [float(r["median_ms"]) * 1000.0 for r in fitted_rows],
                     "evals": max_evals or (ROUND2_MAX_EVALS if round2 else ROUND1_MAX_EVALS), "free": free,
                     "round2": round2, "start_values": start_values,
                     "n_rows": len(fitted_rows), "forced_fitted": forced_fitted, "checks": [case_of(r) for r in checks],
                     "check_measured_us": [float(r["median_ms"]) * 1000.0 for r in checks]})
    cases_by_key = {}
    for j in jobs:
        cases_by_key[j["kind"]] = j["cases"]
        cases_by_key[f"{j['kind']} checks"] = j["checks"]
    with CasePool(cases_by_key, workers or os.cpu_count() or 1) as pool:
        with ThreadPoolExecutor(max(len(jobs), 1)) as threads:
            fits = list(threads.map(lambda j: _fit_job(j, pool, stage, progress), jobs))
    return jobs, fits


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


def calibrated_spec(preset: GPUSpec, m: Measurements, layers: tuple[str, ...] | None = None,
                    max_evals: int | None = None, workers: int | None = None,
                    progress: Callable[[CalibrationProgress], None] | None = None) -> tuple[GPUSpec, dict[str, Any]]:
    """The calibrated spec and a report of the per-kind fits.

    A kind measured at one occupancy (its non-fused kernel, ``timing`` events: the first round) gets
    (compute_efficiency, fixed_ns). A kind with ``queued`` rows (``gpu.calibrate.occupancy``: its tasks
    alone at several occupancies and in the megakernel, the host hidden) is fitted on those rows only,
    with ``block_sm_ready``, ``block_dram_bw_gbps`` and ``megakernel_fixed_ns`` free too; its other
    rows are simulated and reported as a check. The kinds are fitted side by side, their simulations
    spread over ``workers`` processes (``megasim.calibration.pool``; default: the CPU count; the
    result does not depend on it).

    With traced end-order rows (``extra.block_end_order``), the spec's ``younger_block_weight`` is
    fitted first (``megasim.calibration.age``) on a first fit of those rows' kinds at equal sharing,
    and every kind is then fitted with it in place. ``mixed_kinds_sm_factor`` is fitted last.
    ``progress`` receives a ``CalibrationProgress`` as each stage starts and after each batch of simulations
    (from the fits' threads: it must be thread-safe)."""
    def tell(stage: str, **kw) -> None:
        if progress is not None:
            progress(CalibrationProgress(stage, **kw))

    base = measured_base(preset, m)
    layers = tuple(layers or dict.fromkeys(r["layer"] for r in m.kind_times))
    if any(r.get("timing") == "queued" for r in m.kind_times) and base.queued_launch_ns is None:
        raise SpecError("measurements: queued-timed rows need the queued_launch_ns measurement (gpu.calibrate.occupancy)")
    natural_of, params_of = natural_cases(m, layers)
    report: dict[str, Any] = {"layers": list(layers), "plan_params": m.plan_params, "kinds": {}}
    end_rows = m.extra.get("block_end_order") or []
    if end_rows:
        # The schedulers' preference for older blocks (megasim.calibration.age), fitted on the traced
        # end order of the kinds' first-wave blocks, with those kinds fitted first at equal sharing;
        # then every kind is fitted with it in place.
        only = {r["kind"] for r in end_rows}
        tell("first pass")
        jobs, fits = kind_fits(base, m, layers, natural_of, params_of, max_evals, workers, only,
                               progress=progress, stage="first pass")
        first = dataclasses.replace(base, task_costs={**base.task_costs,
                                                      **{j["kind"]: f["cost"] for j, f in zip(jobs, fits)}})
        tell("younger_block_weight")
        with _scalar_pool(workers) as map_fn:
            rho, how, checks = fit_age_weight(first, end_rows, m.plan_params, map_fn=map_fn,
                                              on_evaluation=lambda n: tell("younger_block_weight", evaluations=n))
        base = dataclasses.replace(base, younger_block_weight=rho,
                                   sources={**base.sources, "younger_block_weight": source(m, how)})
        report["younger_block_weight"] = rho
        report["end_order_checks_first_pass"] = checks
        # The GEMMs' fits with rho in place start from the first pass's (rho moves them little)
        start_costs = {j["kind"]: f["cost"] for j, f in zip(jobs, fits)}
    else:
        start_costs = None
    tell("kinds")
    jobs, fits = kind_fits(base, m, layers, natural_of, params_of, max_evals, workers, progress=progress,
                           start_costs=start_costs)
    costs: dict[str, TaskCost] = {}
    sources = dict(base.sources)
    for job, fit in zip(jobs, fits):
        kind, free = job["kind"], job["free"]
        costs[kind] = fit["cost"]
        if job["round2"]:
            how = (f"{kind}'s tasks alone on {', '.join(layers)} at --param {job['params']}: "
                   f"{job['n_rows']} runs (its non-fused kernel at its own "
                   f"{'and at forced lower occupancy' if job['forced_fitted'] else 'occupancy'}, the "
                   f"megakernel running only these tasks per task and as persistent grids of 1 and 2 blocks per "
                   f"SM{'' if job['forced_fitted'] else '; its kernel at forced lower occupancy is a check'}), timed with the host's launch cost hidden (gpu.calibrate.occupancy); "
                   f"{', '.join(free)} fitted jointly so that megasim's simulation of each run matches its "
                   f"median, rms log error {fit['rms_log_error']:.3f}")
        else:
            how = (f"{kind}'s non-fused kernel alone on {', '.join(layers)} at --param "
                   f"{m.plan_params or 'defaults'}; fitted so that megasim's simulation of that launch matches "
                   f"the measured median, rms log error {fit['rms_log_error']:.3f}")
        for name in free:
            sources[f"task_costs.{kind}.{name}"] = source(m, how)
        if job["claim"] is not None:
            sources[f"task_costs.{kind}.megakernel_claim_ns"] = source(m, job["claim"]["method"])
        report["kinds"][kind] = {**{name: getattr(fit["cost"], name) for name in free},
                                 "megakernel_claim_ns": fit["cost"].megakernel_claim_ns,
                                 "block_sm_share": fit["cost"].block_sm_share,
                                 "block_sm_ready": fit["cost"].block_sm_ready,
                                 "further_block_sm_ready": fit["cost"].further_block_sm_ready,
                                 "cases": [c[0] for c in job["cases"]],
                                 "measured_us": fit["measured_us"],
                                 "simulated_us": fit["simulated_us"], "rms_log_error": fit["rms_log_error"],
                                 "evaluations": fit["evaluations"],
                                 "checks": [{"case": c[0], "measured_us": mu, "simulated_us": su} for c, mu, su in
                                            zip(job["checks"], job["check_measured_us"], fit["check_simulated_us"])]}
    if "default" in base.task_costs:
        costs["default"] = base.task_costs["default"]
    spec = dataclasses.replace(base, task_costs=costs, sources=sources,
                               description=f"{preset.description}; calibrated {m.date} on {m.device}")
    mixed = m.extra.get("mixed_kind_rows") or []
    with _scalar_pool(workers) as map_fn:
        if mixed:
            tell("mixed_kinds_sm_factor")
            cases = [mixed_case(r["layer"], tuple(r["kind"].split("+")), r.get("plan_params", m.plan_params))
                     for r in mixed]
            report["mixed_checks_unfitted"] = mixed_checks(spec, mixed, m.plan_params, cases, map_fn)
            factor, how = fit_mixed_factor(spec, mixed, m.plan_params, map_fn=map_fn,
                                           on_evaluation=lambda n: tell("mixed_kinds_sm_factor", evaluations=n))
            spec = dataclasses.replace(spec, mixed_kinds_sm_factor=factor,
                                       sources={**spec.sources, "mixed_kinds_sm_factor": source(m, how)})
            report["mixed_kinds_sm_factor"] = factor
            report["mixed_checks"] = mixed_checks(spec, mixed, m.plan_params, cases, map_fn)
        if end_rows:
            tell("checks")
            report["end_order_checks"] = end_order_checks(spec, end_rows, m.plan_params, map_fn=map_fn)
    return spec, report


@contextlib.contextmanager
def _scalar_pool(workers: int | None):
    """``map`` over ``workers`` processes (default: the CPU count; 1: this process) for the scalar fits'
    few simulations per evaluation (rho, the mixed-kinds factor)."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    n = workers or os.cpu_count() or 1
    if n <= 1:
        yield map
        return
    with ProcessPoolExecutor(n) as pool:
        yield pool.map


MIXED_FACTOR_BOUNDS = (0.5, 1.0)


def fit_mixed_factor(spec: GPUSpec, rows: list[dict[str, Any]], plan_params: str = "",
                     on_evaluation: Callable[[int], None] | None = None, map_fn: Callable = map) -> tuple[float, str]:
    """The spec's ``mixed_kinds_sm_factor``: chosen so that the simulations of the
    mixed-kind runs (two kinds' non-fused tasks interleaved in one megakernel launch, counters zeroed;
    ``gpu.calibrate.occupancy.time_mixed_kinds``) match their medians (least squares in log time,
    bounded scalar search over ``MIXED_FACTOR_BOUNDS``), the kinds' own costs fitted before and held.

    Why: each kind's costs come from runs of that kind alone; a fused schedule mixes kinds on an SM.
    With the kinds' costs fitted well alone (the output transform's rms 0.15 -> 0.04, 150ee9f), the
    megakernel runs that mix kinds came out faster than measured (the mixed-kind runs by up to 8%, the
    fused validation runs by about 4% on average), and nothing in a kind's own runs can say by how
    much. The mixed-kind runs are calibration runs, not validated mappings. ``map_fn``: how each
    evaluation's runs are simulated (``map``, or a process pool's: the same numbers)."""
    from scipy.optimize import minimize_scalar
    meas = np.array([float(r["median_ms"]) * 1000.0 for r in rows])
    cases = [mixed_case(r["layer"], tuple(r["kind"].split("+")), r.get("plan_params", plan_params)) for r in rows]
    evaluations = [0]

    def loss(factor: float) -> float:
        sims = mixed_checks(dataclasses.replace(spec, mixed_kinds_sm_factor=float(factor)), rows, plan_params,
                            cases, map_fn)
        evaluations[0] += 1
        if on_evaluation is not None:
            on_evaluation(evaluations[0])
        return float(np.sum(np.log(np.array([c["simulated_us"] for c in sims]) / meas) ** 2))

    res = minimize_scalar(loss, bounds=MIXED_FACTOR_BOUNDS, method="bounded", options={"xatol": 2e-3})
    factor = float(res.x)
    rms = math.sqrt(float(res.fun) / len(rows))    # the loss at res.x, not simulated again
    where = ", ".join(f"{r['layer']} {r['kind']}" for r in rows)
    return factor, (f"the {len(rows)} mixed-kind runs ({where}: two kinds' non-fused tasks interleaved in one "
                    f"megakernel launch, counters zeroed, host hidden; gpu.calibrate.occupancy.time_mixed_kinds) "
                    f"simulated with the fitted kinds' costs; bounded search in {list(MIXED_FACTOR_BOUNDS)}, "
                    f"rms log error {rms:.3f}")
