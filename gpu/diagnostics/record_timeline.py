"""Record a measured task timeline of the megakernel and put it beside the simulated one.

Runs one layer's fused schedule (Algorithm 1, default parameters, or the mapping of ``--param``) on
the GPU with tracing on: thread 0
of each block writes the global-timer nanoseconds at which it claimed its task, saw its parents done
and finished, and its SM id (gpu/kernels/common/trace.py). The same TaskGraph and schedule are simulated with a spec
(default: the calibrated H200 spec). Writes to DIR (default $OUT or experiments/results/<device>):
timeline_measured.csv and timeline_simulated.csv (task, kind, start_ns, ready_ns, end_ns, sm, done_ns;
times from the first claim; done: the task's body finished, before its signal, = end in the model) and timeline_gantt.png (per-SM Gantt charts, a few SMs, measured above simulated;
the SM ids are not the same SMs: the model numbers its SMs in placement order). The measured CSV is
what `python -m experiments.figures.fig03_task_timeline --measured FILE` reads.

    bash gpu/on_device.sh python -m gpu.diagnostics.record_timeline --layer resnet-1
    bash gpu/on_device.sh python -m gpu.diagnostics.record_timeline --layer yolov3-3 --param D_IG=64,D_GO=2560,M=4 --tag go4

Inputs are rotated over ``--sets`` workspaces (default 3) as in the validation's timing, so the
recorded run does not find its input in L2; ``--sets 1`` records a run on the input of the run before
(on resnet-1 the per-kind times agree within 0.5 us either way).

With ``--tag T`` the files are named timeline_T_measured.csv, timeline_T_simulated.csv, timeline_T_gantt.png.

``--hog S`` records the runs beside a DRAM hog on S SMs (``gpu.probes.dram_hog_kernel``; ``--hog-idle``: the hog holds
the SMs and sleeps), to see which part of which task kind stretches when memory is contended (issue 3;
experiments/results/nvidia-h200/dram_hog/: the megakernel slows 2.16x there, our non-fused pipeline 1.85x). The simulated timeline is
the spec's, without the hog.

    bash gpu/on_device.sh python -m gpu.diagnostics.record_timeline --layer resnet-1 --hog 64 --tag hog64
    bash gpu/on_device.sh python -m gpu.diagnostics.record_timeline --layer resnet-1 --hog 64 --hog-idle --tag idle64
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
from numba import cuda

from gpu.runtime import executor as ex
from gpu.runtime.prepared import PreparedSchedule
from megasim.hardware import load_spec
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.workloads import parse_layer

COLUMNS = ("task", "kind", "start_ns", "ready_ns", "end_ns", "sm", "done_ns")


def _write(path: Path, rows) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)


def kind_summary(table: np.ndarray, kind_names) -> dict[str, dict[str, float]]:
    """Per task kind of a timeline (rows of COLUMNS): tasks, mean wait (claim -> parents done), mean
    run time (parents done -> end) and of it the signal (body done -> end: release fence and
    decrement; 0 in the model, whose run includes it), in us."""
    out = {}
    for k, name in enumerate(kind_names):
        sel = table[:, 1] == k
        if sel.any():
            out[name] = {"tasks": int(sel.sum()), "wait_us": float((table[sel, 3] - table[sel, 2]).mean() / 1e3),
                         "run_us": float((table[sel, 4] - table[sel, 3]).mean() / 1e3),
                         "signal_us": float((table[sel, 4] - table[sel, 6]).mean() / 1e3)}
    return out


def _gantt(ax, start, end, sm, kind, kinds, sms, title, colors) -> None:
    for row, s in enumerate(sms):
        sel = np.flatnonzero(sm == s)
        for k in range(len(kinds)):
            pick = sel[kind[sel] == k]
            if pick.size:
                ax.broken_barh(list(zip(start[pick] / 1e3, (end[pick] - start[pick]) / 1e3)), (row - 0.4, 0.8),
                               facecolors=colors[k], edgecolor="none", alpha=0.8)
    ax.set_yticks(range(len(sms)), [f"SM {s}" for s in sms])
    ax.set_title(title)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="resnet-1")
    ap.add_argument("--spec", default="megasim/hardware/calibrated/h200.json")
    ap.add_argument("--sms", type=int, default=6, help="SMs drawn in the Gantt chart")
    ap.add_argument("--param", default="", help="the fused mapping's --param string (default: Algorithm 1's defaults)")
    ap.add_argument("--tag", default="", help="a name put into the output file names")
    ap.add_argument("--sets", type=int, default=3,
                    help="input workspaces rotated over (1: the same input every run, L2-warm)")
    ap.add_argument("--hog", type=int, default=0,
                    help="record beside a DRAM hog on this many SMs (gpu.probes.dram_hog_kernel; 0: no hog)")
    ap.add_argument("--hog-idle", action="store_true", help="the hog holds its SMs and sleeps (no DRAM traffic)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.sets < 1:
        ap.error(f"--sets {args.sets} is not allowed: it must be at least 1")
    if args.hog < 0:
        ap.error(f"--hog {args.hog} is not allowed: give 0 (no hog) or a number of SMs below the GPU's")
    if args.hog_idle and not args.hog:
        ap.error("--hog-idle is not allowed without --hog S")
    problem = parse_layer(args.layer)
    graph, schedule, plan = build(problem, Plan.parse("fused", args.param))
    wplan = ex.make_plan(problem, plan.params.config, graph)
    rng = np.random.default_rng(5)
    # Inputs rotated over `sets` workspaces, as the validation times them (gpu.calibrate.validate): the recorded
    # run reads the workspace used least recently, so its input is not left in L2 by the run before.
    wss = []
    for _ in range(args.sets):
        x = cuda.to_device(rng.standard_normal((problem.n, problem.h, problem.w, problem.c), dtype=np.float32))
        w = cuda.to_device(rng.standard_normal((problem.k, problem.c, 3, 3), dtype=np.float32))
        wss.append(ex.workspace(wplan, x, w))
    prep = PreparedSchedule(wplan, schedule, kernels="megakernel", trace=True)
    for i in range(3 * args.sets + 1):       # warm-up; the last run is the one recorded
        prep.run(wss[i % args.sets])
    cuda.synchronize()
    hog_stats = None
    if args.hog:    # the same runs again beside the hog (every kernel is loaded: nothing waits for its end)
        from gpu.probes.dram_hog_kernel import DramHog
        from gpu.errors import KernelInputError
        try:
            hog = DramHog(args.hog, stream_dram=not args.hog_idle, max_seconds=60.0)
        except KernelInputError as exc:
            raise SystemExit(f"--hog: {exc}")
        with hog:
            for i in range(3 * args.sets + 1):
                prep.run(wss[i % args.sets])
            cuda.default_stream().synchronize()     # the default stream only: the hog runs on
        hog_stats = hog.stats.as_dict()
        if not (hog.stats.covered and not hog.stats.timed_out):
            raise SystemExit(f"the hog on {args.hog} SMs did not run through the recorded runs: {hog.stats}")
    prep.check()
    (trace,) = prep.traces()
    order = np.asarray(schedule.launches[0].order)
    t0 = trace[:, 0].min()
    measured = np.column_stack([order, graph.kind[order], trace[:, 0] - t0, trace[:, 1] - t0,
                                trace[:, 2] - t0, trace[:, 3], trace[:, 4] - t0])
    sim = simulate(graph, schedule, load_spec(args.spec))
    s0 = np.nanmin(sim.claim_ns)
    simulated = np.column_stack([np.arange(graph.num_tasks), graph.kind, sim.claim_ns - s0, sim.ready_ns - s0,
                                 sim.end_ns - s0, sim.sm, sim.end_ns - s0])
    out = Path(args.out or "experiments/results/gpu")
    out.mkdir(parents=True, exist_ok=True)
    stem = f"timeline_{args.tag}_" if args.tag else "timeline_"
    _write(out / f"{stem}measured.csv", measured[np.argsort(measured[:, 0])].astype(np.int64).tolist())
    _write(out / f"{stem}simulated.csv", np.round(simulated).astype(np.int64).tolist())
    span_m = (trace[:, 2].max() - t0) / 1e3
    print(f"{args.layer} fused {plan.param_string()}: measured span {span_m:,.1f} us (one traced run), "
          f"simulated {sim.predicted_us:,.1f} us; {graph.num_tasks} tasks on {len(np.unique(trace[:, 3]))} SMs")
    from megasim.calibration.validation import run_meta
    meta = run_meta({"device": str(cuda.get_current_device().name), "spec": args.spec, "sets": args.sets,
                     "hog_sms": args.hog, "hog_streams_dram": args.hog and not args.hog_idle, "hog_stats": hog_stats,
                     "command": "bash gpu/on_device.sh python -m gpu.diagnostics.record_timeline " + " ".join(argv or sys.argv[1:])})
    summary = {"meta": meta, "layer": args.layer, "params": plan.param_string(), "measured_span_us": span_m,
               "predicted_us": sim.predicted_us, "measured": kind_summary(measured, graph.kind_names),
               "simulated": kind_summary(simulated, graph.kind_names)}
    for name in graph.kind_names:
        m, p = summary["measured"].get(name), summary["simulated"].get(name)
        if m and p:
            print(f"  {name:7s} wait {m['wait_us']:7.2f} us (model {p['wait_us']:7.2f})  "
                  f"run {m['run_us']:7.2f} us (model {p['run_us']:7.2f}; measured signal {m['signal_us']:5.2f})")
    (out / f"{stem}summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from experiments.figures import style
    colors = style.OKABE_ITO
    fig, axes = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    m_sm = np.unique(measured[:, 5])[:args.sms]
    _gantt(axes[0], measured[:, 2], measured[:, 4], measured[:, 5], measured[:, 1], graph.kind_names, m_sm,
           f"measured on the GPU ({args.layer}, one run, first {args.sms} SMs)", colors)
    _gantt(axes[1], simulated[:, 2], simulated[:, 4], simulated[:, 5], simulated[:, 1], graph.kind_names,
           list(range(args.sms)), f"simulated ({Path(args.spec).name})", colors)
    axes[1].set_xlabel("time from the first claim (us)")
    handles = [matplotlib.patches.Patch(color=colors[k], label=n) for k, n in enumerate(graph.kind_names)]
    axes[0].legend(handles=handles, loc="upper right", ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{stem}gantt.png", dpi=150)
    plt.close(fig)
    print(f"wrote {out / (stem + 'measured.csv')}, {out / (stem + 'simulated.csv')}, {out / (stem + 'gantt.png')}")


if __name__ == "__main__":
    main()
