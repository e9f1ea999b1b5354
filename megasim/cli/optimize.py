"""`megasim optimize`: search one layer's mapping parameters with the model (or the GPU).

Every flag is checked before the search starts: the layer, GPU, algorithm, space and base --param;
--option against the strategy's declared options (name and type); --budget, --workers and --seed
ranges; the output paths (--cache, --landscape) writable; and the problem's task count under
--max-tasks (one evaluation's work; the search runs up to --budget of them).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from megasim.cli.common import check_out_path, gpu_label, integer, spec_of
from megasim.cli.simulate import add_problem_arguments
from megasim.errors import InputError, ResourceError

MAX_BUDGET = 100_000        # evaluations of one search (docs/errors.md)
MAX_WORKERS = 256       # megasim.search.evaluators.MAX_WORKERS (not imported here: the parser stays light)


def options_of(text: str | None, strategy: str, declared: dict, ranges: dict | None = None) -> dict:
    """--option K=V,K=V checked against the strategy's declared options: each key declared, each value of
    its default's type and inside the strategy's range for it (``ranges``: name -> (lowest, highest);
    without one, an integer option a whole number >= 1, a float option a finite number >= 0)."""
    out: dict = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep or not key or not value:
            raise InputError(f"malformed --option item {item.strip()!r}: write KEY=VALUE, e.g. top=8")
        if key not in declared:
            listed = ", ".join(f"{k} (default {v})" for k, v in declared.items()) or "none"
            raise InputError(f"--option {key} is not allowed for strategy {strategy!r} (allowed: {listed})")
        if key in out:
            raise InputError(f"--option {key} is given twice: give each key once")
        default = declared[key]
        if isinstance(default, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise InputError(f"--option {key}={value!r} is not allowed: it must be true or false")
            out[key] = value.lower() in ("true", "1")
        elif isinstance(default, int):
            low, high = (ranges or {}).get(key, (1, math.inf))
            allowed = f"an integer from {low:g} to {high:g}" if math.isfinite(high) else f"an integer >= {low:g}"
            try:
                out[key] = int(value)
            except ValueError:
                raise InputError(f"--option {key}={value!r} is not allowed: it must be {allowed} "
                                 f"(default {default})") from None
            if not low <= out[key] <= high:
                raise InputError(f"--option {key}={value!r} is not allowed: it must be {allowed} (default {default})")
        elif isinstance(default, float):
            low, high = (ranges or {}).get(key, (0.0, math.inf))
            allowed = f"a finite number from {low:g} to {high:g}" if math.isfinite(high) else \
                f"a finite number >= {low:g}"
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = math.nan
            if not math.isfinite(out[key]) or not low <= out[key] <= high:
                raise InputError(f"--option {key}={value!r} is not allowed: it must be {allowed} (default {default})")
        else:
            out[key] = value
    return out


def add_optimize(p: argparse.ArgumentParser) -> None:
    from megasim.search import DEFAULT_STRATEGY, STRATEGIES
    add_problem_arguments(p)
    p.add_argument("--param", help="parameters the search does not set, kept in every point (e.g. tile=6, or "
                   "sparsity=0.7); a key the --space varies or holds at its default (winograd: M, D_IG, D_GO, t, "
                   "threads, pairs, gemm_k_tile, gemm_threads, style, dispatch, blocks_per_sm) is refused")
    p.add_argument("--budget", type=integer(1, MAX_BUDGET), default=200, help="most evaluations (default 200)")
    p.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=list(STRATEGIES))
    p.add_argument("--option", help="strategy options, e.g. top=8,explore=0.5")
    p.add_argument("--space", default="default", help="the algorithm's named space (default; winograd: algorithm1 and full too; "
                   "im2win: tiles too)")
    p.add_argument("--seed", type=integer(0, 2 ** 32 - 1), default=0)
    p.add_argument("--workers", type=integer(1, MAX_WORKERS), help="simulations at once, as threads of this process (default: the usable CPUs, at most 8)")
    p.add_argument("--cache", help="a Kernel Tuner cache file to consult and update")
    p.add_argument("--landscape", help="write every evaluated point to this CSV")
    p.add_argument("--evaluator", default="simulator", choices=("simulator", "gpu"),
                   help="simulator (the model) or gpu (measured on this machine's CUDA GPU by the validation harness)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run_optimize(args: argparse.Namespace) -> int:
    from megasim import __version__
    from megasim.plan import Plan, estimate_tasks
    from megasim.search import get_strategy, optimize, spaces_of
    from megasim.search.budget import check_options
    from megasim.search.landscape import write_landscape
    from megasim.workloads import parse_layer

    problem = parse_layer(args.layer, batch=args.batch)
    spec = spec_of(args)
    module = get_strategy(args.strategy)
    ranges = getattr(module, "RANGES", None)
    options = options_of(args.option, args.strategy, module.OPTIONS, ranges)
    check_options(args.strategy, options, module.OPTIONS, ranges)
    base = Plan.parse(None, args.param, algorithm=args.algo)
    spaces = spaces_of(args.algo)
    if not spaces:
        raise InputError(f"--algo {args.algo} has no mapping parameters to search: its one mapping is what "
                         f"`megasim simulate --algo {args.algo}` predicts")
    if args.space not in spaces:
        raise InputError(f"--space {args.space!r} is not allowed for {args.algo} (allowed: {', '.join(spaces)})")
    space = spaces[args.space]()
    space.check_base(args.param)       # a key the search sets would be replaced without a word
    check_out_path(args.landscape, "--landscape")
    check_out_path(args.cache, "--cache")
    estimate = estimate_tasks(problem, base, spec)
    if estimate is not None and estimate > args.max_tasks:
        raise ResourceError(f"layer {problem.name or args.layer!r} under {args.algo} is about {estimate:,} tasks per "
                         f"evaluation: more than --max-tasks {args.max_tasks:,} is not allowed (a smaller --batch, or "
                         f"raise --max-tasks; docs/errors.md)")
    result = optimize(problem, spec, strategy=args.strategy, budget=args.budget, options=options,
                      seed=args.seed, workers=args.workers, cache_path=args.cache, space=space,
                      progress=not args.json and sys.stderr.isatty(), evaluator=args.evaluator, base=base,
                      max_tasks=args.max_tasks)
    if args.landscape:
        write_landscape(result.records, space.names, args.landscape)
    best = result.best
    summary = {"layer": problem.name or args.layer, "problem": problem.spec_string(), "gpu": spec.name,
               "spec_file": args.spec,
               "algorithm": args.algo, "strategy": args.strategy, "options": options, "seed": args.seed, "space": args.space,
               "budget": args.budget, "best_point": best.params, "params": best.extras.get("param"),
               ("measured_us" if args.evaluator == "gpu" else "predicted_us"): best.time_us,
               "evaluator": args.evaluator, "evaluations": result.evaluations, "simulated": result.simulated,
               "full_fidelity_evaluations": len(result.full_fidelity()), "wall_s": round(result.wall_s, 3),
               "megasim_version": __version__}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{summary['layer']} ({problem.spec_string()}) on {gpu_label(spec, args)}, {args.algo}: strategy {args.strategy}, "
          f"space {args.space}, budget {args.budget}")
    print(f"  best params     {summary['params']}")
    print(f"  best point      {', '.join(f'{k}={v}' for k, v in best.params.items())}")
    print(f"  {'measured ' if args.evaluator == 'gpu' else 'predicted'}       {best.time_us:,.1f} us")
    print(f"  evaluations     {result.evaluations} ({len(result.full_fidelity())} at full fidelity, "
          f"{result.simulated} {'measured' if args.evaluator == 'gpu' else 'simulated'}, the rest from the cache)")
    print(f"  wall time       {result.wall_s:.1f} s")
    if args.landscape:
        print(f"  landscape       {args.landscape}")
    return 0
