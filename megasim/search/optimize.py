"""``optimize``: one search of one layer on one GPU, the function behind ``megasim optimize``."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from megasim.errors import MegasimError
from megasim.hardware.spec import GPUSpec
from megasim.search.evaluators import GPUEvaluator, SimulatorEvaluator
from megasim.search.record import Record
from megasim.plan import DEFAULT_MAX_TASKS, Plan
from megasim.search.space import SearchSpace, spaces_of
from megasim.search.strategies import DEFAULT_STRATEGY, get_strategy
from megasim.workloads.problem import ConvProblem

EVALUATORS = ("simulator", "gpu")


@dataclass(frozen=True)
class SearchResult:
    best: Record | None
    records: tuple[Record, ...]
    strategy: str
    evaluations: int
    simulated: int          # evaluations that ran the model (the rest came from the cache)
    wall_s: float
    options: dict[str, Any] = field(default_factory=dict)

    def full_fidelity(self) -> list[Record]:
        return [r for r in self.records if r.extras.get("fidelity", "full") == "full"]


def best_full(records: list[Record] | tuple[Record, ...]) -> Record | None:
    """The fastest valid record evaluated at full fidelity."""
    full = [r for r in records if r.valid and r.extras.get("fidelity", "full") == "full"]
    return min(full, key=Record.objective) if full else None


class ProgressLine:
    """A one-line progress display on stderr: evaluations, best so far, elapsed time."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.done, self.best, self.start = 0, float("inf"), time.perf_counter()

    def __call__(self, record: Record) -> None:
        if record.extras.get("duplicate"):   # not an evaluation: the budget does not count it
            return
        self.done += 1
        if record.valid and record.extras.get("fidelity", "full") == "full":
            self.best = min(self.best, record.objective())
        best = f"{self.best:,.1f} us" if self.best < float("inf") else "-"
        width = 30
        fill = int(width * min(self.done, self.total) / max(1, self.total))
        self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} evaluations, "
                          f"best {best}, {time.perf_counter() - self.start:.1f} s ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def run_search(space: SearchSpace, evaluator: Any, strategy: str = DEFAULT_STRATEGY, budget: int = 200,
               options: dict[str, Any] | None = None, seed: int = 0) -> SearchResult:
    """Run a strategy against any evaluator; the best full-fidelity record and every evaluation."""
    module = get_strategy(strategy)
    start = time.perf_counter()
    records = module.run(space, evaluator, budget, options or {}, seed)
    wall = time.perf_counter() - start
    simulated = getattr(evaluator, "simulated", 0)
    coarse = evaluator.coarse() if hasattr(evaluator, "coarse") else None
    simulated += getattr(coarse, "simulated", 0) if coarse is not None else 0
    return SearchResult(best_full(records), tuple(records), strategy, len(records), simulated, wall,
                        dict(options or {}))


def optimize(problem: ConvProblem, spec: GPUSpec, *, strategy: str = DEFAULT_STRATEGY, budget: int = 200,
             options: dict[str, Any] | None = None, seed: int = 0, workers: int | None = None,
             cache_path: str | Path | None = None, space: SearchSpace | None = None,
             progress: bool = False, evaluator: str = "simulator", base: Plan | None = None,
             max_tasks: int = DEFAULT_MAX_TASKS, client: Any = None) -> SearchResult:
    """Search the mapping parameters of one layer with the simulator, or measured on the GPU
    (``evaluator="gpu"``: the validation harness; `spec` is then unused). The space's algorithm is
    searched (default: Winograd's default space); `base` gives the plan's other parameters (for
    example a sparse map's sparsity, or Winograd's tile). `max_tasks`: the largest task count one
    evaluation may lower to (``megasim.plan.build``). `client`: a ``distributed.Client`` to evaluate on
    (a sweep's or calibration's, left open); without one, `workers` > 1 starts a LocalCluster for the
    search and `workers` = 1 simulates in this process."""
    get_strategy(strategy)   # fail fast on a bad name, before the pool starts
    if evaluator not in EVALUATORS:
        raise MegasimError(f"evaluator {evaluator!r} is not allowed (allowed: {', '.join(EVALUATORS)})")
    if space is None:
        space = spaces_of(base.algorithm if base is not None else "winograd")["default"]()
    if base is not None and base.algorithm != space.algorithm:
        raise MegasimError(f"the plan's algorithm {base.algorithm!r} is not the space's {space.algorithm!r}")
    line = ProgressLine(budget) if progress else None
    try:
        if evaluator == "gpu":
            ev = GPUEvaluator(problem, space, cache_path=cache_path, progress=line)
            result = run_search(ev.space, ev, strategy, budget, options, seed)
        else:
            with SimulatorEvaluator(problem, spec, space, workers=workers, cache_path=cache_path,
                                    progress=line, base=base, max_tasks=max_tasks, client=client) as ev:
                result = run_search(ev.space, ev, strategy, budget, options, seed)
    finally:
        if line:
            line.close()
    if result.best is None:
        reasons = sorted({r.reason for r in result.records if r.reason})
        raise MegasimError(f"no valid point found in {result.evaluations} evaluations"
                           + (f" ({'; '.join(reasons[:3])})" if reasons else ""))
    return result
