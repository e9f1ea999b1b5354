"""Benchmark of the simulator's speed against SimPy itself: the engine's tasks/s on the 13 Table-2
layers, relative to the events/s of a plain SimPy timeout loop on the same machine, in one run.

Produces: DIR/simulator_speed.csv and DIR/simulator_speed.json (default DIR =
experiments/results/simulator_speed; the JSON holds the same rows and the metadata: CPU model, core
count, Python/NumPy/SimPy versions, git SHA, date, the reference's events/s and the summary below).
One row per (engine, spec, layer, schedule), each in a fresh process: engine_start_s and
engine_start_mb (a first, tiny simulation: with the compiled engine, Numba's start and loading the
cached loop, about 0.35 s and 130 MB once per process; with SimPy's, nothing to speak of), tasks,
build_s (lowering + task order), first_sim_s (the first ``simulate`` of the layer), sim_s (a second,
identical ``simulate``: the engine's own speed, as the reference is timed after its start-up), total_s
(build + first simulate), tasks_per_s (tasks / sim_s), its ratio to the reference's events/s,
predicted_us (the two engines must agree to the last bit), peak_rss_mb and rss_per_task_bytes (the
peak resident memory of the process, less its memory once the engine had started, per task). One more
row per engine times the memory of a 313,632-task run (``MEMORY_RUN``, preset; not in the geometric
means). Engines (``--engines``): ``compiled``
(``megasim.sim.compiled_loop``, what ``simulate`` runs by default) and ``simpy`` (the handlers on
SimPy's queue, ``SimOptions(engine="simpy")``).

The reference: ``REFERENCE_PROCESSES`` SimPy processes, each ``yield env.timeout(1)`` in a loop, run
for about ``--reference-s`` seconds of wall time, best of ``REFERENCE_REPEATS`` (the least disturbed).
The summary, per engine: the geometric mean of tasks/s over the preset's 26 rows (13 layers, fused and
non-fused) and over the calibrated spec's 26, each divided by the reference's events/s; issue 42's targets are
>= 0.4 (preset) and >= 0.25 (calibrated), vgg-1 fused with the calibrated spec in <= 1 s of
simulation, and <= 0.5 KB per task on the largest run.
Runs on: any CPU; rows one after another, each in its own process (one core).
Takes: about 10 minutes (104 rows, most of it the SimPy engine's; --quick: 2 layers at batch 4, about 20 s).

    python -m experiments.benchmarks.simulator_speed [--quick] [--out DIR] [--gpu H100]
        [--calibrated megasim/hardware/calibrated/h100_from_h200.json] [--engines compiled,simpy]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from experiments.provenance import provenance, write_results

REFERENCE_PROCESSES = 100
REFERENCE_REPEATS = 3
CALIBRATED = "megasim/hardware/calibrated/h100_from_h200.json"   # the calibrated H100 (H200 costs, H100 measured)
QUICK_LAYERS = ("resnet-4", "yolov3-5")
MEMORY_RUN = ("vgg16/conv1_2", "nonfused")     # issue 42: at most 0.5 KB per task on a run of 300k tasks
ENGINES = ("compiled", "simpy")
TARGETS = {"preset_ratio": 0.4, "calibrated_ratio": 0.25, "vgg1_fused_calibrated_s": 1.0, "bytes_per_task": 512}


def simpy_events_per_s(seconds: float, processes: int = REFERENCE_PROCESSES) -> float:
    """Events/s of `processes` SimPy processes that each time out for 1 time unit in a loop, run in
    slices of simulated time until `seconds` of wall time have passed."""
    import simpy

    env = simpy.Environment()
    count = [0]

    def ticker(env):
        while True:
            yield env.timeout(1)
            count[0] += 1

    for _ in range(processes):
        env.process(ticker(env))
    env.run(until=1)      # start-up events are not timed
    count[0] = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        env.run(until=env.now + 100)
    return count[0] / elapsed


def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _one(engine: str, layer: str, schedule: str, spec_name: str, spec_source: str, batch: int | None) -> dict:
    """One row, in a fresh process: build, then simulate twice, timed apart."""
    from megasim.hardware import get_gpu, load_spec
    from megasim.plan import Plan, build
    from megasim.sim import SimOptions, simulate
    from megasim.workloads import parse_layer

    spec = load_spec(spec_source) if spec_source.endswith(".json") else get_gpu(spec_source)
    problem = parse_layer(layer, batch=batch) if batch else parse_layer(layer)
    options = SimOptions(engine=engine)
    rss_start = _current_rss_bytes()
    start = time.perf_counter()
    simulate(*build(parse_layer("N=1,C=8,K=8,H=6,W=6"), Plan(schedule), spec)[:2], spec, options)
    engine_start_s = time.perf_counter() - start
    rss_before = _current_rss_bytes()
    start = time.perf_counter()
    graph, sched, plan = build(problem, Plan(schedule), spec)
    built = time.perf_counter()
    first = simulate(graph, sched, spec, options)
    done = time.perf_counter()
    del first
    again = time.perf_counter()
    result = simulate(graph, sched, spec, options)
    sim_s = time.perf_counter() - again
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tasks = int(graph.num_tasks)
    return {"engine": engine, "spec": spec_name, "layer": layer, "schedule": schedule, "batch": problem.n,
            "engine_start_s": round(engine_start_s, 4), "engine_start_mb": round((rss_before - rss_start) / 2**20, 1),
            "tasks": tasks, "build_s": round(built - start, 4), "first_sim_s": round(done - built, 4),
            "sim_s": round(sim_s, 4), "total_s": round(done - start, 4), "tasks_per_s": round(tasks / sim_s),
            "predicted_us": float(plan.algo.time_us(result)), "peak_rss_mb": round(peak / 2**20, 1),
            "rss_per_task_bytes": round(max(0, peak - rss_before) / tasks, 1)}


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _one_in_fresh_process(*args) -> dict:
    """``_one(*args)`` in a Python process of its own, one row at a time: its start-up and peak memory are
    that row's alone."""
    code = ("import json, sys; from experiments.benchmarks.simulator_speed import _one; "
            "print(json.dumps(_one(*json.loads(sys.argv[1]))))")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"row {args} failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    from megasim.workloads import TABLE2_NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"layers {', '.join(QUICK_LAYERS)} at batch 4")
    parser.add_argument("--out", default="experiments/results/simulator_speed")
    parser.add_argument("--gpu", default="H100", help="the preset (default H100)")
    parser.add_argument("--calibrated", default=CALIBRATED, help=f"the calibrated spec file (default {CALIBRATED})")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help=f"engines to time, comma-separated (default {','.join(ENGINES)})")
    parser.add_argument("--reference-s", type=float, default=None,
                        help="wall seconds of each SimPy reference run (default 1.5; --quick 0.2)")
    args = parser.parse_args(argv)
    reference_s = args.reference_s if args.reference_s is not None else (0.2 if args.quick else 1.5)
    if not reference_s > 0:
        parser.error(f"--reference-s={reference_s} is not allowed: it must be > 0")
    from megasim.errors import MegasimError
    from megasim.hardware import get_gpu, load_spec
    for flag, source in (("--gpu", args.gpu), ("--calibrated", args.calibrated)):
        try:        # checked here, before any work, not in the first worker
            load_spec(source) if source.endswith(".json") else get_gpu(source)
        except (MegasimError, OSError) as exc:
            parser.error(f"{flag} {source!r}: {exc}")
    engines = tuple(e.strip() for e in args.engines.split(","))
    if not engines or any(e not in ENGINES for e in engines) or len(set(engines)) != len(engines):
        parser.error(f"--engines={args.engines!r} is not allowed: give some of {', '.join(ENGINES)}, comma-separated, once each")
    layers = QUICK_LAYERS if args.quick else tuple(TABLE2_NAMES)
    batch = 4 if args.quick else None

    refs = [simpy_events_per_s(reference_s) for _ in range(REFERENCE_REPEATS)]
    reference = max(refs)
    print(f"SimPy reference: {reference:,.0f} events/s (best of {', '.join(f'{r:,.0f}' for r in refs)}; "
          f"{REFERENCE_PROCESSES} processes, {reference_s} s each)")
    specs = (("preset", args.gpu), ("calibrated", args.calibrated))
    rows = []
    print(f"{'engine':8s} {'spec':10s} {'layer':13s} {'schedule':9s} {'tasks':>8s} {'build_s':>7s} {'first_s':>7s} "
          f"{'sim_s':>7s} {'tasks/s':>10s} {'x SimPy':>7s} {'B/task':>7s}")
    runs = [(spec_name, source, layer, schedule, batch) for spec_name, source in specs for layer in layers
            for schedule in ("fused", "nonfused")]
    if not args.quick:
        runs.append(("memory", args.gpu, *MEMORY_RUN, None))
    for engine in engines:
        for spec_name, source, layer, schedule, row_batch in runs:
            row = _one_in_fresh_process(engine, layer, schedule, spec_name, source, row_batch)
            row["ratio_to_simpy"] = round(row["tasks_per_s"] / reference, 4)
            rows.append(row)
            print(f"{engine:8s} {spec_name:10s} {layer[:13]:13s} {schedule:9s} {row['tasks']:8d} {row['build_s']:7.2f} "
                  f"{row['first_sim_s']:7.2f} {row['sim_s']:7.3f} {row['tasks_per_s']:10,d} "
                  f"{row['ratio_to_simpy']:7.3f} {row['rss_per_task_bytes']:7.0f}", flush=True)

    summary: dict = {"simpy_events_per_s": round(reference), "simpy_events_per_s_runs": [round(r) for r in refs]}
    for engine in engines:
        for spec_name, _ in specs:
            mine = [r for r in rows if r["spec"] == spec_name and r["engine"] == engine]
            gm = _geomean([r["tasks_per_s"] for r in mine])
            summary[f"{engine}_{spec_name}_runs"] = len(mine)
            summary[f"{engine}_{spec_name}_geomean_tasks_per_s"] = round(gm)
            summary[f"{engine}_{spec_name}_ratio"] = round(gm / reference, 4)
        vgg = [r for r in rows if r["engine"] == engine and r["spec"] == "calibrated" and r["layer"] == "vgg-1"
               and r["schedule"] == "fused"]
        summary[f"{engine}_vgg1_fused_calibrated_sim_s"] = vgg[0]["sim_s"] if vgg else None
        summary[f"{engine}_vgg1_fused_calibrated_first_sim_s"] = vgg[0]["first_sim_s"] if vgg else None
        largest = max((r for r in rows if r["engine"] == engine), key=lambda r: r["tasks"])   # the memory run
        summary[f"{engine}_engine_start_s"] = max(r["engine_start_s"] for r in rows if r["engine"] == engine)
        summary[f"{engine}_engine_start_mb"] = max(r["engine_start_mb"] for r in rows if r["engine"] == engine)
        summary[f"{engine}_largest_run"] = f"{largest['spec']} {largest['layer']} {largest['schedule']} ({largest['tasks']} tasks)"
        summary[f"{engine}_largest_run_bytes_per_task"] = largest["rss_per_task_bytes"]
        print(f"{engine}: geometric mean tasks/s / SimPy events/s: preset {summary[f'{engine}_preset_ratio']:.3f} "
              f"(target >= {TARGETS['preset_ratio']}), calibrated {summary[f'{engine}_calibrated_ratio']:.3f} "
              f"(target >= {TARGETS['calibrated_ratio']})")
        if vgg:
            print(f"{engine}: vgg-1 fused, calibrated: {vgg[0]['sim_s']:.2f} s of simulation, {vgg[0]['first_sim_s']:.2f} s "
                  f"the first time in its process (target <= {TARGETS['vgg1_fused_calibrated_s']} s)")
        print(f"{engine}: largest run, {summary[f'{engine}_largest_run']}: {largest['rss_per_task_bytes']:.0f} "
              f"bytes/task of peak RSS (target <= {TARGETS['bytes_per_task']})")
    mismatched = sorted({(r["spec"], r["layer"], r["schedule"]) for r in rows
                         if len({q["predicted_us"] for q in rows if (q["spec"], q["layer"], q["schedule"])
                                 == (r["spec"], r["layer"], r["schedule"])}) > 1})
    summary["engines_agree"] = not mismatched
    if mismatched:
        print(f"the engines' predictions differ on {mismatched}")
    meta = provenance({"benchmark": "simulator_speed", "cpu_count": os.cpu_count(),
                       "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                       "preset": args.gpu, "calibrated_spec": args.calibrated, "quick": args.quick, "engines": engines,
                       "batch": batch or "layer's own (64)", "reference_s": reference_s,
                       "reference_processes": REFERENCE_PROCESSES, "targets": TARGETS, "summary": summary})
    write_results(rows, Path(args.out), "simulator_speed", meta)
    return summary


if __name__ == "__main__":
    main()
