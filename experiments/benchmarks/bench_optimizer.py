"""Benchmark of the optimiser (docs/optimizer.md): does the default strategy find the optimum of the
default space within 1%, with at most 200 evaluations and 60 s per layer on a 2-core machine?

Produces (DIR = experiments/results/model):
- DIR/bench_optimizer.csv/.json: per Table-2 layer (batch 64, H100 preset): the exhaustive optimum
  of the default space, the default strategy's best from an EMPTY cache with `--workers` processes
  (its wall time is honest), evaluations, wall time, gap = found / optimum - 1;
- DIR/bench_optimizer_replay.csv/.json: every strategy replayed against the exhaustive caches
  (full and low fidelity) with 3 seeds and budgets 25/50/100/200: distance to the optimum;
- DIR/optimizer_landscape_resnet-1.csv/.png: the exhaustive landscape of one layer and its plot;
- DIR/optimizer_cache/LAYER.json (+ LAYER.bN.json, the low-fidelity batch): Kernel Tuner cache files
  of the exhaustive runs; reruns replay them instead of simulating.
Runs on: any CPU. Takes: ~20 min on a 2-core VM the first time (the exhaustive runs), ~6 min after.

    python -m experiments.benchmarks.bench_optimizer [--layers a,b] [--workers 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from experiments.provenance import provenance, write_results
from megasim.hardware import get_gpu
from megasim.search.cache import device_name
from megasim.search.landscape import plot_landscape, write_landscape
from megasim.algorithms.winograd.space import algorithm1_space
from megasim.search import (STRATEGIES, CacheEvaluator, SimulatorEvaluator, optimize,
                            run_search)
from megasim.search.strategies import DEFAULT_STRATEGY
from megasim.workloads import TABLE2_NAMES, parse_layer

BUDGET = 200
REPLAY_BUDGETS = (25, 50, 100, 200)
SEEDS = (0, 1, 2)


def _loadavg() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def exhaustive(layer: str, gpu: str, cache_dir: Path, workers: int, low_too: bool = True):
    """(optimum record, full cache path, low cache path or None, wall s, points); replays the cache if present."""
    problem, spec = parse_layer(layer), get_gpu(gpu)
    path = cache_dir / f"{layer}.json"
    for stale in [path, *cache_dir.glob(f"{layer}.b*.json")]:   # another model version: set aside, recompute
        if stale.exists() and json.loads(stale.read_text()).get("device_name") != device_name(spec):
            stale.replace(stale.with_suffix(".stale"))
    start = time.perf_counter()
    with SimulatorEvaluator(problem, spec, algorithm1_space(), workers=workers, cache_path=path) as ev:
        exhaustive.device = ev.device
        full = run_search(ev.space, ev, "exhaustive", ev.space.size)
        low = ev.coarse() if low_too else None
        low_path = None
        if low is not None:
            run_search(ev.space, low, "exhaustive", ev.space.size)
            low_path = low.cache_path
    return full.best, path, low_path, time.perf_counter() - start, full.evaluations


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(TABLE2_NAMES))
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="experiments/results/model")
    parser.add_argument("--landscape-layer", default="resnet-1")
    parser.add_argument("--exhaustive-only", action="store_true", help="only fill the exhaustive caches")
    args = parser.parse_args(argv)
    from experiments.layer_args import checked_layers
    checked_layers(args.layers.split(","), parser.error)   # every layer named is a problem, before any work
    out = Path(args.out)
    cache_dir = out / "optimizer_cache"
    spec = get_gpu(args.gpu)
    rows, replay = [], []
    print(f"{'layer':11s} {'optimum_us':>10s} {'found_us':>9s} {'gap_%':>6s} {'evals':>5s} {'sims':>5s} "
          f"{'wall_s':>6s} {'load':>5s}  best params")
    for layer in args.layers.split(","):
        if args.exhaustive_only:
            opt, *_, ex_wall, ex_evals = exhaustive(layer, args.gpu, cache_dir, args.workers, low_too=False)
            print(f"{layer:11s} {opt.time_us:10.1f} exhaustive: {ex_evals} points in {ex_wall:.0f} s", flush=True)
            continue
        opt, path, low_path, ex_wall, ex_evals = exhaustive(layer, args.gpu, cache_dir, args.workers)
        load_before = _loadavg()
        with tempfile.TemporaryDirectory() as tmp:   # empty cache: an honest wall time
            res = optimize(parse_layer(layer), spec, strategy=DEFAULT_STRATEGY, budget=BUDGET,
                           workers=args.workers, cache_path=Path(tmp) / "c.json", seed=0)
        gap = res.best.time_us / opt.time_us - 1
        row = {"layer": layer, "gpu": args.gpu, "batch": parse_layer(layer).n, "space_points": ex_evals,
               "optimum_us": round(opt.time_us, 3), "optimum_params": opt.extras.get("param"),
               "strategy": DEFAULT_STRATEGY, "budget": BUDGET, "found_us": round(res.best.time_us, 3),
               "found_params": res.best.extras.get("param"), "gap_pct": round(100 * gap, 3),
               "evaluations": res.evaluations, "simulated": res.simulated,
               "full_fidelity_evals": len(res.full_fidelity()), "wall_s": round(res.wall_s, 2),
               "workers": args.workers, "loadavg_1min_before": load_before, "loadavg_1min_after": _loadavg(),
               "exhaustive_wall_s": round(ex_wall, 1), "cache_device_name": exhaustive.device}
        rows.append(row)
        print(f"{layer:11s} {row['optimum_us']:10.1f} {row['found_us']:9.1f} {row['gap_pct']:6.2f} "
              f"{row['evaluations']:5d} {row['simulated']:5d} {row['wall_s']:6.1f} {load_before:5.2f}  "
              f"{row['found_params']}", flush=True)
        space = algorithm1_space().bind(parse_layer(layer))
        if layer == args.landscape_layer:   # the exhaustive landscape of one layer, CSV + plot
            full = run_search(space, CacheEvaluator(space, path), "exhaustive", space.size)
            csv_path = write_landscape(full.records, space.names, out / f"optimizer_landscape_{layer}.csv")
            plot_landscape(csv_path, out / f"optimizer_landscape_{layer}.png",
                           title=f"{layer}, batch 64, {args.gpu}: default space, exhaustive")
        for strategy in STRATEGIES:
            for budget in REPLAY_BUDGETS:
                for seed in SEEDS:
                    ev = CacheEvaluator(space, path, low_path)
                    r = run_search(space, ev, strategy, budget, seed=seed)
                    replay.append({"layer": layer, "strategy": strategy, "budget": budget, "seed": seed,
                                   "evaluations": r.evaluations,
                                   "found_us": round(r.best.time_us, 3) if r.best else None,
                                   "gap_pct": round(100 * (r.best.time_us / opt.time_us - 1), 3) if r.best else None})
    if args.exhaustive_only:
        return rows
    meta = provenance({"benchmark": "bench_optimizer", "gpu_preset": args.gpu, "budget": BUDGET,
                       "workers": args.workers, "cpu_count": os.cpu_count(), "space": "default",
                       "default_strategy": DEFAULT_STRATEGY, "device_name_at_end": device_name(spec)})
    write_results(rows, out, "bench_optimizer", meta)
    write_results(replay, out, "bench_optimizer_replay", meta)
    print("\nreplay (mean gap % over layers and seeds):")
    for strategy in STRATEGIES:
        cells = []
        for budget in REPLAY_BUDGETS:
            gaps = [r["gap_pct"] for r in replay if r["strategy"] == strategy and r["budget"] == budget
                    and r["gap_pct"] is not None]
            cells.append(f"{budget}: {sum(gaps) / max(1, len(gaps)):6.2f}")
        print(f"  {strategy:14s} " + "  ".join(cells))
    return rows


if __name__ == "__main__":
    main()
