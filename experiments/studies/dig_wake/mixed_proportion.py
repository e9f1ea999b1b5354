"""Mixed-kind calibration runs at several proportions of the kinds (issue 42's follow-up to the dig_wake study).

The calibration's mixed-kind runs (``gpu.calibrate.occupancy --mixed``) interleave all of two kinds' non-fused
tasks in one per-task megakernel launch; in them an input transform has 1.8-2.7 GEMM blocks beside it on its SM
(simulated), in the fused megakernel's validated mappings 1.0-1.7. These runs keep every n-th GEMM task only
(``gemm_every`` 1, 2, 4, 8), the other kind's tasks all, so the transforms see fewer GEMMs, timed exactly as
``gpu.calibrate.occupancy.time_mixed_kinds`` times them (counters zeroed, host hidden, queued medians), on the
calibration layers only (never a validated layer or mapping). On the GPU machine:

    bash gpu/on_device.sh python3 -m experiments.studies.dig_wake.mixed_proportion --out $OUT/mixed_proportion.json

The measured rows: ``experiments/results/nvidia-h200/dig_wake/mixed_proportion_measured.json`` (2026-11-28, 46 s of
GPU). The model's side (``mixed_proportion_case``): the same thinned order as a graph of the listed tasks alone;
``--model`` prints the spec's simulation of each measured row (on any CPU):

    python -m experiments.studies.dig_wake.mixed_proportion --model [--spec megasim/hardware/calibrated/h200.json]

The per-(kind, neighbour kind) slowdowns tried on these runs (not adopted; issue 42, docs/findings.md) are the
engine patch ``experiments/studies/dig_wake/pair_slowdown.patch`` (``git apply`` it in a worktree; environment
``MEGASIM_PAIR="itrans:gemm=0.45,gemm:itrans=0.10,..."`` sets s[kind, neighbour], ``MEGASIM_PAIR_MODE=any`` counts a
neighbour kind once instead of once per block); their numbers are in
``experiments/results/nvidia-h200/dig_wake/dig_wake.json`` (``variants``, ``mixed_proportion``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from megasim.calibration.cases import MIXED_PAIRS, interleave, kind_subgraph
from megasim.calibration.measurements import CALIBRATION_LAYERS

GEMM_EVERY = (1, 2, 4, 8)


def thinned_order(graph, schedule, pair: tuple[str, str], gemm_every: int) -> np.ndarray:
    """Two kinds' non-fused launches interleaved in proportion, every ``gemm_every``-th GEMM task kept."""
    orders = {}
    for launch in schedule.launches:
        k = graph.kind_names[int(graph.kind[int(launch.order[0])])]
        orders[k] = np.asarray(launch.order, np.int64)
    orders["gemm"] = orders["gemm"][::gemm_every]
    return interleave(orders[pair[0]], orders[pair[1]])


def mixed_proportion_case(layer: str, pair: tuple[str, str], plan_params: str, gemm_every: int):
    """The model's (graph, schedule) of one such run: the listed tasks only, one per-task megakernel launch."""
    from megasim.plan import Plan, build
    from megasim.schedule import Launch, Schedule
    from megasim.workloads import parse_layer
    graph, schedule, _ = build(parse_layer(layer), Plan.parse("nonfused", plan_params))
    order = thinned_order(graph, schedule, pair, gemm_every)
    keep = np.zeros(graph.num_tasks, bool)
    keep[order] = True
    # a graph of the listed tasks: drop the others by giving kind_subgraph a graph whose other tasks are
    # of a kind it does not select
    kinds = "+".join(pair)
    ks = [graph.kind_id(k) for k in pair]
    dropped = np.isin(graph.kind, ks) & ~keep
    other = next(i for i in range(len(graph.kind_names)) if i not in ks)
    g2 = dataclasses.replace(graph, kind=np.where(dropped, other, graph.kind).astype(graph.kind.dtype))
    sub, sched = kind_subgraph(g2, kinds, order)
    launch = Launch(sched.launches[0].order, kinds, "per_task", "ticket", None, "megakernel")
    return sub, Schedule(f"{kinds}_mixed_every{gemm_every}", (launch,), {})


MEASURED = "experiments/results/nvidia-h200/dig_wake/mixed_proportion_measured.json"


def model_errors(spec_path: str = "megasim/hardware/calibrated/h200.json", measured: str = MEASURED) -> list[dict]:
    """Each measured row beside the spec's simulation of it (queued timing, as the calibration's mixed runs)."""
    from megasim.calibration.cases import mixed_us
    from megasim.hardware import load_spec
    spec = load_spec(spec_path)
    out = []
    for r in json.load(open(measured))["rows"]:
        sim = mixed_us(spec, mixed_proportion_case(r["layer"], tuple(r["kind"].split("+")), r["plan_params"],
                                                   r["gemm_every"]))
        meas = r["median_ms"] * 1e3
        alone = sum(us / (r["gemm_every"] if k == "gemm" else 1) for k, us in r["single_kind_us"].items())
        out.append({"layer": r["layer"], "kind": r["kind"], "gemm_every": r["gemm_every"], "measured_us": meas,
                    "simulated_us": sim, "error": sim / meas - 1.0, "measured_over_single_kind_sum": meas / alone})
    return out


def main(argv=None) -> int:
    if argv is None:
        import sys
        argv = sys.argv[1:]
    if "--model" in argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--model", action="store_true")
        ap.add_argument("--spec", default="megasim/hardware/calibrated/h200.json")
        a = ap.parse_args(argv)
        rows = model_errors(a.spec)
        for r in rows:
            print(f"{r['layer'][:9]:9s} {r['kind']:12s} every {r['gemm_every']}: measured {r['measured_us']:7.1f} us "
                  f"(x{r['measured_over_single_kind_sum']:.3f} the single-kind sum) simulated {r['simulated_us']:7.1f} "
                  f"{r['error']:+.3f}")
        print("rms log error %.4f" % float(np.sqrt(np.mean([np.log1p(r["error"]) ** 2 for r in rows]))))
        return 0
    from numba import cuda

    from gpu.calibrate.occupancy import Spinner, fused_transform_params, time_zeroed_order
    from gpu.calibrate.runs import launch_orders, nonfused_workspaces
    from megasim.provenance import git_sha
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", nargs="+", default=list(CALIBRATION_LAYERS))
    ap.add_argument("--plan-params", default="")
    ap.add_argument("--gemm-every", type=int, nargs="+", default=list(GEMM_EVERY))
    args = ap.parse_args(argv)
    base = json.load(open("megasim/hardware/calibrated/h200.measurements.json"))
    pp = args.plan_params or fused_transform_params(base["plan_params"]) or base["plan_params"]
    dev = cuda.get_current_device()
    t0 = time.perf_counter()
    spin = Spinner()
    rng = np.random.default_rng(8)
    rows = []
    for name in args.layers:
        graph, schedule, wplan, wss = nonfused_workspaces(name, pp, rng)
        zeros = cuda.to_device(np.zeros(graph.num_counters, np.int32))

        def timed(order, label):
            return time_zeroed_order(wplan, wss, zeros, order, label, spin, repeats=10)

        singles = {kind: timed(order, kind)[0].median_ms * 1e3 for kind, order in launch_orders(graph, schedule).items()}
        for every in args.gemm_every:
            for pair in MIXED_PAIRS:
                st, host = timed(thinned_order(graph, schedule, pair, every), "+".join(pair))
                rows.append({"layer": name, "kind": "+".join(pair), "plan_params": pp, "gemm_every": every,
                             "median_ms": st.median_ms, "min_ms": st.min_ms, "max_ms": st.max_ms,
                             "single_kind_us": {k: singles[k] for k in pair}})
                print(f"{name:9s} {'+'.join(pair):12s} every {every}: {st.median_ms * 1e3:9.1f} us", flush=True)
        del wss
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    out = {"device": name, "date": time.strftime("%Y-%m-%d"), "git_sha": git_sha(),
           "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
