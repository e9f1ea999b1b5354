"""The sweep file: what to evaluate, read from TOML into frozen dataclasses, every key checked.

A sweep is the product of problems x GPU specs x runs. A *run* names one algorithm and how its
mappings are chosen: explicit parameter lists (``grid``: their Cartesian product, each combination a
``--param`` string), every valid point of one of the algorithm's named search spaces (``space``), or
the optimiser's best mapping (``optimize = {budget = ...}``, one search per problem and GPU). Problems
are catalogue layer names, free specs (``N=8,C=64,...``) or whole networks (``networks = ["vgg16"]``,
every catalogue layer of that network). GPUs are preset names or spec files (a relative path is read
from the sweep file's folder, else from the current directory).

Reading the file does no work beyond parsing: layers, GPUs and algorithms are looked up when the points
are expanded (``megasim.sweep.points``). Every mistake is one ``InputError`` line naming the key, the
file and what is allowed. The spec's hash (``SweepSpec.hash``) is taken over its parsed content, so a
comment or a reordered table does not change it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megasim.errors import InputError
from megasim.input_files import parse_toml, read_text

TOP_KEYS = ("name", "problems", "networks", "batch", "gpus", "runs", "max_tasks", "out")
RUN_KEYS = ("algorithm", "schedules", "param", "grid", "space", "optimize")
OPTIMIZE_KEYS = ("budget", "strategy", "space", "seed", "options")
MAX_OPTIMIZE_BUDGET = 100_000     # as `megasim optimize --budget`
MAX_BATCH = 2 ** 20
_PARAM_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class OptimizeSpec:
    """One search per (problem, GPU): ``megasim.search.optimize`` in the worker, serially."""

    budget: int
    strategy: str = "multifidelity"
    space: str = "default"
    seed: int = 0
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class RunSpec:
    """One algorithm and how its mappings are chosen: ``grid`` (parameter lists), ``space`` (a named
    search space, every valid point) or ``optimize``; with none of them, the schedules' defaults."""

    algorithm: str
    schedules: tuple[str, ...] = ()
    param: str = ""
    grid: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    space: str | None = None
    optimize: OptimizeSpec | None = None

    @property
    def mode(self) -> str:
        return "optimize" if self.optimize else "space" if self.space else "params"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    source: str                        # the file it was read from ('<dict>' when built in Python)
    gpus: tuple[str, ...]
    runs: tuple[RunSpec, ...]
    problems: tuple[str, ...] = ()
    networks: tuple[str, ...] = ()
    batch: int | None = None
    max_tasks: int | None = None
    out: str | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def hash(self) -> str:
        """A hash of the parsed content (not of the file's bytes): comments do not change it."""
        data = json.dumps(self.raw, sort_keys=True, default=str)
        return hashlib.sha256(data.encode()).hexdigest()[:12]

    @property
    def folder(self) -> Path:
        return Path(self.source).resolve().parent if self.source != "<dict>" else Path.cwd()


def load_sweep(path: str | Path) -> SweepSpec:
    """The sweep file at `path`; one-line InputError when it cannot be read or a key is wrong."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise InputError(f"sweep file {path!r} is not allowed: give the path of a TOML sweep file")
    where = f"sweep file {str(path)!r}"
    try:
        text = read_text(path, where, "sweep file")
    except OSError as err:
        raise InputError(f"{where} cannot be read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise InputError(f"{where} is not UTF-8 text: write the sweep in TOML") from None
    data = parse_toml(text, where)
    return parse_sweep(data, source=str(path), default_name=Path(path).stem)


def parse_sweep(data: dict[str, Any], source: str = "<dict>", default_name: str = "sweep") -> SweepSpec:
    """A SweepSpec from the parsed TOML (or an equal dict built in Python)."""
    where = f"sweep file {source!r}" if source != "<dict>" else "sweep"
    if not isinstance(data, dict):
        raise InputError(f"{where}: give a table of keys ({', '.join(TOP_KEYS)})")
    _known(data, TOP_KEYS, where)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name.strip() or any(c in name for c in "/\\\0"):
        raise InputError(f"{where}: name={name!r} is not allowed: give a non-empty string without '/'")
    problems = _strings(data, "problems", where)
    networks = _strings(data, "networks", where)
    if not problems and not networks:
        raise InputError(f"{where}: give problems = [LAYER, ...] or networks = [NETWORK, ...] (none given)")
    gpus = _strings(data, "gpus", where)
    if not gpus:
        raise InputError(f"{where}: gpus is missing: give a list of preset names or spec files, e.g. gpus = [\"H100\"]")
    batch = _integer(data, "batch", where, 1, MAX_BATCH)
    max_tasks = _integer(data, "max_tasks", where, 1, None)
    out = data.get("out")
    if out is not None and (not isinstance(out, str) or not out.strip()):
        raise InputError(f"{where}: out={out!r} is not allowed: give a file name ending .parquet or .csv")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise InputError(f"{where}: runs is missing or not a list of tables: give at least one [[runs]] table "
                         f"with algorithm = NAME")
    parsed_runs = tuple(_run(r, f"{where} [[runs]] #{i + 1}") for i, r in enumerate(runs))
    return SweepSpec(name=name, source=source, gpus=gpus, runs=parsed_runs, problems=problems, networks=networks,
                     batch=batch, max_tasks=max_tasks, out=out, raw=data)


def _run(data: dict[str, Any], where: str) -> RunSpec:
    _known(data, RUN_KEYS, where)
    algorithm = data.get("algorithm")
    if not isinstance(algorithm, str) or not algorithm:
        raise InputError(f"{where}: algorithm is missing: give algorithm = NAME (see `megasim algorithms`)")
    schedules = _strings(data, "schedules", where)
    param = data.get("param", "")
    if not isinstance(param, str):
        raise InputError(f"{where}: param={param!r} is not allowed: give a --param string, e.g. \"t=64,M=4\"")
    chosen = [k for k in ("grid", "space", "optimize") if k in data]
    if len(chosen) > 1:
        raise InputError(f"{where}: {' and '.join(chosen)} are given together: give at most one of grid, space, optimize")
    grid: tuple = ()
    if "grid" in data:
        g = data["grid"]
        if not isinstance(g, dict) or not g:
            raise InputError(f"{where}: grid={g!r} is not allowed: give a table of --param keys to lists, "
                             f"e.g. grid = {{M = [1, 2, 4]}}")
        items = []
        for key, values in g.items():
            if not _PARAM_KEY.fullmatch(key):
                raise InputError(f"{where}: grid key {key!r} is not allowed: give a --param key (letters, digits, "
                                 f"'_'), e.g. grid = {{M = [1, 2, 4]}}")
            if isinstance(values, list) and any(isinstance(v, str) and (set(v) & set(",=") or not v.strip())
                                                for v in values):
                raise InputError(f"{where}: grid.{key}={values!r} is not allowed: a value is one --param value, "
                                 f"without ',' or '=' (give other keys as keys of grid)")
            if not isinstance(values, list) or not values or not all(isinstance(v, (int, float, str)) and
                                                                     not isinstance(v, bool) for v in values):
                raise InputError(f"{where}: grid.{key}={values!r} is not allowed: give a non-empty list of "
                                 f"numbers or strings")
            if len(set(map(str, values))) != len(values):
                raise InputError(f"{where}: grid.{key}={values!r} is not allowed: its values must be distinct")
            items.append((key, tuple(values)))
        grid = tuple(items)
    space = data.get("space")
    if space is not None and (not isinstance(space, str) or not space):
        raise InputError(f"{where}: space={space!r} is not allowed: give the name of one of the algorithm's "
                         f"spaces (megasim optimize --space)")
    if (space is not None or "optimize" in data) and schedules:
        raise InputError(f"{where}: schedules is not allowed with {'space' if space else 'optimize'}: the "
                         f"space's points choose the schedule")
    optimize = _optimize(data["optimize"], f"{where} optimize") if "optimize" in data else None
    return RunSpec(algorithm=algorithm, schedules=schedules, param=param, grid=grid, space=space, optimize=optimize)


def _optimize(data: Any, where: str) -> OptimizeSpec:
    if not isinstance(data, dict):
        raise InputError(f"{where}={data!r} is not allowed: give a table, e.g. optimize = {{budget = 50}}")
    _known(data, OPTIMIZE_KEYS, where)
    budget = _integer(data, "budget", where, 1, MAX_OPTIMIZE_BUDGET)
    if budget is None:
        raise InputError(f"{where}: budget is missing: give optimize = {{budget = N}} (1 to {MAX_OPTIMIZE_BUDGET:,})")
    strategy = data.get("strategy", "multifidelity")
    space = data.get("space", "default")
    for key, value in (("strategy", strategy), ("space", space)):
        if not isinstance(value, str) or not value:
            raise InputError(f"{where}: {key}={value!r} is not allowed: give a name")
    seed = _integer(data, "seed", where, 0, 2 ** 32 - 1) or 0
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise InputError(f"{where}: options={options!r} is not allowed: give a table, e.g. options = {{top = 8}}")
    return OptimizeSpec(budget=budget, strategy=strategy, space=space, seed=seed,
                        options=tuple(sorted(options.items())))


def _known(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise InputError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed)})")


def _strings(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InputError(f"{where}: {key}={value!r} is not allowed: give a list of non-empty strings")
    if len(set(value)) != len(value):
        raise InputError(f"{where}: {key}={value!r} is not allowed: name each entry once")
    return tuple(value)


def _integer(data: dict[str, Any], key: str, where: str, low: int, high: int | None) -> int | None:
    if key not in data:
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"from {low} to {high:,}"
        raise InputError(f"{where}: {key}={value!r} is not allowed: it must be an integer {allowed}")
    return value
