"""`megasim simulate`: predict the runtime of one layer under one plan on one GPU.

The layer, GPU and plan are checked first, then the work is bounded (``--max-tasks``, refused before
anything is lowered, ``megasim.plan``'s limits), then a run over ~2 s shows its stage and elapsed
time on a terminal.
"""

from __future__ import annotations

import argparse
import json
import platform

from megasim.cli.common import Progress, check_out_path, gpu_label, integer, spec_of, text

ALGO_HELP = "the algorithm (default winograd; see megasim algorithms)"
# One run in a fresh process: below this many tasks SimPy's loop finishes before Numba would have started
# (about 0.45 s to import it and load the compiled loop; the loop then saves 8-20 us per task).
SINGLE_RUN_COMPILED_TASKS = 50_000
# Where the compiled loop is not on disk yet, its first run compiles it (about 8 s on 2 cores); below this many
# tasks SimPy's loop (about 90,000 tasks/s) finishes first.
COLD_COMPILED_TASKS = 750_000
LAYER_HELP = "a layer name (megasim layers) or a spec such as N=64,C=64,K=64,H=56,W=56"


def add_problem_arguments(p: argparse.ArgumentParser) -> None:
    """The layer, GPU, algorithm and work-limit flags simulate and optimize share."""
    from megasim.hardware import preset_names
    from megasim.plan import DEFAULT_MAX_TASKS
    p.add_argument("layer", help=LAYER_HELP)
    p.add_argument("--gpu", type=text("a GPU preset name"), help=f"a preset: {', '.join(preset_names())}")
    p.add_argument("--spec", help="a GPU spec file (JSON), instead of --gpu")
    p.add_argument("--batch", type=integer(1), help="replace the layer's batch size N")
    p.add_argument("--algo", default="winograd", metavar="NAME", help=ALGO_HELP)
    p.add_argument("--max-tasks", type=integer(1), default=DEFAULT_MAX_TASKS, metavar="N",
                   help=f"refuse problems of more tasks than this, before lowering them (default {DEFAULT_MAX_TASKS:,}; "
                        f"docs/errors.md)")


def add_simulate(p: argparse.ArgumentParser) -> None:
    add_problem_arguments(p)
    p.add_argument("--schedule", help="one of the algorithm's schedules (default: its first; megasim algorithms)")
    p.add_argument("--param", help="the algorithm's and the execution parameters, e.g. D_IG=128,D_GO=416,M=4,t=32 "
                                   "or sparsity=0.7,k_tile=16")
    p.add_argument("--placement", default="round_robin", metavar="NAME",
                   help="how a launch's first blocks are spread over the SMs (round_robin, ...)")
    p.add_argument("--engine", default="auto", choices=("auto", "compiled", "simpy"),
                   help="what runs the model's events: the compiled loop or the handlers on SimPy's queue (the same "
                        f"prediction, bit for bit; default auto: compiled from {SINGLE_RUN_COMPILED_TASKS:,} tasks, "
                        f"where it pays for Numba's start, and from {COLD_COMPILED_TASKS:,} where Numba has "
                        "not compiled it on this machine yet; docs/model.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trace", help="write a Chrome trace (JSON) of every task to this file")


def launch_runs(launches) -> list:
    """(first launch, last launch, count) per run of consecutive launches alike in name, tasks and blocks per
    SM (im2col's one unfold launch per image prints as one line)."""
    runs: list = []
    for launch in launches:
        key = (launch.name, launch.tasks, launch.blocks_per_sm, launch.limited_by)
        if runs and runs[-1][3] == key:
            runs[-1][1:3] = [launch, runs[-1][2] + 1]
        else:
            runs.append([launch, launch, 1, key])
    return [(first, last, count) for first, last, count, _ in runs]


def grid_set_by(launch) -> str:
    """What set a launch's blocks per SM: a persistent grid's own ``blocks_per_sm``, where it asked for fewer
    than fit, else the occupancy limit (registers, shared memory, threads, blocks)."""
    from megasim.sim.launches import REQUESTED_GRID
    if launch.limited_by == REQUESTED_GRID:
        return f"requested: blocks_per_sm={launch.blocks_per_sm}"
    return f"limited by {launch.limited_by}"


def auto_engine(tasks: int | None) -> str:
    """What runs one simulation of about `tasks` tasks in this process (``--engine auto``): SimPy's loop below
    ``SINGLE_RUN_COMPILED_TASKS``, and below ``COLD_COMPILED_TASKS`` where the compiled loop would first have to
    be compiled; else the compiled loop."""
    if tasks is None:
        return "compiled"
    if tasks < SINGLE_RUN_COMPILED_TASKS:
        return "simpy"
    if tasks < COLD_COMPILED_TASKS and not compiled_on_disk():
        return "simpy"
    return "compiled"


def compiled_on_disk() -> bool:
    """Whether Numba's disk cache holds the compiled event loop (``megasim.sim.compiled_loop``, ``cache=True``)
    of this source, so a run loads it (about 0.45 s) instead of compiling it (about 8 s, once per machine and
    source). Read from ``run_events``' cache index, which Numba keys by the source file's stamp (a Numba
    internal, not its public API); True when it cannot be read, so ``auto_engine`` keeps its usual choice."""
    from megasim.sim.compiled_loop import run_events
    try:
        return bool(run_events._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - another Numba version: no answer
        return True


def run_simulate(args: argparse.Namespace) -> int:
    from megasim import __version__
    from megasim.plan import Plan, estimate_tasks, predict
    from megasim.sim import SimOptions
    from megasim.workloads import parse_layer
    problem = parse_layer(args.layer, batch=args.batch)
    spec = spec_of(args)
    plan = Plan.parse(args.schedule, args.param, algorithm=args.algo)
    engine = args.engine
    if engine == "auto":
        engine = auto_engine(estimate_tasks(problem, plan, spec))
    options = SimOptions(placement=args.placement, engine=engine)
    check_out_path(args.trace, "--trace")
    with Progress() as progress:
        result, plan = predict(problem, spec, plan, options, max_tasks=args.max_tasks, progress=progress)
        if args.trace:
            progress(f"writing {args.trace}")
            result.write_chrome_trace(args.trace)
    summary = {"layer": problem.name or args.layer, "problem": problem.spec_string(), "gpu": spec.name,
               "spec_file": args.spec,
               "algorithm": plan.algorithm, "schedule": plan.schedule, "params": plan.param_string(), **{
                   k: v for k, v in result.summary().items() if k not in ("gpu", "schedule", "params")},
               "time_us": plan.algo.time_us(result),
               "default_cost": [n for n in dict.fromkeys(result.cost_names) if not spec.prices(n)],
               "megasim_version": __version__, "python": platform.python_version()}
    for record, launch in zip(summary.get("launches", ()), result.launches):
        record["blocks_per_sm_set_by"] = grid_set_by(launch)
    extra = plan.algo.footprint(problem, plan.params, plan.schedule)
    if extra is not None:
        summary["extra_bytes"] = extra
    if args.json:
        util = result.utilization(bins=20)
        summary["utilization_20_bins"] = {k: [round(float(x), 4) for x in v] for k, v in util.items()}
        print(json.dumps(summary))
        return 0
    print(f"{summary['layer']} ({problem.spec_string()}) on {gpu_label(spec, args)}, {plan.algorithm}, schedule {plan.schedule}")
    print(f"  params          {summary['params']}")
    print(f"  predicted       {result.predicted_us:,.1f} us")
    if summary["time_us"] != result.predicted_us:
        print(f"  kernel time     {summary['time_us']:,.1f} us  (first launch's start to last launch's end)")
    if summary["default_cost"]:
        which = ("every kind takes" if len(summary["default_cost"]) == len(set(result.cost_names))
                 else ", ".join(summary["default_cost"]) + (" takes" if len(summary["default_cost"]) == 1 else " take"))
        print(f"  costs           uncalibrated: {which} the spec's 'default' cost (docs/calibration.md)")
    per_kind = ", ".join(f"{kind} {info['tasks']}" for kind, info in summary["kinds"].items())
    print(f"  tasks           {result.num_tasks:,}  ({per_kind})")
    for first, last, count in launch_runs(result.launches):
        times = "" if count == 1 else f"{count} launches of "
        print(f"  launch          {first.name}: {times}{first.tasks} tasks, {first.blocks_per_sm} blocks/SM "
              f"({grid_set_by(first)}), {first.start_ns / 1e3:,.1f}-{last.end_ns / 1e3:,.1f} us")
    if extra is not None:
        tensors = ", ".join(f"{name} {b / 1e6:,.1f} MB" for name, b in extra.items()) or "none"
        print(f"  extra memory    {sum(extra.values()) / 1e6:,.1f} MB beyond input, filter, output ({tensors})")
    print(f"  L2 hit rate     {result.l2_hit_rate:.3f}")
    print(f"  DRAM traffic    {result.dram_bytes / 1e6:,.1f} MB  ({result.achieved_dram_gbps:,.0f} GB/s achieved)")
    print(f"  FP32            {result.achieved_gflops / 1e3:,.2f} TFLOP/s achieved")
    print(f"  waits           {summary['total_wait_us']:,.1f} us summed over blocks")
    print(f"  simulated in    {result.sim_wall_s:.2f} s  ({result.num_tasks / max(result.sim_wall_s, 1e-9):,.0f} tasks/s)")
    print(f"  taskgraph hash  {result.taskgraph_hash}")
    if args.trace:
        print(f"  trace           {args.trace} (open in https://ui.perfetto.dev)")
    return 0
