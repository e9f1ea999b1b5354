"""The `megasim` command.

    megasim layers [--json]
    megasim gpus [--json]
    megasim algorithms [--json]
    megasim simulate LAYER [--algo NAME] --gpu GPU [--batch N] [--schedule S] [--param K=V,..]
                     [--spec FILE] [--json] [--trace FILE]
    megasim optimize LAYER [--algo NAME] --gpu GPU [--param K=V,..] [--spec FILE] [--budget N] [--strategy S]
                     [--option K=V,..] [--seed N] [--workers N] [--cache FILE] [--landscape FILE.csv] [--json]
                     [--space NAME] [--evaluator simulator|gpu]
    megasim calibrate [--algo NAME] --out FILE [--from-measurements FILE] [...]                    (GPU)
    megasim validate LAYER.. --spec FILE [--mappings N] [--out DIR] [--measured CSV] [--no-predict]  (GPU)
    megasim transfer-spec --spec FILE --measurements FILE.measurements.json --out FILE [--keep FIELD ..]
    megasim update-spec --spec FILE --measurements FILE.measurements.json --out FILE [--refit FIELD[@KIND] ..]

User errors (unknown layer or GPU, malformed spec, impossible parameters, bad spec file) print one
line, ``megasim: error: ...``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Sequence

from megasim import __version__
from megasim.errors import MegasimError
from megasim.hardware import get_gpu, load_spec, preset_names
from megasim.hardware.spec import GPUSpec
from megasim.algorithms import ALGORITHMS, get_algorithm
from megasim.plan import Plan, predict
from megasim.sim import PLACEMENTS, SimOptions
from megasim.workloads import CATALOGUE, parse_layer


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit status 2 (argparse's own convention)
        self.exit(2, f"megasim: error: {message} (see megasim {self.prog.split()[-1]} --help)\n")


def _spec(args: argparse.Namespace) -> GPUSpec:
    if args.spec:
        return load_spec(args.spec)
    if not args.gpu:
        raise MegasimError("give --gpu NAME (one of " + ", ".join(preset_names()) + ") or --spec FILE")
    return get_gpu(args.gpu)


def _cmd_layers(args: argparse.Namespace) -> int:
    rows = [{"name": p.name, "N": p.n, "C": p.c, "K": p.k, "H": p.h, "W": p.w, "R": p.r, "S": p.s,
             "stride": p.stride, "padding": p.padding, "gflop": p.direct_flops / 1e9}
            for p in CATALOGUE.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'layer':24s} {'N':>4s} {'C':>5s} {'K':>5s} {'HxW':>9s} {'RxS':>5s} {'str':>3s} {'pad':>3s} {'GFLOP':>8s}")
    for r in rows:
        print(f"{r['name']:24s} {r['N']:4d} {r['C']:5d} {r['K']:5d} {str(r['H']) + 'x' + str(r['W']):>9s} "
              f"{str(r['R']) + 'x' + str(r['S']):>5s} {r['stride']:3d} {r['padding']:3d} {r['gflop']:8.2f}")
    print("\nOr a free spec: N=64,C=64,K=64,H=56,W=56[,R=3,S=3,stride=1,padding=1]")
    return 0


def _cmd_gpus(args: argparse.Namespace) -> int:
    specs = [get_gpu(n) for n in preset_names()]
    if args.json:
        print(json.dumps([{"name": s.name, "description": s.description, "sm_count": s.sm_count,
                           "fp32_peak_gflops": s.fp32_peak_gflops, "dram_bw_gbps": s.dram_bw_gbps,
                           "l2_bytes": s.l2_bytes, "shared_mem_per_sm_bytes": s.shared_mem_per_sm_bytes}
                          for s in specs], indent=1))
        return 0
    print(f"{'gpu':8s} {'SMs':>4s} {'FP32 TFLOP/s':>12s} {'DRAM GB/s':>9s} {'L2 MB':>6s} {'smem/SM KB':>10s}  description")
    for s in specs:
        print(f"{s.name:8s} {s.sm_count:4d} {s.fp32_peak_gflops / 1e3:12.1f} {s.dram_bw_gbps:9.0f} "
              f"{s.l2_bytes / 2**20:6.1f} {s.shared_mem_per_sm_bytes / 1024:10.0f}  {s.description}")
    print("\nOr --spec FILE: a JSON spec (see megasim/hardware/presets/*.json for the format).")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    problem = parse_layer(args.layer, batch=args.batch)
    spec = _spec(args)
    plan = Plan.parse(args.schedule, args.param, algorithm=args.algo)
    result, plan = predict(problem, spec, plan, SimOptions(placement=args.placement))
    if args.trace:
        result.write_chrome_trace(args.trace)
    summary = {"layer": problem.name or args.layer, "problem": problem.spec_string(), "gpu": spec.name,
               "algorithm": plan.algorithm, "schedule": plan.schedule, "params": plan.param_string(), **{
                   k: v for k, v in result.summary().items() if k not in ("gpu", "schedule", "params")},
               "time_us": plan.algo.time_us(result),
               "megasim_version": __version__, "python": platform.python_version()}
    if args.json:
        util = result.utilization(bins=20)
        summary["utilization_20_bins"] = {k: [round(float(x), 4) for x in v] for k, v in util.items()}
        print(json.dumps(summary))
        return 0
    print(f"{summary['layer']} ({problem.spec_string()}) on {spec.name}, {plan.algorithm}, schedule {plan.schedule}")
    print(f"  params          {summary['params']}")
    print(f"  predicted       {result.predicted_us:,.1f} us")
    if summary["time_us"] != result.predicted_us:
        print(f"  kernel time     {summary['time_us']:,.1f} us  (first launch's start to last launch's end)")
    per_kind = ", ".join(f"{kind} {info['tasks']}" for kind, info in summary["kinds"].items())
    print(f"  tasks           {result.num_tasks:,}  ({per_kind})")
    for launch in result.launches:
        print(f"  launch          {launch.name}: {launch.tasks} tasks, {launch.blocks_per_sm} blocks/SM "
              f"(limited by {launch.limited_by}), {launch.start_ns / 1e3:,.1f}-{launch.end_ns / 1e3:,.1f} us")
    print(f"  L2 hit rate     {result.l2_hit_rate:.3f}")
    print(f"  DRAM traffic    {result.dram_bytes / 1e6:,.1f} MB  ({result.achieved_dram_gbps:,.0f} GB/s achieved)")
    print(f"  FP32            {result.achieved_gflops / 1e3:,.2f} TFLOP/s achieved")
    print(f"  waits           {summary['total_wait_us']:,.1f} us summed over blocks")
    print(f"  simulated in    {result.sim_wall_s:.2f} s  ({result.num_tasks / result.sim_wall_s:,.0f} tasks/s)")
    print(f"  taskgraph hash  {result.taskgraph_hash}")
    if args.trace:
        print(f"  trace           {args.trace} (open in https://ui.perfetto.dev)")
    return 0


def _options(text: str | None) -> dict:
    """--option K=V,K=V: numbers become int/float; anything else stays a string."""
    out: dict = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise MegasimError(f"malformed --option item {item!r}: write KEY=VALUE, e.g. top=8")
        value = value.strip()
        for cast in (int, float):
            try:
                out[key.strip()] = cast(value)
                break
            except ValueError:
                continue
        else:
            out[key.strip()] = value
    return out


def _cmd_optimize(args: argparse.Namespace) -> int:
    from megasim.search import get_strategy, optimize, spaces_of
    from megasim.search.landscape import write_landscape

    problem = parse_layer(args.layer, batch=args.batch)
    spec = _spec(args)
    module = get_strategy(args.strategy)
    options = _options(args.option)
    from megasim.search.budget import check_options
    check_options(args.strategy, options, module.OPTIONS)
    if args.budget < 1:
        raise MegasimError(f"--budget {args.budget} is not allowed: it must be at least 1")
    base = Plan.parse(None, args.param, algorithm=args.algo)
    spaces = spaces_of(args.algo)
    if args.space not in spaces:
        raise MegasimError(f"--space {args.space!r} is not allowed for {args.algo} (allowed: {', '.join(spaces)})")
    space = spaces[args.space]()
    result = optimize(problem, spec, strategy=args.strategy, budget=args.budget, options=options,
                      seed=args.seed, workers=args.workers, cache_path=args.cache, space=space,
                      progress=not args.json and sys.stderr.isatty(), evaluator=args.evaluator, base=base)
    if args.landscape:
        write_landscape(result.records, space.names, args.landscape)
    best = result.best
    summary = {"layer": problem.name or args.layer, "problem": problem.spec_string(), "gpu": spec.name,
               "algorithm": args.algo, "strategy": args.strategy, "options": options, "seed": args.seed, "space": args.space,
               "budget": args.budget, "best_point": best.params, "params": best.extras.get("param"),
               ("measured_us" if args.evaluator == "gpu" else "predicted_us"): best.time_us,
               "evaluator": args.evaluator, "evaluations": result.evaluations, "simulated": result.simulated,
               "full_fidelity_evaluations": len(result.full_fidelity()), "wall_s": round(result.wall_s, 3),
               "megasim_version": __version__}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{summary['layer']} ({problem.spec_string()}) on {spec.name}, {args.algo}: strategy {args.strategy}, "
          f"space {args.space}, budget {args.budget}")
    print(f"  best params     {summary['params']}")
    print(f"  best point      {', '.join(f'{k}={v}' for k, v in best.params.items())}")
    print(f"  {'measured ' if args.evaluator == 'gpu' else 'predicted'}       {best.time_us:,.1f} us")
    print(f"  evaluations     {result.evaluations} ({len(result.full_fidelity())} at full fidelity, "
          f"{result.simulated} simulated, the rest from the cache)")
    print(f"  wall time       {result.wall_s:.1f} s")
    if args.landscape:
        print(f"  landscape       {args.landscape}")
    return 0


def _gpu_module(name: str):
    """Import gpu.<name> (numba, a CUDA device) lazily; a one-line MegasimError without them."""
    import importlib
    try:
        from numba import config, cuda
    except ImportError as err:
        raise MegasimError(f"{name} needs numba-cuda and a CUDA GPU ({err}); install the [gpu] extra on a GPU machine") from None
    if config.ENABLE_CUDASIM:
        raise MegasimError(f"{name} needs a real CUDA GPU, not Numba's simulator (NUMBA_ENABLE_CUDASIM=1)")
    try:
        available = cuda.is_available()
    except Exception:  # noqa: BLE001 - any driver problem means no GPU here
        available = False
    if not available:
        raise MegasimError(f"{name} needs a CUDA GPU and none was found (run it on the GPU machine: bash gpu/on_device.sh megasim {name} ...)")
    return importlib.import_module(f"gpu.calibrate.{name}")


def _repo_relative(path: str) -> str:
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(repo))
    except ValueError:
        return str(path)


def _carry_kinds(spec, path):
    """`spec` with the task costs of kinds it lacks copied, with their sources, from the spec file `path`."""
    if not path:
        return spec
    import dataclasses
    other = load_spec(path)
    costs, sources = dict(spec.task_costs), dict(spec.sources)
    for kind, cost in other.task_costs.items():
        if kind not in costs:
            costs[kind] = cost
            sources.update({k: v for k, v in other.sources.items() if k.startswith(f"task_costs.{kind}.")})
    return dataclasses.replace(spec, task_costs=costs, sources=sources)


def _read_measurements(path: str, flag: str):
    """A gpu.calibrate.measure Measurements file, or a one-line error naming `flag` and what is wrong."""
    from pathlib import Path
    from megasim.calibration.winograd import Measurements
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise MegasimError(f"{flag} {path!r} cannot be read: {err}") from None
    if not isinstance(data, dict):
        raise MegasimError(f"{flag} {path!r} is not allowed: it must hold one JSON object "
                           f"(gpu.calibrate.measure's Measurements), not a {type(data).__name__}")
    missing = [k for k in ("device", "date", "preset", "values") if k not in data]
    if missing:
        raise MegasimError(f"{flag} {path!r} is not allowed: it has no {missing[0]!r} "
                           f"(gpu.calibrate.measure's Measurements have device, date, preset, values)")
    return Measurements.from_dict(data)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Calibrate the task kinds of --algo: its plug-in names the procedure (``Algorithm.calibration``)."""
    procedure = get_algorithm(args.algo).calibration
    if procedure not in _CALIBRATIONS:
        raise MegasimError(f"--algo {args.algo!r} has no calibration procedure (algorithms with one: "
                           f"{', '.join(n for n, a in ALGORITHMS.items() if a.calibration in _CALIBRATIONS)})")
    return _CALIBRATIONS[procedure](args)


def _calibrate_megakernel(args: argparse.Namespace) -> int:
    """The Winograd task kinds, each timed alone on the calibration layers (gpu.calibrate.measure)."""
    from megasim.calibration.winograd import calibrated_spec
    from megasim.hardware import dump_spec
    layers = tuple(args.layers)
    Plan.parse("nonfused", args.param, algorithm=args.algo)   # bad --param: one-line error before any measuring
    if args.from_measurements:
        m = _read_measurements(args.from_measurements, "--from-measurements")
        spec, report = calibrated_spec(get_gpu(m.preset), m, layers)
        dump_spec(_carry_kinds(spec, args.carry_kinds_from), args.out)
    else:
        calibrate = _gpu_module("measure")
        report = calibrate.calibrate(args.out, layers=layers, plan_params=args.param or "")
        if args.carry_kinds_from:
            dump_spec(_carry_kinds(load_spec(args.out), args.carry_kinds_from), args.out)
    report["out"] = args.out
    if args.json:
        print(json.dumps(report, default=str))
        return 0
    print(f"wrote {args.out} (calibration layers {', '.join(report['layers'])})")
    for kind, fit in report["kinds"].items():
        extra = "".join(f"  {name} {fit[name]:.3f}" for name in ("block_sm_share", "block_dram_bw_gbps",
                                                                   "megakernel_fixed_ns") if name in fit)
        print(f"  {kind:7s} compute_efficiency {fit['compute_efficiency']:.3f}  fixed_ns {fit['fixed_ns']:9.1f}{extra}  "
              f"rms log error {fit['rms_log_error']:.3f} over {len(fit['measured_us'])} runs")
    if report.get("mixed_kinds_sm_factor") is not None:
        errors = ", ".join(f"{c['layer']} {c['kinds']} {c['error']:+.1%}" for c in report["mixed_checks"])
        print(f"  mixed_kinds_sm_factor {report['mixed_kinds_sm_factor']:.3f} (mixed-kind runs: {errors})")
    if report.get("younger_block_weight") is not None:
        orders = "; ".join(f"{c['layer']} {c['kind']} measured {c['measured']} simulated {c['simulated']}"
                           for c in report["end_order_checks"])
        print(f"  younger_block_weight {report['younger_block_weight']:.3f} (first-wave end order / mean: {orders})")
    return 0


def _cmd_transfer_spec(args: argparse.Namespace) -> int:
    from megasim.calibration.transfer import transferred_spec, transferred_values
    from megasim.hardware import dump_spec
    m = _read_measurements(args.measurements, "--measurements")
    base = load_spec(args.spec)
    keep = tuple(args.keep or ())
    spec = transferred_spec(base, m, name=args.name, keep=keep)
    dump_spec(spec, args.out)
    moved = [f for f in transferred_values(m) if f not in keep]
    changed = [f for f in moved if getattr(spec, f) != getattr(base, f)]
    print(f"wrote {args.out}: {base.name}'s task costs with {len(moved)} values measured on {m.device} "
          f"({len(changed)} differ{', ' + str(len(set(keep))) + ' kept' if keep else ''})")
    for f in changed:
        print(f"  {f:24s} {getattr(base, f)!s:>22} -> {getattr(spec, f)!s}")
    return 0


def _cmd_update_spec(args: argparse.Namespace) -> int:
    from megasim.calibration.update import updated_spec
    from megasim.hardware import dump_spec
    m = _read_measurements(args.measurements, "--measurements")
    base = load_spec(args.spec)
    spec, report = updated_spec(base, m, tuple(args.refit), tuple(args.layers or ()) or None)
    dump_spec(spec, args.out)
    report["out"] = args.out
    if args.json:
        print(json.dumps(report, default=str))
        return 0
    print(f"wrote {args.out}: {base.name} with megakernel_claim_ns{''.join(', ' + f for f in args.refit)} "
          f"updated from {m.device}'s runs of {m.date}")
    for kind, entry in report["kinds"].items():
        changes = "  ".join(f"{f} {v['before']:.4g} -> {v['after']:.4g}" for f, v in entry.items()
                            if isinstance(v, dict) and v["before"] is not None)
        rms = f"  (rms log error {entry['rms_log_error']:.3f})" if "rms_log_error" in entry else ""
        print(f"  {kind:10s} {changes}{rms}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path
    from megasim.calibration.validation import CSV_COLUMNS, predict_rows, read_rows, run_meta, summarize, write_rows
    from megasim.workloads import TABLE2_NAMES
    layers = [n for name in args.layers for n in (TABLE2_NAMES if name == "table2" else (name,))]
    for name in layers:
        parse_layer(name)
    if not args.no_predict:
        load_spec(args.spec)                    # a broken spec fails before the GPU time is spent
    if args.mappings < 1:
        raise MegasimError(f"--mappings {args.mappings} is not allowed: it must be at least 1")
    for name in ("repeats", "rounds"):
        if getattr(args, name) < 1:
            raise MegasimError(f"--{name} {getattr(args, name)} is not allowed: it must be at least 1")
    if args.measured:
        rows = [r for r in read_rows(args.measured) if r["layer"] in layers]
        device = rows[0]["device"] if rows else "unknown"
    else:
        validate = _gpu_module("validate")
        device = validate.device_name()
        rows = validate.measure(layers, args.mappings, repeats=args.repeats, rounds=args.rounds)
    import re
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "unknown-device"
    out = Path(args.out or f"experiments/results/{slug}")
    meta = run_meta({"device": device, "layers": layers, "mappings": args.mappings, "spec": args.spec,
                     "measured_from": args.measured or "this run"})
    if args.no_predict:
        write_rows(rows, out / "validation_measured.csv")
        (out / "validation_measured.json").write_text(json.dumps({"meta": meta}, indent=1) + "\n")
        print(f"wrote {out / 'validation_measured.csv'} ({len(rows)} measured rows; predict later with --measured)")
        return 0
    ok = [r for r in rows if r.get("measured_us") not in ("", None)]
    rows = predict_rows(ok, args.spec, _repo_relative(args.spec), workers=args.workers)
    rows = [{c: r.get(c, "") for c in CSV_COLUMNS} for r in rows]
    summary = summarize([r for r in rows if r["predicted_us"] != ""])
    write_rows(rows, out / "validation.csv", CSV_COLUMNS)
    (out / "validation_summary.json").write_text(json.dumps({"meta": meta, **summary}, indent=1, default=str) + "\n")
    o = summary["overall"]
    print(f"{o['points']} points on {o['layers']} layers: MAPE {o.get('mape', float('nan')):.1%}, "
          f"Kendall tau {o.get('kendall_tau', float('nan')):.3f}, worst regret {o.get('regret_max', float('nan')):.1%}")
    for name, met in summary["targets_met"].items():
        print(f"  {'met    ' if met else 'NOT met'}  {name}")
    print(f"wrote {out / 'validation.csv'} and {out / 'validation_summary.json'}")
    return 0


def _calibrate_sparse(args: argparse.Namespace) -> int:
    """The sparse family's kinds, fitted to each kernel timed alone (measured by gpu.calibrate.sparse)."""
    from pathlib import Path
    from megasim.calibration.sparse import calibrate_sparse
    from megasim.hardware import dump_spec
    if not args.from_measurements or not args.spec:
        raise MegasimError(f"--algo {args.algo} calibrates from measurements: time the kernels on the GPU with "
                           "`python -m gpu.calibrate.sparse`, then give --from-measurements sparse_calibration.json "
                           "and --spec BASE (the spec to extend)")
    try:
        data = json.loads(Path(args.from_measurements).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise MegasimError(f"--from-measurements {args.from_measurements!r} cannot be read: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise MegasimError(f"--from-measurements {args.from_measurements!r} is not allowed: it must hold a JSON "
                           "object with a 'rows' list (gpu.calibrate.sparse's sparse_calibration.json)")
    base = load_spec(args.spec)
    meta = data.get("meta", {})
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


_CALIBRATIONS = {"megakernel_kinds": _calibrate_megakernel, "sparse_kinds": _calibrate_sparse}


def _cmd_algorithms(args: argparse.Namespace) -> int:
    rows = [{"name": a.name, "summary": a.summary, "schedules": list(a.schedules), "kinds": list(a.kinds),
             "params": list(a.params_type.KEYS) + list(getattr(a.params_type, "PARSERS", {})),
             "spaces": list(a.spaces)} for a in ALGORITHMS.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['name']:13s} {r['summary']}")
        print(f"{'':13s} schedules {', '.join(r['schedules'])}; --param {', '.join(r['params'])}")
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="megasim", description="Predict the runtime of megakernel task mappings on GPUs.")
    parser.add_argument("--version", action="version", version=f"megasim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("layers", help="list the built-in layers")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_layers)
    p = sub.add_parser("gpus", help="list the GPU presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_gpus)
    p = sub.add_parser("algorithms", help="list the algorithms, their schedules and parameters")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_algorithms)
    algo_help = f"the algorithm (default winograd; one of {', '.join(ALGORITHMS)}: megasim algorithms)"
    p = sub.add_parser("simulate", help="predict the runtime of one layer under one schedule")
    p.add_argument("layer", help="a layer name (megasim layers) or a spec such as N=64,C=64,K=64,H=56,W=56")
    p.add_argument("--gpu", help=f"a preset: {', '.join(preset_names())}")
    p.add_argument("--spec", help="a GPU spec file (JSON), instead of --gpu")
    p.add_argument("--batch", type=int, help="replace the layer's batch size N")
    p.add_argument("--algo", default="winograd", metavar="NAME", help=algo_help)
    p.add_argument("--schedule", help="one of the algorithm's schedules (default: its first; megasim algorithms)")
    p.add_argument("--param", help="the algorithm's and the execution parameters, e.g. D_IG=128,D_GO=416,M=4,t=32 "
                                   "or sparsity=0.7,k_tile=16")
    p.add_argument("--placement", default="round_robin", choices=PLACEMENTS,
                   help="how a launch's first blocks are spread over the SMs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trace", help="write a Chrome trace (JSON) of every task to this file")
    p.set_defaults(func=_cmd_simulate)
    from megasim.search import DEFAULT_STRATEGY, STRATEGIES
    p = sub.add_parser("optimize", help="search the mapping parameters of one layer with the model")
    p.add_argument("--algo", default="winograd", metavar="NAME", help=algo_help)
    p.add_argument("--param", help="parameters the search does not vary (e.g. tile=6, or sparsity=0.7)")
    p.add_argument("layer", help="a layer name (megasim layers) or a spec such as N=64,C=64,K=64,H=56,W=56")
    p.add_argument("--gpu", help=f"a preset: {', '.join(preset_names())}")
    p.add_argument("--spec", help="a GPU spec file (JSON), instead of --gpu")
    p.add_argument("--batch", type=int, help="replace the layer's batch size N")
    p.add_argument("--budget", type=int, default=200, help="most evaluations (default 200)")
    p.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=list(STRATEGIES))
    p.add_argument("--option", help="strategy options, e.g. top=8,explore=0.5")
    p.add_argument("--space", default="default", help="the algorithm's named space (default; winograd: full too)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, help="worker processes (default: all cores)")
    p.add_argument("--cache", help="a Kernel Tuner cache file to consult and update")
    p.add_argument("--landscape", help="write every evaluated point to this CSV")
    p.add_argument("--evaluator", default="simulator", choices=("simulator", "gpu"),
                   help="simulator (the model) or gpu (measured; needs the validation harness, not built yet)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_optimize)
    from megasim.calibration.winograd import CALIBRATION_LAYERS
    p = sub.add_parser("calibrate", help="measure this GPU with microbenchmarks and write a spec file (needs a GPU)")
    p.add_argument("--algo", default="winograd", metavar="NAME",
                   help="whose task kinds to calibrate (winograd; the sparse family shares one fit)")
    p.add_argument("--spec", help="sparse family: the spec to extend with the fitted kinds")
    p.add_argument("--sharing", default="share", choices=("share", "ready"),
                   help="sparse family: how the convolution kinds' blocks share an SM: a per-block cap "
                        "(block_sm_share) or independent stalls (block_sm_ready)")
    p.add_argument("--ready-kinds", nargs="+", default=[], metavar="KIND",
                   help="sparse family: convolution kinds fitted with block_sm_ready whatever --sharing says")
    p.add_argument("--out", required=True, help="the spec file to write (JSON, the presets' format)")
    p.add_argument("--layers", nargs="+", default=list(CALIBRATION_LAYERS),
                   help=f"calibration layers for the per-kind costs (default {' '.join(CALIBRATION_LAYERS)})")
    p.add_argument("--param", help="implementation parameters of the per-kind kernels (default: the defaults)")
    p.add_argument("--from-measurements", help="refit from saved measurements (winograd: FILE.measurements.json; "
                   "sparse family: sparse_calibration.json of gpu.calibrate.sparse; no GPU needed)")
    p.add_argument("--carry-kinds-from", metavar="SPEC",
                   help="copy the task costs (and their sources) of kinds this calibration does not fit from SPEC "
                        "(e.g. the sparse kinds of megasim/hardware/calibrated/h200.json), unchanged")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_calibrate)
    p = sub.add_parser("transfer-spec", help="a calibrated spec moved to another GPU of the same architecture: "
                       "its measured values from that GPU's microbenchmarks, the task costs kept (no GPU needed)")
    p.add_argument("--spec", required=True, help="the calibrated spec whose task costs are kept")
    p.add_argument("--measurements", required=True,
                   help="FILE.measurements.json of the other GPU (gpu.calibrate.measure.measure); only its values are used")
    p.add_argument("--out", required=True, help="the spec file to write")
    p.add_argument("--name", help="the new spec's name (default: the measured device's)")
    p.add_argument("--keep", nargs="+", metavar="FIELD",
                   help="measured fields to keep from --spec (e.g. l2_bw_gbps, where the probe changed between "
                        "the two measurements)")
    p.set_defaults(func=_cmd_transfer_spec)
    from megasim.calibration.update import REFITTABLE
    p = sub.add_parser("update-spec", help="a calibrated spec after a kernel change: the traced claims and the "
                       "named task-cost fields refitted from new measurements, every other cost kept (no GPU needed)")
    p.add_argument("--spec", required=True, help="the calibrated spec to update")
    p.add_argument("--measurements", required=True,
                   help="FILE.measurements.json of the changed kernels (gpu.calibrate.measure.measure)")
    p.add_argument("--refit", nargs="*", default=["megakernel_fixed_ns"], metavar="FIELD[@KIND]",
                   help=f"task-cost fields to refit on the single-kind runs, from the spec's values, for every kind "
                        f"or (FIELD@KIND) one (default megakernel_fixed_ns; none: the claims only; allowed fields: "
                        f"{', '.join(REFITTABLE)})")
    p.add_argument("--layers", nargs="+", help="calibration layers (default: those the measurements time)")
    p.add_argument("--out", required=True, help="the spec file to write")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_update_spec)
    p = sub.add_parser("validate", help="predicted vs measured runtimes of many mappings (needs a GPU)")
    p.add_argument("layers", nargs="+", help="layer names, or 'table2' for the 13 layers of the paper's Table 2")
    p.add_argument("--spec", required=True, help="the GPU spec file the predictions use")
    p.add_argument("--mappings", type=int, default=16, help="mappings per layer (default 16)")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per mapping and round (default 10)")
    p.add_argument("--rounds", type=int, default=6,
                   help="rounds over a layer's mappings, timed round-robin (default 6; the summary's "
                        "measurement repeatability needs >= 2)")
    p.add_argument("--out", help="results folder (default experiments/results/<device>)")
    p.add_argument("--measured", help="reuse a validation_measured.csv instead of measuring (no GPU needed)")
    p.add_argument("--no-predict", action="store_true", help="measure only; write validation_measured.csv")
    p.add_argument("--workers", type=int, help="processes for the predictions (default: all cores)")
    p.set_defaults(func=_cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except MegasimError as err:
        print(f"megasim: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `megasim layers | head`
        return 0
    except OSError as err:  # an output (or input) path that cannot be opened: --trace, --out, --landscape
        where = f" {err.filename!r}" if err.filename else ""
        print(f"megasim: error: cannot open{where}: {err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
