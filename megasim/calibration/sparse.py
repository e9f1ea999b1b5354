"""Calibrating the sparse kinds (ECR, PECR, their dense twins, ReLU, max-pool): the pure half.

``gpu.calibrate.sparse`` times each kernel ALONE on the calibration cases below and writes rows
``{"op", "kind", "problem", "sparsity", "pattern", "seed", "pool", "k_tile", "median_ms"}``. This module
turns them into per-kind ``TaskCost`` entries of a spec:

- each case is lowered exactly as the model lowers a prediction (``megasim.algorithms.sparse.lowering``), from
  the same seeded feature map the GPU ran on, and the launch of the kind is simulated alone;
- the kind's free cost parameters are chosen to minimise the squared log error of the simulated
  against the measured times (SciPy ``least_squares``, bounded, deterministic start).

Which parameters a kind fits (``FREE``): the convolution kinds five (compute efficiency of the
multiply-adds, SM time per scanned element, a fixed time once per launch (``launch_fixed_ns``; per
block, ``fixed_ns``, before 110e473: on grids of many waves a per-block constant is paid once a
wave, and round 4 showed the calibration had fitted a per-launch one), how blocks share their SM,
the latency of a channel chunk); the sharing is either a cap on one block's share (``block_sm_share``,
``sharing="share"``) or the independent-stall readiness of ``ReadinessSharedServer``
(``block_sm_ready``, ``sharing="ready"``, the rule the Winograd kinds use; ``ready_kinds`` picks it
per kind, and the blocks are then weighted by age when the spec gives ``younger_block_weight``); the
filter tile varies across the cases, so the multiply-adds (which
scale with it) and the scan (which does not) separate; ReLU and max-pool only their per-element
time and fixed time (no flops).

The calibration problems are NOT VGG-19 layers, the problems the model is judged on: the cases span
many and few blocks per SM (the share), and sparsities 0 to 0.95 (the scan against the multiply-adds).
Cases shorter than 1.5x the host's launch cost (``kernel_launch_ns``) are host-bound and not fitted.

Rounds: ``CAL_PROBLEMS`` (rounds 1 and 2) give every kind its cases; ``TAIL_PROBLEMS`` (round 3) give
only ECR (at ``SPARSE_SPARSITIES``) and its dense twin (at 0.5), 15 cases, appended after the others so
that every earlier case keeps its index (the GPU side seeds each case's weights by it). A GPU run can
time a subset (``select_cases``) and merge it into an earlier run's measurements
(``merge_measurements``): the earlier rows and meta stay as they were, each new row names its run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from megasim.calibration.cases import kind_subgraph
from megasim.calibration.fit import fit_log_times
from megasim.errors import MegasimError, SpecError
from megasim.hardware.spec import GPUSpec, TaskCost, finite_number
from megasim.algorithms.sparse.lowering import lower_sparse
from megasim.algorithms.sparse.tiling import PoolSpec
from megasim.schedule import Schedule
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
# Round 3 (ECR and its dense twin only): ECR's grid just past one wave of 3 blocks per SM (396 slots on
# the H200), so 3-7 tail blocks run nearly alone after the wave, as in VGG-19's conv3_x at batch 1
# (k_tile 16, 400 blocks, 64 chunks) and conv5_x at batch 16 (k_tile 32, 400 blocks, 128 chunks on a
# 14x14 map), whose last pixel tile holds 64 of 128 pixels; the two rounds before had one such grid
# (440 blocks, 44 tail blocks). Per problem (checked in tests/test_sparse_calibration_rounds.py):
# (pixel tiles x filter tiles)
#   k_tile 16, 13 x 31 = 403 blocks (7 tail), 66 chunks, last tile 64 pixels (2 of 4 warps);
#   k_tile 32, 21 x 19 = 399 blocks (3 tail), 120 chunks, 18x18 maps, last tile 32 pixels (1 warp);
#   k_tile 32, 16 x 25 = 400 blocks (4 tail), 112 chunks, 16x16 maps, no partial tile (the contrast:
#   the tail alone, without a partial block that frees its slot early).
TAIL_PROBLEMS = ("N=1,C=264,K=496,H=40,W=40", "N=8,C=480,K=608,H=18,W=18", "N=8,C=448,K=800,H=16,W=16")
TAIL_SEED0 = 20                 # the round-3 maps' seeds: 20, 21, 22
# Round 4: few input channels on long grids, as a network's first layer (one partial
# channel chunk per block, so the block's fixed costs weigh most). ECR at SPARSE_SPARSITIES and its
# dense twin; no calibration problem had C < 16 before, and the model had ECR 30-49% slow on VGG-19's
# conv1_1 (C = 3) at batch 16 (12,800 / 7,200 / 4,096 blocks: 32, 18 and 10 waves of ECR; each case
# 200-400 us, well above the host's launch cost: a first try at a quarter of these batches ran 35-85 us).
FEW_CHANNEL_PROBLEMS = ("N=32,C=3,K=64,H=160,W=160", "N=64,C=3,K=32,H=120,W=120", "N=16,C=5,K=64,H=128,W=128")
FEW_CHANNEL_SEED0 = 30          # the round-4 maps' seeds: 30, 31, 32
SPARSE_SPARSITIES = (0.0, 0.5, 0.8, 0.95)
ELEMENTWISE_PROBLEM = "N=16,C=4,K=128,H=112,W=112"
HOST_BOUND_FACTOR = 1.5     # a case faster than 1.5 x the host's launch cost is host-bound: not fitted
CONV_KINDS = ("ecr", "pecr", "direct", "direct_fused")
REPLAY_KINDS = ("ecr",)         # the kinds whose lowering counts shared-memory replays
ELEMENTWISE_FREE = ("ns_per_other_op", "fixed_ns")
SHARING_FIELD = {"share": "block_sm_share", "ready": "block_sm_ready"}
BOUNDS = {"compute_efficiency": (0.005, 1.0), "ns_per_other_op": (1e-6, 10.0), "fixed_ns": (0.0, 100_000.0),
          "launch_fixed_ns": (0.0, 100_000.0),
          "block_sm_share": (0.02, 1.0), "block_sm_ready": (0.02, 1.0), "ns_per_step": (0.0, 100_000.0),
          "ns_per_iteration": (0.0, 10_000.0), "ns_per_replay": (0.0, 100.0)}
START = {"compute_efficiency": 0.3, "ns_per_other_op": 0.01, "fixed_ns": 1000.0, "launch_fixed_ns": 1000.0,
         "block_sm_share": 0.3,
         "block_sm_ready": 0.3, "ns_per_step": 200.0, "ns_per_iteration": 20.0,
         "ns_per_replay": 0.01}
LINEAR = ("fixed_ns", "launch_fixed_ns", "ns_per_step", "ns_per_iteration")     # fitted in us, linearly; the others in log space


def free_fields(kind: str, sharing: str = "share") -> tuple[str, ...]:
    """The TaskCost fields fitted for `kind` under the SM-sharing rule `sharing` ("share" or "ready")."""
    if sharing not in SHARING_FIELD:
        raise SpecError(f"sharing={sharing!r} is not allowed: use one of {', '.join(SHARING_FIELD)}")
    if kind not in CONV_KINDS:
        return ELEMENTWISE_FREE
    # The fixed constant is fitted once per launch (TaskCost.launch_fixed_ns; a per-block fixed_ns
    # was fitted before 110e473 and is paid once a wave on long grids: calibration round 4).
    conv = ("compute_efficiency", "ns_per_other_op", "launch_fixed_ns", SHARING_FIELD[sharing], "ns_per_step",
            "ns_per_iteration")
    return conv + ("ns_per_replay",) if kind in REPLAY_KINDS else conv


FREE = {kind: free_fields(kind) for kind in (*CONV_KINDS, "relu", "maxpool")}


# The occupancy probe (not fitted): a convolution kind's time against how many of its blocks share an
# SM in one wave. Per filter tile, a grid of exactly b blocks per SM (N=1, K = k_tile: one filter tile;
# 132 b output rows of 128 pixels: a block is one row, 132 b blocks on the H200's and H100's 132 SMs;
# rows of 128 keep the lowering's input rows, which a block reads whole, equal to the block's columns),
# for b = 1 up to the blocks that fit at the kernel's registers, and twice that (two waves: the steady
# state). C scales as 1 / k_tile, so every block does the same 128 x 32 x 128 x 9 multiply-adds.
# The direct cases were sized for the dense twin with inline loads (80 / 70 / 64 / 64
# registers); the twin with "channel" loads (e60cb6d) holds fewer blocks per SM at k_tile 32-8, so a
# re-run puts its largest b in more than one wave.
OCCUPANCY_SM_COUNT = 132
OCCUPANCY_BLOCKS_PER_SM = {
    ("direct", 32): (1, 2, 3, 4, 5, 6, 12), ("direct", 16): (1, 2, 3, 4, 5, 7, 14),
    ("direct", 8): (1, 2, 3, 4, 6, 8, 16), ("direct", 4): (1, 2, 3, 4, 6, 8, 16),
    ("ecr", 32): (1, 2, 3, 6), ("ecr", 16): (1, 2, 3, 6), ("ecr", 8): (1, 2, 3, 5, 10), ("ecr", 4): (1, 2, 3, 4, 8),
}
OCCUPANCY_SPARSITIES = {"direct": (0.5,), "ecr": (0.0, 0.5, 0.9)}
OCCUPANCY_SEED0 = 300


def occupancy_problem(k_tile: int, blocks_per_sm: int) -> str:
    """The probe's problem for this filter tile and blocks per SM (see OCCUPANCY_BLOCKS_PER_SM)."""
    return f"N=1,C={128 * 32 // k_tile},K={k_tile},H={OCCUPANCY_SM_COUNT * blocks_per_sm},W=128"


def occupancy_cases() -> list[dict[str, Any]]:
    """The occupancy probe's cases (``gpu.probes.conv_occupancy`` times them, ``experiments.studies.sparse_model.conv_occupancy``
    predicts them): calibration-case dicts with ``force_k_tile`` and ``blocks_per_sm``."""
    cases = []
    for (kind, k_tile), counts in OCCUPANCY_BLOCKS_PER_SM.items():
        for b in counts:
            for s in OCCUPANCY_SPARSITIES[kind]:
                cases.append({"op": kind, "kind": kind, "problem": occupancy_problem(k_tile, b), "sparsity": s,
                              "pattern": "uniform", "seed": OCCUPANCY_SEED0 + len(cases), "pool": None,
                              "force_k_tile": k_tile, "blocks_per_sm": b})
    return cases


# The map-shape probe (not fitted): the same grid of 396 blocks (3 per SM on 132 SMs, k_tile 32, one
# filter tile, C = 128: every block does the same multiply-adds) on maps of different widths, so only
# how a block's 128 pixels lie on the map changes (rows of 128 = one row a block, as in the occupancy
# probe; narrower rows = a block over several rows; wider = a block over part of a row). The dense
# twin with inline loads ran VGG-19 conv2_2 at batch 1 (rows of 112, 392 blocks) 6% slower than the probe's
# rows of 128 (2026-11-25), and ECR did not. Plus conv2_1 and conv2_2 of VGG-19 at batch 1 themselves.
MAP_SHAPE_WIDTHS = (16, 32, 56, 64, 96, 100, 112, 120, 128, 224, 256, 448)
MAP_SHAPE_PIXELS = 396 * 128
MAP_SHAPE_VGG = ("N=1,C=64,K=128,H=112,W=112", "N=1,C=128,K=128,H=112,W=112")
MAP_SHAPE_SEED0 = 400


def map_shape_problems() -> list[str]:
    """The probe's problems: per width, the most rows whose pixels still fill 396 blocks of 128."""
    probs = []
    for w in MAP_SHAPE_WIDTHS:
        h = MAP_SHAPE_PIXELS // w
        probs.append(f"N=1,C=128,K=32,H={h},W={w}")
    return probs + list(MAP_SHAPE_VGG)


def map_shape_cases() -> list[dict[str, Any]]:
    """The map-shape probe's cases (``gpu.probes.conv_map_shape`` times them, ``experiments.studies.sparse_model.conv_map_shape``
    predicts them): calibration-case dicts with ``force_k_tile`` 32. ``variant`` is where the dense twin
    loads its window (``gpu.kernels.sparse.kernels.conv_kernel``'s ``dense_loads``: "inline" is the benchmarks'
    twin; "chunk" and "channel" load before the multiplies, and the model predicts them as the twin)."""
    cases = []
    for prob in map_shape_problems():
        for kind, variant in (("direct", "inline"), ("direct", "chunk"), ("ecr", "inline")):
            cases.append({"op": kind, "kind": kind, "variant": variant, "problem": prob, "sparsity": 0.5,
                          "pattern": "uniform", "seed": MAP_SHAPE_SEED0 + len(cases), "pool": None, "force_k_tile": 32})
    for prob in map_shape_problems():      # added after the first run: appended, so earlier cases keep their seeds
        cases.append({"op": "direct", "kind": "direct", "variant": "channel", "problem": prob, "sparsity": 0.5,
                      "pattern": "uniform", "seed": MAP_SHAPE_SEED0 + len(cases), "pool": None, "force_k_tile": 32})
    return cases


# The wave-tail probe (not fitted): one kind's grid of one filter tile (K = k_tile = 32) on
# rows of 128 pixels (one block per row, every block the same work), at fractions of a full wave of its
# occupancy on 132 SMs: the dense twin (126 registers, 4 blocks per SM: a wave of 528 blocks) and ECR at
# sparsity 0.5 (133 registers, 3 per SM: 396). Past a whole wave, the tail blocks either spread over the
# SMs (older blocks favoured by the warp schedulers, so an SM's blocks free their slots one by one) or
# stack on the SMs whose blocks end first (every block on an SM alike, so its slots free together).
WAVE_TAIL_FRACTIONS = (0.5, 1.0, 1.25, 1.5, 1.75, 2.0)
WAVE_TAIL_KINDS = (("direct", 528), ("ecr", 396))
WAVE_TAIL_SEED0 = 500


def wave_tail_cases() -> list[dict[str, Any]]:
    """The wave-tail probe's cases (``gpu.probes.conv_map_shape --tail`` times them,
    ``experiments.studies.sparse_model.conv_map_shape --tail`` predicts them): calibration-case dicts with ``force_k_tile``
    32 and ``wave_fraction``, the grid's blocks over the kind's blocks per wave on 132 SMs."""
    cases = []
    for kind, wave in WAVE_TAIL_KINDS:
        for f in WAVE_TAIL_FRACTIONS:
            cases.append({"op": kind, "kind": kind, "variant": "channel" if kind == "direct" else "inline",
                          "problem": f"N=1,C=128,K=32,H={round(wave * f)},W=128", "sparsity": 0.5,
                          "pattern": "uniform", "seed": WAVE_TAIL_SEED0 + len(cases), "pool": None,
                          "force_k_tile": 32, "wave_fraction": f})
    return cases


def calibration_cases() -> list[dict[str, Any]]:
    """The cases gpu.calibrate.sparse times: (op run, kind fitted, problem, sparsity, pattern, seed, pool)."""
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
    # Rounds 3 and 4, in that order after the others (the cases above keep their indices).
    for problems, seed0 in ((TAIL_PROBLEMS, TAIL_SEED0), (FEW_CHANNEL_PROBLEMS, FEW_CHANNEL_SEED0)):
        for pi, prob in enumerate(problems):
            for s in SPARSE_SPARSITIES:
                cases.append({"op": "ecr", "kind": "ecr", "problem": prob, "sparsity": s, "pattern": "uniform",
                              "seed": seed0 + pi, "pool": None})
            cases.append({"op": "direct", "kind": "direct", "problem": prob, "sparsity": 0.5, "pattern": "uniform",
                          "seed": seed0 + pi, "pool": None})
    return cases


def _problem_key(text: str) -> str:
    return parse_layer(text).spec_string()


def select_cases(problems=None) -> list[tuple[int, dict[str, Any]]]:
    """(index in ``calibration_cases()``, case) of every case, or of the cases whose problem is one of
    `problems` (spec strings, compared as parsed problems; ``"round3"`` stands for ``TAIL_PROBLEMS``,
    ``"round4"`` for ``FEW_CHANNEL_PROBLEMS``).
    An unknown or unreadable problem is an error (SpecError, one line)."""
    cases = list(enumerate(calibration_cases()))
    if not problems:
        return cases
    known = {_problem_key(c["problem"]) for _, c in cases}
    wanted = set()
    for text in problems:
        rounds = {"round3": TAIL_PROBLEMS, "round4": FEW_CHANNEL_PROBLEMS}
        for prob in rounds.get(text.strip(), (text,)):
            try:
                key = _problem_key(prob)
            except MegasimError as err:
                raise SpecError(f"problem {prob!r} cannot be read: {err}") from None
            if key not in known:
                raise SpecError(f"problem {prob!r} is not a calibration problem (allowed: round3, round4, "
                                f"{', '.join(dict.fromkeys(c['problem'] for _, c in cases))})")
            wanted.add(key)
    return [(i, c) for i, c in cases if _problem_key(c["problem"]) in wanted]


CASE_KEY = ("op", "kind", "problem", "sparsity", "pattern", "seed", "pool")


def _case_key(row: dict[str, Any]) -> tuple:
    pool = row.get("pool")
    return (row["op"], row["kind"], _problem_key(row["problem"]), float(row["sparsity"]), row["pattern"],
            int(row["seed"]), tuple(pool) if pool else None)


def merge_measurements(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`base` (``{"meta", "rows"}``, possibly merged before) with the rows of the run `new` appended.

    Provenance: base's meta and rows are kept unchanged; `new`'s meta goes to ``base["merged"]`` (a
    list, one entry per merged run, with the number of rows it added) and each of its rows gets
    ``merged_run`` (its index there), ``date_utc`` and ``git_sha`` of that run. Rows without
    ``merged_run`` come from ``meta``. A new row measuring a case already present is an error
    (SpecError): nothing is overwritten."""
    for name, data in (("base", base), ("new", new)):
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or not isinstance(data.get("meta"), dict):
            raise SpecError(f"the {name} measurements are not allowed: they must be a {{'meta', 'rows'}} object "
                            f"as gpu.calibrate.sparse writes")
    have = {_case_key(r): r for r in base["rows"]}
    for r in new["rows"]:
        if _case_key(r) in have:
            raise SpecError(f"the new run measures a case already in the base measurements, which is not "
                            f"overwritten: {', '.join(f'{k}={r.get(k)}' for k in CASE_KEY)}")
    merged = list(base.get("merged", []))
    run = len(merged)
    meta = new["meta"]
    merged.append({**meta, "rows_added": len(new["rows"])})
    rows = list(base["rows"]) + [{**r, "merged_run": run, "date_utc": meta.get("date_utc"),
                                  "git_sha": meta.get("git_sha")} for r in new["rows"]]
    return {**base, "merged": merged, "rows": rows}


def case_graph(case: dict[str, Any], sm_count: int) -> tuple[TaskGraph, Schedule]:
    """The graph of the case's kind alone (its launch cut out of the op's graph) and its schedule."""
    pool = PoolSpec(*case["pool"]) if case.get("pool") else None
    graph, schedule, _ = lower_sparse(parse_layer(case["problem"]), case["op"], sm_count, pool=pool,
                                      sparsity=SparsitySpec(case["sparsity"], case["pattern"], seed=case["seed"]),
                                      k_tile=case.get("force_k_tile"))
    if len(schedule.launches) == 1:
        return graph, schedule
    launch = next(l for l in schedule.launches if l.name == case["kind"])
    return kind_subgraph(graph, case["kind"], launch.order)


def _simulated_us(spec: GPUSpec, kind: str, cost: TaskCost, graphs) -> np.ndarray:
    s = dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost})
    return np.array([launch_us(simulate(g, sch, s), sch) for g, sch in graphs])


def launch_us(result, schedule: Schedule) -> float:
    """The simulated time of the schedule's only launch, from its start (launch overhead excluded:
    the GPU timing brackets the kernel with events, which do not see the host's launch cost)."""
    launch = result.launches[-1]
    return (launch.end_ns - launch.start_ns) / 1e3


def fit_kind(spec: GPUSpec, kind: str, graphs, measured_us, max_evals: int = 200,
             sharing: str = "share") -> dict[str, Any]:
    """Fit the free parameters of `kind` (log space for positive scales, linear in us for the ns
    fields); returns the TaskCost, simulated and measured times, the error."""
    free = free_fields(kind, sharing)
    base = spec.task_cost(kind) if kind in spec.task_costs else TaskCost(compute_efficiency=1.0)
    if kind in CONV_KINDS:      # start from the other rule's neutral value, whichever the base spec used;
        # the per-block constant of specs fitted before 110e473 is not fitted any more
        base = dataclasses.replace(base, block_sm_share=1.0, block_sm_ready=None, fixed_ns=0.0)
    return fit_log_times(base, free, BOUNDS, START, LINEAR, lambda cost: _simulated_us(spec, kind, cost, graphs),
                         measured_us, max_evals)


def run_dates(rows: list[dict[str, Any]], date: str) -> str:
    """The days the rows were measured: their own ``date_utc`` (rows merged from a later run,
    ``merge_measurements``), else `date` (the measurements' meta)."""
    return " and ".join(sorted({str(r.get("date_utc") or date)[:10] for r in rows}))


def check_rows(rows: Any, origin: str = "sparse measurements") -> None:
    """One-line SpecError naming `origin`, the row and its field when a measured row cannot be fitted:
    each row an object with op, kind, problem and pattern strings, a sparsity in [0, 1], an integer
    seed, and median_ms a finite positive number (checked before the fit, which takes minutes)."""
    import math
    if not isinstance(rows, list) or not rows:
        raise SpecError(f"{origin}: rows={type(rows).__name__} is not allowed: give a non-empty list of measured runs")
    for i, r in enumerate(rows):
        where = f"{origin}: rows[{i}]"
        if not isinstance(r, dict):
            raise SpecError(f"{where} is not allowed: it must be an object, not {type(r).__name__}")
        for key in ("op", "kind", "problem", "pattern"):
            if not isinstance(r.get(key), str):
                raise SpecError(f"{where}.{key}={r.get(key)!r} is not allowed: it must be a string")
        for key, low, high in (("sparsity", 0.0, 1.0), ("median_ms", 0.0, math.inf)):
            v = r.get(key)
            if not finite_number(v) or not low <= v <= high or (key == "median_ms" and v == 0):
                allowed = "a number in [0, 1]" if key == "sparsity" else "a finite number > 0"
                raise SpecError(f"{where}.{key}={v!r} is not allowed: it must be {allowed}")
        if isinstance(r.get("seed"), bool) or not isinstance(r.get("seed"), int):
            raise SpecError(f"{where}.seed={r.get('seed')!r} is not allowed: it must be an integer")
        parse_layer(r["problem"], source=f"{where}.problem")


def calibrate_sparse(spec: GPUSpec, rows: list[dict[str, Any]], *, device: str, date: str,
                     max_evals: int = 200, sharing: str = "share",
                     ready_kinds: tuple[str, ...] = ()) -> tuple[GPUSpec, dict[str, Any]]:
    """`spec` with the sparse kinds' TaskCosts fitted to the measured `rows` (the convolution kinds
    sharing their SMs by `sharing`, "share" or "ready", except `ready_kinds`, which share by "ready");
    and a report. A ready kind's blocks are weighted by age when `spec` gives ``younger_block_weight``."""
    unknown = [k for k in ready_kinds if k not in CONV_KINDS]
    if unknown:
        raise SpecError(f"ready kind {unknown[0]!r} is not allowed: use the convolution kinds {', '.join(CONV_KINDS)}")
    costs = dict(spec.task_costs)
    sources = dict(spec.sources)
    report: dict[str, Any] = {"sharing": sharing, "ready_kinds": list(ready_kinds), "kinds": {}}
    for kind in FREE:
        kind_sharing = "ready" if kind in ready_kinds else sharing
        free = free_fields(kind, kind_sharing)
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
                       kind_sharing)
        costs[kind] = fit["cost"]
        how = (f"measured {run_dates(kind_rows, date)} on {device} by gpu.calibrate.sparse: {kind}'s kernel alone on "
               f"{len(kind_rows)} calibration cases (megasim.calibration.sparse, not VGG-19), fitted so "
               f"that megasim's simulation matches the measured medians, rms log error {fit['rms_log_error']:.3f}")
        for name in SHARING_FIELD.values():     # the rule not fitted no longer has a source
            sources.pop(f"task_costs.{kind}.{name}", None)
        if kind in CONV_KINDS:                  # nor the per-block constant (0 since 110e473)
            sources.pop(f"task_costs.{kind}.fixed_ns", None)
        for name in free:
            sources[f"task_costs.{kind}.{name}"] = how
        report["kinds"][kind] = {**dataclasses.asdict(fit["cost"]),
                                 **{k: v for k, v in fit.items() if k != "cost"},
                                 "cases": [{k: r[k] for k in ("op", "problem", "sparsity", "pattern", "pool")}
                                           for r in kind_rows]}
    return dataclasses.replace(spec, task_costs=costs, sources=sources), report
