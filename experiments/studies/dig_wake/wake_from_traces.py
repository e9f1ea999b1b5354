"""Issue 42 (a wider D_IG's gain under-priced): what a dependency wait costs on the GPU, read from traced
fused runs (``gpu.diagnostics.record_timeline``'s timeline_*_measured.csv), beside the model's run of the
same TaskGraph and schedule.

Per run: the wake (the child's ready, after its poll loop and acquire fence, minus the end of the last
parent that signalled its counter, after that parent's release fence and decrement) of every GEMM and
output transform that waited; how many waited; the mean run (ready -> end) per kind; and each GEMM's and
input transform's run binned by the time-averaged number of other GEMM blocks on its SM. The model's
wake is one ``atomic_latency_ns`` (154 ns on the H200 spec).

    python -m experiments.studies.dig_wake.wake_from_traces --spec megasim/hardware/calibrated/h200.json \
        --run "N=32,C=16,K=64,H=96,W=96|D_IG=8,D_GO=152,M=4|timeline_c16x1_measured.csv" ... --out summary.json

The H200's numbers (six traced runs of three shapes that are not validated layers, each at Algorithm 1's tightest
D_IG and at 4x it) and the model variants tried against them, with their validation on the 208 and 416 mappings:
experiments/results/nvidia-h200/dig_wake/dig_wake.json.
"""

from __future__ import annotations

import argparse
import gzip
import json

import numpy as np

from megasim.hardware import load_spec
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.workloads import parse_layer

BINS = ((0.0, 0.5), (0.5, 1.5), (1.5, 2.5), (2.5, 4.5))


def _read(path: str) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return np.loadtxt(f, delimiter=",", skiprows=1)


def _table(graph, rows: np.ndarray) -> np.ndarray:
    """(task, kind, start, ready, end, sm, done) rows -> per task id (kind, start, ready, end, sm, done)."""
    t = np.zeros((graph.num_tasks, 6))
    t[rows[:, 0].astype(int)] = rows[:, 1:]
    return t


def wake_stats(graph, t: np.ndarray) -> dict:
    kind, start, ready, end = t[:, 0], t[:, 1], t[:, 2], t[:, 3]
    sig = graph.signal_counters[:, 0]
    cend = np.full(graph.counter_init.size, -np.inf)
    np.maximum.at(cend, sig[sig >= 0], end[sig >= 0])
    out = {}
    for k, name in enumerate(graph.kind_names):
        ids = np.flatnonzero(graph.kind == k)
        w = graph.wait_counters[ids]
        if not (w >= 0).any():
            continue
        last = np.max(np.where(w >= 0, cend[np.maximum(w, 0)], -np.inf), axis=1)
        waited = last > start[ids] + 300.0          # the last parent ended after the claim began
        d = (ready[ids] - last)[waited]
        out[name] = {"tasks": int(ids.size), "waited": int(waited.sum())}
        if d.size:
            out[name].update({"wake_median_ns": float(np.median(d)), "wake_p10_ns": float(np.percentile(d, 10)),
                              "wake_p90_ns": float(np.percentile(d, 90))})
    return out


def run_by_gemm_neighbours(t: np.ndarray, kind_id: int, gemm_id: int, step: int = 3) -> list:
    kind, start, ready, end, sm = t[:, 0], t[:, 1], t[:, 2], t[:, 3], t[:, 4]
    rows = []
    for i in np.flatnonzero(kind == kind_id)[::step]:
        on = np.flatnonzero((sm == sm[i]) & (start < end[i]) & (end > ready[i]) & (kind == gemm_id))
        on = on[on != i]
        dur = end[i] - ready[i]
        rows.append((dur, (np.minimum(end[on], end[i]) - np.maximum(start[on], ready[i])).sum() / dur))
    rows = np.array(rows)
    out = []
    for lo, hi in BINS:
        sel = (rows[:, 1] >= lo) & (rows[:, 1] < hi)
        if sel.sum() >= 5:
            out.append({"gemm_neighbours": [lo, hi], "n": int(sel.sum()), "run_us": float(rows[sel, 0].mean() / 1e3)})
    return out


def summarize(layer: str, params: str, measured_csv: str, spec) -> dict:
    graph, schedule, plan = build(parse_layer(layer), Plan.parse("fused", params))
    sim = simulate(graph, schedule, spec)
    s0 = np.nanmin(sim.claim_ns)
    sim_t = np.column_stack([graph.kind, sim.claim_ns - s0, sim.ready_ns - s0, sim.end_ns - s0, sim.sm, sim.end_ns - s0])
    meas_t = _table(graph, _read(measured_csv))
    gemm, itrans = graph.kind_id("gemm"), graph.kind_id("itrans")
    out = {"layer": layer, "params": plan.param_string(), "trace": measured_csv.rsplit("/", 1)[-1],
           "span_us": {"measured": float((meas_t[:, 3].max() - meas_t[:, 1].min()) / 1e3),
                       "model": float(sim.predicted_ns / 1e3)}}
    for name, t in (("measured", meas_t), ("model", sim_t)):
        out[name] = {"waits": wake_stats(graph, t),
                     "run_us": {n: float((t[graph.kind == k, 3] - t[graph.kind == k, 2]).mean() / 1e3)
                                for k, n in enumerate(graph.kind_names)},
                     "gemm_run_by_gemm_neighbours": run_by_gemm_neighbours(t, gemm, gemm),
                     "itrans_run_by_gemm_neighbours": run_by_gemm_neighbours(t, itrans, gemm, step=1)}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default="megasim/hardware/calibrated/h200.json")
    ap.add_argument("--run", action="append", required=True, help="LAYER|PARAMS|MEASURED_CSV(.gz)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    spec = load_spec(args.spec)
    runs = [summarize(*r.split("|"), spec) for r in args.run]
    with open(args.out, "w") as f:
        json.dump({"spec": args.spec, "atomic_latency_ns": spec.atomic_latency_ns, "runs": runs}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
