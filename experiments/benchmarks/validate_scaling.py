"""Benchmark of a GPU validation sweep spread over the GPUs of one host: the same sweep measured on 1 GPU
(a one-worker ``megasim.sweep.gpus.gpu_cluster``) and then on all of them (one worker per GPU), in one
run, on one machine; issue 45's bar: 4 GPUs at least 3.5x faster than one of them, with the same
measurements within noise.

The sweep (defaults): the 13 Table-2 layers, 32 validation mappings each (``megasim validate``'s
plans), 30 timed runs per mapping and round, 6 rounds round-robin, 4 mappings per GPU task
(``gpu.calibrate.validate.measure_on_gpus``: the largest layers first, a worker staying on a layer's
chunks while other layers are left); the same sweep as
``megasim validate table2 --gpus all --mappings 32 --repeats 30 --rounds 6 --mappings-per-task 4``.
By default the timed sweeps are what ``megasim validate --gpus`` runs: no warm-up, each worker's first
tasks open its CUDA context and load the kernels; ``--warm-mappings N`` makes every worker first measure N
of the warm-up layer's plans once, timed apart (``warm_up_s``). Before both runs, with ``--kernel-cache warm``
(the default), a worker of its own compiles the warm-up layer's kernels (16 plans: every kernel variant the
sweep launches) into the on-disk kernel cache (``gpu.kernels.cache``: ``cache_fill_s``), as any earlier
command on the host would have (``--kernel-cache off``: every worker compiles). ``sweep_s`` is the sweep
alone, ``total_s`` from asking for the cluster until the sweep ends (start, warm-up if any, and sweep).
The bar on G GPUs is the 4-GPU bar's efficiency, 3.5 * G / 4 (``target_speedup``).

Agreement: per (layer, mapping), the ratio of its median time on the many-GPU run to that on the
one-GPU run (median, mean and max of |ratio - 1|). Noise: per mapping of each run, the median of its
even rounds over that of its odd rounds (the split-half ratio; each half has half the runs of a full
median, so it overstates a full median's noise by about sqrt(2) for independent runs, and it does not
hold the difference between two GPUs of the host, which the ratio does).

Produces, in DIR (default experiments/results/<device-slug>/validate_scaling): validate_scaling.csv and
.json (one row per GPU count: devices, cluster start, warm-up, sweep and total seconds, rows, rows per
device, speedups; the JSON's meta adds the devices from nvidia-smi and from each worker, driver,
versions, commit, date, the settings and the summary), validate_scaling_points.csv (one row per
mapping: both times, the ratio, the device, both split-half ratios), measured_<G>gpu.csv (the
measured rows of each run, ``validation_measured.csv``'s columns plus ``cuda_device``) and
validate_scaling_timeline.csv (one row per task and run: device, whether it was the worker's first chunk
of its layer, submitted / start / end / received seconds from the sweep's start, GPU time as medians x
runs and the rest, host work; the JSON's ``workers_idle`` sums it per worker: busy, idle before, between
and after its tasks).
Runs on: a host with several CUDA GPUs (``bash gpu/on_device.sh python3 -m
experiments.benchmarks.validate_scaling``, dask and distributed carried as wheels). Under Numba's
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, no GPU) ``--quick`` runs the same code on two simulated
devices with the host's clock (``gpu.runtime.timing.time_host``): a check of the script, not a timing.
Takes: 89.9 s with 1 GPU and 24.5 s with 4 on 4x H200 (2158c16, starts included, no warm-up; 175 s for the
whole command with the 37 s cache fill); 92.5 s with 1 GPU and 49.9 s with 2 on 2x H200 (3b913a2);
results and discussion in docs/sweeps.md; --quick on the simulator ~7 s.

    python -m experiments.benchmarks.validate_scaling [--quick] [--gpus all|0,1,..] [--kernel-cache warm|off]
        [--warm-mappings N] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.provenance import nvidia_smi, provenance, write_results

TARGET_SPEEDUP = 3.5        # issue 45's bar on 4 GPUs; on G GPUs the same efficiency, 3.5 * G / 4
DEFAULTS = {"layers": "table2", "mappings": 32, "repeats": 30, "rounds": 6, "per_task": 4, "algo": "winograd",
            "warm_layer": "resnet-4", "warm_mappings": 0}
FILL_MAPPINGS = 16    # the warm-up layer's plans whose kernels fill the on-disk cache (every kernel variant of the sweep)
QUICK = {"layers": "N=1,C=4,K=4,H=4,W=4", "mappings": 2, "repeats": 1, "rounds": 2,
         "per_task": 1, "algo": "direct", "warm_layer": "N=1,C=4,K=4,H=4,W=4", "warm_mappings": 1}
SIMULATED_DEVICES = 2
KEY = ("layer", "label", "params")
# What the JSON records of each GPU of the host (nvidia-smi --query-gpu names).
SMI_FIELDS = ("index", "name", "uuid", "driver_version", "memory.total", "clocks.max.sm", "pci.bus_id")


def _versions() -> dict[str, str | None]:
    from importlib import metadata
    out: dict[str, str | None] = {}
    for name in ("numba", "numba-cuda", "numpy", "torch", "dask", "distributed", "simpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def warm_up(client, workers: int, mappings: int, cfg: dict[str, Any], timer) -> list[dict[str, Any]]:
    """Each of ``workers`` GPU workers measures ``mappings`` of the warm-up layer's plans once (kernels loaded
    or compiled, CUDA context open); their device reports."""
    from gpu.calibrate import validate
    from megasim.sweep.gpus import map_on_gpus
    return [info for _, info in map_on_gpus(client, validate.warm_up, [cfg["warm_layer"]] * workers, mappings,
                                            algorithm=cfg["algo"], timer=timer)]


def fill_kernel_cache(device: str, cfg: dict[str, Any], timer) -> float:
    """Seconds for one worker of its own to compile the warm-up layer's kernels, which it writes to the
    on-disk kernel cache (``gpu.kernels.cache``, shared by the host's processes) for the timed runs'
    workers to load."""
    from megasim.sweep.gpus import gpu_client
    start = time.perf_counter()
    with gpu_client((device,)) as client:
        warm_up(client, 1, cfg["warm_mappings"] or FILL_MAPPINGS, cfg, timer)
    return time.perf_counter() - start


def run_sweep(devices: tuple[str, ...], layers: list[str], cfg: dict[str, Any], timer,
              kernel_cache: bool = True) -> dict[str, Any]:
    """One timed run of the sweep on a fresh gpu_cluster of `devices`: start, warm-up, sweep (``kernel_cache``
    False: the workers compile every kernel, the on-disk cache turned off in them)."""
    from gpu.calibrate import validate
    from gpu.kernels import cache
    from megasim.sweep.gpus import gpu_client
    start = time.perf_counter()
    timeline: list[dict[str, Any]] = []
    with gpu_client(devices) as client:
        if not kernel_cache:
            client.run(cache.set_directory, None)
        ready = time.perf_counter()
        workers = warm_up(client, len(devices), cfg["warm_mappings"], cfg, timer) if cfg["warm_mappings"] else []
        warm, warm_wall = time.perf_counter(), time.time()
        rows = validate.measure_on_gpus(client, layers, cfg["mappings"], per_task=cfg["per_task"],
                                        algorithm=cfg["algo"], repeats=cfg["repeats"], rounds=cfg["rounds"],
                                        timer=timer, timeline=timeline)
        done, done_wall = time.perf_counter(), time.time()
        if not workers:               # no warm-up: each worker's device, asked after the timed sweep
            from gpu.calibrate.validate import device_info
            workers = list(client.run(device_info).values())
    per_device: dict[str, int] = {}
    for r in rows:
        per_device[r["cuda_device"]] = per_device.get(r["cuda_device"], 0) + 1
    units = len(validate.mapping_units(layers, cfg["mappings"], cfg["per_task"]))
    spans, idle = task_timeline(timeline, rows, warm_wall, done_wall, len(devices), WARMUP_RUNS)
    return {"timeline": spans, "idle": idle, "summary": {"gpus": len(devices), "devices": ";".join(devices), "units": units, "rows": len(rows),
                        "rows_ok": sum(r.get("status") == "ok" for r in rows),
                        "rows_per_device": ";".join(f"{d}:{n}" for d, n in sorted(per_device.items())),
                        "cluster_start_s": round(ready - start, 3), "warm_up_s": round(warm - ready, 3),
                        "sweep_s": round(done - warm, 3), "total_s": round(done - start, 3)},
            "rows": rows, "workers": workers}


WARMUP_RUNS = 2       # measure_unit's untimed runs per mapping and round (measure_plans's default)


def task_timeline(timeline: list[dict[str, Any]], rows: list[dict[str, Any]], t0: float, t1: float, gpus: int,
                  warmup: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sweep's tasks (``measure_on_gpus``'s timeline: one per unit, the workers' clocks) in seconds from
    the sweep's start `t0` (client clock, same host), each with its GPU time (its rows' medians x runs, timed
    and warm-up: an estimate) and the rest (host work: plans, inputs, uploads, launches); and per worker its
    busy time, idle time before its first task, between tasks (scheduling: the client hands out the next
    task once the last one's result is back) and after its last task until the sweep ends at `t1`."""
    def gpu_time(part: list[dict[str, Any]]) -> float:
        return sum(float(r["measured_us"]) * (int(r.get("repeats") or 0) + warmup * int(r.get("rounds") or 1)) * 1e-6
                   for r in part if r.get("status") == "ok")
    spans = []
    for t in timeline:
        if t is None or "start" not in t:
            continue
        part = rows[t["rows"][0]:t["rows"][1]]
        gpu_s = gpu_time(part)
        spans.append({"gpus": gpus, "unit": t["unit"], "layer": t["unit"].split("[")[0], "device": t["device"],
                      "first_of_layer": t["first_of_key"], "rows": len(part),
                      "submitted_s": round(t["submitted"] - t0, 4), "start_s": round(t["start"] - t0, 4),
                      "end_s": round(t["end"] - t0, 4), "received_s": round(t["received"] - t0, 4),
                      "duration_s": round(t["end"] - t["start"], 4), "gpu_s": round(gpu_s, 4),
                      "host_s": round(t["end"] - t["start"] - gpu_s, 4)})
    spans.sort(key=lambda x: (str(x["device"]), x["start_s"]))
    idle = []
    span = t1 - t0
    for device in sorted({x["device"] for x in spans}, key=str):
        mine = [x for x in spans if x["device"] == device]
        busy = sum(x["duration_s"] for x in mine)
        gaps = sum(max(0.0, b["start_s"] - a["end_s"]) for a, b in zip(mine, mine[1:]))
        idle.append({"gpus": gpus, "device": device, "tasks": len(mine), "rows": sum(x["rows"] for x in mine),
                     "layers_started": sum(bool(x["first_of_layer"]) for x in mine),
                     "busy_s": round(busy, 3), "gpu_s": round(sum(x["gpu_s"] for x in mine), 3),
                     "host_s": round(sum(x["host_s"] for x in mine), 3),
                     "idle_before_s": round(mine[0]["start_s"], 3), "idle_between_s": round(gaps, 3),
                     "idle_after_s": round(span - mine[-1]["end_s"], 3),
                     "idle_s": round(span - busy, 3), "sweep_s": round(span, 3)})
    return spans, idle


def _rounds(row: dict[str, Any]) -> list[float]:
    text = str(row.get("round_us") or "")
    return [float(x) for x in text.split(";") if x.strip()]


def split_half(row: dict[str, Any]) -> float:
    """The median of a row's even rounds over that of its odd rounds (nan with fewer than 2 rounds)."""
    r = _rounds(row)
    if len(r) < 2:
        return math.nan
    return statistics.median(r[0::2]) / statistics.median(r[1::2])


def _dev_stats(values: list[float], prefix: str) -> dict[str, float | None]:
    """median, mean, 95th percentile and max of |v - 1| over the finite values."""
    dev = sorted(abs(v - 1) for v in values if math.isfinite(v))
    if not dev:
        return {f"{prefix}_{k}": None for k in ("n", "median_abs_dev", "mean_abs_dev", "p95_abs_dev", "max_abs_dev")}
    p95 = dev[min(len(dev) - 1, int(math.ceil(0.95 * len(dev))) - 1)]
    return {f"{prefix}_n": len(dev), f"{prefix}_median_abs_dev": round(statistics.median(dev), 5),
            f"{prefix}_mean_abs_dev": round(statistics.fmean(dev), 5), f"{prefix}_p95_abs_dev": round(p95, 5),
            f"{prefix}_max_abs_dev": round(dev[-1], 5)}


def compare(one: list[dict[str, Any]], many: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-mapping points (one-GPU against many-GPU time) and the agreement and noise statistics."""
    keys_one = [tuple(str(r.get(k)) for k in KEY) for r in one]
    keys_many = [tuple(str(r.get(k)) for k in KEY) for r in many]
    by_many = dict(zip(keys_many, many))
    same_plans = keys_one == keys_many and all(a.get("taskgraph_hash") == b.get("taskgraph_hash")
                                               for a, b in zip(one, many))
    points = []
    for key, a in zip(keys_one, one):
        b = by_many.get(key)
        if b is None:
            continue
        ok = a.get("status") == "ok" and b.get("status") == "ok"
        t1 = float(a["measured_us"]) if ok else math.nan
        tg = float(b["measured_us"]) if ok else math.nan
        points.append({"layer": key[0], "label": key[1], "params": key[2], "taskgraph_hash": a.get("taskgraph_hash"),
                       "one_gpu_device": a.get("cuda_device"), "many_gpu_device": b.get("cuda_device"),
                       "one_gpu_us": t1, "many_gpu_us": tg, "ratio": tg / t1 if ok else math.nan,
                       "one_gpu_split_half": split_half(a), "many_gpu_split_half": split_half(b)})
    ratios = [p["ratio"] for p in points]
    summary: dict[str, Any] = {"same_plans_same_order": same_plans, "points": len(points),
                               "points_ok": sum(math.isfinite(r) for r in ratios),
                               "ratio_median": round(statistics.median([r for r in ratios if math.isfinite(r)]), 5)
                               if any(math.isfinite(r) for r in ratios) else None}
    summary.update(_dev_stats(ratios, "ratio"))
    summary.update(_dev_stats([p["one_gpu_split_half"] for p in points], "noise_one_gpu_split_half"))
    summary.update(_dev_stats([p["many_gpu_split_half"] for p in points], "noise_many_gpu_split_half"))
    per_device: dict[str, list[float]] = {}
    for p in points:
        if math.isfinite(p["ratio"]):
            per_device.setdefault(str(p["many_gpu_device"]), []).append(p["ratio"])
    summary["ratio_median_by_many_gpu_device"] = {d: round(statistics.median(v), 5) for d, v in sorted(per_device.items())}
    return points, summary


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, restval="")
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="one tiny layer, the direct convolution, 2 mappings (a check of the script, e.g. on the simulator)")
    ap.add_argument("--gpus", default="all", help="the GPUs of the many-GPU run: 'all' or indices such as 0,1,2,3 "
                                                  "(the one-GPU run takes the first)")
    ap.add_argument("--layers", help=f"layers, ';'-separated, or table2 (default {DEFAULTS['layers']})")
    ap.add_argument("--mappings", type=int, help=f"mappings per layer (default {DEFAULTS['mappings']})")
    ap.add_argument("--repeats", type=int, help=f"timed runs per mapping and round (default {DEFAULTS['repeats']})")
    ap.add_argument("--rounds", type=int, help=f"rounds (default {DEFAULTS['rounds']})")
    ap.add_argument("--per-task", type=int, dest="per_task", help=f"mappings per GPU task (default {DEFAULTS['per_task']})")
    ap.add_argument("--warm-mappings", type=int, dest="warm_mappings",
                    help=f"the warm-up layer's mappings each worker measures before its timed sweep (default "
                         f"{DEFAULTS['warm_mappings']}; 0: no warm-up, the sweep as `megasim validate --gpus` runs it, its "
                         f"first tasks loading the kernels)")
    ap.add_argument("--kernel-cache", choices=("warm", "off"), default="warm",
                    help="warm (default): compile the warm-up layer's kernels once into the on-disk kernel cache before "
                         "the timed runs, whose workers load them (cache_fill_s); off: every worker compiles")
    ap.add_argument("--out", type=Path, help="results folder (default experiments/results/<device-slug>/validate_scaling)")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else DEFAULTS)
    for name in ("layers", "mappings", "repeats", "rounds", "per_task", "warm_mappings"):
        if getattr(args, name) is not None:
            cfg[name] = getattr(args, name)
    if cfg["warm_mappings"] < 0:
        raise SystemExit(f"validate_scaling: --warm-mappings {cfg['warm_mappings']} is not allowed: give an integer >= 0")
    for name in ("mappings", "repeats", "rounds", "per_task"):
        if cfg[name] < 1:
            raise SystemExit(f"validate_scaling: --{name.replace('_', '-')} {cfg[name]} is not allowed: give an integer >= 1")

    from numba import config, cuda
    from megasim.cli.common import layers_of
    from megasim.errors import MegasimError
    from megasim.sweep.gpus import parse_device_list, select_devices
    simulator = bool(config.ENABLE_CUDASIM)
    try:
        layers = layers_of([x for x in cfg["layers"].split(";") if x.strip()], "--layers")
        count = SIMULATED_DEVICES if simulator else len(cuda.gpus)
        devices = select_devices(parse_device_list(args.gpus), count, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except MegasimError as err:
        raise SystemExit(f"validate_scaling: {err}") from None
    timer = None
    if simulator:
        from gpu.runtime.timing import time_host
        timer = time_host
    smi = [] if simulator else nvidia_smi(SMI_FIELDS)
    name = smi[0].get("name", "") if smi and "name" in smi[0] else ("CUDA simulator" if simulator else "unknown")
    from experiments.benchmarks.winograd_bench import device_slug
    out = args.out or Path("experiments/results") / device_slug(name) / "validate_scaling"
    print(f"validate_scaling: {len(layers)} layers x {cfg['mappings']} mappings, {cfg['repeats']} runs x "
          f"{cfg['rounds']} rounds, {cfg['per_task']} mappings per task, {cfg['algo']}; GPUs {', '.join(devices)}"
          f"{' (simulated: a check, not a timing)' if simulator else ''}", flush=True)

    from megasim.calibration.validation import write_rows
    runs = []
    warm = args.kernel_cache == "warm"
    cache_fill_s = round(fill_kernel_cache(devices[0], cfg, timer), 3) if warm else None
    if warm:
        print(f"validate_scaling: kernel cache filled in {cache_fill_s:.1f} s", flush=True)
    for group in ((devices[0],), devices):
        run = run_sweep(group, layers, cfg, timer, kernel_cache=warm)
        s = run["summary"]
        write_rows(run["rows"], out / f"measured_{s['gpus']}gpu.csv")          # kept should a later step fail
        _write_csv([t for r in [*runs, run] for t in r["timeline"]], out / "validate_scaling_timeline.csv")
        print(f"validate_scaling: {s['gpus']} GPU(s): sweep {s['sweep_s']:.1f} s (start {s['cluster_start_s']:.1f} s, "
              f"warm-up {s['warm_up_s']:.1f} s, total {s['total_s']:.1f} s), {s['rows_ok']}/{s['rows']} rows ok, "
              f"rows per device {s['rows_per_device']}", flush=True)
        runs.append(run)
    base = runs[0]["summary"]
    for run in runs:
        s = run["summary"]
        s["speedup_sweep"] = round(base["sweep_s"] / s["sweep_s"], 3) if s["sweep_s"] > 0 else None
        s["speedup_total"] = round(base["total_s"] / s["total_s"], 3) if s["total_s"] > 0 else None
    points, agreement = compare(runs[0]["rows"], runs[-1]["rows"])
    many = runs[-1]["summary"]
    target = round(TARGET_SPEEDUP * many["gpus"] / 4, 3)
    summary = {"kernel_cache": args.kernel_cache, "cache_fill_s": cache_fill_s,
               "speedup_sweep": many["speedup_sweep"], "speedup_total": many["speedup_total"],
               "target_speedup": target, "gpus": many["gpus"],
               "met_on_sweep": bool(many["speedup_sweep"] and many["speedup_sweep"] >= target),
               "met_on_total": bool(many["speedup_total"] and many["speedup_total"] >= target),
               **agreement}
    meta = provenance({"script": "experiments.benchmarks.validate_scaling", "device": name, "simulator": simulator,
                       "timer": "time_host (host clock)" if simulator else "time_cuda (CUDA events)",
                       "nvidia_smi": smi, "workers": {f"{r['summary']['gpus']}_gpu": r["workers"] for r in runs},
                       "gpu_versions": _versions(), "settings": {**cfg, "layers": layers, "devices": list(devices)},
                       "equivalent_command": (f"megasim validate {' '.join(layers)} --gpus {','.join(devices)} --algo "
                                              f"{cfg['algo']} --mappings {cfg['mappings']} --repeats {cfg['repeats']} "
                                              f"--rounds {cfg['rounds']} --mappings-per-task {cfg['per_task']} --no-predict"),
                       "summary": summary,
                       "workers_idle": {f"{r['summary']['gpus']}_gpu": r["idle"] for r in runs}})
    csv_path, json_path = write_results([r["summary"] for r in runs], out, "validate_scaling", meta)
    _write_csv(points, out / "validate_scaling_points.csv")

    print(f"\n{'GPUs':>4} {'sweep s':>9} {'total s':>9} {'warm-up s':>9} {'start s':>8} {'speedup':>8} {'(total)':>8}  rows/device")
    for run in runs:
        s = run["summary"]
        print(f"{s['gpus']:>4} {s['sweep_s']:>9.1f} {s['total_s']:>9.1f} {s['warm_up_s']:>9.1f} {s['cluster_start_s']:>8.1f} "
              f"{s['speedup_sweep']:>8.3f} {s['speedup_total']:>8.3f}  {s['rows_per_device']}")
    print(f"\nper worker (seconds of the sweep; gpu: medians x runs, host: the rest of its tasks; idle before its first "
          f"task, between tasks, after its last):")
    for run in runs:
        for w in run["idle"]:
            print(f"  {w['gpus']} GPU(s), device {w['device']}: {w['tasks']} tasks, {w['layers_started']} layers started, "
                  f"busy {w['busy_s']:.1f} (gpu {w['gpu_s']:.1f}, host {w['host_s']:.1f}), idle {w['idle_s']:.1f} "
                  f"(before {w['idle_before_s']:.2f}, between {w['idle_between_s']:.2f}, after {w['idle_after_s']:.2f})")
    a = agreement
    print(f"\nagreement over {a['points_ok']} mappings ({'same plans, same order' if a['same_plans_same_order'] else 'PLANS DIFFER'}): "
          f"{many['gpus']}-GPU / 1-GPU time median {a['ratio_median']}, |ratio - 1| median {a['ratio_median_abs_dev']}, "
          f"p95 {a['ratio_p95_abs_dev']}, max {a['ratio_max_abs_dev']}; by device {a['ratio_median_by_many_gpu_device']}")
    print(f"noise (split-half rounds, |r - 1|): 1-GPU median {a['noise_one_gpu_split_half_median_abs_dev']}, p95 "
          f"{a['noise_one_gpu_split_half_p95_abs_dev']}, max {a['noise_one_gpu_split_half_max_abs_dev']}; "
          f"{many['gpus']}-GPU median {a['noise_many_gpu_split_half_median_abs_dev']}, p95 "
          f"{a['noise_many_gpu_split_half_p95_abs_dev']}, max {a['noise_many_gpu_split_half_max_abs_dev']}")
    print(f"validate_scaling: speedup {summary['speedup_sweep']} on the sweep, {summary['speedup_total']} in total "
          f"(target {target} on {many['gpus']} GPUs); wrote {csv_path}, {json_path}, {out / 'validate_scaling_points.csv'}, "
          f"{out / 'validate_scaling_timeline.csv'} and the measured rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
