"""Fig. 3 on the model: which kinds of task run over time, under three task mappings of one layer.

Produces ``DIR/fig03_task_timeline.csv`` (for each mapping, time bins with the mean number of blocks
working on each task kind, ``ftrans`` ``itrans`` ``gemm`` ``otrans``, and of blocks holding a slot while
they poll for unfinished parents, ``waiting``; plus the mapping's parameters, predicted time and slot
count), its JSON (provenance, GPU spec, parameters) and ``DIR/fig03_task_timeline.png``/``.pdf``, drawn
from the CSV alone (and from ``DIR/fig03_task_timeline_measured.csv`` when a recorded run was given).

From: the megasim model on a GPU spec preset (default V100, the paper's GPU); no GPU is used. Layer
resnet-1 (Table 2), batch 64. The mappings of the paper's Fig. 3 (Sec. 5.1-5.3):
(a) ``naive``: the megakernel in non-fused order (``megasim.algorithms.winograd.winograd_naive``): all input
    transforms, then the GEMMs, then the output transforms;
(b) ``mixed``: Algorithm 1 with M = 4 and its smallest valid D_IG and D_GO: kinds interleaved in the
    proportion S_I : S_G : S_O, parents only just ahead of their children (the closest the algorithm
    allows to Fig. 3b's "mixed, no dependency distance");
(c) ``distance``: Algorithm 1 with M = 4 and D_IG, D_GO four times those (Fig. 3c).
The counts come from the simulated per-task records (``SimResult.claim_ns`` / ``ready_ns`` /
``end_ns`` / ``kind``): a task counts as *working* from ready to end and as *waiting* from claim to
ready; each bin holds the time average over the bin (200 bins over the longest of the three runs).

``--measured FILE`` takes a recorded GPU run, a CSV with columns ``task,kind,start_ns,end_ns,sm`` (kind
by name or by index in ftrans/itrans/gemm/otrans; with ``ready_ns`` too, as ``gpu.diagnostics.record_timeline``
writes, polling time is drawn as waiting) (an
optional ``mapping`` column splits it into panels); it is binned into
``DIR/fig03_task_timeline_measured.csv`` (kept there for later re-plots) and drawn beside the model.
Without one the figure says "measured: not yet available".

Run time (2 shared cores): full ~4 s (three simulations, ~1 s of model time); ``--quick`` (batch 8) ~3 s.

    python -m experiments.figures.fig03_task_timeline [--quick] [--out DIR] [--gpu V100] [--measured FILE]
    python -m experiments.figures.fig03_task_timeline --plot-only --out DIR
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiments.figures import style
from experiments.provenance import provenance, read_rows, write_results
from experiments.sweeps import FULL_BATCH, QUICK_BATCH, graph_of, run_script, spec_meta
from megasim.algorithms.winograd import WinogradParams
from megasim.algorithms.winograd.algorithm1 import default_params
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.workloads import parse_layer

NAME = "fig03_task_timeline"
MEASURED = f"{NAME}_measured"
LAYER = "resnet-1"
M = 4
DISTANCE_FACTOR = 4
BINS = 200
KINDS = ("ftrans", "itrans", "gemm", "otrans")
KIND_COLOURS = {"ftrans": style.OKABE_ITO[4], "itrans": style.OKABE_ITO[0], "gemm": style.OKABE_ITO[1],
                "otrans": style.OKABE_ITO[2], "waiting": "#BBBBBB"}
LABELS = {"naive": "(a) non-fused order in one megakernel",
          "mixed": f"(b) Algorithm 1, M={M}, smallest D_IG / D_GO",
          "distance": f"(c) Algorithm 1, M={M}, D_IG / D_GO x{DISTANCE_FACTOR}"}
MEASURED_COLUMNS = ("task", "kind", "start_ns", "end_ns", "sm")


def _extra_args(ap) -> None:
    ap.add_argument("--measured", type=Path, default=None,
                    help="a recorded GPU run (CSV: task,kind,start_ns,end_ns,sm[,ready_ns,mapping]) to draw beside the model")
    ap.add_argument("--measured-label", default="recorded run",
                    help="what the recorded run was, for its panel title when its CSV has no mapping column")


def mean_open(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-averaged number of open [start, end) intervals in each bin [edges[i], edges[i+1])."""
    keep = end > start
    s, e = np.sort(start[keep]), np.sort(end[keep])
    cs, ce = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(e)])
    ks, ke = np.searchsorted(s, edges, side="right"), np.searchsorted(e, edges, side="right")
    # Integral from -inf to x of the open count: sum over started (x - s) minus sum over ended (x - e).
    integral = (ks * edges - cs[ks]) - (ke * edges - ce[ke])
    return np.diff(integral) / np.diff(edges)


def _mapping_plans(graph) -> dict[str, Plan]:
    base = Plan("fused", WinogradParams(m=M))
    a1 = default_params(graph, M)
    n_i = int((graph.kind == graph.kind_names.index("itrans")).sum())
    far = Plan("fused", WinogradParams(m=a1.m, d_ig=min(n_i, a1.d_ig * DISTANCE_FACTOR), d_go=a1.d_go * DISTANCE_FACTOR))
    return {"naive": Plan("naive"), "mixed": base, "distance": far}


def compute(args, spec) -> Path:
    batch = QUICK_BATCH if args.quick else FULL_BATCH
    problem = parse_layer(LAYER, batch)
    runs = {}
    for key, plan in _mapping_plans(graph_of(problem)).items():
        g, schedule, plan = build(problem, plan)
        runs[key] = (plan, simulate(g, schedule, spec))
        r = runs[key][1]
        print(f"  {key:<8} {r.predicted_us:9.1f} us  waits {r.wait_ns.sum() / 1e3:9.1f} us  "
              f"({plan.param_string().split(',t=')[0] if plan.params.d_ig is not None else 'non-fused order'})", flush=True)
    edges = np.linspace(0.0, max(r.predicted_ns for _, r in runs.values()), BINS + 1)
    rows: list[dict[str, Any]] = []
    for key, (plan, r) in runs.items():
        counts = {k: mean_open(r.ready_ns[r.kind == r.kind_names.index(k)],
                               r.end_ns[r.kind == r.kind_names.index(k)], edges) for k in KINDS}
        counts["waiting"] = mean_open(r.claim_ns, r.ready_ns, edges)
        slots = max(l.blocks_per_sm for l in r.launches) * r.sm_count
        for i in range(BINS):
            rows.append({"mapping": key, "label": LABELS[key], "layer": LAYER, "batch": batch, "gpu": spec.name,
                         "schedule": plan.schedule, "D_IG": plan.params.d_ig if plan.params.d_ig is not None else "",
                         "D_GO": plan.params.d_go if plan.params.d_go is not None else "",
                         "M": plan.params.m if plan.params.m is not None else "",
                         "predicted_us": round(r.predicted_us, 3), "slots": slots,
                         "total_wait_us": round(float(r.wait_ns.sum()) / 1e3, 1), "bin": i,
                         "t0_us": round(edges[i] / 1e3, 4), "t1_us": round(edges[i + 1] / 1e3, 4),
                         **{k: round(float(v[i]), 3) for k, v in counts.items()}})
    params = {"layer": LAYER, "batch": batch, "M": M, "distance_factor": DISTANCE_FACTOR, "bins": BINS,
              "mappings": {k: LABELS[k] for k in runs},
              "resolved": {k: p.param_string() for k, (p, _) in runs.items()},
              "working": "ready_ns to end_ns", "waiting": "claim_ns to ready_ns (polling parents' counters)",
              "quick": args.quick}
    meta = provenance({**spec_meta(spec), "script": f"experiments.{NAME}", "device": "model (no GPU)",
                       "parameters": params})
    csv_path, _ = write_results(rows, args.out, NAME, meta)
    return csv_path


def prepare(args) -> None:
    """Bin a recorded GPU run (--measured) into DIR/NAME_measured.csv, which the plot reads."""
    if args.measured is None:
        return
    if not args.measured.exists():
        _fail(f"--measured {args.measured}: no such file (a CSV with columns {','.join(MEASURED_COLUMNS)})")
    raw = read_rows(args.measured)
    missing = [c for c in MEASURED_COLUMNS if raw and c not in raw[0]]
    if not raw or missing:
        _fail(f"--measured {args.measured}: needs columns {','.join(MEASURED_COLUMNS)}"
              + (f"; missing {','.join(missing)}" if missing else "; it has no rows"))
    rows: list[dict[str, Any]] = []
    label = args.measured_label
    for mapping in dict.fromkeys(r.get("mapping", label) for r in raw):
        mine = [r for r in raw if r.get("mapping", label) == mapping]
        start = np.array([float(r["start_ns"]) for r in mine])
        end = np.array([float(r["end_ns"]) for r in mine])
        # Working from ready to end when the recording has ready_ns (as gpu.diagnostics.record_timeline writes),
        # else from start; kinds by name or by their index in the Winograd lowering's KINDS.
        ready = np.array([float(r["ready_ns"]) for r in mine]) if "ready_ns" in mine[0] else start
        kind = np.array([KINDS[int(r["kind"])] if r["kind"].isdigit() and int(r["kind"]) < len(KINDS) else r["kind"]
                         for r in mine])
        t0 = start.min()
        edges = np.linspace(0.0, end.max() - t0, BINS + 1)
        counts = {k: mean_open(ready[kind == k] - t0, end[kind == k] - t0, edges) for k in KINDS}
        if "ready_ns" in mine[0]:
            counts["waiting"] = mean_open(start - t0, ready - t0, edges)
        others = sorted(set(kind) - set(KINDS))
        for i in range(BINS):
            rows.append({"mapping": mapping, "label": f"measured: {mapping}", "measured_us": round((end.max() - t0) / 1e3, 3),
                         "sms": len({r["sm"] for r in mine}), "bin": i, "t0_us": round(edges[i] / 1e3, 4),
                         "t1_us": round(edges[i + 1] / 1e3, 4),
                         **{k: round(float(v[i]), 3) for k, v in counts.items()}})
        if others:
            print(f"  --measured: kinds {', '.join(others)} are not drawn (drawn: {', '.join(KINDS)})")
    meta = provenance({"script": f"experiments.{NAME}", "device": "recorded GPU run",
                       "parameters": {"source": str(args.measured), "bins": BINS, "working": "start_ns to end_ns"}})
    path, _ = write_results(rows, args.out, MEASURED, meta)
    print(f"{NAME}: binned {len(raw)} measured tasks from {args.measured} into {path}")


def _fail(message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _stack(ax, rows, kinds, cap=None) -> None:
    t = np.array([0.5 * (float(r["t0_us"]) + float(r["t1_us"])) for r in rows])
    ys = [np.array([float(r[k]) for r in rows]) for k in kinds]
    ax.stackplot(t, ys, colors=[KIND_COLOURS[k] for k in kinds], labels=kinds, linewidth=0)
    if cap:
        ax.axhline(cap, color="black", lw=0.8, ls="--")
        ax.text(t[-1], cap, f"{cap} slots", ha="right", va="bottom", fontsize=7)
    ax.set_ylabel("blocks")


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """One stacked-area panel per mapping (shared time axis), a measured panel per recorded mapping."""
    rows = read_rows(csv_path)
    measured_path = csv_path.with_name(f"{MEASURED}.csv")
    measured = read_rows(measured_path) if measured_path.exists() else []
    mappings = list(dict.fromkeys(r["mapping"] for r in rows))
    recorded = list(dict.fromkeys(r["mapping"] for r in measured))
    style.apply()
    import matplotlib.pyplot as plt

    n = len(mappings) + len(recorded)
    fig, axes = plt.subplots(n, 1, figsize=(6.4, 1.75 * n + 0.6), sharex=False, squeeze=False)
    axes = axes[:, 0]
    t_max = max(float(r["t1_us"]) for r in rows)
    for ax, key in zip(axes, mappings):
        mine = [r for r in rows if r["mapping"] == key]
        _stack(ax, mine, [*KINDS, "waiting"], int(mine[0]["slots"]))
        r0 = mine[0]
        params = f"D_IG={r0['D_IG']}, D_GO={r0['D_GO']}, " if r0["D_IG"] else ""
        ax.set_title(f"{r0['label']}: {params}{float(r0['predicted_us']):.0f} us, "
                     f"summed waits {float(r0['total_wait_us']) / 1e3:.1f} ms", fontsize=8, loc="left")
        ax.set_xlim(0, t_max)
    for ax, key in zip(axes[len(mappings):], recorded):
        mine = [r for r in measured if r["mapping"] == key]
        _stack(ax, mine, list(KINDS) + (["waiting"] if mine[0].get("waiting", "") != "" else []))
        ax.set_title(f"measured ({key}): {float(mine[0]['measured_us']):.0f} us on {mine[0]['sms']} SMs",
                     fontsize=8, loc="left")
    axes[-1].set_xlabel("time (us)")
    handles, labels = axes[0].get_legend_handles_labels()
    r0 = rows[0]
    fig.legend(handles[::-1], labels[::-1], loc="upper right", ncol=5, frameon=False, fontsize=7,
               bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"Model ({r0['gpu']} spec), {r0['layer']} batch {r0['batch']}: blocks working on each "
                 f"task kind", x=0.0, ha="left", fontsize=9, y=1.0 + 0.02 * (4 / n))
    if not recorded:
        fig.text(0.0, -0.01, "measured: not yet available (no recorded GPU run; see --measured)",
                 fontsize=7, style="italic", va="top")
    fig.tight_layout()
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot, extra_args=_extra_args, prepare=prepare)


if __name__ == "__main__":
    sys.exit(main())
