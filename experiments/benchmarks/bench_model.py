"""Benchmark of the model: predicted fused and non-fused times for the paper's 13 Table-2 layers
(batch 64, H100 preset), and the simulator's own speed and memory.

Produces: DIR/bench_model.csv and .json (default DIR = experiments/results/model), one row per
(layer, schedule): predicted_us, tasks, sim_s (engine: setup + event loop + result), total_s (lowering
+ mapping + simulation), tasks_per_s (tasks / sim_s), events_per_task, peak_rss_mb (the peak resident
memory of a fresh process that did only that row).
Runs on: any CPU, one core per row (rows run one after another, each in its own process).
Takes: about a minute (--quick: 4 layers at batch 8, seconds).

    python -m experiments.benchmarks.bench_model [--quick] [--out DIR] [--gpu H100]
"""

from __future__ import annotations

import argparse
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from experiments.provenance import provenance, write_results


def _one(layer: str, schedule: str, gpu: str, batch: int) -> dict:
    from megasim.hardware import get_gpu
    from megasim.plan import Plan, build
    from megasim.sim import simulate
    from megasim.workloads import parse_layer

    start = time.perf_counter()
    graph, sched, plan = build(parse_layer(layer, batch=batch), Plan(schedule))
    result = simulate(graph, sched, get_gpu(gpu))
    total = time.perf_counter() - start
    return {"layer": layer, "schedule": schedule, "gpu": gpu, "batch": batch, "params": plan.param_string(),
            "predicted_us": round(result.predicted_us, 3), "tasks": result.num_tasks,
            "sim_s": round(result.sim_wall_s, 4), "total_s": round(total, 4),
            "tasks_per_s": round(result.num_tasks / result.sim_wall_s),
            "events_per_task": round(result.events / result.num_tasks, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "l2_hit_rate": round(result.l2_hit_rate, 4), "taskgraph_hash": result.taskgraph_hash}


def main(argv: list[str] | None = None) -> list[dict]:
    from megasim.workloads import TABLE2_NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="experiments/results/model")
    parser.add_argument("--gpu", default="H100")
    args = parser.parse_args(argv)
    layers = ["resnet-1", "resnet-4", "yolov3-5", "densenet-1"] if args.quick else list(TABLE2_NAMES)
    batch = 8 if args.quick else 64
    rows = []
    print(f"{'layer':12s} {'schedule':9s} {'predicted_us':>12s} {'tasks':>8s} {'sim_s':>7s} {'total_s':>7s} "
          f"{'tasks/s':>8s} {'ev/task':>7s} {'rss_MB':>7s}")
    for layer in layers:
        for schedule in ("nonfused", "fused"):
            with ProcessPoolExecutor(max_workers=1, max_tasks_per_child=1) as pool:
                row = pool.submit(_one, layer, schedule, args.gpu, batch).result()
            rows.append(row)
            print(f"{layer:12s} {schedule:9s} {row['predicted_us']:12.1f} {row['tasks']:8d} {row['sim_s']:7.2f} "
                  f"{row['total_s']:7.2f} {row['tasks_per_s']:8d} {row['events_per_task']:7.2f} {row['peak_rss_mb']:7.0f}")
    total_tasks = sum(r["tasks"] for r in rows)
    total_sim = sum(r["sim_s"] for r in rows)
    print(f"all rows: {total_tasks} tasks in {total_sim:.1f} s of simulation = {total_tasks / total_sim:,.0f} tasks/s")
    meta = provenance({"benchmark": "bench_model", "gpu_preset": args.gpu, "batch": batch, "quick": args.quick,
                       "tasks_per_s_overall": round(total_tasks / total_sim)})
    write_results(rows, Path(args.out), "bench_model", meta)
    return rows


if __name__ == "__main__":
    main()
