"""What the figure scripts share: one measured point of the model, the small Algorithm 1 parameter
sweep of Figs. 7 and 8, the D_IG range of Fig. 9, the common command line, and a stdout table.

A *point* is one prediction of the model (``megasim.plan.predict``) reduced to a flat dict: the plan's
parameters, the predicted time and the quantities the comparison with the paper needs (L2 hit rate,
DRAM traffic, dependency waits, the time after the last input transform, mean memory / compute
utilisation, occupancy). Parameters that Algorithm 1 rejects give a point with ``valid=False`` and the
model's reason instead of an exception, so a sweep never stops half-way.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from megasim.errors import MegasimError
from megasim.hardware import get_gpu, load_spec
from megasim.hardware.spec import GPUSpec
from megasim.algorithms.winograd.lowering import lower_winograd
from megasim.schedule import Launch, Schedule
from megasim.algorithms.winograd.algorithm1 import counts, default_params
from megasim.algorithms.winograd import WinogradParams
from megasim.plan import Plan, build, predict
from megasim.sim import SimResult, simulate
from megasim.taskgraph import TaskGraph
from megasim.workloads import ConvProblem

DEFAULT_OUT = Path("experiments/results/model")
FULL_BATCH = 64     # the paper's batch (Sec. 7.2)
QUICK_BATCH = 8

# Figs. 7/8 sweep: D_IG as multiples of the smallest valid D_IG for each M; D_GO left at its default.
SWEEP_M = (1, 2, 4, 8)
SWEEP_D_IG_MULTS = (1, 2, 4)
QUICK_SWEEP_M = (1, 4)
QUICK_SWEEP_D_IG_MULTS = (1, 2)
GROUPED_GEMM_M = 4   # M of the ablation baseline: non-fused, GEMM kernel in Algorithm 1's GEMM order


def graph_of(problem: ConvProblem) -> TaskGraph:
    """The lowered graph with the default Winograd implementation parameters (those Plan() uses)."""
    return build(problem, Plan("fused"))[0]


def layer_info(problem: ConvProblem, graph: TaskGraph) -> dict[str, Any]:
    c = counts(graph)
    return {"layer": problem.name, "C": problem.c, "K": problem.k, "C_plus_K": problem.c + problem.k,
            "H": problem.h, "W": problem.w, "batch": problem.n, "N_G": c["N_G"], "S_I": c["S_I"],
            "S_G": c["S_G"], "S_O": c["S_O"], "N_I": c["N_G"] * c["S_I"]}


def min_d_ig(graph: TaskGraph, m: int) -> int:
    """Smallest valid D_IG for M (as Plan() defaults it); M is clipped to N_G as default_params does."""
    return int(default_params(graph, m).d_ig)


def measure(problem: ConvProblem, spec: GPUSpec, plan: Plan) -> dict[str, Any]:
    """One prediction as a flat dict; an invalid plan gives valid=False and the model's message."""
    row: dict[str, Any] = {"schedule": plan.schedule, "D_IG": plan.params.d_ig, "D_GO": plan.params.d_go,
                           "M": plan.params.m}
    try:
        result, resolved = predict(problem, spec, plan)
    except MegasimError as exc:
        row.update(valid=False, reason=str(exc))
        return row
    row.update(D_IG=resolved.params.d_ig, D_GO=resolved.params.d_go, M=resolved.params.m, valid=True, reason="")
    row.update(result_metrics(result))
    return row


def measure_nonfused_grouped_gemm(problem: ConvProblem, spec: GPUSpec, m: int) -> dict[str, Any]:
    """An ablation baseline: the non-fused schedule with its GEMM kernel in Algorithm 1's GEMM order
    (batches of M groups, column j of every group of the batch together, so M GEMMs share a transformed
    filter matrix, the paper's reuse type b). The model's plain non-fused GEMM kernel runs group by
    group; this separates the gain of the GEMM order from the gain of fusion proper."""
    graph, schedule, _ = build(problem, Plan(schedule="nonfused"))
    launches = []
    for launch in schedule.launches:
        order = launch.order
        if launch.name == "gemm":
            group, column = graph.group[order], graph.index_in_group[order]
            order = order[np.lexsort((group, column, group // m))]
        launches.append(Launch(order, name=launch.name))
    result = simulate(graph, Schedule(f"nonfused-gemm-M{m}", tuple(launches), {"gemm_M": m}), spec)
    return {"schedule": f"nonfused_gemm_M{m}", "D_IG": "", "D_GO": "", "M": m, "valid": True, "reason": "",
            **result_metrics(result)}


def result_metrics(result: SimResult) -> dict[str, Any]:
    """The flat metrics of one prediction."""
    row: dict[str, Any] = {}
    kinds = result.kind_summary()
    util = result.utilization()
    itrans = result.kind == result.kind_names.index("itrans")
    last_itrans_ns = float(result.end_ns[itrans].max()) if itrans.any() else 0.0
    row.update(
        predicted_us=round(result.predicted_us, 3),
        l2_hit_rate=round(result.l2_hit_rate, 4),
        dram_mb=round(result.dram_bytes / 1e6, 3),
        wait_us_total=round(float(result.wait_ns.sum()) / 1e3, 1),
        gemm_mean_wait_ns=round(kinds.get("gemm", {}).get("mean_wait_ns", 0.0), 1),
        otrans_mean_wait_ns=round(kinds.get("otrans", {}).get("mean_wait_ns", 0.0), 1),
        # Time in which no input transform runs any more: GEMMs and output transforms only (the tail).
        after_last_itrans_us=round((result.predicted_ns - last_itrans_ns) / 1e3, 3),
        mem_util=round(float(np.mean(util["memory"])), 4),
        compute_util=round(float(np.mean(util["compute"])), 4),
        blocks_per_sm="|".join(str(l.blocks_per_sm) for l in result.launches),
        limited_by="|".join(l.limited_by for l in result.launches),
        tasks=result.num_tasks,
        sim_wall_s=round(result.sim_wall_s, 3),
    )
    return row


def sweep_plans(graph: TaskGraph, m_values: Sequence[int], d_ig_mults: Sequence[int]) -> list[tuple[int, Plan]]:
    """(D_IG multiple, fused Plan) for each M and each multiple of that M's smallest D_IG, capped at the
    number of input transforms; M above N_G is kept (the model rejects it, and the point says why)."""
    c = counts(graph)
    n_i = c["N_G"] * c["S_I"]
    plans: list[tuple[int, Plan]] = []
    for m in m_values:
        if m > c["N_G"]:
            plans.append((1, Plan("fused", WinogradParams(m=m))))
            continue
        base = max(1, min_d_ig(graph, m))
        seen: set[int] = set()
        for mult in d_ig_mults:
            d_ig = min(base * mult, n_i)
            if d_ig not in seen:
                seen.add(d_ig)
                plans.append((mult, Plan("fused", WinogradParams(m=m, d_ig=d_ig))))
    return plans


def layer_sweep(problem: ConvProblem, spec: GPUSpec, m_values: Sequence[int],
                d_ig_mults: Sequence[int]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Non-fused, fused with default parameters, and the fused sweep of one layer.

    Returns (summary row, all points). The summary names the best valid sweep point (the default plan
    is one of the candidates) and the speedups over non-fused."""
    graph = graph_of(problem)
    info = layer_info(problem, graph)
    points = []
    nonfused = {**info, "variant": "nonfused", "d_ig_mult": "", **measure(problem, spec, Plan(schedule="nonfused"))}
    default = {**info, "variant": "default", "d_ig_mult": "", **measure(problem, spec, Plan())}
    grouped = {**info, "variant": f"nonfused_gemm_M{GROUPED_GEMM_M}", "d_ig_mult": "",
               **measure_nonfused_grouped_gemm(problem, spec, GROUPED_GEMM_M)}
    points += [nonfused, default]
    for mult, plan in sweep_plans(graph, m_values, d_ig_mults):
        if default["valid"] and (plan.params.m, plan.params.d_ig) == (default["M"], default["D_IG"]):
            points.append({**default, "variant": "sweep", "d_ig_mult": mult})   # same plan: reuse the prediction
            continue
        points.append({**info, "variant": "sweep", "d_ig_mult": mult, **measure(problem, spec, plan)})
    candidates = [p for p in points[1:] if p["valid"]]   # the fused points
    points.append(grouped)
    best = min(candidates, key=lambda p: p["predicted_us"])
    summary = {
        **info,
        "nonfused_us": nonfused["predicted_us"],
        "default_us": default["predicted_us"],
        "default_D_IG": default["D_IG"], "default_D_GO": default["D_GO"], "default_M": default["M"],
        "best_us": best["predicted_us"],
        "best_D_IG": best["D_IG"], "best_D_GO": best["D_GO"], "best_M": best["M"],
        "best_d_ig_mult": best["d_ig_mult"] if best["variant"] == "sweep" else 1,
        "speedup_default": round(nonfused["predicted_us"] / default["predicted_us"], 4),
        "speedup_best": round(nonfused["predicted_us"] / best["predicted_us"], 4),
        f"nonfused_gemm_M{GROUPED_GEMM_M}_us": grouped["predicted_us"],
        "speedup_best_vs_grouped_gemm": round(grouped["predicted_us"] / best["predicted_us"], 4),
        "l2_hit_nonfused": nonfused["l2_hit_rate"], "l2_hit_best": best["l2_hit_rate"],
        "dram_mb_nonfused": nonfused["dram_mb"], "dram_mb_best": best["dram_mb"],
        "mem_util_nonfused": nonfused["mem_util"], "mem_util_best": best["mem_util"],
        "compute_util_nonfused": nonfused["compute_util"], "compute_util_best": best["compute_util"],
        "wait_us_total_best": best["wait_us_total"],
        "after_last_itrans_us_best": best["after_last_itrans_us"],
        "blocks_per_sm_best": best["blocks_per_sm"], "blocks_per_sm_nonfused": nonfused["blocks_per_sm"],
        "sweep_points": sum(p["variant"] == "sweep" for p in points),
        "sweep_invalid": sum(not p["valid"] for p in points),
    }
    return summary, points


def d_ig_range(graph: TaskGraph, m: int, factors: Sequence[float]) -> list[int]:
    """D_IG values from the smallest valid one for M up to max(factors) times it, capped at the number
    of input transforms N_I (which is added as the last point when the cap cuts the range short)."""
    c = counts(graph)
    n_i = c["N_G"] * c["S_I"]
    base = max(1, min_d_ig(graph, m))
    values = {min(n_i, int(round(base * f))) for f in factors}
    if base * max(factors) > n_i:
        values.add(n_i)
    return sorted(values)


# --- command line ------------------------------------------------------------------------------------
def parse_args(description: str, argv: Sequence[str] | None,
               extra_args: Callable[[argparse.ArgumentParser], None] | None = None,
               default_gpu: str = "V100", options: Sequence[str] = ("quick", "gpu")) -> argparse.Namespace:
    """The common options (--out, --plot-only, and those of `options`: --quick, --gpu; a script that has
    no use for one leaves it out of its --help, and reads quick=False, gpu=None); `extra_args` adds a
    script's own (e.g. --measured)."""
    ap = argparse.ArgumentParser(description=description.strip().splitlines()[0])
    if "quick" in options:
        ap.add_argument("--quick", action="store_true",
                        help=f"fewer points and batch {QUICK_BATCH} instead of {FULL_BATCH} (CI; < 60 s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    if "gpu" in options:
        ap.add_argument("--gpu", default=default_gpu, help=f"GPU preset or spec file (default {default_gpu}"
                        + (", the paper's GPU)" if default_gpu == "V100" else ")"))
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from DIR/NAME.csv only")
    if extra_args is not None:
        extra_args(ap)
    args = ap.parse_args(argv)
    args.quick = getattr(args, "quick", False)
    args.gpu = getattr(args, "gpu", None)
    return args


def gpu_spec(name_or_path: str) -> GPUSpec:
    """A preset by name, or a spec file (a path ending in .json)."""
    if name_or_path.endswith(".json"):
        return load_spec(name_or_path)
    return get_gpu(name_or_path)


def run_script(name: str, description: str, argv: Sequence[str] | None,
               compute: Callable[[argparse.Namespace, GPUSpec], Path],
               plot: Callable[[Path, Path], tuple[Path, Path]],
               extra_args: Callable[[argparse.ArgumentParser], None] | None = None,
               prepare: Callable[[argparse.Namespace], None] | None = None,
               default_gpu: str = "V100", uses_gpu_option: bool = True,
               options: Sequence[str] = ("quick", "gpu")) -> int:
    """The shared main(): compute (unless --plot-only) and then plot from the CSV.

    `extra_args` adds a script's own options; `prepare(args)` runs first in both modes (e.g. to turn
    a recorded GPU run into a results CSV beside the model's, which the plot then reads). A script
    that does not use --gpu (`uses_gpu_option=False`) gets None for the spec."""
    args = parse_args(description, argv, extra_args, default_gpu, options)
    if prepare is not None:
        prepare(args)
    csv_path = args.out / f"{name}.csv"
    if not args.plot_only:
        try:
            spec = gpu_spec(args.gpu) if uses_gpu_option else None
        except MegasimError as exc:
            raise SystemExit(f"{name}: error: {exc}") from None
        start = time.perf_counter()
        csv_path = compute(args, spec)
        on = f" on GPU spec {spec.name}" if spec is not None else ""
        print(f"\n{name}: model time {time.perf_counter() - start:.1f} s{on}; "
              f"wrote {csv_path} and {csv_path.with_suffix('.json')}")
    elif not csv_path.exists():
        raise SystemExit(f"--plot-only: {csv_path} does not exist; run without --plot-only first")
    png, pdf = plot(csv_path, args.out)
    print(f"{name}: drew {png} and {pdf}")
    return 0


def _map_chunk(items: Sequence[Any], fn: Callable[[Any], Any]) -> list[Any]:
    return [fn(item) for item in items]


def parallel_map(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, client: Any = None) -> list[Any]:
    """[fn(item) for item in items], on a Dask cluster when workers > 1 or a client is given (results in
    input order): `client`'s, else a LocalCluster of `workers` processes (megasim.sweep.cluster), the
    items handed out in chunks (about two per worker).

    `fn` must be a module-level function (it is pickled); each call is one independent prediction,
    and the model is deterministic, so the results do not depend on the number of workers."""
    if client is None and (workers <= 1 or len(items) <= 1):
        return [fn(item) for item in items]
    from megasim.sweep.cluster import map_batches, open_client

    with open_client(client, workers=None if client is not None else min(workers, len(items))) as c:
        return map_batches(c, _map_chunk, list(items), fn)


def spec_meta(spec: GPUSpec) -> dict[str, Any]:
    """The GPU spec's identity and the values the discussion refers to."""
    return {"gpu": spec.name, "gpu_description": getattr(spec, "description", ""),
            "gpu_values": {k: getattr(spec, k) for k in ("sm_count", "l2_bytes", "dram_bw_gbps",
                                                          "l2_bw_gbps", "fp32_peak_gflops") if hasattr(spec, k)}}


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """A fixed-width table of the given columns on stdout."""
    cells = [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def table2_sweep(args: argparse.Namespace, spec: GPUSpec, name: str) -> Path:
    """Figs. 7 and 8: `layer_sweep` over the paper's 13 Table-2 layers; writes DIR/NAME.csv (one summary
    row per layer) and DIR/NAME_points.csv (every simulated point), each with its JSON."""
    from experiments.provenance import provenance, write_results
    from megasim.workloads import TABLE2_NAMES, parse_layer

    batch = QUICK_BATCH if args.quick else FULL_BATCH
    m_values = QUICK_SWEEP_M if args.quick else SWEEP_M
    mults = QUICK_SWEEP_D_IG_MULTS if args.quick else SWEEP_D_IG_MULTS
    summaries, points = [], []
    for layer in TABLE2_NAMES:
        start = time.perf_counter()
        summary, pts = layer_sweep(parse_layer(layer, batch), spec, m_values, mults)
        summary["wall_s"] = round(time.perf_counter() - start, 2)
        summaries.append(summary)
        points += pts
        print(f"  {layer:<11} nonfused {summary['nonfused_us']:9.1f} us  best fused {summary['best_us']:9.1f} us "
              f"(D_IG={summary['best_D_IG']}, M={summary['best_M']})  speedup {summary['speedup_best']:.2f}  "
              f"[{summary['wall_s']:.1f} s]", flush=True)
    params = {"batch": batch, "layers": list(TABLE2_NAMES), "sweep_M": list(m_values),
              "sweep_D_IG_multiples_of_min": list(mults), "D_GO": "default (smallest valid for M)",
              "baseline": "the model's own non-fused schedule (four kernels); no cuDNN on the model side",
              "implementation": Plan().param_string().split(",", 3)[-1], "quick": args.quick}
    meta = provenance({**spec_meta(spec), "script": f"experiments.{name}", "device": "model (no GPU)",
                       "parameters": params})
    write_results(points, args.out, f"{name}_points", meta)
    csv_path, _ = write_results(summaries, args.out, name, meta)
    print()
    print_table(summaries, ["layer", "C", "K", "nonfused_us", "default_us", "best_us", "best_D_IG", "best_M",
                            "speedup_default", "speedup_best", "speedup_best_vs_grouped_gemm", "l2_hit_nonfused",
                            "l2_hit_best"])
    return csv_path


RESNET_LAYERS = ("resnet-1", "resnet-2", "resnet-3", "resnet-4")


def normalise(points: list[dict[str, Any]]) -> None:
    """Add norm_time (predicted time / the layer's best valid time; 1 = best) and is_best to each point."""
    best: dict[str, float] = {}
    for p in points:
        if p["valid"]:
            best[p["layer"]] = min(best.get(p["layer"], float("inf")), p["predicted_us"])
    for p in points:
        ok = p["valid"] and p["layer"] in best
        p["norm_time"] = round(p["predicted_us"] / best[p["layer"]], 4) if ok else ""
        p["is_best"] = bool(ok and p["predicted_us"] == best[p["layer"]])
