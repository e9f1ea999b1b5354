"""Where a megakernel task's time goes, per kind: each kind traced alone and beside one other kind.

A microbenchmark for the calibration (issue 4), not a validation: it runs only the calibration's
single-kind and mixed-kind launches (counters at zero, so no task waits on a parent), never the fused
mappings that are validated. The megakernel's trace gives, per task, four instants read by thread 0
(gpu/kernels/winograd/megakernel.py, ``TRACE_COLS``): its claim (before the ticket), ready (ticket, task-table row,
counter look and acquire fence done), done (the task's body and the block's closing barrier done) and
end (the release fence and the signal done). So a task's time splits into

- ``claim_us``  = ready - claim: what the megakernel costs before the body; in a fused run this runs
  while the block waits on its parents, so it is hidden there when a task waits;
- ``body_us``   = done - ready: the task's own work, on an SM shared with whatever is co-resident;
- ``signal_us`` = end - done: the release fence and the counter decrement;
- ``gap_us``    = next claim - end of the same block (persistent grids): the claim loop's own cost.

Runs per layer (``--params``, default the fused schedule's transforms, ``pairs=4``): each kind alone
as a persistent grid of 1 block per SM (nothing beside it on its SM), of 2 blocks per SM, and per task
(one block per task, the launch's full occupancy); then each pair of kinds in ``--pairs`` interleaved
per task (``megasim.calibration.cases.mixed_order``), so a kind's body beside another kind's blocks sits
next to its body alone. The model's numbers for the same launches (the calibration's cut-out graphs,
``--spec``) are printed beside them: its claim is the dispatch plus the counter check
(``block_dispatch_ns`` or ``atomic_latency_ns``, plus ``atomic_latency_ns``), its body the rest.

    bash gpu/on_device.sh python -m gpu.diagnostics.trace_kinds --layers resnet-1 yolov3-1 vgg-3 --out $OUT/tk

Writes DIR/trace_kinds.csv (a row per layer, run, kind and source) and DIR/trace_kinds.json (the same
with provenance), DIR defaulting to $OUT or experiments/results/<device>/trace_kinds/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

# (style, blocks per SM) of the single-kind runs
ALONE_RUNS = (("persistent", 1), ("persistent", 2), ("per_task", None))
DEFAULT_PAIRS = ("itrans+gemm", "ftrans+gemm", "gemm+otrans")


def persistent_gaps(claim, end, sm, slot_of) -> np.ndarray:
    """Per task of a persistent run: the time from its block's previous task's end to its claim (NaN
    for a block's first task). ``slot_of`` tells the blocks apart (a block = (SM, slot))."""
    gap = np.full(claim.shape[0], np.nan)
    keys = sm.astype(np.int64) * 1024 + slot_of.astype(np.int64)
    for key in np.unique(keys):
        idx = np.flatnonzero(keys == key)
        idx = idx[np.argsort(claim[idx])]
        gap[idx[1:]] = claim[idx[1:]] - end[idx[:-1]]
    return gap


def block_slots(claim, end, sm) -> np.ndarray:
    """Which block of its SM each task of a measured persistent run belongs to: the trace gives no
    block id, so tasks are chained per SM greedily (a task continues the block whose last task ended
    latest before its claim)."""
    slot = np.zeros(claim.shape[0], np.int64)
    for s in np.unique(sm):
        idx = np.flatnonzero(sm == s)
        idx = idx[np.argsort(claim[idx])]
        ends: list[float] = []
        for i in idx:
            free = [b for b, e in enumerate(ends) if e <= claim[i]]
            if free:
                b = max(free, key=lambda b: ends[b])
                ends[b] = end[i]
            else:
                b = len(ends)
                ends.append(end[i])
            slot[i] = b
    return slot


def summarise(layer: str, run: str, source: str, names, kind, claim, ready, done, end, sm, slot=None) -> list[dict]:
    """A row per kind of one run: tasks, span and the means of the claim / body / signal / gap parts
    (us). ``done`` may be None (the model has no separate signal: its body includes it)."""
    rows = []
    gap = persistent_gaps(claim, end, sm, slot) if slot is not None else np.full(claim.shape[0], np.nan)
    span = float((end.max() - claim.min()) / 1e3)
    for k in np.unique(kind):
        sel = kind == k
        body_end = end if done is None else done
        row = {"layer": layer, "run": run, "source": source, "kind": names[int(k)], "tasks": int(sel.sum()),
               "span_us": span, "claim_us": float((ready[sel] - claim[sel]).mean() / 1e3),
               "body_us": float((body_end[sel] - ready[sel]).mean() / 1e3),
               "signal_us": float((end[sel] - body_end[sel]).mean() / 1e3) if done is not None else "",
               "gap_us": float(np.nanmean(gap[sel]) / 1e3) if np.isfinite(gap[sel]).any() else ""}
        rows.append(row)
    return rows


def _line(r: dict) -> str:
    def f(v):
        return f"{v:7.2f}" if isinstance(v, float) else f"{'-':>7s}"
    return (f"{r['layer']:9s} {r['run']:22s} {r['source']:8s} {r['kind']:7s} n={r['tasks']:6d} span {r['span_us']:9.1f} "
            f"claim {f(r['claim_us'])} body {f(r['body_us'])} signal {f(r['signal_us'])} gap {f(r['gap_us'])}")


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
    ap.add_argument("--kinds", nargs="*", default=None, help="kinds traced alone (default: all)")
    ap.add_argument("--pairs", nargs="*", default=list(DEFAULT_PAIRS), help="kind pairs interleaved per task")
    ap.add_argument("--spec", default="megasim/hardware/calibrated/h200.json")
    ap.add_argument("--runs", type=int, default=4, help="traced runs per case, inputs rotated (the last is kept)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs {args.runs} is not allowed: it must be at least 1")
    spec = load_spec(args.spec)
    device = device_name()
    out = Path(args.out or Path("experiments/results/nvidia-h200") / "trace_kinds")
    rows: list[dict] = []
    rng = np.random.default_rng(11)
    for layer in args.layers:
        graph, schedule, wplan, wss = nonfused_workspaces(layer, args.params, rng)
        names = list(graph.kind_names)
        orders = launch_orders(graph, schedule)
        alone = list(orders) if args.kinds is None else args.kinds
        if not set(alone) <= set(orders):
            raise SystemExit(f"--kinds {' '.join(alone)} is not allowed: choose from {', '.join(orders)}")
        cases = [(f"{k} {style}{'' if bps is None else ' x' + str(bps)}", (k,), orders[k], style, bps)
                 for k in alone for style, bps in ALONE_RUNS]
        for pair in args.pairs:
            kinds = tuple(pair.split("+"))
            if len(kinds) != 2 or not set(kinds) <= set(orders):
                raise SystemExit(f"--pairs {pair!r} is not allowed: two of {', '.join(orders)} joined by '+'")
            cases.append((f"{pair} per_task", kinds, mixed_order(graph, schedule, kinds), "per_task", None))
        cut = kind_cases((layer,), args.params)          # each kind's launch cut out: [(layer, graph, schedule)]
        kind_case = {k: cut[k][0][1:] for k in orders}
        for run, kinds, order, style, bps in cases:
            tr = traced_alone(wplan, wss, order, run, style, bps, args.runs)   # claim, ready, end, sm, done
            kind = graph.kind[order]
            sm = tr[:, 3].astype(np.int64)
            t0 = tr[:, 0].min()
            claim, ready, end, done = tr[:, 0] - t0, tr[:, 1] - t0, tr[:, 2] - t0, tr[:, 4] - t0
            slot = block_slots(claim, end, sm) if style == "persistent" else None
            rows += summarise(layer, run, "measured", names, kind, claim, ready, done, end, sm, slot)
            if len(kinds) == 2:
                sub, sim_sched = mixed_case(layer, kinds, args.params)
            else:
                sub, sched = kind_case[kinds[0]]
                sub, sim_sched = variant_case(sub, sched, {"kernel": "megakernel", "style": style, "blocks_per_sm": bps})
            r = simulate(sub, sim_sched, spec)
            s0 = np.nanmin(r.claim_ns)
            rows += summarise(layer, run, "model", list(sub.kind_names), sub.kind, r.claim_ns - s0, r.ready_ns - s0,
                              None, r.end_ns - s0, r.sm, r.slot if style == "persistent" else None)
            for row in rows[-2 * len(kinds):]:
                print(_line(row))
        del wss
    meta = provenance({"device": device, "layers": args.layers, "params": args.params, "pairs": args.pairs,
                       "spec": args.spec, "runs": args.runs,
                       "parts": "per task, microseconds: claim = ready - claim (ticket, table row, counter look, "
                                "acquire fence), body = done - ready, signal = end - done (release fence, "
                                "decrement), gap = a persistent block's next claim - its previous end; the "
                                "model's body includes its signal"})
    for path in write_results(rows, out, "trace_kinds", meta):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
