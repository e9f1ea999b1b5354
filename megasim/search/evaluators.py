"""Evaluators: what turns points of a search space into Records. A strategy cannot tell them apart.

Every evaluator has ``space`` and ``evaluate(points) -> list[Record]`` (one record per point, in the
order given) and ``coarse()``, a cheaper evaluator of the same kind that ranks points roughly alike
(the simulator at a smaller batch; a replayed low-fidelity cache), or None when there is none.

- ``SimulatorEvaluator``: the model. Points run in a ``multiprocessing`` pool (``workers`` processes,
  os.cpu_count() by default; results come back in the order given, so a search is deterministic
  whatever the worker count). It consults and updates a Kernel Tuner cache file.
- ``CacheEvaluator``: replays a cache file; a point that is not there gets reason 'not in cache'.
- ``GPUEvaluator``: measurement through the validation harness (issue 4); not built yet, it raises.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Protocol

from megasim.algorithms import get_algorithm
from megasim.errors import MegasimError
from megasim.hardware.spec import GPUSpec
from megasim.plan import Plan, build
from megasim.search.cache import Cache, device_name, model_fingerprint
from megasim.search.record import Record
from megasim.search.space import SearchSpace
from megasim.sim import SimOptions, simulate
from megasim.workloads.problem import ConvProblem

Progress = Callable[[Record], None]
_log = logging.getLogger(__name__)


class Evaluator(Protocol):
    space: SearchSpace

    def evaluate(self, points: list[dict[str, Any]]) -> list[Record]: ...

    def coarse(self) -> "Evaluator | None": ...


# -- the model, one point --------------------------------------------------------------------------
def point_plan(problem: ConvProblem, point: dict[str, Any], algorithm: str = "winograd",
               base: Plan | None = None) -> Plan:
    """The Plan of a full point of `algorithm`'s space (the base plan's other parameters kept)."""
    return get_algorithm(algorithm).point_plan(problem, point, base)


def simulate_point(problem: ConvProblem, spec: GPUSpec, point: dict[str, Any], options: SimOptions | None = None,
                   algorithm: str = "winograd", base: Plan | None = None
                   ) -> tuple[float | None, str | None, dict[str, Any]]:
    """(time_us or None, reason, extras) of one full point; model errors become the reason."""
    start = time.perf_counter()
    try:
        plan = point_plan(problem, point, algorithm, base)
        graph, schedule, plan = build(problem, plan, spec)
        result = simulate(graph, schedule, spec, options)
    except MegasimError as err:
        return None, str(err), {"batch": problem.n, "sim_wall_s": round(time.perf_counter() - start, 4)}
    except Exception as err:  # noqa: BLE001 - a model bug must not end a search; record it, loudly
        _log.warning("model error on %s %s: %s: %s", problem.spec_string(), point, type(err).__name__, err)
        return None, f"model error: {type(err).__name__}: {err}", {
            "batch": problem.n, "sim_wall_s": round(time.perf_counter() - start, 4)}
    return float(plan.algo.time_us(result)), None, {
        **plan.algo.record_extras(plan), "param": plan.param_string(), "batch": problem.n,
        "sim_wall_s": round(time.perf_counter() - start, 4), "taskgraph_hash": result.taskgraph_hash}


def _worker(args: tuple) -> tuple[float | None, str | None, dict[str, Any]]:
    return simulate_point(*args)


class SimulatorEvaluator:
    """The model as an evaluator; a pool of worker processes, a cache file consulted and updated."""

    def __init__(self, problem: ConvProblem, spec: GPUSpec, space: SearchSpace, *, workers: int | None = None,
                 cache_path: str | Path | None = None, progress: Progress | None = None,
                 options: SimOptions | None = None, fidelity: str = "full", base: Plan | None = None,
                 _pool=None) -> None:
        self.problem, self.spec, self.options, self.base = problem, spec, options, base
        self.space = space.bind(problem)
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.cache_path = Path(cache_path) if cache_path else None
        self.device = device_name(spec)
        self.cache = (Cache.open(self.cache_path, self.space, self.device, problem.spec_string())
                      if self.cache_path else Cache.for_space(self.space, self.device, problem.spec_string()))
        self.progress = progress
        self.fidelity = fidelity
        self._pool = _pool
        self._owns_pool = _pool is None
        self._coarse: SimulatorEvaluator | None = None
        self.simulated = 0   # points actually simulated (not served from the cache)

    def _get_pool(self):
        if self._pool is None and self.workers > 1:
            self._pool = multiprocessing.get_context("fork").Pool(self.workers)
        return self._pool

    def evaluate(self, points: list[dict[str, Any]]) -> list[Record]:
        out: list[Record | None] = [None] * len(points)
        todo: list[int] = []
        for i, p in enumerate(points):
            reason = self.space.constraint(p)
            if reason:
                out[i] = Record(dict(p), None, reason, {"fidelity": self.fidelity})
                continue
            hit = self.cache.get(self.space, p)
            if hit is not None:
                out[i] = Record(hit.params, hit.time_us, hit.reason, {**hit.extras, "fidelity": self.fidelity})
                if self.progress:
                    self.progress(out[i])
            else:
                todo.append(i)
        jobs = [(self.problem, self.spec, self.space.full(points[i]), self.options, self.space.algorithm, self.base)
                for i in todo]
        pool = self._get_pool() if len(jobs) > 1 else None
        results = pool.imap(_worker, jobs) if pool is not None else map(_worker, jobs)
        for i, (t_us, reason, extras) in zip(todo, results):
            rec = Record(dict(points[i]), t_us, reason, {**extras, "cached": False, "fidelity": self.fidelity})
            self.cache.put(self.space, rec)
            self.simulated += 1
            out[i] = rec
            if self.progress:
                self.progress(rec)
        if todo and self.cache_path:
            self.cache.save(self.cache_path)
        return [r for r in out if r is not None]

    def coarse(self) -> "SimulatorEvaluator | None":
        if self._coarse is None:
            batch = get_algorithm(self.space.algorithm).coarse_batch(self.problem)
            if batch >= self.problem.n:
                return None
            low = replace(self.problem, n=batch)
            path = (self.cache_path.with_name(f"{self.cache_path.stem}.b{batch}{self.cache_path.suffix}")
                    if self.cache_path else None)
            self._coarse = SimulatorEvaluator(low, self.spec, self.space, workers=self.workers, cache_path=path,
                                              progress=self.progress, options=self.options, fidelity="low", base=self.base,
                                              _pool=self._get_pool())
        return self._coarse

    def close(self) -> None:
        if self._pool is not None and self._owns_pool:
            self._pool.close()
            self._pool.join()
        self._pool = None

    def __enter__(self) -> "SimulatorEvaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CacheEvaluator:
    """Replays a cache (and, optionally, a low-fidelity cache as its coarse evaluator)."""

    def __init__(self, space: SearchSpace, cache: Cache | str | Path, low: Cache | str | Path | None = None,
                 fidelity: str = "full") -> None:
        self.space = space
        self.cache = cache if isinstance(cache, Cache) else Cache.load(cache, space)
        self._low = low
        self.fidelity = fidelity

    def evaluate(self, points: list[dict[str, Any]]) -> list[Record]:
        out = []
        for p in points:
            reason = self.space.constraint(p)
            rec = None if reason else self.cache.get(self.space, p)
            if reason:
                out.append(Record(dict(p), None, reason, {"fidelity": self.fidelity}))
            elif rec is None:
                out.append(Record(dict(p), None, "not in cache", {"fidelity": self.fidelity}))
            else:
                out.append(Record(rec.params, rec.time_us, rec.reason, {**rec.extras, "fidelity": self.fidelity}))
        return out

    def coarse(self) -> "CacheEvaluator | None":
        return None if self._low is None else CacheEvaluator(self.space, self._low, fidelity="low")


class GPUEvaluator:
    """Measured runtimes on the GPU, through the validation harness (``gpu.calibrate.validate.measure_plans``:
    the same ``megasim.plan.build`` TaskGraph as the model, ``PreparedSchedule``, CUDA events, median
    of ``repeats``). Same interface as the simulator's evaluator, so a strategy cannot tell them apart;
    its cache is keyed by the measured device, never mixed with predictions. No coarse fidelity."""

    def __init__(self, problem: ConvProblem, space: SearchSpace, *, repeats: int = 10, warmup: int = 2,
                 sets: int = 2, cache_path: str | Path | None = None, progress: Progress | None = None,
                 measure: Callable[..., list[dict[str, Any]]] | None = None, device: str | None = None) -> None:
        self.problem, self.repeats, self.warmup, self.sets = problem, repeats, warmup, sets
        self.space = space.bind(problem)
        self.cache_path = Path(cache_path) if cache_path else None
        self.progress = progress
        self.simulated = 0      # points measured (not served from the cache)
        if measure is not None:   # tests: a stand-in for the GPU harness
            self._measure, name = measure, device or "stand-in"
        else:
            self._measure, name = self._gpu_harness()
        self.device = f"measured-{name}-model-{model_fingerprint()}"
        self.cache = (Cache.open(self.cache_path, self.space, self.device, problem.spec_string())
                      if self.cache_path else Cache.for_space(self.space, self.device, problem.spec_string()))

    @staticmethod
    def _gpu_harness():
        try:  # gpu/ (numba) is imported only here, when a GPU evaluator is asked for
            from numba import config, cuda
            available = not config.ENABLE_CUDASIM and cuda.is_available()
        except Exception:  # noqa: BLE001 - numba missing or broken: no GPU evaluator
            available = False
        if not available:
            raise MegasimError("the GPU evaluator needs a CUDA GPU and numba-cuda (gpu/on_device.sh); "
                               "use the simulator or a replayed cache")
        from gpu.calibrate import validate
        return validate.measure_plans, validate.device_name()

    def evaluate(self, points: list[dict[str, Any]]) -> list[Record]:
        """Cached and impossible points are answered at once; the others are measured in one call of
        the harness (one set of inputs and workspaces for the whole batch)."""
        out: list[Record | None] = [None] * len(points)
        todo: list[tuple[int, Plan]] = []
        for i, p in enumerate(points):
            reason = self.space.constraint(p)
            hit = None if reason else self.cache.get(self.space, p)
            if reason:
                out[i] = Record(dict(p), None, reason, {"fidelity": "full"})
            elif hit is not None:
                out[i] = Record(hit.params, hit.time_us, hit.reason, {**hit.extras, "fidelity": "full"})
            else:
                try:
                    todo.append((i, point_plan(self.problem, self.space.full(p), self.space.algorithm)))
                except MegasimError as err:
                    out[i] = Record(dict(p), None, str(err), {"fidelity": "full"})
        if todo:
            rows = self._measure(self.problem, [("point", plan) for _, plan in todo], repeats=self.repeats,
                                 warmup=self.warmup, sets=self.sets)
            for (i, plan), row in zip(todo, rows):
                ok = row.get("status") == "ok"
                rec = Record(dict(points[i]), float(row["measured_us"]) if ok else None,
                             None if ok else row.get("status", "measurement failed"),
                             {**plan.algo.record_extras(plan), "param": plan.param_string(),
                              "spread_us": row.get("spread_us"), "cached": False, "fidelity": "full"})
                self.cache.put(self.space, rec)
                self.simulated += 1
                out[i] = rec
            if self.cache_path:
                self.cache.save(self.cache_path)
        if self.progress:
            for rec in out:
                self.progress(rec)
        return [r for r in out if r is not None]

    def coarse(self) -> None:
        return None
