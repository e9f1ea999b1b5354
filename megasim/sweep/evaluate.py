"""Evaluating a batch of sweep points in one worker: the function a Dask task runs.

A batch is a list of ``SweepPoint``s; the result is one row (a flat dict, ``megasim.sweep.table``'s
columns) per point, in the order given. A point is

- ``params``: one prediction of the plan (schedule + --param string) (``megasim.plan.predict``);
- ``space``: one point of an algorithm's search space, through the optimiser's own evaluation of a
  point (``megasim.search.evaluators.simulate_point``), with the run's --param string as the base plan;
- ``optimize``: one search (``megasim.search.optimize``) in this worker, serially (``workers=1``): the
  sweep's parallelism is across points, so a search never starts a cluster of its own.

A point that cannot run (a ``MegasimError``: an algorithm that does not apply to the layer, parameters
the problem cannot take, work above the task limit) is a row with ``status = "failed"`` and the reason
in one line; so is any other exception (``model error: Type: message``), so a model bug on one point
does not end the sweep. Nothing here imports Dask: a batch runs the same in a worker or in this process.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Sequence

from megasim.errors import MegasimError
from megasim.sweep.points import SweepPoint


def evaluate_batch(points: Sequence[SweepPoint]) -> list[dict[str, Any]]:
    """One row per point, in order (see the module's docstring)."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    return [{**evaluate_point(p), "worker": worker} for p in points]


def evaluate_point(p: SweepPoint) -> dict[str, Any]:
    start, cpu = time.perf_counter(), time.process_time()
    row: dict[str, Any] = {"point_key": p.key, "status": "ok", "reason": ""}
    try:
        row.update(_RUNNERS[p.mode](p))
    except MegasimError as err:
        row.update(status="failed", reason=_one_line(str(err)))
    except Exception as err:  # noqa: BLE001 - one point's model bug must not end the sweep; it is recorded
        row.update(status="failed", reason=_one_line(f"model error: {type(err).__name__}: {err}"))
    row["sim_wall_s"] = round(time.perf_counter() - start, 4)
    row["sim_cpu_s"] = round(time.process_time() - cpu, 4)   # the worker process's CPU time meanwhile
    return row


def _params(p: SweepPoint) -> dict[str, Any]:
    from megasim.plan import Plan, predict
    result, plan = predict(p.problem, p.spec, Plan.parse(p.schedule, p.param or None, algorithm=p.algorithm),
                           max_tasks=p.max_tasks)
    # the whole run, as `megasim simulate` prints it and a search records it: rows compare across algorithms
    return {"predicted_us": float(result.predicted_us), "param": plan.param_string(),
            "taskgraph_hash": result.taskgraph_hash, "tasks": int(result.num_tasks), "evaluations": 1}


def _space(p: SweepPoint) -> dict[str, Any]:
    from megasim.plan import Plan
    from megasim.search.evaluators import simulate_point
    from megasim.search import spaces_of
    space_name = p.schedule.split(":", 1)[1]
    space = spaces_of(p.algorithm)[space_name]()
    base = Plan.parse(None, p.param or None, algorithm=p.algorithm)
    time_us, reason, extras = simulate_point(p.problem, p.spec, space.full(dict(p.point)), algorithm=p.algorithm,
                                             base=base, max_tasks=p.max_tasks)
    if reason is not None:
        raise MegasimError(reason)
    return {"predicted_us": float(time_us), "param": extras.get("param", ""),
            "taskgraph_hash": extras.get("taskgraph_hash", ""), "evaluations": 1}


def _optimize(p: SweepPoint) -> dict[str, Any]:
    import json
    from megasim.plan import Plan
    from megasim.search import optimize, spaces_of
    o = p.optimize
    base = Plan.parse(None, p.param or None, algorithm=p.algorithm)
    result = optimize(p.problem, p.spec, strategy=o.strategy, budget=o.budget, options=dict(o.options), seed=o.seed,
                      workers=1, space=spaces_of(p.algorithm)[o.space](), base=base, max_tasks=p.max_tasks)
    best = result.best
    return {"predicted_us": float(best.time_us), "param": best.extras.get("param", ""),
            "taskgraph_hash": best.extras.get("taskgraph_hash", ""), "evaluations": result.evaluations,
            "best_point": json.dumps(best.params, sort_keys=True)}


_RUNNERS = {"params": _params, "space": _space, "optimize": _optimize}


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]
