"""Calibrating the im2win task kinds from each kernel timed alone: the cases and the fit (pure half).

``experiments.benchmarks.im2win_calibration`` times, on the GPU, each kernel ALONE (the transform's
launch, or the convolution's launch on a window tensor written before) on ``CAL_PROBLEMS``, problems
that are NOT the bench's 12 layers (the points the model is validated on): few and many channels
(3-512), filters 1x1 to 7x7, strides 1 and 2, padding 0-2, maps 7x7 to 300x300, 16 to 1,024 filters,
batch 4-64, so grids of under one wave to hundreds of waves. Its rows (``calibration_cases`` lists them):

- ``im2win_transform``: the transform kernel;
- ``im2win_conv`` and ``im2win_conv@m64``: the optimized kernel at each filter tile of ``CAL_TILES`` (the
  plug-in's defaults otherwise: n_b 128, k_b 16, 8 x 8 register tiles, the register cap of
  ``tiling.register_cap``, the staging ``tiling.DEFAULT_STAGING``);
- ``im2win_conv@3xtf32``: the optimized kernel on tensor cores (``math=3xtf32``) at the default tile;
- ``im2win_conv@no_vector``, ``@no_prefetch`` (the default tile), ``@no_microkernel`` (32 x 32, 1 x 1),
  ``@basic`` (Alg. 2): the ablation's kernels;
- ``im2col_transform`` and ``im2col_gemm``: the im2col + cuBLAS baseline's two steps, each timed alone as the
  bench runs them (torch ``unfold``; ``matmul`` of the filter matrix by an im2col matrix made before). The
  plug-in ``im2col_gemm`` lowers cuBLAS's batched SGEMM to its own tiles (``Im2colParams``' defaults),
  not to the tiles cuBLAS picks per shape, so the fitted fields describe cuBLAS's kernels through that
  tiling: an effective efficiency, readiness and per-block costs, not a model of cuBLAS's code;
- ``naive_direct``: the paper's naive direct convolution (``gpu.kernels.im2win.direct``, the bench's
  ``direct``): its compute efficiency, one block's readiness, a latency per tap of a thread's chain of
  C*R*S dependent multiply-adds (``ns_per_step``), a fixed time per block and per launch, one block's DRAM
  rate.

``fit_im2win(spec, rows)`` lowers every case exactly as a prediction lowers it
(``megasim.algorithms.im2win.lowering``), cuts the kind's launch out (``megasim.calibration.cases.kind_subgraph``),
simulates it alone, and chooses the kind's free ``TaskCost`` fields (``FREE``) by the calibration's
bounded least squares in log time (``megasim.calibration.fit.least_squares_cost``, the routine the
Winograd and sparse fits use), each cost name on its own rows. The conv kinds fit compute efficiency,
the readiness of one block alone on its SM (``block_sm_ready``: blocks share an SM by
``ReadinessSharedServer``'s rule, as the Winograd kinds do; a cap on one block's share,
``block_sm_share``, fitted the 64-row tiles' partial second waves worse: rms log error 0.138 against
0.105), a latency per K step (``ns_per_step``, hidden by other resident blocks), a fixed time per block
(``fixed_ns``: the epilogue's 64 bounds-checked stores per thread, which weigh on layers of few K steps),
a fixed time per launch, the fraction of the loads overlapped with the multiply-adds
(``memory_overlap``) and one block's DRAM rate; the transform its time per element written
(``ns_per_other_op``), its per-block DRAM rate and a fixed time per launch; Alg. 2 (``BASIC_FREE``) its
filter loads' costs (``lowering.basic_filter_loads``) instead of its multiply-adds'. The optimized
kernel's rows at 64-row tiles fit ``im2win_conv@m64`` (``lowering.conv_cost_name``). Cases shorter than
``HOST_BOUND_MS`` (1.5x the host's dispatch of one Numba launch) are host-bound and left out (as for the
sparse kinds).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from megasim.algorithms.im2win.lowering import conv_cost_name, conv_kind, lower_im2win, lower_naive_direct
from megasim.algorithms.im2win.tiling import DEFAULT_STAGING, NO_MICROKERNEL_TILE, Im2winTiling, default_m_b
from megasim.calibration.measurements import measured_time
from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec, TaskCost
from megasim.schedule import Launch, Schedule
from megasim.workloads import parse_layer
from megasim.workloads.problem import ConvProblem

CAL_PROBLEMS = ("N=32,C=3,K=48,H=160,W=160,R=5,S=5,stride=2",
                "N=16,C=32,K=96,H=64,W=64,R=3,S=3,padding=1",
                "N=32,C=128,K=192,H=20,W=20,R=3,S=3,padding=1",
                "N=8,C=64,K=256,H=40,W=40,R=1,S=1",
                "N=64,C=192,K=384,H=13,W=13,R=3,S=3,padding=1",
                "N=16,C=16,K=32,H=112,W=112,R=5,S=5,padding=2",
                "N=32,C=48,K=128,H=28,W=28,R=5,S=5,padding=2",
                "N=8,C=3,K=32,H=300,W=300,R=3,S=3,stride=2",
                "N=32,C=320,K=320,H=9,W=9,R=3,S=3",
                "N=4,C=512,K=1024,H=7,W=7,R=1,S=1",
                "N=16,C=96,K=80,H=35,W=35,R=3,S=3",
                "N=64,C=24,K=64,H=56,W=56,R=7,S=7,stride=2,padding=2",
                "N=32,C=32,K=64,H=128,W=128,R=3,S=3,padding=1",
                "N=16,C=64,K=160,H=78,W=78,R=3,S=3",
                # grids of tens of waves: few K steps and many outputs per block (2 and 3 steps of 16: the
                # per-block costs against the per-step ones), and transforms of 100-200 MB (above the host's
                # dispatch of one launch, which bounds the small cases' transforms)
                "N=32,C=3,K=96,H=192,W=192,R=3,S=3,padding=1",
                "N=64,C=4,K=64,H=160,W=160,R=3,S=3",
                "N=64,C=16,K=64,H=120,W=120,R=3,S=3,padding=1",
                "N=32,C=32,K=64,H=96,W=96,R=5,S=5,padding=2")
CAL_TILES = (64, 128)
# A case whose kernel takes less than this is host-bound, not fitted: the smallest transform case (1.1 MB)
# times 37 us on the H100, the host's dispatch of one Numba launch of 4-5 arguments; 1.5x that.
HOST_BOUND_MS = 0.055
# The same for runs that time Numba's kernels as packed launches (experiments.benchmarks.im2win_calibration records
# it as its JSON's host_bound_ms): ~3 us of host per launch; 3x that.
PACKED_HOST_BOUND_MS = 0.010
CONV_FREE = ("compute_efficiency", "block_sm_ready", "ns_per_step", "launch_fixed_ns", "memory_overlap", "fixed_ns",
             "block_dram_bw_gbps")
# Alg. 2 (one output per thread from global memory) is bound by its warps' 32-row filter loads
# (lowering.basic_filter_loads): their cost per load and per aligned load, how its blocks share an SM and
# overlap memory, a fixed time per launch; its multiply-adds stay at the start's compute efficiency (fitting
# them and a K-step latency instead left rms log error 0.37: C*R*S alone cannot tell aligned rows apart)
BASIC_FREE = ("ns_per_other_op", "ns_per_replay", "block_sm_ready", "launch_fixed_ns", "memory_overlap",
              "block_dram_bw_gbps")
BASIC_START = {"ns_per_other_op": 0.01, "ns_per_replay": 0.01}
TRANSFORM_FREE = ("ns_per_other_op", "block_dram_bw_gbps", "launch_fixed_ns")
# torch's unfold (lowering._im2col_transform): its threads' R*S copies one after another (a latency per copy),
# the grid's empty blocks (a fixed time per block), per element, per block's DRAM rate, per launch (an image)
IM2COL_TRANSFORM_FREE = ("ns_per_other_op", "ns_per_step", "fixed_ns", "block_dram_bw_gbps", "launch_fixed_ns")
NAIVE_DIRECT_FREE = ("compute_efficiency", "block_sm_ready", "ns_per_step", "launch_fixed_ns", "fixed_ns",
                     "block_dram_bw_gbps")
BOUNDS = {"compute_efficiency": (0.01, 1.0), "block_sm_ready": (0.02, 1.0), "ns_per_step": (0.0, 20_000.0),
          "launch_fixed_ns": (0.0, 100_000.0), "ns_per_other_op": (1e-7, 1.0), "block_dram_bw_gbps": (1.0, 1000.0),
          "memory_overlap": (0.01, 1.0), "fixed_ns": (0.0, 200_000.0),
          "ns_per_replay": (1e-7, 1.0)}
START = {"compute_efficiency": 0.4, "block_sm_ready": 0.3, "ns_per_step": 100.0, "launch_fixed_ns": 2000.0,
         "ns_per_other_op": 1e-4, "block_dram_bw_gbps": 50.0, "memory_overlap": 0.5, "fixed_ns": 1000.0, "ns_per_replay": 1e-3}
LINEAR = ("ns_per_step", "launch_fixed_ns", "fixed_ns")
CASE_KEYS = ("kind", "cost_name", "problem", "variant", "m_b", "n_b", "k_b", "m_t", "n_t", "staging", "max_registers",
             "math")


IM2COL_KINDS = ("im2col_transform", "im2col_gemm")
TRANSFORM_NAMES = ("im2win_transform", "im2col_transform")
NAIVE_DIRECT = "naive_direct"
OWN_KINDS = (*IM2COL_KINDS, NAIVE_DIRECT)      # kinds whose cost name is the kind


def calibration_cases() -> list[dict[str, Any]]:
    """The cases the GPU side times (module docstring): dicts of CASE_KEYS (None: the default)."""
    out = []
    for text in CAL_PROBLEMS:
        base = dict(problem=text, n_b=None, k_b=None, m_t=None, n_t=None, max_registers=None)
        for kind in OWN_KINDS:
            out.append({**base, "kind": kind, "cost_name": kind, "variant": "optimized", "m_b": None, "staging": None})
        out.append({**base, "kind": "im2win_transform", "cost_name": "im2win_transform", "variant": "optimized",
                    "m_b": None, "staging": None})
        for m_b in CAL_TILES:
            out.append({**base, "kind": "im2win_conv", "cost_name": "im2win_conv", "variant": "optimized",
                        "m_b": m_b, "staging": None})
        out.append({**base, "kind": "im2win_conv", "cost_name": "im2win_conv@3xtf32", "variant": "optimized",
                    "m_b": None, "staging": None, "math": "3xtf32"})
        for variant in ("no_vector", "no_prefetch", "no_microkernel", "basic"):
            out.append({**base, "kind": conv_kind(variant), "cost_name": f"im2win_conv@{variant}", "variant": variant,
                        "m_b": None, "staging": None})
    return out


def _cost_name(variant: str, staging: str | None) -> str:
    if variant != "optimized":
        return f"im2win_conv@{variant}"
    return "im2win_conv" if (staging or DEFAULT_STAGING) == DEFAULT_STAGING else f"im2win_conv@{staging}"


def case_tiling(row: dict[str, Any], problem: ConvProblem) -> Im2winTiling:
    """The tiling a measured row ran (its tile fields; None: the plug-in's defaults)."""
    from megasim.algorithms.im2win.plugin import Im2winParams
    variant = row.get("variant") or "optimized"
    given = {k: int(row[k]) for k in ("m_b", "n_b", "k_b", "m_t", "n_t") if row.get(k) not in (None, "")}
    if variant == "no_microkernel":
        given = {**NO_MICROKERNEL_TILE, **given}
    params = Im2winParams(**{**given, "variant": variant, "math": row.get("math") or "fp32"})
    if params.m_b is None:
        params = dataclasses.replace(params, m_b=default_m_b(problem, variant))
    return params.tiling


def im2col_tiling(row: dict[str, Any]) -> Im2winTiling:
    """The tiling an im2col row is lowered at (its tile fields; None: ``Im2colParams``' defaults)."""
    from megasim.algorithms.im2win.plugin import Im2colParams
    given = {k: int(row[k]) for k in ("m_b", "n_b", "k_b", "m_t", "n_t") if row.get(k) not in (None, "")}
    return Im2colParams(**given).tiling


def case_graph(row: dict[str, Any]):
    """(graph, schedule) of the row's kind alone, lowered as a prediction lowers it."""
    from megasim.calibration.cases import kind_subgraph
    problem = parse_layer(row["problem"])
    if row["kind"] == NAIVE_DIRECT:
        return lower_naive_direct(problem)
    if row["kind"] in IM2COL_KINDS:
        graph, schedule = lower_im2win(problem, im2col_tiling(row), "im2col")
    else:
        graph, schedule = lower_im2win(problem, case_tiling(row, problem), "im2win")
    launches = [l for l in schedule.launches if l.name == row["kind"]]
    sub, alone = kind_subgraph(graph, row["kind"], np.concatenate([l.order for l in launches]))
    if len(launches) == 1:
        return sub, alone
    # im2col's transform: a launch per image, as the bench's; the one launch cut back at the same sizes
    parts = np.split(alone.launches[0].order, np.cumsum([l.order.size for l in launches])[:-1])
    return sub, Schedule(alone.name, tuple(Launch(part, name=row["kind"]) for part in parts), {})


def simulated_us(spec: GPUSpec, name: str, cost: TaskCost, graphs) -> np.ndarray:
    """Each graph's launches simulated with ``cost`` as cost name ``name``, in us from the first one's start
    to the last one's end (the host's launch of the first excluded: CUDA events do not see it)."""
    from megasim.sim import simulate
    s = dataclasses.replace(spec, task_costs={**spec.task_costs, name: cost})
    out = []
    for g, sch in graphs:
        launches = simulate(g, sch, s).launches
        out.append((launches[-1].end_ns - launches[0].start_ns) / 1e3)
    return np.array(out)


def fit_cost(spec: GPUSpec, name: str, graphs, measured_us, max_evals: int = 60) -> dict[str, Any]:
    """The free fields of cost name ``name`` fitted on its graphs (see the module docstring)."""
    from megasim.calibration.fit import fit_log_times
    free = {"im2win_conv@basic": BASIC_FREE, "im2win_transform": TRANSFORM_FREE,
            "im2col_transform": IM2COL_TRANSFORM_FREE, NAIVE_DIRECT: NAIVE_DIRECT_FREE}.get(name, CONV_FREE)
    starts = {**START, **(BASIC_START if name == "im2win_conv@basic" else {})}
    base = TaskCost(compute_efficiency=1.0 if name in TRANSFORM_NAMES else 0.4)
    fit = fit_log_times(base, free, BOUNDS, starts, LINEAR, lambda cost: simulated_us(spec, name, cost, graphs),
                        measured_us, max_evals)
    return {**fit, "free": list(free)}


def check_rows(rows: list[dict[str, str]], origin: str = "im2win measurements") -> None:
    """One-line SpecError naming ``origin``, the CSV line and the field when a measured row cannot be fitted
    (checked before the fit): a kind the fit knows, a problem that parses, a variant, tile fields empty or
    positive integers, median_ms empty or a finite number > 0."""
    from megasim.algorithms.im2win.tiling import MATHS, VARIANTS
    kinds = {"im2win_transform", *OWN_KINDS, *(conv_kind(v) for v in VARIANTS)}
    for line, r in enumerate(rows, start=2):        # line 1 is the header
        where = f"{origin} line {line}"
        if r.get("kind") not in kinds:
            raise SpecError(f"{where}: kind={r.get('kind')!r} is not allowed (allowed: {', '.join(sorted(kinds))})")
        if (r.get("variant") or "optimized") not in VARIANTS:
            raise SpecError(f"{where}: variant={r.get('variant')!r} is not allowed (allowed: {', '.join(VARIANTS)})")
        if (r.get("math") or "fp32") not in MATHS:
            raise SpecError(f"{where}: math={r.get('math')!r} is not allowed (allowed: {', '.join(MATHS)})")
        parse_layer(str(r.get("problem")), source=f"{where} problem")
        for key in ("m_b", "n_b", "k_b", "m_t", "n_t"):
            v = r.get(key)
            if v not in (None, "") and not (str(v).isdigit() and int(v) > 0):
                raise SpecError(f"{where}: {key}={v!r} is not allowed: it must be empty or a positive integer")
        try:
            measured_time(r.get("median_ms"))
        except ValueError:
            raise SpecError(f"{where}: median_ms={r.get('median_ms')!r} is not allowed: it must be empty (a failed "
                            f"run) or a finite number > 0") from None


def usable_rows(spec: GPUSpec, rows: list[dict[str, Any]], host_bound_ms: float | None = None) -> list[dict[str, Any]]:
    """The rows that can be fitted: status ok, a finite time above the host-bound floor (the run's
    ``host_bound_ms`` where it records one, else ``HOST_BOUND_MS`` or 1.5 of the spec's launch cost)."""
    floor_ms = host_bound_ms if host_bound_ms is not None else max(HOST_BOUND_MS, 1.5 * spec.kernel_launch_ns / 1e6)
    out = []
    for r in rows:
        t = float(r.get("median_ms") or math.nan)
        if str(r.get("status", "ok")) == "ok" and math.isfinite(t) and t >= floor_ms:
            if r["kind"] in ("im2win_transform", *OWN_KINDS):
                name = r["kind"]
            elif (r.get("staging") or DEFAULT_STAGING) != DEFAULT_STAGING:
                name = f"im2win_conv@{r['staging']}"       # another build: kept, priced by no plan
            else:
                name = conv_cost_name(case_tiling(r, parse_layer(r["problem"])))
            out.append({**r, "cost_name": name})
    return out


def fit_im2win(spec: GPUSpec, rows: list[dict[str, Any]], *, device: str, date: str, max_evals: int = 60,
               names: tuple[str, ...] | None = None, log=None,
               host_bound_ms: float | None = None) -> tuple[GPUSpec, dict[str, Any]]:
    """``spec`` with the im2win cost names fitted to the measured rows, and a report per cost name."""
    rows = usable_rows(spec, rows, host_bound_ms)
    costs, sources = dict(spec.task_costs), dict(spec.sources)
    report: dict[str, Any] = {"cost_names": {}}
    for name in names or tuple(dict.fromkeys(r["cost_name"] for r in rows)):
        mine = [r for r in rows if r["cost_name"] == name]
        if not mine:
            raise SpecError(f"im2win calibration: no usable measured rows for cost name {name!r}")
        graphs = [case_graph(r) for r in mine]
        fit = fit_cost(spec, name, graphs, [float(r["median_ms"]) * 1000.0 for r in mine], max_evals)
        costs[name] = fit["cost"]
        how = (f"measured {date[:10]} on {device} by experiments.benchmarks.im2win_calibration: {name}'s kernel alone "
               f"on {len(mine)} calibration cases (megasim.algorithms.im2win.calibration, not the bench's 12 layers), "
               f"fitted so that megasim's simulation matches the measured medians, rms log error "
               f"{fit['rms_log_error']:.3f}")
        for field in fit["free"]:
            sources[f"task_costs.{name}.{field}"] = how
        for field in ("compute_efficiency", "fixed_ns"):       # the fit's fixed values, where it does not free them
            if field not in fit["free"]:
                sources[f"task_costs.{name}.{field}"] = (f"set to {getattr(fit['cost'], field)!r} by the im2win "
                                                         f"calibration for {name}, not fitted (its time is in "
                                                         f"{', '.join(fit['free'])})")
        report["cost_names"][name] = {**dataclasses.asdict(fit["cost"]), **{k: v for k, v in fit.items() if k != "cost"},
                                      "cases": [{k: r.get(k) for k in CASE_KEYS} for r in mine]}
        if log:
            log(f"{name}: {len(mine)} cases, rms log error {fit['rms_log_error']:.3f}, {fit['evaluations']} evaluations")
    return dataclasses.replace(spec, task_costs=costs, sources=sources), report


def calibrate_im2win(spec: GPUSpec, rows: list[dict[str, Any]], meta: dict[str, Any], *, max_evals: int = 60,
                     log=None) -> tuple[GPUSpec, dict[str, Any]]:
    """``fit_im2win`` on the rows of ``experiments.benchmarks.im2win_calibration`` (its CSV's rows and its JSON's
    ``meta``: device, date, kernels' commit), the spec's description noting what was fitted where. What
    ``megasim calibrate --algo im2win --from-measurements CSV`` runs. The description keeps the notes of earlier
    fits of other cost names (e.g. the im2col kinds fitted on a spec whose im2win kinds were fitted before)."""
    device, date = str(meta.get("device", "unknown GPU")), str(meta.get("date_utc", ""))
    floor = meta.get("host_bound_ms")
    new, report = fit_im2win(spec, rows, device=device, date=date, max_evals=max_evals, log=log,
                             host_bound_ms=None if floor is None else float(floor))
    note = (f"; im2win kinds ({', '.join(report['cost_names'])}) fitted on {device} {date[:10]} from each kernel timed "
            f"alone (megasim.algorithms.im2win.calibration, kernels of {str(meta.get('kernels_commit') or meta.get('git_sha'))[:7]})")
    head, *notes = new.description.split("; im2win kinds")
    kept = [n for n in notes if not set(n.split(")")[0].strip(" (").split(", ")) <= set(report["cost_names"])]
    description = head + "".join("; im2win kinds" + n for n in kept) + note
    return dataclasses.replace(new, description=description), report
