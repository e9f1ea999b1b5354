"""Both schedules of a bench run's layers, one run each inside a profiler range, for Nsight Compute.

What fusion can gain is bounded by what the fused megakernel must issue: an SM sub-partition issues at
most one warp instruction per cycle, so no schedule of the same task bodies runs faster than
(its warp instructions) / (4 x SMs x clock). ``experiments.studies.fusion.fusion_ceiling`` computes that bound from
the instruction counts this script lets ncu collect, and sets it beside the bench's measured times.

For each layer of a ``winograd_bench`` JSON this rebuilds the run's two implementations exactly as the
bench timed them: the fused megakernel at the layer's Winograd config (tile, pairs per thread) and its
best mapping (the faster of ``fused_sweep_best`` and ``fused_blockidx_best``), and the non-fused
pipeline at its config. It warms both up on rotated input sets (fresh normal inputs), checks that the
two agree, then runs the fused schedule once and the non-fused pipeline once between
``cuda.profile_start()`` and ``cuda.profile_stop()``; layers follow each other in the order of
``DIR/profile_manifest.json``, which lists per layer what ran. Run it under ncu, profiling only the
range, with caches and clocks left as they are (the pipeline's kernels find what the one before left
in L2, as when timed):

    bash gpu/on_device.sh ncu --profile-from-start off --cache-control none --clock-control none \\
        --csv --print-units base --metrics METRICS --log-file DIR/ncu.csv \\
        python -m gpu.diagnostics.profile_schedules --bench experiments/results/nvidia-h200/winograd_bench.json --out DIR

METRICS: ``experiments.studies.fusion.fusion_ceiling.NCU_METRICS``. Without ncu it runs the same (a check that the
rebuilt schedules run and agree).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

#: The two schedules' agreement must be within this normwise relative difference (both are FP32
#: Winograd at the same tile; the largest error against float64 at F(7x7) is 2.9e-5).
AGREE_REL = 1e-3


@dataclasses.dataclass(frozen=True)
class LayerRun:
    """One layer of a bench run, as the bench ran it: the problem, both configs, the best fused mapping."""

    layer: str
    problem_spec: str
    config_fused: dict
    config_nonfused: dict
    d_ig: int
    d_go: int
    m: int
    dispatch: str           # "ticket" or "blockidx": whichever of the two best rows was faster
    fused_ms: float         # the bench's median of that row
    nonfused_ms: float      # the bench's median of the non-fused row


def _row_ms(rows: list[dict], layer: str, impl: str) -> float:
    for r in rows:
        if r["layer"] == layer and r["impl"] == impl and r.get("status", "ok") == "ok":
            return float(r["median_ms"])
    return float("nan")


def layer_runs(bench: dict, layers: list[str] | None = None) -> list[LayerRun]:
    """The layers of a winograd_bench JSON (``read_bench_json``) that have a fused sweep best and a
    non-fused row; ValueError naming a requested layer the run lacks."""
    per_layer, rows = bench["meta"]["per_layer"], bench["rows"]
    names = layers or list(bench["meta"]["layers"])
    out = []
    for name in names:
        meta = per_layer.get(name)
        if meta is None or "fused_sweep_best" not in meta or "winograd_config_nonfused" not in meta:
            raise ValueError(f"layer {name!r} is not allowed: the bench run has no fused sweep and non-fused "
                             f"run of it (layers it has: {', '.join(k for k in per_layer if 'fused_sweep_best' in per_layer[k])})")
        ticket, blockidx = _row_ms(rows, name, "fused_sweep_best"), _row_ms(rows, name, "fused_blockidx_best")
        dispatch = "blockidx" if blockidx < ticket else "ticket"      # (NaN compares False: ticket)
        best = meta["fused_sweep_best"]
        out.append(LayerRun(name, meta["problem"], meta["winograd_config"], meta["winograd_config_nonfused"],
                            int(best["D_IG"]), int(best["D_GO"]), int(best["M"]), dispatch,
                            blockidx if dispatch == "blockidx" else ticket, _row_ms(rows, name, "nonfused")))
    return out


def run_layer(run: LayerRun, sets: int, warmup: int, seed: int, profile: bool) -> dict:
    """Check that both schedules agree, run each ``warmup`` more times on rotated inputs, then each once
    more (inside a profiler range with ``profile``). Returns the manifest entry."""
    from numba import cuda

    from gpu.runtime import executor as ex
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.algorithms.winograd.lowering import WinogradConfig
    from megasim.algorithms.winograd.algorithm1 import Algorithm1Params
    from megasim.algorithms.winograd.algorithm1 import algorithm1
    from megasim.algorithms.winograd import winograd_nonfused
    from megasim.workloads import parse_layer

    problem = parse_layer(run.problem_spec)
    cfg_f, cfg_nf = WinogradConfig(**run.config_fused), WinogradConfig(**run.config_nonfused)
    plan_f, plan_nf = ex.make_plan(problem, cfg_f), ex.make_plan(problem, cfg_nf)
    schedule = algorithm1(plan_f.graph, Algorithm1Params(run.d_ig, run.d_go, run.m))
    if run.dispatch != "ticket":
        schedule = schedule.with_style("per_task", run.dispatch)
    nonfused_schedule = winograd_nonfused(plan_nf.graph)
    fused = PreparedSchedule(plan_f, schedule, kernels="megakernel")
    nonfused = PreparedSchedule(plan_nf, nonfused_schedule, kernels="per_kind")
    rng = np.random.default_rng(seed)
    wss = []
    for _ in range(sets):      # both plans' workspaces have the same shapes (problem and tile)
        x = cuda.to_device(rng.standard_normal((problem.n, problem.h, problem.w, problem.c), dtype=np.float32))
        w = cuda.to_device(rng.standard_normal((problem.k, problem.c, 3, 3), dtype=np.float32))
        wss.append(ex.workspace(plan_f, x, w))
    fused.run(wss[0])
    y_fused = wss[0].Y.copy_to_host()
    fused.check()
    nonfused.run(wss[0])
    y_nonfused = wss[0].Y.copy_to_host()
    differ = float(np.linalg.norm(y_fused - y_nonfused) / np.linalg.norm(y_nonfused))
    if not differ <= AGREE_REL:
        raise RuntimeError(f"{run.layer}: the fused and non-fused outputs differ by {differ:.3g} (normwise; "
                           f"allowed {AGREE_REL:g})")
    for i in range(warmup):
        fused.run(wss[(i + 1) % sets])
        nonfused.run(wss[(i + 2) % sets])
    cuda.synchronize()
    if profile:
        cuda.profile_start()
    fused.run(wss[(warmup + 1) % sets])     # an input set the run before did not read
    cuda.synchronize()
    nonfused.run(wss[(warmup + 2) % sets])
    cuda.synchronize()
    if profile:
        cuda.profile_stop()
    fused.check()
    return {"layer": run.layer, "problem": run.problem_spec, "tile": cfg_f.m,
            "pairs_fused": cfg_f.transform_pairs_per_thread, "pairs_nonfused": cfg_nf.transform_pairs_per_thread,
            "mapping": {"D_IG": run.d_ig, "D_GO": run.d_go, "M": run.m, "dispatch": run.dispatch},
            "fused_launches": [lch.name for lch in schedule.launches if len(lch.order)],
            "nonfused_launches": [lch.name for lch in nonfused_schedule.launches if len(lch.order)],
            "bench_fused_ms": run.fused_ms, "bench_nonfused_ms": run.nonfused_ms, "fused_vs_nonfused_rel": differ}


def with_mapping(run: LayerRun, text: str) -> LayerRun:
    """The run at another fused mapping: ``text`` = "D_IG=..,D_GO=..,M=..[,dispatch=ticket|blockidx]" (the
    bench timed only its best, so the fused time becomes NaN); ValueError naming a bad item."""
    items = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
    unknown = set(items) - {"D_IG", "D_GO", "M", "dispatch"}
    if unknown or not {"D_IG", "D_GO", "M"} <= set(items) or len(items) != len(text.split(",")):
        raise ValueError(f"mapping {text!r} is not allowed: write D_IG=..,D_GO=..,M=.. and optionally dispatch=ticket|blockidx")
    dispatch = items.get("dispatch", "ticket")
    if dispatch not in ("ticket", "blockidx"):
        raise ValueError(f"mapping {text!r}: dispatch={dispatch!r} is not allowed (allowed: ticket, blockidx)")
    try:
        d_ig, d_go, m = int(items["D_IG"]), int(items["D_GO"]), int(items["M"])
    except ValueError:
        raise ValueError(f"mapping {text!r}: D_IG, D_GO and M must be integers") from None
    return dataclasses.replace(run, d_ig=d_ig, d_go=d_go, m=m, dispatch=dispatch, fused_ms=float("nan"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="a winograd_bench JSON (plain or .json.gz)")
    ap.add_argument("--layers", nargs="+", default=None, help="default: every layer of the bench run")
    ap.add_argument("--mappings", nargs="+", default=None,
                    help="fused mappings to profile instead of the bench's best, each D_IG=..,D_GO=..,M=..[,dispatch=..] "
                         "(every layer runs once per mapping; the bench has no time for them)")
    ap.add_argument("--sets", type=int, default=3, help="input sets rotated in the warm-up (default 3)")
    ap.add_argument("--warmup", type=int, default=6, help="runs of each schedule before the profiled one (default 6)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", default=None, help="where profile_manifest.json goes (default $OUT or .)")
    args = ap.parse_args(argv)
    if args.warmup < 0:
        ap.error(f"--warmup {args.warmup} is not allowed: it must be 0 or more")
    if args.sets < 2:
        ap.error(f"--sets {args.sets} is not allowed: it must be at least 2 (the profiled runs read inputs "
                 "the run before did not)")
    from numba import config

    from experiments.benchmarks.winograd_bench import read_bench_json
    try:
        bench = read_bench_json(args.bench)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--bench {args.bench}: {exc}")
    try:
        runs = layer_runs(bench, args.layers)
    except ValueError as exc:
        raise SystemExit(f"--layers: {exc}")
    if args.mappings:
        try:
            runs = [with_mapping(run, text) for run in runs for text in args.mappings]
        except ValueError as exc:
            raise SystemExit(f"--mappings: {exc}")
    from megasim.errors import MegasimError
    profile = not config.ENABLE_CUDASIM     # the simulator has no profiler
    entries = []
    for i, run in enumerate(runs):
        try:
            entry = run_layer(run, args.sets, args.warmup, args.seed + i, profile)
        except MegasimError as exc:
            raise SystemExit(f"{run.layer} at D_IG={run.d_ig},D_GO={run.d_go},M={run.m}: {exc}")
        entries.append(entry)
        print(f"{run.layer}: tile {entry['tile']}, fused pairs {entry['pairs_fused']} {entry['mapping']}, "
              f"fused and non-fused agree to {entry['fused_vs_nonfused_rel']:.2g}", flush=True)
    from numba import cuda

    from megasim.calibration.validation import run_meta
    dev = cuda.get_current_device()
    name = getattr(dev, "name", "the CUDA simulator")
    name = name.decode() if isinstance(name, bytes) else str(name)
    meta = run_meta({"device": name, "sm_count": int(getattr(dev, "MULTIPROCESSOR_COUNT", 0)) or None,
                     "bench": args.bench, "bench_git_sha": bench["meta"].get("git_sha"),
                     "command": "python -m gpu.diagnostics.profile_schedules " + " ".join(argv or sys.argv[1:])})
    out = Path(args.out or ".")
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile_manifest.json").write_text(json.dumps({"meta": meta, "layers": entries}, indent=1) + "\n")
    print(f"wrote {out / 'profile_manifest.json'}")


if __name__ == "__main__":
    main()
