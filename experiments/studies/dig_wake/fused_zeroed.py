"""The fused megakernel's own order with its counters zeroed: a mixed-kind calibration run shaped like the fused
megakernel (issue 42's follow-up to the dig_wake study).

The calibration's mixed-kind runs (and ``mixed_proportion``'s thinned ones) interleave two kinds' non-fused tasks:
both kinds stream from DRAM (simulated L2 hit rate 0.34-0.48, 1.8-2.2 TB/s), while in the fused megakernel the
GEMMs read what the input transforms have just written (hit rate 0.81-0.93, 0.85-0.98 TB/s). This run keeps the
fused order, kinds' proportions and producer-consumer reuse, and removes the waits (counters zeroed: every task
is ready when claimed; data may be stale, only time matters). On the calibration layers only, at Algorithm 1's
D_IG and at 4x; timed as ``gpu.calibrate.occupancy.time_mixed_kinds`` times its runs. On the GPU machine:

    bash gpu/on_device.sh python3 -m experiments.studies.dig_wake.fused_zeroed --out $OUT/fused_zeroed.json

``--model`` prints the spec's simulation of each measured row
(``experiments/results/nvidia-h200/dig_wake/fused_zeroed_measured.json``) on any CPU.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from megasim.calibration.measurements import CALIBRATION_LAYERS

MEASURED = "experiments/results/nvidia-h200/dig_wake/fused_zeroed_measured.json"
D_IG_MULT = (1, 4)


def fused_plan_params(layer: str, plan_params: str, d_ig_mult: int) -> str:
    """The fused plan's parameters at Algorithm 1's defaults, D_IG times ``d_ig_mult``."""
    from megasim.plan import Plan, build
    from megasim.workloads import parse_layer
    _, _, plan = build(parse_layer(layer), Plan.parse("fused", plan_params))
    p = plan.params
    return f"{plan_params + ',' if plan_params else ''}D_IG={p.d_ig * d_ig_mult},D_GO={p.d_go},M={p.m}"


def fused_zeroed_case(layer: str, params: str):
    """The model's (graph, schedule): the fused order, every task's counters gone (ready when claimed)."""
    from megasim.calibration.cases import kind_subgraph
    from megasim.plan import Plan, build
    from megasim.schedule import Launch, Schedule
    from megasim.workloads import parse_layer
    graph, schedule, _ = build(parse_layer(layer), Plan.parse("fused", params))
    (launch,) = schedule.launches
    sub, sched = kind_subgraph(graph, "+".join(graph.kind_names), launch.order)
    one = Launch(sched.launches[0].order, "fused_zeroed", launch.style, launch.dispatch, launch.blocks_per_sm, "megakernel")
    return sub, Schedule("fused_zeroed", (one,), {})


def model_errors(spec_path: str = "megasim/hardware/calibrated/h200.json", measured: str = MEASURED) -> list[dict]:
    from megasim.calibration.cases import mixed_us
    from megasim.hardware import load_spec
    spec = load_spec(spec_path)
    out = []
    for r in json.load(open(measured))["rows"]:
        sim = mixed_us(spec, fused_zeroed_case(r["layer"], r["params"]))
        meas = r["zeroed_median_ms"] * 1e3
        out.append({"layer": r["layer"], "params": r["params"], "measured_us": meas, "simulated_us": sim,
                    "error": sim / meas - 1.0})
    return out


def main(argv=None) -> int:
    import sys
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--model", action="store_true")
    ap.add_argument("--spec", default="megasim/hardware/calibrated/h200.json")
    ap.add_argument("--layers", nargs="+", default=list(CALIBRATION_LAYERS))
    args = ap.parse_args(argv)
    if args.model:
        rows = model_errors(args.spec)
        for r in rows:
            print(f"{r['layer'][:9]:9s} {r['params']:40s} measured {r['measured_us']:7.1f} simulated "
                  f"{r['simulated_us']:7.1f} {r['error']:+.3f}")
        print("rms log error %.4f" % float(np.sqrt(np.mean([np.log1p(r["error"]) ** 2 for r in rows]))))
        return 0
    from numba import cuda

    from gpu.calibrate.occupancy import Spinner, time_queued
    from gpu.calibrate.runs import random_workspaces
    from gpu.runtime import executor as ex
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.plan import Plan, build
    from megasim.provenance import git_sha
    from megasim.workloads import parse_layer
    base = json.load(open("megasim/hardware/calibrated/h200.measurements.json"))
    from gpu.calibrate.occupancy import fused_transform_params
    pp = fused_transform_params(base["plan_params"]) or base["plan_params"]
    t0 = time.perf_counter()
    spin = Spinner()
    rng = np.random.default_rng(8)
    rows = []
    for name in args.layers:
        problem = parse_layer(name)
        for mult in D_IG_MULT:
            params = fused_plan_params(name, pp, mult)
            graph, schedule, plan = build(problem, Plan.parse("fused", params))
            wplan = ex.make_plan(problem, plan.params.config, graph)
            wss = random_workspaces(problem, wplan, rng)
            normal = PreparedSchedule(wplan, schedule, kernels="megakernel")
            for ws in wss:
                normal.run(ws)
            normal.check()
            st_n, _ = time_queued(lambda i: normal.run(wss[i]), spin, repeats=10, rotate=3)
            zeroed = PreparedSchedule(wplan, schedule, kernels="megakernel", check=False)
            zeroed.d_counters_init = cuda.to_device(np.zeros(graph.num_counters, np.int32))
            zeroed.run(wss[0])
            zeroed.check()
            st_z, _ = time_queued(lambda i: zeroed.run(wss[i]), spin, repeats=10, rotate=3)
            rows.append({"layer": name, "params": params, "d_ig_mult": mult, "zeroed_median_ms": st_z.median_ms,
                         "zeroed_min_ms": st_z.min_ms, "zeroed_max_ms": st_z.max_ms,
                         "with_counters_median_ms": st_n.median_ms})
            print(f"{name:9s} {params}: zeroed {st_z.median_ms * 1e3:8.1f} us, with counters "
                  f"{st_n.median_ms * 1e3:8.1f} us", flush=True)
            del wss, normal, zeroed
    dev = cuda.get_current_device()
    out = {"device": dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name),
           "date": time.strftime("%Y-%m-%d"), "git_sha": git_sha(), "seconds": round(time.perf_counter() - t0, 1),
           "rows": rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
