"""How much faster than our non-fused pipeline can any schedule of the same task bodies be? An issue-rate bound.

Issue 3 asks the fused megakernel to be 1.25x faster than our non-fused pipeline. Fusion changes when and
where tasks run, not what each task executes: the megakernel runs the same transform and GEMM bodies,
plus its claims, waits and signals. Each of an SM's 4 sub-partitions issues at most one warp
instruction per cycle, so a run that executes I warp instructions takes at least

    T_issue = I / (4 x SMs x f_SM)

whatever its schedule. ``ceiling = T_nonfused / T_issue(fused)`` bounds the fused / non-fused speedup
of *any* mapping of the megakernel as built: reaching it would need every sub-partition of every SM to
issue on every cycle from the first task to the last. No kernel here does (the bench's kernels issue
on 60-85% of cycles; cuBLAS's SIMT SGEMM on 87%: docs/findings.md), so the ceiling at cuBLAS's issue rate is
given beside it. If the ceiling is below 1.25x on a layer, no mapping reaches the target there without
executing fewer instructions, and fewer instructions per task would speed the non-fused pipeline too.

The DRAM floor (the bytes ncu counted / the spec's bandwidth) is given as well: where it were the larger,
the run would be memory-bound and issue would not be the bound.

Inputs: ``gpu.diagnostics.profile_schedules``' manifest and the ncu CSV it was run under (the metrics
``NCU_METRICS``; ``--csv --print-units base``, the default "details" page: a row per kernel and metric).
The measured times are the bench's (CUDA events, median of 30); ncu supplies instruction counts, issue
activity, the SM clock and DRAM bytes of one profiled run of each schedule.

    python -m experiments.studies.fusion.fusion_ceiling DIR [--spec megasim/hardware/calibrated/h200.json]
        # DIR holds profile_manifest.json and ncu.csv (or ncu.csv.gz)

``--spec`` adds the model's predictions of the same runs: the fused mapping's time, and both schedules'
DRAM bytes read and written, beside ncu's (docs/findings.md: at the bench's best mappings the fused megakernel
reads every intermediate from DRAM, and the model says so too).

Writes DIR/fusion_ceiling.csv and DIR/fusion_ceiling.json (rows, geometric means, provenance).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

NCU_METRICS = (
    "smsp__inst_executed.sum",                              # warp instructions executed
    "smsp__issue_active.avg.pct_of_peak_sustained_active",  # % of active cycles a sub-partition issued
    "sm__cycles_elapsed.max",                               # the kernel's duration in SM cycles
    "gpu__time_duration.sum",                               # the kernel's duration (with the cycles: the SM clock)
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",  # FFMAs (thread-level)
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
)

#: Issue rate of cuBLAS's FP32 SIMT SGEMM (cutlass_80_simt_sgemm_256x128_8x4) on vgg-3's GEMM phase: 87.1% of
#: cycles (H200, ncu; docs/findings.md). The best a real kernel was seen to sustain here.
CUBLAS_ISSUE_ACTIVE = 0.871
SUBPARTITIONS_PER_SM = 4
TARGET = 1.25

_UNIT_SCALE = {"": 1.0, "inst": 1.0, "cycle": 1.0, "byte": 1.0, "%": 1.0, "nsecond": 1.0, "ns": 1.0,
               "usecond": 1e3, "msecond": 1e6, "second": 1e9, "cycle/second": 1.0, "hz": 1.0,
               "cycle/nsecond": 1e9, "cycle/usecond": 1e6, "khz": 1e3, "mhz": 1e6, "ghz": 1e9,
               "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9}


@dataclass(frozen=True)
class KernelRecord:
    """One profiled kernel launch: its ncu ID, name and metrics (in base units: ns, cycles, Hz, bytes)."""

    ncu_id: int
    name: str
    metrics: dict

    @property
    def role(self) -> str:
        """'restore' (the counters' reset before a megakernel launch), 'fused' (the megakernel) or
        'nonfused' (a per-kind kernel)."""
        if "restore_kernel" in self.name:
            return "restore"
        return "fused" if "megakernel" in self.name else "nonfused"


def _number(text: str, unit: str) -> float:
    scale = _UNIT_SCALE.get(unit.strip().lower())
    if scale is None:
        raise ValueError(f"ncu unit {unit!r} is not one this reader knows (allowed: {', '.join(sorted(_UNIT_SCALE))}); "
                         "run ncu with --print-units base")
    return float(text.replace(",", "")) * scale


def read_ncu_csv(path: str | Path) -> list[KernelRecord]:
    """The kernels of an ncu ``--csv`` log (details page: ID, Kernel Name, Metric Name, Metric Unit, Metric
    Value per row), in launch order. Lines before the CSV header (ncu's ==PROF== lines, the program's
    output) are skipped."""
    path = Path(path)
    raw = path.read_bytes()
    lines = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\"); was ncu run with --csv?")
    kernels: dict[int, tuple[str, dict]] = {}
    for row in csv.DictReader(lines[start:]):
        if not row.get("ID", "").strip().isdigit():
            continue                                    # (a program line interleaved with the log)
        kid = int(row["ID"])
        name, metrics = kernels.setdefault(kid, (row["Kernel Name"], {}))
        value = row["Metric Value"]
        metrics[row["Metric Name"]] = _number(value, row["Metric Unit"]) if value.strip() not in ("", "n/a") else math.nan
    return [KernelRecord(k, n, m) for k, (n, m) in sorted(kernels.items())]


def split_by_layer(records: list[KernelRecord], manifest: dict) -> list[tuple[dict, list, list]]:
    """(manifest entry, fused records, non-fused records) per layer, in the manifest's order: each layer ran
    its fused launches, then its non-fused ones (restore kernels skipped). ValueError if the log does not
    hold exactly that sequence."""
    seq = [r for r in records if r.role != "restore"]
    out, pos = [], 0
    for entry in manifest["layers"]:
        n_f, n_nf = len(entry["fused_launches"]), len(entry["nonfused_launches"])
        fused, nonfused = seq[pos:pos + n_f], seq[pos + n_f:pos + n_f + n_nf]
        pos += n_f + n_nf
        if [r.role for r in fused] != ["fused"] * n_f or [r.role for r in nonfused] != ["nonfused"] * n_nf:
            got = ", ".join(f"{r.ncu_id}:{r.role}" for r in fused + nonfused) or "none"
            raise ValueError(f"layer {entry['layer']}: expected {n_f} megakernel and {n_nf} non-fused kernel "
                             f"records, the ncu log has {got}")
        out.append((entry, fused, nonfused))
    if pos != len(seq):
        raise ValueError(f"the ncu log has {len(seq) - pos} kernel records after the manifest's last layer")
    return out


def _sum(records: list[KernelRecord], metric: str) -> float:
    return float(sum(r.metrics.get(metric, math.nan) for r in records))


def layer_row(entry: dict, fused: list[KernelRecord], nonfused: list[KernelRecord], sms: int,
              dram_bw_gbps: float | None) -> dict:
    """The bound and its ingredients for one layer (times in us)."""
    inst_f, inst_nf = _sum(fused, "smsp__inst_executed.sum"), _sum(nonfused, "smsp__inst_executed.sum")
    cyc_f, cyc_nf = _sum(fused, "sm__cycles_elapsed.max"), _sum(nonfused, "sm__cycles_elapsed.max")
    clock_f = cyc_f / (_sum(fused, "gpu__time_duration.sum") * 1e-9)
    lanes = SUBPARTITIONS_PER_SM * sms
    floor_f_us = inst_f / lanes / clock_f * 1e6
    t_nf_us, t_f_us = entry["bench_nonfused_ms"] * 1e3, entry["bench_fused_ms"] * 1e3
    bytes_f = _sum(fused, "dram__bytes_read.sum") + _sum(fused, "dram__bytes_write.sum")
    dram_floor_f_us = bytes_f / (dram_bw_gbps * 1e9) * 1e6 if dram_bw_gbps else math.nan
    ffma_f = _sum(fused, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum") / 32
    mp = entry["mapping"]
    return {
        "layer": entry["layer"], "tile": entry["tile"], "pairs_fused": entry["pairs_fused"],
        "mapping": f"D_IG={mp['D_IG']},D_GO={mp['D_GO']},M={mp['M']},dispatch={mp['dispatch']}",
        "bench_nonfused_us": t_nf_us, "bench_fused_us": t_f_us, "measured_speedup": t_nf_us / t_f_us,
        "inst_fused_M": inst_f / 1e6, "inst_nonfused_M": inst_nf / 1e6, "inst_fused_over_nonfused": inst_f / inst_nf,
        "ffma_share_fused": ffma_f / inst_f,
        "issue_active_fused": inst_f / (lanes * cyc_f), "issue_active_nonfused": inst_nf / (lanes * cyc_nf),
        "clock_ghz": clock_f / 1e9,
        "issue_floor_fused_us": floor_f_us, "dram_floor_fused_us": dram_floor_f_us,
        "ceiling": t_nf_us / floor_f_us, "ceiling_at_cublas_issue": t_nf_us / floor_f_us * CUBLAS_ISSUE_ACTIVE,
        "dram_read_fused_MB": _sum(fused, "dram__bytes_read.sum") / 1e6,
        "dram_write_fused_MB": _sum(fused, "dram__bytes_write.sum") / 1e6,
        "dram_read_nonfused_MB": _sum(nonfused, "dram__bytes_read.sum") / 1e6,
        "dram_write_nonfused_MB": _sum(nonfused, "dram__bytes_write.sum") / 1e6,
        "ncu_fused_us": _sum(fused, "gpu__time_duration.sum") / 1e3,
        "ncu_nonfused_us": _sum(nonfused, "gpu__time_duration.sum") / 1e3,
    }


def model_columns(entry: dict, spec) -> dict:
    """The model's prediction of the same two runs (``megasim.plan.predict`` with ``spec``): the fused
    mapping's time and both schedules' DRAM bytes, beside ncu's counts (the model's L2 is write-back with
    no discards, as the GPU's)."""
    from megasim.plan import Plan, predict
    from megasim.workloads.catalogue import parse_layer
    problem = parse_layer(entry["problem"])
    mp = entry["mapping"]
    fused, _ = predict(problem, spec, Plan.parse(
        "fused", f"tile={entry['tile']},pairs={entry['pairs_fused']},D_IG={mp['D_IG']},D_GO={mp['D_GO']},"
                 f"M={mp['M']},dispatch={mp['dispatch']}"))
    nonfused, _ = predict(problem, spec, Plan.parse("nonfused", f"tile={entry['tile']},pairs={entry['pairs_nonfused']}"))
    return {"model_fused_us": fused.predicted_us, "model_nonfused_us": nonfused.predicted_us,
            "model_dram_read_fused_MB": float(fused.dram_read_bytes.sum()) / 1e6,
            "model_dram_write_fused_MB": float(fused.dram_write_bytes.sum()) / 1e6,
            "model_dram_read_nonfused_MB": float(nonfused.dram_read_bytes.sum()) / 1e6,
            "model_dram_write_nonfused_MB": float(nonfused.dram_write_bytes.sum()) / 1e6}


def geomean(values) -> float:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else math.nan


COLUMNS = ("layer", "tile", "measured_speedup", "inst_fused_over_nonfused", "issue_active_nonfused",
           "issue_active_fused", "issue_floor_fused_us", "bench_fused_us", "bench_nonfused_us", "ceiling",
           "ceiling_at_cublas_issue")


def _refuse(message: str) -> None:
    print(f"fusion_ceiling: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="holds profile_manifest.json and the ncu log")
    ap.add_argument("--ncu", default=None, help="the ncu --csv log's name in DIR (default ncu.csv, else ncu.csv.gz)")
    ap.add_argument("--dram-gbps", type=float, default=None,
                    help="DRAM bandwidth for the DRAM floor (default: none computed)")
    ap.add_argument("--spec", default=None,
                    help="a calibrated spec: add the model's predictions of the same runs (time, DRAM bytes)")
    args = ap.parse_args(argv)
    d = Path(args.dir)
    holds = ("the folder of a gpu.diagnostics.profile_schedules run under ncu: profile_manifest.json and the "
             "ncu --csv log, ncu.csv or ncu.csv.gz")
    if not d.is_dir():
        _refuse(f"{args.dir!r} is not a folder: give {holds}")
    if not (d / "profile_manifest.json").is_file():
        _refuse(f"{args.dir!r} holds no profile_manifest.json: give {holds}")
    ncu_name = args.ncu or ("ncu.csv" if (d / "ncu.csv").exists() else "ncu.csv.gz")
    if not (d / ncu_name).is_file():
        _refuse(f"{args.dir!r} holds no ncu log {ncu_name!r}: give {holds}")
    try:
        manifest = json.loads((d / "profile_manifest.json").read_text())
        ncu = args.ncu or ("ncu.csv" if (d / "ncu.csv").exists() else "ncu.csv.gz")
        records = read_ncu_csv(d / ncu)
        layers = split_by_layer(records, manifest)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{args.dir}: {exc}")
    sms = manifest["meta"].get("sm_count")
    if not sms:
        raise SystemExit(f"{d / 'profile_manifest.json'}: no sm_count in its meta (a run under the simulator?)")
    rows = [layer_row(e, f, nf, sms, args.dram_gbps) for e, f, nf in layers]
    if args.spec:
        from megasim.errors import MegasimError
        from megasim.hardware import load_spec
        try:
            spec = load_spec(args.spec)
            for row, (entry, _, _) in zip(rows, layers):
                row.update(model_columns(entry, spec))
        except (OSError, MegasimError) as exc:
            raise SystemExit(f"--spec {args.spec}: {exc}")
    means = {k: geomean(r[k] for r in rows) for k in ("measured_speedup", "inst_fused_over_nonfused", "ceiling",
                                                       "ceiling_at_cublas_issue")}
    print(f"{manifest['meta'].get('device')}, bench {manifest['meta'].get('bench')}; the bound on fused / "
          f"non-fused from the fused megakernel's warp instructions at 1 per sub-partition per cycle")
    print(f"{'layer':>10} {'tile':>4} {'measured':>8} {'inst f/nf':>9} {'issue nf':>8} {'issue f':>7} "
          f"{'floor us':>8} {'fused us':>8} {'nonf us':>8} {'ceiling':>7} {'at 87%':>6} {'DRAM f MB':>9} {'DRAM nf MB':>10}")
    for r in rows:
        print(f"{r['layer']:>10} {r['tile']:>4} {r['measured_speedup']:>7.3f}x {r['inst_fused_over_nonfused']:>9.3f} "
              f"{r['issue_active_nonfused']:>8.1%} {r['issue_active_fused']:>7.1%} {r['issue_floor_fused_us']:>8.1f} "
              f"{r['bench_fused_us']:>8.1f} {r['bench_nonfused_us']:>8.1f} {r['ceiling']:>6.3f}x "
              f"{r['ceiling_at_cublas_issue']:>5.3f}x {r['dram_read_fused_MB'] + r['dram_write_fused_MB']:>9.0f} "
              f"{r['dram_read_nonfused_MB'] + r['dram_write_nonfused_MB']:>10.0f}  {r['mapping']}")
    print(f"{'geomean':>10} {'':>4} {means['measured_speedup']:>7.3f}x {means['inst_fused_over_nonfused']:>9.3f} "
          f"{'':>8} {'':>7} {'':>8} {'':>8} {'':>8} {means['ceiling']:>6.3f}x {means['ceiling_at_cublas_issue']:>5.3f}x")
    if args.spec:
        print(f"the model ({args.spec}) beside ncu: fused time and DRAM MB read / written, fused and non-fused")
        for r in rows:
            print(f"{r['layer']:>10} fused {r['ncu_fused_us']:7.0f} us (model {r['model_fused_us']:7.0f}), DRAM "
                  f"{r['dram_read_fused_MB']:5.0f} / {r['dram_write_fused_MB']:5.0f} (model {r['model_dram_read_fused_MB']:5.0f} / "
                  f"{r['model_dram_write_fused_MB']:5.0f}); non-fused {r['dram_read_nonfused_MB']:5.0f} / "
                  f"{r['dram_write_nonfused_MB']:5.0f} (model {r['model_dram_read_nonfused_MB']:5.0f} / "
                  f"{r['model_dram_write_nonfused_MB']:5.0f})  {r['mapping']}")
    below = [r["layer"] for r in rows if r["ceiling"] < TARGET]
    print(f"layers whose ceiling is below {TARGET}x: {', '.join(below) or 'none'}")
    with (d / "fusion_ceiling.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    from megasim.calibration.validation import run_meta
    meta = run_meta({"profile_meta": manifest["meta"], "ncu_log": ncu, "dram_gbps": args.dram_gbps, "spec": args.spec,
                     "cublas_issue_active": CUBLAS_ISSUE_ACTIVE,
                     "command": "python -m experiments.studies.fusion.fusion_ceiling " + " ".join(argv or sys.argv[1:])})
    (d / "fusion_ceiling.json").write_text(json.dumps({"meta": meta, "geomean": means, "rows": rows}, indent=1) + "\n")
    print(f"wrote {d / 'fusion_ceiling.csv'}, {d / 'fusion_ceiling.json'}")


if __name__ == "__main__":
    main()
