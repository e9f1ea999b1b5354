"""Benchmark of the sweep engine's scaling: one sweep of more than 10,000 simulations run on a Dask
LocalCluster of 1 and of 2 worker processes (and any other counts given), in one run, on one machine.

Produces: DIR/sweep_scaling.csv and DIR/sweep_scaling.json (default DIR =
experiments/results/sweep_scaling; the JSON holds the rows and the metadata: CPU model, usable cores,
load average before and after, Python/NumPy/SimPy/Dask/distributed/pyarrow versions, git SHA, date,
the sweep's definition and hash). One row per worker count: points, simulations (rows ok), failed,
batches, cluster_start_s (LocalCluster up, workers ready), sweep_s (``run_sweep`` on that cluster),
total_s (both), simulations per second, worker_cpu_s (the workers' CPU time in the points) and
cpu_share (worker_cpu_s / (workers x sweep_s): near 1 when each worker had a core to itself; on a
machine shared with other work it shows how much of a core each got), and the speedup over the first
count (on sweep_s and on total_s). Then the same sweep is run again on the last table: ``repeat_added`` must be 0 (a repeated
run adds nothing), and ``identical`` says whether every count's table holds the same predictions.

The sweep: the paper's 13 Table-2 layers at batch 1 and at batch 2 (free specs, so the batch is part
of each problem), on the five GPU presets and the two calibrated specs, each under Winograd's
``algorithm1`` space (every valid Algorithm 1 point), the non-fused and naive schedules at t = 32 and
64, and the dense direct convolution at three filter tiles: about 12,500 simulations of 1-150 ms.
Issue 45's bar: 2 workers at least 1.8x faster than 1 on a 2-core machine (sweep_s), the repeat adding
nothing. Timings on a shared machine are noisy: the load average is recorded beside them.
Runs on: any CPU. Takes: 216 s with 1 worker and 108 s with 2 on the quiet 2-core VM (2026-11-28;
--quick: the resnet layers at batch 1 on two presets, 368 simulations, ~10 s in all).

    python -m experiments.benchmarks.sweep_scaling [--quick] [--workers 1,2] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.provenance import provenance, write_results

GPUS = ("V100", "A100", "RTX3090", "H100", "H200", "megasim/hardware/calibrated/h200.json",
        "megasim/hardware/calibrated/h100_from_h200.json")
QUICK_GPUS = ("H100", "A100")
BATCHES = (1, 2)
TARGET_SPEEDUP_2 = 1.8


def sweep_definition(quick: bool) -> dict[str, Any]:
    """The sweep as the dict a TOML sweep file parses to (megasim.sweep.spec)."""
    from megasim.workloads import TABLE2_NAMES, parse_layer
    layers = [n for n in TABLE2_NAMES if n.startswith("resnet")] if quick else list(TABLE2_NAMES)
    batches = (1,) if quick else BATCHES
    problems = [parse_layer(name, batch=b).spec_string() for b in batches for name in layers]
    return {"name": "sweep_scaling", "problems": problems, "gpus": list(QUICK_GPUS if quick else GPUS),
            "runs": [{"algorithm": "winograd", "space": "algorithm1"},
                     {"algorithm": "winograd", "schedules": ["nonfused", "naive"], "grid": {"t": [32, 64]}},
                     {"algorithm": "direct", "param": "sparsity=0", "grid": {"k_tile": [8, 16, 32]}}]}


def _versions() -> dict[str, str | None]:
    from importlib import metadata
    out = {}
    for name in ("dask", "distributed", "pyarrow"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def run_once(sweep, workers: int, table: Path) -> dict[str, Any]:
    """One run of the sweep into a fresh table on a fresh LocalCluster of `workers` processes."""
    from distributed import Client
    from megasim.sweep import run_sweep
    from megasim.sweep.cluster import local_cluster
    start = time.perf_counter()
    cluster = local_cluster(workers)
    try:
        with Client(cluster) as client:
            client.wait_for_workers(workers)
            client.run(__import__, "megasim.sweep.evaluate")     # imports done before the clock starts
            ready = time.perf_counter()
            summary = run_sweep(sweep, client, out=table)
            done = time.perf_counter()
    finally:
        cluster.close()
    from megasim.sweep.table import read_table
    rows = read_table(table)
    ok = sum(r["status"] == "ok" for r in rows)
    cpu = sum(r["sim_cpu_s"] or 0.0 for r in rows)
    return {"workers": workers, "points": summary.points, "simulations": ok, "failed": summary.failed,
            "batches": summary.batches, "cluster_start_s": round(ready - start, 3),
            "sweep_s": round(done - ready, 3), "total_s": round(done - start, 3),
            "simulations_per_s": round(ok / (done - ready), 1), "worker_cpu_s": round(cpu, 1),
            "cpu_share": round(cpu / (workers * (done - ready)), 3), "table": str(table)}


def predictions(table: Path) -> dict[str, float | None]:
    from megasim.sweep.table import read_table
    return {r["point_key"]: r["predicted_us"] for r in read_table(table)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small sweep (368 simulations) to check the script")
    ap.add_argument("--workers", default="1,2", help="worker counts to run, comma-separated (default 1,2)")
    ap.add_argument("--out", type=Path, default=Path("experiments/results/sweep_scaling"))
    args = ap.parse_args(argv)
    try:
        counts = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        raise SystemExit(f"sweep_scaling: --workers {args.workers!r} is not allowed: give counts such as 1,2") from None
    if not counts or min(counts) < 1:
        raise SystemExit(f"sweep_scaling: --workers {args.workers!r} is not allowed: give counts >= 1")
    from megasim.sweep import parse_sweep
    definition = sweep_definition(args.quick)
    sweep = parse_sweep(definition)
    load_before = os.getloadavg()
    rows, tables = [], []
    with tempfile.TemporaryDirectory(prefix="sweep_scaling_") as tmp:
        for workers in counts:
            table = Path(tmp) / f"w{workers}.parquet"
            from megasim.sweep.table import have_pyarrow
            if not have_pyarrow():
                table = table.with_suffix(".csv")
            row = run_once(sweep, workers, table)
            tables.append(table)
            rows.append(row)
            print(f"  {workers} worker(s): {row['simulations']:,} simulations ({row['failed']} failed) in "
                  f"{row['sweep_s']:.1f} s + {row['cluster_start_s']:.1f} s start, "
                  f"{row['simulations_per_s']:,.0f} /s, {row['batches']} batches, CPU share {row['cpu_share']:.2f}",
                  flush=True)
        from megasim.sweep import run_sweep
        repeat = run_sweep(sweep, workers=counts[-1], out=tables[-1])
        first = predictions(tables[0])
        identical = all(predictions(t) == first for t in tables[1:])
    load_after = os.getloadavg()
    base = rows[0]
    for row in rows:
        row["speedup_sweep"] = round(base["sweep_s"] / row["sweep_s"], 3)
        row["speedup_total"] = round(base["total_s"] / row["total_s"], 3)
        row.pop("table")
    two = next((r for r in rows if r["workers"] == 2), None)
    summary = {"simulations": base["simulations"], "repeat_added": repeat.evaluated, "identical": identical,
               "speedup_2_workers": two["speedup_sweep"] if two and base["workers"] == 1 else None,
               "target_speedup_2_workers": TARGET_SPEEDUP_2,
               "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
               "load_average_before": [round(x, 2) for x in load_before],
               "load_average_after": [round(x, 2) for x in load_after]}
    meta = provenance({"script": "experiments.benchmarks.sweep_scaling", "device": "CPU (model only)",
                       "versions_dask": _versions(), "sweep": definition, "sweep_hash": sweep.hash,
                       "quick": args.quick, "summary": summary})
    csv_path, json_path = write_results(rows, args.out, "sweep_scaling", meta)
    print(f"sweep_scaling: {summary['simulations']:,} simulations; speedup with 2 workers "
          f"{summary['speedup_2_workers']} (target {TARGET_SPEEDUP_2}); repeat added {repeat.evaluated}; "
          f"identical predictions: {identical}; load average {summary['load_average_before']} -> "
          f"{summary['load_average_after']}")
    print(f"sweep_scaling: wrote {csv_path} and {json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
