"""A sweep's points: the sweep file expanded into the simulations (or searches) it asks for.

Each point is one (problem, GPU spec, algorithm, schedule, mapping) to predict, or one (problem, GPU
spec, algorithm) to optimise. Expansion resolves every name (layers, networks, GPUs, algorithms,
schedules, spaces, strategies), so a mistake is found before any work starts, as one line naming the
key and the sweep file. Identical problems (the same shape and batch under two names: a network repeats
its blocks) are evaluated once; ``layer`` names the first.

A point's ``key`` is a hash of what it computes (the problem's shape, every field of the GPU spec, the
algorithm, schedule and mapping, the search's settings, the task limit), not of where it came from: a
table row with that key answers the point, whichever sweep file wrote it, so a rerun skips it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from megasim.errors import InputError, MegasimError
from megasim.hardware.spec import GPUSpec
from megasim.plan import DEFAULT_MAX_TASKS, Plan
from megasim.sweep.spec import OptimizeSpec, RunSpec, SweepSpec
from megasim.workloads.problem import ConvProblem


@dataclasses.dataclass(frozen=True, eq=False)
class SweepPoint:
    index: int                       # position in the expansion (the table's row order)
    key: str
    layer: str
    problem: ConvProblem
    gpu: str                         # as the sweep file names it
    spec: GPUSpec
    gpu_spec_hash: str
    algorithm: str
    schedule: str
    param: str                       # the --param string (a grid's combination, or the run's fixed part)
    point: tuple[tuple[str, Any], ...] = ()   # a space's point (mode 'space')
    optimize: OptimizeSpec | None = None
    max_tasks: int = DEFAULT_MAX_TASKS

    @property
    def mode(self) -> str:
        return "optimize" if self.optimize else "space" if self.point else "params"


def spec_hash(spec: GPUSpec) -> str:
    """A hash of every field of a GPU spec (as ``megasim.search.cache.device_name`` takes it)."""
    data = json.dumps(dataclasses.asdict(spec), sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:10]


def point_key(problem: ConvProblem, gpu_hash: str, algorithm: str, schedule: str, param: str,
              point: tuple = (), optimize: OptimizeSpec | None = None, max_tasks: int = DEFAULT_MAX_TASKS) -> str:
    what = [problem.spec_string(), gpu_hash, algorithm, schedule, param, [list(p) for p in point],
            dataclasses.asdict(optimize) if optimize else None, max_tasks]
    return hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:16]


# The most points one sweep may expand to: about 25 s and 0.5 GB to expand on one core, before any
# simulation (docs/errors.md). A larger study is several sweep files (they can share one table).
MAX_POINTS = 1_000_000


def expand(sweep: SweepSpec) -> list[SweepPoint]:
    """Every point of the sweep, in a fixed order (problems, then GPUs, then runs). A sweep of more than
    MAX_POINTS points is refused (InputError) as soon as the count passes it, before it is built."""
    where = f"sweep file {sweep.source!r}" if sweep.source != "<dict>" else "sweep"
    runs = [_check_run(run, f"{where} [[runs]] #{i + 1}") for i, run in enumerate(sweep.runs)]
    problems = _problems(sweep, where)
    gpus = [(label, _gpu(label, sweep, where)) for label in sweep.gpus]
    max_tasks = sweep.max_tasks or DEFAULT_MAX_TASKS
    mappings: list[list[list[tuple[str, str, tuple]]]] = []     # [problem][run] -> (schedule, param, point)
    total = 0
    for layer, problem in problems:
        mappings.append([list(_mappings(run, combos, problem)) for run, combos in runs])
        total += len(gpus) * sum(len(m) for m in mappings[-1])
        if total > MAX_POINTS:
            raise InputError(f"{where}: more than {MAX_POINTS:,} points (passed at problem {layer!r}, "
                             f"{len(mappings)} of {len(problems)}) is not allowed: split it into several sweep "
                             f"files, or use fewer problems, GPUs, grid values or a smaller space (docs/errors.md)")
    out: list[SweepPoint] = []
    for (layer, problem), per_run in zip(problems, mappings):
        for label, spec in gpus:
            gpu_hash = spec_hash(spec)
            for (run, _), items in zip(runs, per_run):
                for schedule, param, point in items:
                    key = point_key(problem, gpu_hash, run.algorithm, schedule, param, point, run.optimize, max_tasks)
                    out.append(SweepPoint(len(out), key, layer, problem, label, spec, gpu_hash, run.algorithm,
                                          schedule, param, point, run.optimize, max_tasks))
    return out


def _problems(sweep: SweepSpec, where: str) -> list[tuple[str, ConvProblem]]:
    from megasim.workloads import network_layers, parse_layer
    found: list[tuple[str, ConvProblem]] = []
    for text in sweep.problems:
        try:
            problem = parse_layer(text, batch=sweep.batch, source=f"{where} problems")
        except MegasimError as err:
            # parse_layer names the file and field for an unknown name, not for a free spec's bad value
            message = str(err) if where in str(err) else f"{where}: problems entry {err}"
            raise InputError(message) from None
        found.append((problem.name or text, problem))
    for net in sweep.networks:
        try:
            layers = network_layers(net)
        except MegasimError as err:
            raise InputError(f"{where}: networks entry {net!r}: {err}") from None
        found += [(p.name, dataclasses.replace(p, n=sweep.batch) if sweep.batch else p) for p in layers]
    seen: set[str] = set()
    out = []
    for layer, problem in found:
        shape = problem.spec_string()
        if shape not in seen:
            seen.add(shape)
            out.append((layer, problem))
    return out


def _gpu(label: str, sweep: SweepSpec, where: str) -> GPUSpec:
    from megasim.hardware import get_gpu, load_spec
    try:
        if label.endswith(".json") or "/" in label:
            path = Path(label)
            if not path.is_absolute() and (sweep.folder / path).exists():
                path = sweep.folder / path
            return load_spec(path)
        return get_gpu(label)
    except MegasimError as err:
        raise InputError(f"{where}: gpus entry {label!r}: {err}") from None


def _check_run(run: RunSpec, where: str) -> tuple[RunSpec, list[tuple[str, str]]]:
    """The run with its names checked, and its (schedule, --param string) combinations (mode 'params')."""
    from megasim.algorithms import get_algorithm
    try:
        alg = get_algorithm(run.algorithm, source="algorithm")
    except MegasimError as err:
        raise InputError(f"{where}: {err} (see `megasim algorithms`)") from None
    for schedule in run.schedules:
        if schedule not in alg.schedules:
            raise InputError(f"{where}: schedules entry {schedule!r} is not allowed for {alg.name} "
                             f"(allowed: {', '.join(alg.schedules)})")
    try:
        Plan.parse(None, run.param or None, algorithm=alg.name)
    except MegasimError as err:
        raise InputError(f"{where}: param {run.param!r}: {err}") from None
    if run.space is not None or run.optimize is not None:
        space = run.space or run.optimize.space
        if space not in alg.spaces:
            raise InputError(f"{where}: space {space!r} is not allowed for {alg.name} "
                             f"(allowed: {', '.join(alg.spaces) or 'none: it has no search space'})")
        try:
            alg.spaces[space]().check_base(run.param or None, source="param")
        except MegasimError as err:
            raise InputError(f"{where}: {err}") from None
    if run.optimize is not None:
        from megasim.search import get_strategy
        from megasim.search.budget import check_options
        try:
            module = get_strategy(run.optimize.strategy)
            check_options(run.optimize.strategy, dict(run.optimize.options), module.OPTIONS,
                          getattr(module, "RANGES", None))
        except MegasimError as err:
            raise InputError(f"{where}: optimize: {err}") from None
    combos: list[tuple[str, str]] = []
    if run.space is None and run.optimize is None:
        count = len(run.schedules or (alg.default_schedule,))
        for _, values in run.grid:
            count *= len(values)
        if count > MAX_POINTS:
            raise InputError(f"{where}: its grid has {count:,} combinations: more than {MAX_POINTS:,} points is not "
                             f"allowed (split it into several sweep files; docs/errors.md)")
        keys = [k for k, _ in run.grid]
        for values in itertools.product(*(v for _, v in run.grid)) if run.grid else [()]:
            text = ",".join([*(f"{k}={v}" for k, v in zip(keys, values)), *([run.param] if run.param else [])])
            for schedule in run.schedules or (alg.default_schedule,):
                try:
                    Plan.parse(schedule, text or None, algorithm=alg.name)
                except MegasimError as err:
                    raise InputError(f"{where}: grid combination {text!r}: {err}") from None
                combos.append((schedule, text))
    return run, combos


def _mappings(run: RunSpec, combos: list[tuple[str, str]], problem: ConvProblem):
    """(schedule, param, space point) of one run on one problem."""
    if run.optimize is not None:
        yield "optimize", run.param, ()
    elif run.space is not None:
        from megasim.search import spaces_of
        space = spaces_of(run.algorithm)[run.space]().bind(problem)
        for p in space.valid_points():
            yield f"space:{run.space}", run.param, tuple(p.items())
    else:
        for schedule, param in combos:
            yield schedule, param, ()
