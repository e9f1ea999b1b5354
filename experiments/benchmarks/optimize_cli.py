"""Benchmark of `megasim optimize` as a user runs it: one command per Table-2 layer, its wall time and the
peak memory of the command and its worker processes together.

Each layer runs ``megasim optimize LAYER --gpu H100 --budget 200 --json`` (the default strategy and
space, the default workers) as a fresh process; a thread here samples the proportional set size (PSS) of
that process and all its descendants every 50 ms and keeps the peak of their sum (so memory shared
between them counts once). Issue 42's bars: at most 15 s and 400 MB on any Table-2 layer, 200 distinct
points evaluated.

Produces: DIR/optimize_cli.csv and DIR/optimize_cli.json (default DIR = experiments/results/model): per
layer, wall_s (the process, start to exit), search_wall_s (what the command reports), evaluations,
simulated, predicted_us and the best parameters, peak_pss_mb; the metadata (CPU, versions, git SHA, date).
Runs on: Linux (it reads /proc). Takes: about 2 minutes on a 2-core VM.

    python -m experiments.benchmarks.optimize_cli [--layers resnet-1,vgg-1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from experiments.provenance import provenance, write_results

BUDGET = 200
TARGETS = {"wall_s": 15.0, "peak_pss_mb": 400.0, "evaluations": BUDGET}


def tree_pss_kb(root: int) -> int:
    """The summed PSS (kB) of process `root` and all its descendants; processes that end meanwhile count 0."""
    pids, total = [root], 0
    while pids:
        pid = pids.pop()
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    pids.extend(int(c) for c in fh.read().split())
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
        except (OSError, StopIteration, ValueError):
            continue
    return total


def run_layer(layer: str, gpu: str) -> dict:
    """One `megasim optimize` process: its wall time, peak summed PSS and its JSON answer."""
    cmd = [sys.executable, "-c", "import sys; from megasim.cli.main import main; sys.exit(main())",
           "optimize", layer, "--gpu", gpu, "--budget", str(BUDGET), "--json"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_pss_kb(proc.pid))
            done.wait(0.05)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"megasim optimize {layer} failed ({proc.returncode}): {err.strip().splitlines()[-1:]}")
    answer = json.loads(out)
    return {"layer": layer, "gpu": gpu, "budget": BUDGET, "wall_s": round(wall, 2),
            "search_wall_s": answer.get("wall_s"), "evaluations": answer.get("evaluations"),
            "simulated": answer.get("simulated"), "full_fidelity_evaluations": answer.get("full_fidelity_evaluations"),
            "predicted_us": round(answer["predicted_us"], 3), "best_params": answer.get("params"),
            "peak_pss_mb": round(peak[0] / 1024, 1)}


def main(argv: list[str] | None = None) -> list[dict]:
    from megasim.workloads import TABLE2_NAMES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(TABLE2_NAMES))
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--out", default="experiments/results/model")
    args = parser.parse_args(argv)
    from experiments.layer_args import checked_layers
    layers = args.layers.split(",")
    checked_layers(layers, parser.error)
    if not os.path.exists("/proc/self/smaps_rollup"):
        parser.error("this benchmark reads /proc/<pid>/smaps_rollup (Linux)")
    rows = []
    print(f"{'layer':11s} {'wall_s':>7s} {'evals':>5s} {'sims':>5s} {'MB':>6s} {'us':>10s}  best")
    for layer in layers:
        row = run_layer(layer, args.gpu)
        rows.append(row)
        print(f"{layer:11s} {row['wall_s']:7.2f} {row['evaluations']!s:>5s} {row['simulated']!s:>5s} "
              f"{row['peak_pss_mb']:6.0f} {row['predicted_us']:10.2f}  {row['best_params']}", flush=True)
    summary = {"max_wall_s": max(r["wall_s"] for r in rows), "max_peak_pss_mb": max(r["peak_pss_mb"] for r in rows),
               "min_evaluations": min(r["evaluations"] or 0 for r in rows), "targets": TARGETS}
    print(f"slowest {summary['max_wall_s']:.1f} s (target {TARGETS['wall_s']}), most memory "
          f"{summary['max_peak_pss_mb']:.0f} MB (target {TARGETS['peak_pss_mb']:.0f})")
    meta = provenance({"benchmark": "optimize_cli", "gpu": args.gpu, "budget": BUDGET, "cpu_count": os.cpu_count(),
                       "summary": summary})
    write_results(rows, Path(args.out), "optimize_cli", meta)
    return rows


if __name__ == "__main__":
    main()
