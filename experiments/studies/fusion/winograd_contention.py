"""Fusion where DRAM is scarce: the fused megakernel and our non-fused pipeline timed beside a DRAM hog.

Issue 3 asks the fused megakernel (best of the bench's Algorithm 1 sweep) to run 1.25x faster than our
non-fused pipeline; on the H200 and the H100 it runs 0.94x and 0.97x. The calibrated model says the
gap is the GPUs' memory/compute balance: fusion saves DRAM traffic, and beside 132 GH100 SMs DRAM is
too fast for the saving to pay (``experiments.studies.fusion.fusion_vs_dram``: 1.25x at ~1.1 TB/s). This script
tests that on the GPU we have: a hog (``gpu.probes.dram_hog_kernel``) streams DRAM on S SMs, leaving the kernels the
other 132 - S SMs and what bandwidth the hog leaves them.

``measure`` (GPU): per hog size S (0 = no hog), what the other SMs get beside the hog: the copy
bandwidth (the spec's DRAM probe: a 2 GiB device-to-device copy, read + write bytes) and the spec's
latency probes (``gpu.probes.dram_hog.Latencies``). Then per Table-2 layer and S: our non-fused
pipeline, the fused megakernel at the default Algorithm 1 parameters, and the best of the bench's
12-point sweep (chosen anew at each S). Each is checked against a float64 reference (before the hog and
again under it) and timed as the bench times them (CUDA events, median, inputs rotated). A window the
hog did not cover is an error. ``--idle``: hogs that hold the same SMs and sleep, so only the SM count
changes.

``predict`` (no GPU): the H200's calibrated spec (nothing fitted here) with its SM count set to 132 - S
and its DRAM bandwidth scaled by the copy's beside the hog over alone (``--hog`` CSV:
``gpu.probes.dram_hog``'s or ``measure``'s), the same sweep. ``--latency`` also scales its DRAM, L2 and
atomic latencies by the probes; ``--idle`` changes the SM count only; ``--scale FIELD=FACTOR`` is a
what-if on any numeric spec field at S > 0. ``--measured`` joins the measured speedups. What the model
leaves out: the hog's traffic through the L2 (its lines are evict-first, but they pass through), and
that the other SMs share DRAM with the hog's demand, not with a fixed bandwidth.

    bash gpu/on_device.sh python -m experiments.studies.fusion.winograd_contention measure [--sms 0 32 64 96] [--idle] [--layers ...]
    python -m experiments.studies.fusion.winograd_contention predict --hog CSV [--latency] [--idle] [--scale F=X] [--measured CSV]
    python -m experiments.studies.fusion.winograd_contention plot      # the figure, from the committed CSVs alone

Writes DIR/winograd_contention[_idle].csv (measure: layer, hog_sms, impl, median_ms, min_ms, max_ms,
rel_err, detail, plus per-S rows of impl "copy_gbps" with the latencies), or
DIR/winograd_contention[_idle][_latency][_whatif_...]_predicted.csv and its summary, each with a JSON of
provenance. Results of 2026-11-25 on the H200: docs/findings.md (GPU kernels).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from experiments.studies.dispatch.ready_dispatch import geomean

NAME = "winograd_contention"
OUT_MODEL = "experiments/results/model/winograd_contention"
SPEC = "megasim/hardware/calibrated/h200.json"
DEFAULT_SMS = (0, 32, 64, 96)
SWEEP_REPEATS = 10


# -- measure (GPU) -------------------------------------------------------------------------------------------

def _layer(lb, sms_levels, rows: list, meta: dict, hogs: dict) -> None:
    """One layer at every hog size: non-fused, fused default, fused sweep best (chosen at that size)."""
    from experiments.benchmarks.winograd_bench import make_row, sweep_candidates, worst
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.algorithms.winograd.algorithm1 import algorithm1
    from megasim.algorithms.winograd.algorithm1 import default_params
    from megasim.algorithms.winograd import winograd_nonfused
    name, flops = lb.p.name, lb.p.direct_flops

    def checked(prep) -> float:
        lb.poison(lb.ws[0].Y)
        prep.run(lb.ws[0])
        prep.check()
        return lb.err_nhwk(lb.ws[0])

    nonfused = PreparedSchedule(lb.plan_nonfused, winograd_nonfused(lb.plan_nonfused.graph), kernels="per_kind")
    default = default_params(lb.plan.graph)
    points = [default] + [p for p in sweep_candidates(lb.plan.graph) if p != default]
    fused = {p: PreparedSchedule(lb.plan, algorithm1(lb.plan.graph, p), kernels="megakernel") for p in points}
    errs = {"nonfused": checked(nonfused), **{p: checked(f) for p, f in fused.items()}}   # before any hog
    for s in sms_levels:
        hog = hogs.get(s)
        with (hog if hog is not None else contextlib.nullcontext()):
            t = lb.time(lambda i: nonfused.run(lb.ws[i]))
            rows.append(make_row(name, "nonfused", t, worst(errs["nonfused"], checked(nonfused)),
                                 sets=lb.sets, flops=flops) | {"hog_sms": s})
            sweep = {}
            for p, f in fused.items():
                sweep[p] = lb.time(lambda i: f.run(lb.ws[i]), repeats=SWEEP_REPEATS, warmup=2).median_ms
                f.check()
            best = min(sweep, key=sweep.get)
            for impl, p in (("fused", default), ("fused_sweep_best", best)):
                t = lb.time(lambda i: fused[p].run(lb.ws[i]))
                fused[p].check()
                detail = f"D_IG={p.d_ig} D_GO={p.d_go} M={p.m}"
                rows.append(make_row(name, impl, t, worst(errs[p], checked(fused[p])), detail=detail,
                                     sets=lb.sets, flops=flops) | {"hog_sms": s})
        meta.setdefault("sweeps", {}).setdefault(name, {})[str(s)] = [
            {**p.as_dict(), "median_ms": ms} for p, ms in sweep.items()]
        if hog is not None:
            meta.setdefault("hog_stats", {}).setdefault(name, {})[str(s)] = hog.stats.as_dict()
            if hog.stats.timed_out or not hog.stats.covered:
                raise RuntimeError(f"the hog on {s} SMs did not run through the layer's timed runs "
                                   f"(timed_out={hog.stats.timed_out}, covered={hog.stats.covered})")


def measure(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.fusion.winograd_contention measure")
    ap.add_argument("--sms", nargs="+", type=int, default=list(DEFAULT_SMS))
    ap.add_argument("--layers", nargs="+", default=None)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--idle", action="store_true",
                    help="idle hogs: the same SMs taken, no DRAM traffic (writes winograd_contention_idle)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import numpy as np
    import torch
    from numba import cuda

    from experiments.provenance import provenance, write_results
    from experiments.benchmarks.winograd_bench import (LayerBench, _release, device_meta, device_slug, error_row, parse_args)
    from gpu.baselines import fp32_torch_flags
    from gpu.probes.dram_hog_kernel import DramHog
    from gpu.probes.dram_hog import Latencies, copy_gbps
    from megasim.workloads import parse_layer

    bench_args = parse_args(["--ours-only", "--repeats", str(args.repeats)]
                            + (["--layers", *args.layers] if args.layers else []))
    fp32_torch_flags()
    dmeta = device_meta(torch, cuda)
    slug = device_slug(dmeta["device"])
    name = NAME + ("_idle" if args.idle else "")
    out = Path(args.out) if args.out else Path(os.environ.get("OUT", "experiments/results")) / slug / NAME
    n_sm = dmeta["sm_count"]
    levels = list(dict.fromkeys(args.sms))
    if not all(0 <= s < n_sm for s in levels):
        ap.error(f"--sms {levels} is not allowed: each must be in 0 .. {n_sm - 1}")
    hogs = {s: DramHog(s, stream_dram=not args.idle, max_seconds=300.0) for s in levels if s > 0}
    meta = provenance({**dmeta, "script": f"experiments.{NAME} measure", "sms": levels, "hog_streams_dram": not args.idle,
                       "layers": bench_args.layers,
                       "repeats": args.repeats, "sweep_repeats": SWEEP_REPEATS,
                       "hog": {s: {"threads_per_block": h.threads, "regs_per_thread": h.regs,
                                   "buffer_bytes": h.buffer_bytes} for s, h in hogs.items()},
                       "timing": "gpu.runtime.timing.time_cuda on the legacy default stream (waits on it only); the hog on a "
                                 "non-blocking torch stream, running from before the first timed run to after the last"})
    rows: list[dict[str, Any]] = []
    src = torch.empty(2 ** 29, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    copy_gbps(torch, src, dst)      # torch loads its copy kernel lazily: load it before any hog runs
    lat = Latencies()
    for s in levels:
        hog = hogs.get(s)
        with (hog if hog is not None else contextlib.nullcontext()):
            census = hog.census(16 * n_sm) if hog is not None else 0
            gbps = copy_gbps(torch, src, dst)
            latencies = lat.measure()
        bad = hog is not None and (census or hog.stats.timed_out or not hog.stats.covered)
        rows.append({"layer": "", "hog_sms": s, "impl": "copy_gbps", "median_ms": math.nan, "rel_err": math.nan,
                     "status": f"hog not alone or not running: census {census}, {hog.stats}" if bad else "ok",
                     "detail": f"{gbps:.1f}" + (f" hog_gbps={hog.stats.gbps:.1f}" if hog else ""),
                     **{k: round(v, 1) for k, v in latencies.items()}})
        print(f"hog on {s} SMs: copy {gbps:.0f} GB/s, census {census}, "
              + ", ".join(f"{k} {v:.0f}" for k, v in latencies.items())
              + (f", hog {hog.stats.gbps:.0f} GB/s" if hog else ""), flush=True)
    del src, dst, lat
    torch.cuda.empty_cache()
    for idx, layer in enumerate(bench_args.layers):
        t0 = time.perf_counter()
        try:
            lb = LayerBench(parse_layer(layer, batch=bench_args.batch), bench_args,
                            np.random.default_rng(bench_args.seed + idx), torch, cuda)
            _layer(lb, levels, rows, meta, hogs)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            traceback.print_exc()
            rows.append(error_row(layer, "fused", exc) | {"hog_sms": -1})
        finally:
            lb = None
            _release(torch, cuda)
        done = [r for r in rows if r["layer"] == layer]
        print(f"[{layer}] {time.perf_counter() - t0:.1f} s: " + ", ".join(
            f"S={r['hog_sms']} {r['impl']} {r['median_ms']:.3f}" for r in done), flush=True)
        write_results(rows, out, name, meta)
    print(format_measured(rows))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


def speedups(rows: list[dict]) -> dict[tuple[str, int], float]:
    """(layer, hog_sms) -> non-fused median / fused sweep best median, from measured rows."""
    ms = {(r["layer"], int(r["hog_sms"]), r["impl"]): float(r["median_ms"]) for r in rows if r["layer"]}
    return {(layer, s): ms[(layer, s, "nonfused")] / ms[(layer, s, "fused_sweep_best")]
            for layer, s, impl in ms if impl == "nonfused" and (layer, s, "fused_sweep_best") in ms}


def copy_bandwidths(rows: list[dict]) -> dict[int, float]:
    """hog_sms -> the copy bandwidth (GB/s) the other SMs got, from measure's rows or gpu.probes.dram_hog's."""
    out = {}
    for r in rows:
        if r.get("impl") == "copy_gbps":
            out[int(r["hog_sms"])] = float(str(r["detail"]).split()[0])
        elif "copy_gbps" in r:
            out[int(r["hog_sms"])] = float(r["copy_gbps"])
    return out


LATENCIES = ("dram_latency_ns", "l2_latency_ns", "atomic_latency_ns")


def block_rate_caps(spec, factor: float) -> dict:
    """Spec fields with every per-block DRAM rate cap times ``factor``: the kinds' fitted
    ``block_dram_bw_gbps`` and ``tb_max_dram_bw_gbps``. Little's law: a block keeps the same bytes in
    flight, so its rate scales as 1 / latency; ``factor`` = latency alone / latency beside the hog."""
    import dataclasses
    costs = {k: (dataclasses.replace(c, block_dram_bw_gbps=c.block_dram_bw_gbps * factor)
                 if c.block_dram_bw_gbps is not None else c) for k, c in spec.task_costs.items()}
    return {"task_costs": costs, "tb_max_dram_bw_gbps": spec.tb_max_dram_bw_gbps * factor}


def megakernel_sync_costs(task_costs: dict, factor: float) -> dict:
    """The kinds' per-task megakernel costs (``megakernel_claim_ns``: the ticket and counter checks;
    ``megakernel_fixed_ns``: the fence and signal) times ``factor``: the hypothesis that they are round
    trips through the L2, so they stretch with its latency (``factor`` = L2 latency beside / alone)."""
    import dataclasses
    out = {}
    for k, c in task_costs.items():
        claim = c.megakernel_claim_ns * factor if c.megakernel_claim_ns is not None else None
        out[k] = dataclasses.replace(c, megakernel_claim_ns=claim, megakernel_fixed_ns=c.megakernel_fixed_ns * factor)
    return out


def latencies_of(rows: list[dict]) -> dict[int, dict[str, float]]:
    """hog_sms -> the latency probes measured beside that hog (rows that have them)."""
    return {int(r["hog_sms"]): {k: float(r[k]) for k in LATENCIES} for r in rows
            if all(str(r.get(k, "")).strip() not in ("", "nan") for k in LATENCIES)}


def format_measured(rows: list[dict]) -> str:
    sp = speedups(rows)
    levels = sorted({s for _, s in sp})
    lines = ["layer        " + " ".join(f"S={s:<3d}" for s in levels) + "  (our non-fused / fused best)"]
    for layer in dict.fromkeys(l for l, _ in sp):
        lines.append(f"{layer:12s} " + " ".join(f"{sp.get((layer, s), math.nan):5.3f}" for s in levels))
    means = [[v for (_, s2), v in sp.items() if s2 == s] for s in levels]
    lines.append(f"{'geomean':12s} " + " ".join(f"{geomean(m):5.3f}" if m else "  -  " for m in means))
    return "\n".join(lines)


# -- predict (model) ----------------------------------------------------------------------------------------

def predict(argv: list[str]) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.fusion.winograd_contention predict")
    ap.add_argument("--hog", default=None, help="a gpu.probes.dram_hog or `measure` CSV (copy bandwidth per S)")
    ap.add_argument("--idle", action="store_true", help="idle hogs: the SM count changes, the bandwidth does not")
    ap.add_argument("--latency", action="store_true",
                    help="also scale the spec's DRAM, L2 and atomic latencies by the --hog CSV's probes (beside / alone)")
    ap.add_argument("--measured", default=None, help="a `measure` CSV to compare with")
    ap.add_argument("--sms", nargs="+", type=int, default=None, help="hog sizes to predict (default: the CSV's)")
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--littles-law", action="store_true",
                    help="with --latency: also scale every per-block DRAM rate cap (the kinds' block_dram_bw_gbps, "
                         "tb_max_dram_bw_gbps) by DRAM latency alone / beside (bytes in flight fixed)")
    ap.add_argument("--sync-latency", action="store_true",
                    help="with --latency: also scale the kinds' per-task megakernel costs (claim, counter checks, "
                         "fence and signal: megakernel_claim_ns, megakernel_fixed_ns) by L2 latency beside / alone")
    ap.add_argument("--scale", nargs="+", default=[], metavar="FIELD=FACTOR",
                    help="what-if: multiply spec fields at every S > 0, e.g. l2_bytes=0.25 (outputs tagged _whatif)")
    ap.add_argument("--layers", nargs="+", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=OUT_MODEL)
    args = ap.parse_args(argv)
    if args.layers:
        from experiments.layer_args import checked_layers
        checked_layers(args.layers, ap.error)   # every layer named is a problem, before any work
    from experiments.studies.fusion.fusion_vs_dram import sweep_at
    from experiments.provenance import provenance, read_rows, write_results
    from experiments.sweeps import parallel_map, print_table
    from megasim.errors import MegasimError
    from megasim.hardware import load_spec
    from megasim.workloads import TABLE2_NAMES, parse_layer

    if not args.idle and not args.hog:
        raise SystemExit("predict needs --hog CSV (the copy bandwidth beside each hog), or --idle")
    scale_fields = {}
    for item in args.scale:
        key, _, val = item.partition("=")
        try:
            scale_fields[key] = float(val)
        except ValueError:
            raise SystemExit(f"--scale {item!r} is not allowed: give FIELD=FACTOR with a number")
    for path in (args.hog, args.measured):
        if path and not Path(path).exists():
            raise SystemExit(f"{path!r} does not exist: give a CSV written by gpu.probes.dram_hog or this script")
    hog_rows = read_rows(args.hog) if args.hog else []
    bw, lat = copy_bandwidths(hog_rows), latencies_of(hog_rows)
    levels = args.sms if args.sms is not None else (list(DEFAULT_SMS) if args.idle else sorted(bw))
    if args.idle:
        bw = {s: 1.0 for s in levels}
    for flag, on in (("--littles-law", args.littles_law), ("--sync-latency", args.sync_latency)):
        if on and not args.latency:
            raise SystemExit(f"{flag} is not allowed without --latency (it scales by the latency probes)")
    if args.latency and not all(s in lat for s in [0, *levels]):
        raise SystemExit(f"--latency: {args.hog!r} has latency probes for S = {sorted(lat)}, not for all of 0, {levels}")
    missing = [s for s in levels if s not in bw]
    if missing:
        raise SystemExit(f"--sms {missing} not in {args.hog!r}, which has copy bandwidths for S = {sorted(bw)}")
    layers = args.layers or list(TABLE2_NAMES)
    try:
        spec = load_spec(args.spec)
        for layer in layers:
            parse_layer(layer)
    except MegasimError as err:
        raise SystemExit(str(err))
    for key, factor in scale_fields.items():
        if not isinstance(getattr(spec, key, None), (int, float)) or not (0 < factor < float("inf")):
            raise SystemExit(f"--scale {key}={factor:g} is not allowed: FIELD must be a numeric spec field, "
                             "FACTOR a positive number")
    n_sm = spec.sm_count
    # S = 0 keeps the spec's own bandwidth (what the model was calibrated with); S > 0 scales it by the
    # copy bandwidth the hog leaves, relative to the copy alone in the same run.
    scale = {s: bw[s] / bw[0] if 0 in bw else 1.0 for s in levels}
    over = {s: ({k: getattr(spec, k) * lat[s][k] / lat[0][k] for k in LATENCIES} if args.latency else {})
            for s in levels}
    for s in levels:
        if s > 0:
            over[s].update({k: type(getattr(spec, k))(getattr(spec, k) * f) for k, f in scale_fields.items()})
        if args.littles_law:
            over[s].update(block_rate_caps(spec, lat[0]["dram_latency_ns"] / lat[s]["dram_latency_ns"]))
        if args.sync_latency:
            base = over[s].get("task_costs", spec.task_costs)
            over[s]["task_costs"] = megakernel_sync_costs(base, lat[s]["l2_latency_ns"] / lat[0]["l2_latency_ns"])
    jobs = [(args.spec, layer, spec.dram_bw_gbps * scale[s], n_sm - s, over[s]) for s in levels for layer in layers]
    rows = parallel_map(sweep_at, jobs, args.workers)
    for r, (_, _, _, sms, _) in zip(rows, jobs):
        r["hog_sms"] = n_sm - sms
    measured = speedups(read_rows(args.measured)) if args.measured else {}
    for r in rows:
        m = measured.get((r["layer"], r["hog_sms"]))
        r["measured_speedup_best"] = round(m, 4) if m is not None else ""
    print_table(rows, ["hog_sms", "sm_count", "dram_bw_gbps", "layer", "nonfused_us", "best_us", "speedup_best",
                       "measured_speedup_best"])
    summary = []
    for s in levels:
        mine = [r for r in rows if r["hog_sms"] == s]
        meas = [r["measured_speedup_best"] for r in mine if r["measured_speedup_best"] != ""]
        summary.append({"hog_sms": s, "sm_count": n_sm - s, "dram_bw_gbps": round(mine[0]["dram_bw_gbps"], 1),
                        "copy_gbps_measured": bw[s], "predicted_geomean": round(geomean([r["speedup_best"] for r in mine]), 4),
                        "measured_geomean": round(geomean(meas), 4) if len(meas) == len(mine) else ""})
    print()
    print_table(summary, list(summary[0]))
    meta = provenance({"script": f"experiments.{NAME} predict", "device": "model (no GPU)", "spec": args.spec,
                       "hog_csv": args.hog, "measured_csv": args.measured, "layers": layers,
                       "bandwidth_rule": "spec dram_bw_gbps" + ("" if args.idle else
                                         " x (copy GB/s beside the hog / copy GB/s alone)"),
                       "sm_rule": "spec sm_count - hog SMs",
                       "latency_rule": ("spec dram/l2/atomic latency x (probe beside the hog / probe alone)"
                                        if args.latency else "spec latencies unchanged"),
                       "block_rate_rule": ("per-block DRAM caps x DRAM latency alone / beside (Little's law)"
                                           if args.littles_law else "per-block DRAM caps unchanged"),
                       "sync_rule": ("megakernel_claim_ns, megakernel_fixed_ns x L2 latency beside / alone"
                                     if args.sync_latency else "per-task megakernel costs unchanged"),
                       "whatif_scale_at_hog": scale_fields})
    name = NAME + ("_idle" if args.idle else "") + ("_latency" if args.latency else "") + (
        "_littles_law" if args.littles_law else "") + ("_sync" if args.sync_latency else "") + (
        "_whatif_" + "_".join(f"{k}{v:g}" for k, v in scale_fields.items()) if scale_fields else "")
    write_results(rows, args.out, f"{name}_predicted", meta)
    write_results(summary, args.out, f"{name}_predicted_summary", meta)
    return summary


# -- plot (from the CSVs alone) -----------------------------------------------------------------------------

MEASURED_DIR = "experiments/results/nvidia-h200/winograd_contention"
PREDICTED_CURVES = (("winograd_contention_predicted_summary", "predicted: bandwidth only (before the run)"),
                    ("winograd_contention_latency_predicted_summary", "predicted: bandwidth and latencies"),
                    ("winograd_contention_latency_littles_law_sync_predicted_summary",
                     "predicted: + Little's law + sync stretch (hypotheses)"),
                    ("winograd_contention_idle_predicted_summary", "predicted: idle hog (SMs only)"))


def plot(argv: list[str]) -> Path:
    """Fused best / our non-fused against the hog's SMs: the measured geometric means beside the DRAM hog
    and the idle hog (thin lines: each layer beside the DRAM hog), the model's curves, 1.0 and the 1.25x
    target. Drawn from the committed CSVs alone."""
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.fusion.winograd_contention plot")
    ap.add_argument("--measured-dir", default=MEASURED_DIR)
    ap.add_argument("--predicted-dir", default=OUT_MODEL)
    ap.add_argument("--out", default=None, help="figure directory (default: --measured-dir)")
    args = ap.parse_args(argv)
    from experiments.figures import style
    from experiments.provenance import read_rows
    mdir, pdir = Path(args.measured_dir), Path(args.predicted_dir)
    hog_csv, idle_csv = mdir / f"{NAME}.csv", mdir / f"{NAME}_idle.csv"
    if not hog_csv.exists():
        raise SystemExit(f"--measured-dir {str(mdir)!r} holds no {NAME}.csv (run `measure` first)")
    style.apply()
    fig, ax = style.new_figure()
    hog = speedups(read_rows(hog_csv))
    for i, layer in enumerate(dict.fromkeys(l for l, _ in hog)):
        pts = sorted((s, v) for (l, s), v in hog.items() if l == layer)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="grey", lw=0.6, alpha=0.5,
                label="one layer, beside the DRAM hog" if i == 0 else None)

    def means(sp):
        levels = sorted({s for _, s in sp})
        return levels, [geomean([v for (_, s2), v in sp.items() if s2 == s]) for s in levels]

    for j, (path, label) in enumerate(((hog_csv, "measured beside the DRAM hog"), (idle_csv, "measured beside an idle hog"))):
        if path.exists():
            x, y = means(speedups(read_rows(path)))
            ax.plot(x, y, color=style.OKABE_ITO[j], lw=2.2, marker=style.MARKERS[j], label=label)
    for j, (stem, label) in enumerate(PREDICTED_CURVES, start=2):
        path = pdir / f"{stem}.csv"
        if path.exists():
            rows = sorted(read_rows(path), key=lambda r: int(r["hog_sms"]))
            ax.plot([int(r["hog_sms"]) for r in rows], [float(r["predicted_geomean"]) for r in rows],
                    color=style.OKABE_ITO[j], ls="--", marker=style.MARKERS[j], label=label)
    ax.axhline(1.25, color="black", ls=":", lw=1, label="issue 3's target, 1.25x")
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_xlabel("SMs taken by the hog (of 132)")
    ax.set_ylabel("fused best / our non-fused (x)")
    ax.legend(loc="upper left", fontsize=6.5)
    png, _ = style.save_figure(fig, args.out or mdir, NAME)
    return png


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("measure", "predict", "plot"):
        print("usage: python -m experiments.studies.fusion.winograd_contention {measure,predict,plot} ...", file=sys.stderr)
        return 2
    if argv[0] == "measure":
        return measure(argv[1:])
    if argv[0] == "plot":
        print(f"wrote {plot(argv[1:])}")
        return 0
    predict(argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
