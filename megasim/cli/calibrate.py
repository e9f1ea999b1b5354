"""`megasim calibrate`: fit the task kinds of an algorithm and write a spec file.

Winograd's kinds are timed on the GPU (``gpu.calibrate.measure``) or refitted from saved measurements;
the sparse family's are fitted from ``gpu.calibrate.sparse``'s saved runs, im2win's from
``experiments.benchmarks.im2win_calibration``'s. Every input (layers,
--param, the files read, the path written) is checked before any measuring or fitting starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any, TextIO

from megasim.cli.common import (Progress, check_out_path, gpu_module, integer, layers_of, read_json,
                                read_measurements, text)
from megasim.errors import InputError, MegasimError


def add_calibrate(p: argparse.ArgumentParser) -> None:
    from megasim.calibration.measurements import CALIBRATION_LAYERS
    p.add_argument("--algo", default="winograd", metavar="NAME",
                   help="whose task kinds to calibrate (winograd; the sparse family shares one fit)")
    p.add_argument("--spec", help="sparse family and im2win: the spec to extend with the fitted kinds")
    p.add_argument("--sharing", default="share", choices=("share", "ready"),
                   help="sparse family: how the convolution kinds' blocks share an SM: a per-block cap "
                        "(block_sm_share) or independent stalls (block_sm_ready)")
    p.add_argument("--ready-kinds", nargs="+", default=[], metavar="KIND", type=text("a task kind"),
                   help="sparse family: convolution kinds fitted with block_sm_ready whatever --sharing says")
    p.add_argument("--out", required=True, help="the spec file to write (JSON, the presets' format)")
    p.add_argument("--layers", nargs="+",
                   help=f"calibration layers for the per-kind costs (default: measuring, {' '.join(CALIBRATION_LAYERS)}; "
                        f"--from-measurements, every layer the file has runs of)")
    p.add_argument("--param", help="implementation parameters of the per-kind kernels (default: the defaults)")
    p.add_argument("--from-measurements", help="refit from saved measurements (winograd: FILE.measurements.json; "
                   "sparse family: sparse_calibration.json of gpu.calibrate.sparse; im2win: im2win_calibration.csv "
                   "of experiments.benchmarks.im2win_calibration; no GPU needed)")
    p.add_argument("--carry-kinds-from", metavar="SPEC",
                   help="copy the task costs (and their sources) of kinds this calibration does not fit from SPEC "
                        "(e.g. the sparse kinds of megasim/hardware/calibrated/h200.json), unchanged")
    p.add_argument("--fit-mixed-factor", action="store_true",
                   help="winograd: also fit mixed_kinds_sm_factor on the mixed-kind runs (default: they are checks; "
                        "docs/calibration.md says why)")
    p.add_argument("--fit-gemm-epilogue", action=argparse.BooleanOptionalAction, default=None,
                   help="winograd: the GEMMs also fit sm_fixed_ns, their tasks' prologue and epilogue SM time (the "
                        "default; --no-fit-gemm-epilogue leaves it unset; docs/calibration.md, \"The GEMM's epilogue\")")
    p.add_argument("--workers", type=integer(1, 1024),
                   help="processes that simulate the fit's cases (default: all cores; the spec does not depend on it)")
    p.add_argument("--json", action="store_true")


class FitReport:
    """Shows a calibration's ``CalibrationProgress`` records: the stage, each cost name's points simulated of
    its budget (``done`` once fitted), the time since the start. On a terminal, one line that ``Progress``
    refreshes in place; elsewhere (a log, a pipe) a plain line to ``stream`` when a stage starts or a kind
    is done, and at most every ``every_s`` between. Called from the fits' threads."""

    def __init__(self, progress: Progress, stream: TextIO | None = None, plain: bool | None = None,
                 every_s: float = 30.0) -> None:
        self.progress, self.stream = progress, stream or sys.stderr
        self.plain = (not progress.enabled) if plain is None else plain
        self.every_s = every_s
        self.stage = ""
        self.kinds: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()

    def message(self) -> str:
        parts = []
        for kind, p in self.kinds.items():
            if not p.max_evaluations:
                parts.append(" ".join(x for x in (kind, f"{p.evaluations} evaluations" if p.evaluations else "") if x))
            elif p.done:
                parts.append(f"{kind} done")
            else:
                rms = "" if p.rms_log_error is None else f" rms {p.rms_log_error:.3f}"
                parts.append(f"{kind} {p.evaluations}/{p.max_evaluations}{rms}")
        detail = ", ".join(x for x in parts if x)
        return f"calibrating: {self.stage}" + (f": {detail}" if detail else "")

    def __call__(self, p) -> None:
        with self._lock:
            step = bool(p.kind) and not p.max_evaluations and p.kind not in self.kinds     # e.g. a probe
            new = p.stage != self.stage or step
            if new or not p.max_evaluations:      # a step of its stage, not a fit: shown alone
                self.stage, self.kinds = p.stage, {}
            self.kinds[p.kind] = p
            text = self.message()
            self.progress(text)
            now = time.monotonic()
            if self.plain and (new or p.done or now - self._last >= self.every_s):
                self._last = now
                self.stream.write(f"megasim: {text} ({now - self._start:.0f} s)\n")
                self.stream.flush()


def _carry_kinds(spec, other):
    """`spec` with the task costs of kinds it lacks copied, with their sources, from the spec `other` (and
    their own kernels' costs, ``kernel_task_costs``, where `other` gives them)."""
    if other is None:
        return spec
    import dataclasses
    costs, kernel_costs, sources = dict(spec.task_costs), dict(spec.kernel_task_costs), dict(spec.sources)
    for kind, cost in other.task_costs.items():
        if kind not in costs:
            costs[kind] = cost
            if kind in other.kernel_task_costs:
                kernel_costs[kind] = other.kernel_task_costs[kind]
            sources.update({k: v for k, v in other.sources.items()
                            if k.startswith((f"task_costs.{kind}.", f"kernel_task_costs.{kind}."))})
    return dataclasses.replace(spec, task_costs=costs, kernel_task_costs=kernel_costs, sources=sources)


def run_calibrate(args: argparse.Namespace) -> int:
    """Calibrate the task kinds of --algo: its plug-in names the procedure (``Algorithm.calibration``)."""
    from megasim.algorithms import ALGORITHMS, get_algorithm
    procedure = get_algorithm(args.algo).calibration
    if procedure not in _CALIBRATIONS:
        raise MegasimError(f"--algo {args.algo!r} has no calibration procedure (algorithms with one: "
                           f"{', '.join(n for n, a in ALGORITHMS.items() if a.calibration in _CALIBRATIONS)})")
    if args.fit_mixed_factor and procedure != "megakernel_kinds":
        raise InputError(f"--fit-mixed-factor is not allowed with --algo {args.algo!r}: only the megakernel's kinds "
                         f"(--algo winograd) have mixed-kind runs to fit it on")
    if args.fit_gemm_epilogue is not None and procedure != "megakernel_kinds":
        flag = "--fit-gemm-epilogue" if args.fit_gemm_epilogue else "--no-fit-gemm-epilogue"
        raise InputError(f"{flag} is not allowed with --algo {args.algo!r}: only the megakernel's "
                         f"kinds (--algo winograd) have its GEMMs")
    check_out_path(args.out, "--out")
    return _CALIBRATIONS[procedure](args)


def _calibrate_megakernel(args: argparse.Namespace) -> int:
    """The Winograd task kinds, each timed alone on the calibration layers (gpu.calibrate.measure)."""
    from megasim.calibration.measurements import CALIBRATION_LAYERS
    from megasim.calibration.winograd import calibrated_spec
    from megasim.hardware import dump_spec, get_gpu, load_spec
    from megasim.plan import Plan
    layers = tuple(layers_of(args.layers, "--layers")) if args.layers else None
    Plan.parse("nonfused", args.param, algorithm=args.algo)   # bad --param: one-line error before any measuring
    carry = load_spec(args.carry_kinds_from) if args.carry_kinds_from else None
    fit_epilogue = args.fit_gemm_epilogue is not False          # the default: fitted
    with Progress() as progress:
        report_progress = FitReport(progress)
        if args.from_measurements:
            m = read_measurements(args.from_measurements, "--from-measurements")
            missing = [name for name in layers or () if name not in m.layers]
            if missing:
                raise InputError(f"--layers {missing[0]!r} is not allowed: {args.from_measurements} has no runs of it "
                                 f"(its layers: {', '.join(m.layers)})")
            spec, report = calibrated_spec(get_gpu(m.preset), m, layers, workers=args.workers,
                                           progress=report_progress, fit_mixed=args.fit_mixed_factor,
                                           fit_epilogue=fit_epilogue)
            dump_spec(_carry_kinds(spec, carry), args.out)
        else:
            calibrate = gpu_module("measure", "calibrate")
            report = calibrate.calibrate(args.out, layers=layers or CALIBRATION_LAYERS, plan_params=args.param or "",
                                         workers=args.workers, progress=report_progress,
                                         fit_mixed=args.fit_mixed_factor, fit_epilogue=fit_epilogue)
            if carry is not None:
                dump_spec(_carry_kinds(load_spec(args.out), carry), args.out)
    report["out"] = args.out
    if args.json:
        print(json.dumps(report, default=str))
        return 0
    print(f"wrote {args.out} (calibration layers {', '.join(report['layers'])})")
    for kind, fit in report["kinds"].items():
        sharing = "block_sm_ready" if fit.get("block_sm_ready") is not None else "block_sm_share"
        extra = "".join(f"  {name} {fit[name]:.3f}" for name in (sharing, "coresident_stretch", "block_dram_bw_gbps",
                                                                   "megakernel_fixed_ns", "sm_fixed_ns")
                        if fit.get(name) is not None)
        mixed = (f" ({fit['mixed_runs']} of them mixed-kind runs: fitted beside the GEMM)"
                 if fit.get("mixed_runs") else "")
        print(f"  {kind:7s} compute_efficiency {fit['compute_efficiency']:.3f}  fixed_ns {fit['fixed_ns']:9.1f}{extra}  "
              f"rms log error {fit['rms_log_error']:.3f} over {len(fit['measured_us'])} runs{mixed}")
    if report.get("own_kernels"):
        fits = ", ".join(f"{kind} {fit['rms_log_error']:.3f} against {fit['joint_rms_log_error']:.3f}"
                         f"{'' if fit['kept'] else ' (not kept)'}" for kind, fit in report["own_kernels"].items())
        print(f"  own kernels (the non-fused pipeline's launches), rms log error over their own runs, own cost "
              f"against the joint one: {fits}")
    if report.get("mixed_checks"):
        errors = ", ".join(f"{c['layer']} {c['kinds']} {c['error']:+.1%}" for c in report["mixed_checks"])
        factor = report.get("mixed_kinds_sm_factor")
        print(f"  mixed-kind runs, simulated / measured - 1 (checks"
              f"{f'; mixed_kinds_sm_factor {factor:.3f} fitted on them' if factor is not None else ''}): {errors}")
    if report.get("younger_block_weight") is not None:
        orders = "; ".join(f"{c['layer']} {c['kind']} measured {c['measured']} simulated {c['simulated']}"
                           for c in report["end_order_checks"])
        print(f"  younger_block_weight {report['younger_block_weight']:.3f} (first-wave end order / mean: {orders})")
    return 0


def _calibrate_sparse(args: argparse.Namespace) -> int:
    """The sparse family's kinds, fitted to each kernel timed alone (measured by gpu.calibrate.sparse)."""
    from pathlib import Path
    from megasim.calibration.sparse import calibrate_sparse, check_rows
    from megasim.hardware import dump_spec, load_spec
    if not args.from_measurements or not args.spec:
        raise InputError(f"--algo {args.algo} calibrates from measurements: time the kernels on the GPU with "
                         "`python -m gpu.calibrate.sparse`, then give --from-measurements sparse_calibration.json "
                         "and --spec BASE (the spec to extend)")
    data = read_json(args.from_measurements, "--from-measurements")
    origin = f"--from-measurements {args.from_measurements!r}"
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise InputError(f"{origin} is not allowed: it must hold a JSON object with a 'rows' list "
                         "(gpu.calibrate.sparse's sparse_calibration.json)")
    check_rows(data["rows"], origin)
    base = load_spec(args.spec)
    meta = data.get("meta", {}) if isinstance(data.get("meta", {}), dict) else {}
    with Progress() as progress:
        progress(f"fitting the sparse kinds on {len(data['rows'])} runs")
        spec, report = calibrate_sparse(base, data["rows"], device=str(meta.get("device", "unknown device")),
                                        date=str(meta.get("date_utc", "unknown date"))[:10], sharing=args.sharing,
                                        ready_kinds=tuple(args.ready_kinds))
    dump_spec(spec, args.out)
    Path(args.out).with_suffix(".sparse_fit.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    for kind, fit in report["kinds"].items():
        sharing = (f"ready {fit['block_sm_ready']:.2f}" if fit.get("block_sm_ready") is not None
                   else f"share {fit['block_sm_share']:.2f}")
        fixed = fit["fixed_ns"] + fit.get("launch_fixed_ns", 0.0)
        per = "launch" if fit.get("launch_fixed_ns") else "block"
        print(f"  {kind:13s} eff {fit['compute_efficiency']:.3f}  ns/op {fit['ns_per_other_op']:.4f}  fixed "
              f"{fixed:8.1f} ns a {per:6s}  {sharing}  rms log error {fit['rms_log_error']:.3f}")
    return 0


def _calibrate_im2win(args: argparse.Namespace) -> int:
    """The im2win kinds, fitted to each kernel timed alone (measured by experiments.benchmarks.im2win_calibration)."""
    import csv
    from pathlib import Path
    from megasim.algorithms.im2win.calibration import calibrate_im2win, check_rows
    from megasim.hardware import dump_spec, load_spec
    if not args.from_measurements or not args.spec:
        raise InputError(f"--algo {args.algo} calibrates from measurements: time the kernels on the GPU with "
                         "`python -m experiments.benchmarks.im2win_calibration`, then give --from-measurements "
                         "im2win_calibration.csv and --spec BASE (the spec to extend)")
    origin = f"--from-measurements {args.from_measurements!r}"
    try:
        from megasim.input_files import read_csv
        rows = read_csv(args.from_measurements, origin)[1]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"{origin} cannot be read: {getattr(err, 'strerror', None) or err}") from None
    needed = ("problem", "kind", "median_ms", "status")
    if not rows or any(c not in rows[0] for c in needed):
        raise InputError(f"{origin} is not allowed: it must be im2win_calibration.csv, with the columns "
                         f"{', '.join(needed)} and one row per run")
    check_rows(rows, origin)
    meta_path = Path(args.from_measurements).with_suffix(".json")
    meta = read_json(str(meta_path), "the measurements' JSON").get("meta", {}) if meta_path.exists() else {}
    base = load_spec(args.spec)
    with Progress() as progress:
        progress(f"fitting the im2win kinds on {len(rows)} runs")
        spec, report = calibrate_im2win(base, rows, meta if isinstance(meta, dict) else {}, log=progress)
    dump_spec(spec, args.out)
    report_path = Path(args.out).with_suffix(".im2win_fit.json")
    report_path.write_text(json.dumps({"measurements": args.from_measurements, "measurements_meta": meta,
                                       "spec_in": args.spec, **report}, indent=1, default=str) + "\n")
    if args.json:
        print(json.dumps({"out": args.out, "report": str(report_path),
                          **{n: {"rms_log_error": f["rms_log_error"], "evaluations": f["evaluations"]}
                             for n, f in report["cost_names"].items()}}))
        return 0
    print(f"wrote {args.out} and {report_path}")
    for name, fit in report["cost_names"].items():
        print(f"  {name:24s} {len(fit['cases']):3d} runs  rms log error {fit['rms_log_error']:.3f}")
    return 0


_CALIBRATIONS = {"megakernel_kinds": _calibrate_megakernel, "sparse_kinds": _calibrate_sparse,
                 "im2win_kinds": _calibrate_im2win}
