"""Evaluators: what turns points of a search space into Records. A strategy cannot tell them apart.

Every evaluator has ``space`` and ``evaluate(points) -> list[Record]`` (one record per point, in the
order given) and ``coarse()``, a cheaper evaluator of the same kind that ranks points roughly alike
(the simulator at a smaller batch; a replayed low-fidelity cache), or None when there is none.

- ``SimulatorEvaluator``: the model. With one worker it simulates in this process (a small search pays
  no cluster start-up). Otherwise each batch of points is cut into contiguous chunks, about two per
  worker, that run as Dask tasks on the client given (``client=``, shared with a sweep, calibration or
  validation) or on a LocalCluster of one process and ``workers`` threads it starts on first use and
  closes at the end (``megasim.sweep.cluster``; the available CPUs by default, at most
  MAX_DEFAULT_WORKERS; the compiled event loop releases the GIL, so threads simulate at once); results
  come back in the order given and duplicates are resolved in that order, so a search is the same
  whatever the worker count or cluster. Each simulated point leaves only scalars (time, D_IG, D_GO, the
  --param string, the program's hash). Points that build the same program (task graph, task map,
  execution style) are simulated once. It consults and updates a Kernel Tuner cache file.
- ``CacheEvaluator``: replays a cache file; a point that is not there gets reason 'not in cache'.
- ``GPUEvaluator``: measured times on a CUDA GPU through the validation harness (``gpu.calibrate.validate``),
  cached under the measured device's name; without a GPU it refuses in one line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection, Protocol

from megasim.algorithms import get_algorithm
from megasim.errors import MegasimError
from megasim.hardware.spec import GPUSpec
from megasim.plan import DEFAULT_MAX_TASKS, Plan, build, check_max_tasks
from megasim.search.cache import Cache, device_name, model_fingerprint
from megasim.search.record import Record
from megasim.search.space import SearchSpace
from megasim.sim import SimOptions, simulate
from megasim.workloads.problem import ConvProblem

Progress = Callable[[Record], None]
MAX_WORKERS = 256
MAX_DEFAULT_WORKERS = 8   # memory grows with the workers (see default_workers)
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
                   algorithm: str = "winograd", base: Plan | None = None, known: Collection[str] = (),
                   max_tasks: int = DEFAULT_MAX_TASKS) -> tuple[float | None, str | None, dict[str, Any]]:
    """(time_us or None, reason, extras) of one full point; model errors become the reason.

    ``extras["program"]`` names what is simulated (the task graph's hash and the schedule's: the task map
    and execution style), so two points that build the same program can be told apart from two that
    merely look different. A point whose program is in `known` is not simulated: it comes back with
    ``time_us=None``, ``reason=None`` and ``extras["duplicate"] = True``, for the caller to answer from
    its own record of that program.
    """
    start = time.perf_counter()
    try:
        plan = point_plan(problem, point, algorithm, base)
        graph, schedule, plan = build(problem, plan, spec, max_tasks=max_tasks)
        program = f"{graph.program_hash}:{schedule.hash}"
        if program in known:
            return None, None, {"program": program, "duplicate": True}
        result = simulate(graph, schedule, spec, options)
    except MegasimError as err:
        return None, str(err), {"batch": problem.n, "sim_wall_s": round(time.perf_counter() - start, 4)}
    except Exception as err:  # noqa: BLE001 - a model bug must not end a search; record it, loudly
        _log.warning("model error on %s %s: %s: %s", problem.spec_string(), point, type(err).__name__, err)
        return None, f"model error: {type(err).__name__}: {err}", {
            "batch": problem.n, "sim_wall_s": round(time.perf_counter() - start, 4)}
    # The whole run, as `megasim simulate` prints it, for every algorithm: a search's and a sweep's times
    # are compared across algorithms (plan.algo.time_us is what a measurement of one algorithm is
    # compared with, e.g. the sparse kernels' time without the first launch's start).
    time_us = float(result.predicted_us)
    del result   # only scalars leave this function
    return time_us, None, {
        **plan.algo.record_extras(plan), "param": plan.param_string(), "batch": problem.n,
        "sim_wall_s": round(time.perf_counter() - start, 4), "taskgraph_hash": graph.hash, "program": program}


# -- the worker side -------------------------------------------------------------------------------
def _evaluate_chunk(job: tuple) -> list[tuple[float | None, str | None, dict[str, Any]]]:
    """One chunk of points in one worker, in order. A program known before the chunk, or met earlier in
    it, is not simulated again (the caller answers it from the first record). A finished simulation
    drops its reference cycles (``megasim.sim.engine``), so its tables are freed before the next one."""
    problem, spec, options, algorithm, base, max_tasks, points, known = job
    known = set(known)
    out = []
    for point in points:
        res = simulate_point(problem, spec, point, options, algorithm, base, known, max_tasks)
        program = res[2].get("program")
        if program is not None and not res[2].get("duplicate"):
            known.add(program)
        out.append(res)
    return out


def default_workers() -> int:
    """The worker count when none is given: the CPUs this process may run on, at most MAX_DEFAULT_WORKERS
    (each worker holds its own lowered graph and simulation: about 50 MB on vgg-1, beside the ~190 MB of
    a process with Dask and Numba loaded)."""
    from megasim.sweep.cluster import available_cpus
    return max(1, min(available_cpus(), MAX_DEFAULT_WORKERS))


def check_workers(workers: int | None) -> int:
    """The worker count to use; MegasimError naming the value and the allowed range if it is not one."""
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise MegasimError(f"workers={workers!r} is not allowed: it must be an integer from 1 to {MAX_WORKERS} "
                           f"(default: the available CPUs, at most {MAX_DEFAULT_WORKERS}; here {default_workers()})")
    return workers


def _chunks(items: list, workers: int) -> list[list]:
    """Contiguous chunks, about two per worker (so one slow point does not leave a worker idle for
    long), in order."""
    from megasim.sweep.cluster import chunks
    return chunks(items, 2 * workers)


class SimulatorEvaluator:
    """The model as an evaluator: chunks of points handed out per batch to a Dask cluster's workers (or
    simulated here with one worker), a cache file consulted and updated. Points that build a program already evaluated (the same task
    graph, task map and execution style) are answered from it, marked ``duplicate``."""

    def __init__(self, problem: ConvProblem, spec: GPUSpec, space: SearchSpace, *, workers: int | None = None,
                 cache_path: str | Path | None = None, progress: Progress | None = None,
                 options: SimOptions | None = None, fidelity: str = "full", base: Plan | None = None,
                 max_tasks: int = DEFAULT_MAX_TASKS, client: Any = None) -> None:
        """``max_tasks``: the largest task count a point may lower to (``megasim.plan.build``). ``client``: a
        ``distributed.Client`` to evaluate on (left open); without one, ``workers`` > 1 starts a
        LocalCluster of that many threads in this process at the first batch, closed by ``close()``."""
        self.problem, self.spec, self.options, self.base = problem, spec, options, base
        self.max_tasks = check_max_tasks(max_tasks)
        self.space = space.bind(problem)
        self.workers = check_workers(workers)
        self.cache_path = Path(cache_path) if cache_path else None
        self.device = device_name(spec)
        self.cache = (Cache.open(self.cache_path, self.space, self.device, problem.spec_string())
                      if self.cache_path else Cache.for_space(self.space, self.device, problem.spec_string()))
        self.progress = progress
        self.fidelity = fidelity
        self._client = client
        self._owned: Any = None      # the open_client context this evaluator entered, if any
        self._coarse: SimulatorEvaluator | None = None
        self._programs: dict[str, Record] = {}   # program -> its first record (scalars only)
        self.simulated = 0   # points actually simulated (not served from the cache or a duplicate)

    def _get_client(self) -> Any:
        """The Dask client to evaluate on; None: simulate in this process (one worker, no client given)."""
        if self._client is None and self.workers > 1:
            from megasim.sweep.cluster import open_client
            self._owned = open_client(workers=self.workers, processes=False)
            self._client = self._owned.__enter__()
        return self._client

    def _run(self, points: list[dict[str, Any]]) -> list[tuple[float | None, str | None, dict[str, Any]]]:
        known = frozenset(self._programs)
        job = (self.problem, self.spec, self.options, self.space.algorithm, self.base, self.max_tasks)
        if not points:
            return []
        client = self._get_client()   # even for one point: the caller never lowers or simulates when it has workers
        if client is None:
            return _evaluate_chunk((*job, points, known))
        from megasim.sweep.cluster import worker_count
        futures = [client.submit(_evaluate_chunk, (*job, c, known), pure=False)
                   for c in _chunks(points, worker_count(client))]
        return [res for part in client.gather(futures) for res in part]

    def evaluate(self, points: list[dict[str, Any]]) -> list[Record]:
        out: list[Record | None] = [None] * len(points)
        todo: list[int] = []
        for i, p in enumerate(points):
            reason = self.space.constraint(p)
            if reason:
                out[i] = Record(dict(p), None, reason, {"fidelity": self.fidelity})
                continue
            hit = self.cache.get(self.space, p)
            if hit is not None:   # a duplicate if its program is known here (not as the file says)
                extras = {k: v for k, v in hit.extras.items() if k != "duplicate"}
                if extras.get("program") in self._programs:
                    extras["duplicate"] = True
                out[i] = Record(hit.params, hit.time_us, hit.reason, {**extras, "fidelity": self.fidelity})
                self._note(out[i])
                if self.progress:
                    self.progress(out[i])
            else:
                todo.append(i)
        results = self._run([self.space.full(points[i]) for i in todo])
        for i, (t_us, reason, extras) in zip(todo, results):
            first = self._programs.get(extras.get("program", ""))
            if first is not None:     # the same program as an earlier point: its result, not a new one
                rec = Record(dict(points[i]), first.time_us, first.reason,
                             {**first.extras, "cached": False, "duplicate": True, "fidelity": self.fidelity})
            else:
                extras = {k: v for k, v in extras.items() if k != "duplicate"}
                rec = Record(dict(points[i]), t_us, reason, {**extras, "cached": False, "fidelity": self.fidelity})
                self.simulated += 1
                self._note(rec)
            self.cache.put(self.space, rec)
            out[i] = rec
            if self.progress:
                self.progress(rec)
        if todo and self.cache_path:
            self.cache.save(self.cache_path)
        return [r for r in out if r is not None]

    def _note(self, rec: Record) -> None:
        program = rec.extras.get("program")
        if program and program not in self._programs:
            self._programs[program] = rec

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
                                              max_tasks=self.max_tasks, client=self._get_client())
        return self._coarse

    def close(self) -> None:
        """Close the cluster this evaluator started (a client given to it stays open)."""
        if self._owned is not None:
            owned, self._owned, self._client = self._owned, None, None
            owned.__exit__(None, None, None)

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
