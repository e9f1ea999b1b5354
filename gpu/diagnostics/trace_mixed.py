"""Which tasks slow down when two kinds share the megakernel? Traced single-kind and mixed-kind runs.

The mixed-kind calibration runs (``gpu.calibrate.occupancy.time_mixed_kinds``) show that interleaving
the input transforms with the GEMMs in one megakernel launch saves only 1-5% against running them one
after the other, where the model expects 8-10% more. This script records the per-task timeline of
those runs (the megakernel's own trace: per task the global-timer ns of its claim, of its parents being
done and of its end, and its SM) for each kind alone and for the pair interleaved, and summarises per
kind the task durations (ready -> end) and, for the GEMM tasks of the mixed run, how their duration
depends on how many tasks of the other kind shared their SM while they ran (time-weighted mean count of
co-resident other-kind tasks, bucketed). The same runs are simulated with a spec, so the model's answer
sits beside the GPU's. Counters start at zero (no waits), as in the calibration runs.

    bash gpu/on_device.sh python -m gpu.diagnostics.trace_mixed [--layers resnet-1 vgg-3] [--params pairs=4]

Writes DIR/trace_mixed.csv (a row per layer, run, kind and source) and DIR/trace_mixed.json (the
same with provenance) under $OUT or experiments/results/<device>/trace_mixed/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

BUCKETS = (0.5, 1.5)          # co-resident other-kind tasks: < 0.5, 0.5-1.5, >= 1.5 (time-weighted)


def coresidency(start, end, sm, kind, of_kind, other_kind) -> np.ndarray:
    """For each task of ``of_kind``: the time-weighted mean number of ``other_kind`` tasks running on its
    SM during [start, end) (their own [start, end) intervals)."""
    out = np.full(start.shape[0], np.nan)
    for s in np.unique(sm):
        mine = np.flatnonzero((sm == s) & (kind == of_kind))
        other = np.flatnonzero((sm == s) & (kind == other_kind))
        if not mine.size:
            continue
        os_, oe = start[other], end[other]
        for i in mine:
            span = end[i] - start[i]
            if span <= 0:
                continue
            overlap = np.clip(np.minimum(oe, end[i]) - np.maximum(os_, start[i]), 0, None).sum()
            out[i] = overlap / span
    return out


def summarise(layer: str, run: str, source: str, names, kind, start, ready, end, sm) -> list[dict]:
    rows = []
    dur = (end - ready) / 1e3
    for k in np.unique(kind):
        sel = kind == k
        rows.append({"layer": layer, "run": run, "source": source, "kind": names[int(k)], "tasks": int(sel.sum()),
                     "span_us": float((end.max() - start.min()) / 1e3), "mean_us": float(dur[sel].mean()),
                     "median_us": float(np.median(dur[sel])), "bucket": "all", "mean_coresident_other": ""})
    kinds = np.unique(kind)
    if kinds.size == 2 and "gemm" in [names[int(k)] for k in kinds]:
        g = names.index("gemm")
        other = int(kinds[kinds != g][0])
        co = coresidency(ready, end, sm, kind, g, other)
        sel_g = np.flatnonzero(kind == g)
        edges = (-np.inf, *BUCKETS, np.inf)
        for lo, hi in zip(edges[:-1], edges[1:]):
            pick = sel_g[(co[sel_g] >= lo) & (co[sel_g] < hi)]
            if pick.size:
                rows.append({"layer": layer, "run": run, "source": source, "kind": "gemm", "tasks": int(pick.size),
                             "span_us": "", "mean_us": float(dur[pick].mean()), "median_us": float(np.median(dur[pick])),
                             "bucket": f"{names[other]} co-resident in [{lo}, {hi})",
                             "mean_coresident_other": float(co[pick].mean())})
    return rows


def main(argv: list[str] | None = None) -> int:
    from experiments.provenance import provenance, write_results
    from gpu.calibrate.runs import launch_orders, nonfused_workspaces, traced_alone
    from gpu.calibrate.validate import device_name
    from megasim.calibration.cases import kind_cases, mixed_case, mixed_order, variant_case
    from megasim.hardware import load_spec
    from megasim.sim import simulate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=["resnet-1", "vgg-3"])
    ap.add_argument("--params", default="pairs=4", help="implementation --param string (default: the fused transform size)")
    ap.add_argument("--pair", default="itrans+gemm", help="the two kinds interleaved (default itrans+gemm)")
    ap.add_argument("--spec", default="megasim/hardware/calibrated/h200.json")
    ap.add_argument("--runs", type=int, default=3, help="traced runs per case (the last is kept; the first warms up)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    pair = tuple(args.pair.split("+"))
    spec = load_spec(args.spec)
    device = device_name()
    out = Path(args.out or Path("experiments/results/nvidia-h200") / "trace_mixed")
    rows: list[dict] = []
    rng = np.random.default_rng(9)
    for layer in args.layers:
        graph, schedule, wplan, wss = nonfused_workspaces(layer, args.params, rng)
        orders = launch_orders(graph, schedule)
        cases = {k: orders[k] for k in pair}
        cases[args.pair] = mixed_order(graph, schedule, pair)
        for run, order in cases.items():
            tr = traced_alone(wplan, wss, order, run, runs=args.runs)   # per map position: claim, ready, end, sm
            kind = graph.kind[order]
            t0 = tr[:, 0].min()
            rows += summarise(layer, run, "measured", list(graph.kind_names), kind, tr[:, 0] - t0, tr[:, 1] - t0,
                              tr[:, 2] - t0, tr[:, 3].astype(np.int64))
            # The model's run of the same tasks: the calibration's cut-out graphs (no waits).
            if run == args.pair:
                sub, sim_sched = mixed_case(layer, pair, args.params)
            else:
                (_, sub, sched), = kind_cases((layer,), args.params)[run]
                sub, sim_sched = variant_case(sub, sched, {"kernel": "megakernel", "style": "per_task"})
            r = simulate(sub, sim_sched, spec)
            rows += summarise(layer, run, "model", list(sub.kind_names), sub.kind, r.claim_ns, r.ready_ns,
                              r.end_ns, r.sm)
            for row in rows[-8:]:
                if row["layer"] == layer and row["run"] == run:
                    print(f"{layer:9s} {run:12s} {row['source']:8s} {row['kind']:7s} {row['bucket']:36s} "
                          f"n={row['tasks']:6d} mean {row['mean_us']:8.2f} us")
        del wss
    meta = provenance({"device": device, "layers": args.layers, "params": args.params, "pair": args.pair,
                       "spec": args.spec, "runs": args.runs,
                       "durations": "ready -> end of each task (its work after the parents were seen done, "
                                    "including the end fence and signal), microseconds"})
    for path in write_results(rows, out, "trace_mixed", meta):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
