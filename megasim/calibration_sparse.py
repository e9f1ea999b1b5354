"""Calibrating the sparse kinds (ECR, PECR, their dense twins, ReLU, max-pool): the pure half.

``gpu.calibrate_sparse`` times each kernel ALONE on the calibration cases below and writes rows
``{"op", "kind", "problem", "sparsity", "pattern", "seed", "pool", "k_tile", "median_ms"}``. This module
turns them into per-kind ``TaskCost`` entries of a spec:

- each case is lowered exactly as the model lowers a prediction (``megasim.lowering.sparse``), from
  the same seeded feature map the GPU ran on, and the launch of the kind is simulated alone;
- the kind's free cost parameters are chosen to minimise the squared log error of the simulated
  against the measured times (SciPy ``least_squares``, bounded, deterministic start).

Which parameters a kind fits (``FREE``): the convolution kinds five (compute efficiency of the
multiply-adds, SM time per scanned element, fixed time per block, how blocks share their SM, the
latency of a channel chunk); the sharing is either a cap on one block's share (``block_sm_share``,
``sharing="share"``) or the independent-stall readiness of ``ReadinessSharedServer``
(``block_sm_ready``, ``sharing="ready"``, the rule the Winograd kinds use); the filter tile varies across the cases, so the multiply-adds (which
scale with it) and the scan (which does not) separate; ReLU and max-pool only their per-element
time and fixed time (no flops).

The calibration problems are NOT VGG-19 layers, the problems the model is judged on: the cases span
many and few blocks per SM (the share), and sparsities 0 to 0.95 (the scan against the multiply-adds).
Cases shorter than 1.5x the host's launch cost (``kernel_launch_ns``) are host-bound and not fitted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from megasim.calibration import kind_subgraph, least_squares_cost
from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec, TaskCost
from megasim.lowering.sparse import lower_sparse
from megasim.lowering.sparse_tiling import PoolSpec
from megasim.mapping import Schedule
from megasim.sim import simulate
from megasim.taskgraph import TaskGraph
from megasim.workloads import parse_layer
from megasim.workloads.sparse import SparsitySpec

# Not VGG-19 shapes; together they give the tiling every filter tile (4..32), 16 to 384 channels
# (1 to 96 serial chunks), maps from 12x12 to 200x200, and many or few blocks per SM. The last two
# (added in the second calibration round, see docs/sparse.md) put ECR's grid just past one wave of
# resident blocks with 56-80 chunks, the regime where a tail of blocks runs nearly alone.
CAL_PROBLEMS = ("N=4,C=64,K=64,H=40,W=40", "N=1,C=128,K=96,H=20,W=20", "N=2,C=32,K=128,H=33,W=33",
                "N=1,C=48,K=64,H=150,W=150", "N=1,C=384,K=384,H=12,W=12", "N=2,C=192,K=192,H=40,W=40",
                "N=1,C=16,K=32,H=200,W=200", "N=1,C=320,K=416,H=30,W=30", "N=1,C=224,K=352,H=50,W=50")
SPARSE_SPARSITIES = (0.0, 0.5, 0.8, 0.95)
ELEMENTWISE_PROBLEM = "N=16,C=4,K=128,H=112,W=112"
HOST_BOUND_FACTOR = 1.5     # a case faster than 1.5 x the host's launch cost is host-bound: not fitted
CONV_KINDS = ("ecr", "pecr", "direct", "direct_fused")
REPLAY_KINDS = ("ecr",)         # the kinds whose lowering counts shared-memory replays
ELEMENTWISE_FREE = ("ns_per_other_op", "fixed_ns")
SHARING_FIELD = {"share": "block_sm_share", "ready": "block_sm_ready"}
BOUNDS = {"compute_efficiency": (0.005, 1.0), "ns_per_other_op": (1e-6, 10.0), "fixed_ns": (0.0, 100_000.0),
          "block_sm_share": (0.02, 1.0), "block_sm_ready": (0.02, 1.0), "ns_per_step": (0.0, 100_000.0),
          "ns_per_iteration": (0.0, 10_000.0), "ns_per_replay": (0.0, 100.0)}
START = {"compute_efficiency": 0.3, "ns_per_other_op": 0.01, "fixed_ns": 1000.0, "block_sm_share": 0.3,
         "block_sm_ready": 0.3, "ns_per_step": 200.0, "ns_per_iteration": 20.0,
         "ns_per_replay": 0.01}
LINEAR = ("fixed_ns", "ns_per_step", "ns_per_iteration")     # fitted in us, linearly; the others in log space


def free_fields(kind: str, sharing: str = "share") -> tuple[str, ...]:
    """The TaskCost fields fitted for `kind` under the SM-sharing rule `sharing` ("share" or "ready")."""
    if sharing not in SHARING_FIELD:
        raise SpecError(f"sharing={sharing!r} is not allowed: use one of {', '.join(SHARING_FIELD)}")
    if kind not in CONV_KINDS:
        return ELEMENTWISE_FREE
    conv = ("compute_efficiency", "ns_per_other_op", "fixed_ns", SHARING_FIELD[sharing], "ns_per_step",
            "ns_per_iteration")
    return conv + ("ns_per_replay",) if kind in REPLAY_KINDS else conv


FREE = {kind: free_fields(kind) for kind in (*CONV_KINDS, "relu", "maxpool")}


def calibration_cases() -> list[dict[str, Any]]:
    """The cases gpu.calibrate_sparse times: (op run, kind fitted, problem, sparsity, pattern, seed, pool)."""
    cases = []
    for pi, prob in enumerate(CAL_PROBLEMS):
        for s in SPARSE_SPARSITIES:
            cases.append({"op": "ecr", "kind": "ecr", "problem": prob, "sparsity": s, "pattern": "uniform", "seed": pi, "pool": None})
            cases.append({"op": "pecr", "kind": "pecr", "problem": prob, "sparsity": s, "pattern": "uniform", "seed": pi, "pool": [2, 2]})
        cases.append({"op": "direct", "kind": "direct", "problem": prob, "sparsity": 0.5, "pattern": "uniform", "seed": pi, "pool": None})
        cases.append({"op": "direct_fused", "kind": "direct_fused", "problem": prob, "sparsity": 0.5, "pattern": "uniform",
                          "seed": pi, "pool": [2, 2]})
        for kind in ("relu", "maxpool"):
            cases.append({"op": "unfused_direct", "kind": kind, "problem": prob, "sparsity": 0.5, "pattern": "uniform",
                              "seed": pi, "pool": [2, 2]})
    # A large map for ReLU and max-pool, so their time is the device's and not the host's launch cost.
    for kind in ("relu", "maxpool"):
        cases.append({"op": "unfused_direct", "kind": kind, "problem": ELEMENTWISE_PROBLEM, "sparsity": 0.5, "pattern": "uniform",
                          "seed": 9, "pool": [2, 2]})
    first = CAL_PROBLEMS[0]
    cases.append({"op": "ecr", "kind": "ecr", "problem": first, "sparsity": 0.8, "pattern": "clustered", "seed": 7, "pool": None})
    cases.append({"op": "pecr", "kind": "pecr", "problem": first, "sparsity": 0.8, "pattern": "clustered", "seed": 7, "pool": [2, 2]})
    cases.append({"op": "pecr", "kind": "pecr", "problem": first, "sparsity": 0.5, "pattern": "uniform", "seed": 8, "pool": [2, 1]})
    cases.append({"op": "direct_fused", "kind": "direct_fused", "problem": first, "sparsity": 0.5, "pattern": "uniform", "seed": 8,
                      "pool": [2, 1]})
    return cases


def case_graph(case: dict[str, Any], sm_count: int) -> tuple[TaskGraph, Schedule]:
    """The graph of the case's kind alone (its launch cut out of the op's graph) and its schedule."""
    pool = PoolSpec(*case["pool"]) if case.get("pool") else None
    graph, schedule, _ = lower_sparse(parse_layer(case["problem"]), case["op"], sm_count, pool=pool,
                                      sparsity=SparsitySpec(case["sparsity"], case["pattern"], seed=case["seed"]))
    if len(schedule.launches) == 1:
        return graph, schedule
    launch = next(l for l in schedule.launches if l.name == case["kind"])
    return kind_subgraph(graph, case["kind"], launch.order)


def _simulated_us(spec: GPUSpec, kind: str, cost: TaskCost, graphs) -> np.ndarray:
    s = dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost})
    return np.array([_launch_us(simulate(g, sch, s), sch) for g, sch in graphs])


def _launch_us(result, schedule: Schedule) -> float:
    """The simulated time of the schedule's only launch, from its start (launch overhead excluded:
    the GPU timing brackets the kernel with events, which do not see the host's launch cost)."""
    launch = result.launches[-1]
    return (launch.end_ns - launch.start_ns) / 1e3


def fit_kind(spec: GPUSpec, kind: str, graphs, measured_us, max_evals: int = 200,
             sharing: str = "share") -> dict[str, Any]:
    """Fit the free parameters of `kind` (log space for positive scales, linear in us for the ns
    fields); returns the TaskCost, simulated and measured times, the error."""
    free = free_fields(kind, sharing)
    meas = np.asarray(measured_us, float)
    base = spec.task_cost(kind) if kind in spec.task_costs else TaskCost(compute_efficiency=1.0)
    if kind in CONV_KINDS:      # start from the other rule's neutral value, whichever the base spec used
        base = dataclasses.replace(base, block_sm_share=1.0, block_sm_ready=None)
    evals = [0]

    def residuals(cost: TaskCost) -> np.ndarray:
        evals[0] += 1
        return np.log(_simulated_us(spec, kind, cost, graphs) / meas)

    best = least_squares_cost(base, free, BOUNDS, START, LINEAR, residuals, max_evals, diff_step=1e-3)
    sim = _simulated_us(spec, kind, best, graphs)
    return {"cost": best, "simulated_us": sim.tolist(), "measured_us": meas.tolist(),
            "rms_log_error": float(np.sqrt(np.mean(np.log(sim / meas) ** 2))), "evaluations": evals[0]}


def calibrate_sparse(spec: GPUSpec, rows: list[dict[str, Any]], *, device: str, date: str,
                     max_evals: int = 200, sharing: str = "share") -> tuple[GPUSpec, dict[str, Any]]:
    """`spec` with the sparse kinds' TaskCosts fitted to the measured `rows` (the convolution kinds
    sharing their SMs by `sharing`: "share" or "ready"); and a report."""
    costs = dict(spec.task_costs)
    sources = dict(spec.sources)
    report: dict[str, Any] = {"sharing": sharing, "kinds": {}}
    for kind in FREE:
        free = free_fields(kind, sharing)
        # Cases whose device time is shorter than the host's launch cost measure the host (the
        # launches queue no faster than Numba dispatches them): they are left out of the fit.
        floor_ms = HOST_BOUND_FACTOR * spec.kernel_launch_ns / 1e6
        kind_rows = [r for r in rows if r["kind"] == kind and float(r["median_ms"]) >= floor_ms]
        if kind not in CONV_KINDS:
            # ReLU and max-pool: only the large map. On the calibration problems their device time is
            # 1-5 us, below the host's launch cost, so those rows time the host, and one that a host
            # stall pushed above the floor (57 us against 18-24 us, the first case of a run) would
            # otherwise be fitted as device time.
            kind_rows = [r for r in kind_rows if r["problem"] == ELEMENTWISE_PROBLEM]
        if not kind_rows:
            raise SpecError(f"sparse calibration: no measured rows of kind {kind!r} above the host-bound floor "
                            f"{floor_ms * 1e3:.1f} us")
        graphs = [case_graph(r, spec.sm_count) for r in kind_rows]
        fit = fit_kind(spec, kind, graphs, [float(r["median_ms"]) * 1000.0 for r in kind_rows], max_evals,
                       sharing)
        costs[kind] = fit["cost"]
        how = (f"measured {date} on {device} by gpu.calibrate_sparse: {kind}'s kernel alone on "
               f"{len(kind_rows)} calibration cases (megasim.calibration_sparse, not VGG-19), fitted so "
               f"that megasim's simulation matches the measured medians, rms log error {fit['rms_log_error']:.3f}")
        for name in SHARING_FIELD.values():     # the rule not fitted no longer has a source
            sources.pop(f"task_costs.{kind}.{name}", None)
        for name in free:
            sources[f"task_costs.{kind}.{name}"] = how
        report["kinds"][kind] = {**dataclasses.asdict(fit["cost"]),
                                 **{k: v for k, v in fit.items() if k != "cost"},
                                 "cases": [{k: r[k] for k in ("op", "problem", "sparsity", "pattern", "pool")}
                                           for r in kind_rows]}
    return dataclasses.replace(spec, task_costs=costs, sources=sources), report
