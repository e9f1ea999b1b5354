"""Measuring the validation mappings on the GPU: the measured half of `megasim validate`.

For each layer, the mappings of ``megasim.calibration.validation.validation_plans`` are built from the same
``megasim.plan.build`` the model uses (so the TaskGraph, and its hash, are the ones predicted), run
through ``PreparedSchedule`` (arrays uploaded once; the non-fused schedule with the per-kind kernels,
every other schedule with the megakernel) and timed with ``time_cuda``: ``warmup`` untimed runs, then
``repeats`` runs between CUDA events, inputs rotated over ``sets`` workspaces, in ``rounds`` rounds over
the layer's mappings (round-robin, so slow drift falls on every mapping alike). The row holds the
median of all runs (``measured_us``), the spread (max - min, ``spread_us``) and each round's median
(``round_us``). A mapping that fails (a kernel error) is a row with ``measured_us`` empty and the error
in ``status``.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

import numpy as np
from numba import cuda

from megasim.provenance import git_sha
from gpu.runtime import executor as ex
from gpu.runtime.prepared import PreparedSchedule
from gpu.runtime.timing import time_cuda
from megasim.plan import build
from megasim.calibration.validation import validation_plans
from megasim.workloads import parse_layer

log = logging.getLogger(__name__)


def device_name() -> str:
    """The current device's name ("CUDA simulator" under Numba's simulator, whose device has none)."""
    name = getattr(cuda.get_current_device(), "name", "CUDA simulator")
    return name.decode() if isinstance(name, bytes) else str(name)


def measure_plans(problem, plans, *, layer: str = "", repeats: int = 10, warmup: int = 2,
                  sets: int = 2, rounds: int = 1) -> list[dict[str, Any]]:
    """Measure (label, Plan) pairs of one problem: a row per plan, in order (see the module docstring).

    With ``rounds`` > 1 the plans are timed round-robin, ``repeats`` runs each per round, so a drift of
    the GPU's clocks over the minutes of a layer falls on every plan alike; ``measured_us`` is the median
    of all ``rounds * repeats`` runs and ``round_us`` the medians of each round (';'-separated), from
    which ``megasim.calibration.validation`` reads how well the measurement itself orders two plans."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds={rounds!r} is not allowed: it must be an integer >= 1")
    device = device_name()
    git_sha = git_sha()
    rng = np.random.default_rng(11)
    xs = [cuda.to_device(rng.standard_normal((problem.n, problem.h, problem.w, problem.c), dtype=np.float32))
          for _ in range(sets)]
    ws_ = [cuda.to_device(rng.standard_normal((problem.k, problem.c, 3, 3), dtype=np.float32)) for _ in range(sets)]
    workspaces: dict = {}
    rows, runs = [], []          # runs[i]: (prepared schedule, workspaces) of rows[i], None once failed
    for label, plan in plans:
        row = {"layer": layer or problem.name, "schedule": plan.schedule, "label": label,
               "params": plan.param_string(), "device": device, "git_sha": git_sha}
        try:
            graph, schedule, plan = build(problem, plan)
            key = plan.params.config
            if key not in workspaces:
                wplan = ex.make_plan(problem, plan.params.config, graph)
                workspaces[key] = (wplan, [ex.workspace(wplan, xs[i], ws_[i]) for i in range(sets)])
            wplan, wss = workspaces[key]
            if wplan.graph.hash != graph.hash:
                wplan = ex.make_plan(problem, plan.params.config, graph)
            kernels = "per_kind" if plan.schedule == "nonfused" else "megakernel"
            runs.append((PreparedSchedule(wplan, schedule, kernels=kernels), wss))
            row["taskgraph_hash"] = graph.hash
        except Exception as exc:  # noqa: BLE001 - a failing mapping is a record, the run goes on
            traceback.print_exc()
            row.update({"measured_us": "", "status": f"error {type(exc).__name__}: {exc}"[:300]})
            runs.append(None)
        rows.append(row)
    samples: list[list[float]] = [[] for _ in rows]
    medians: list[list[float]] = [[] for _ in rows]
    for r in range(rounds):
        for i, run in enumerate(runs):
            if run is None:
                continue
            t0 = time.perf_counter()
            prep, wss = run
            try:
                st = time_cuda(lambda k: prep.run(wss[k]), warmup=warmup, repeats=repeats, rotate=sets)
                prep.check()
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                rows[i].update({"measured_us": "", "status": f"error {type(exc).__name__}: {exc}"[:300]})
                runs[i] = None
                continue
            samples[i] += st.samples
            medians[i].append(st.median_ms * 1e3)
            log.info("%s %-22s round %d %10.1f us (%.1f s)", rows[i]["layer"], rows[i]["label"], r,
                     st.median_ms * 1e3, time.perf_counter() - t0)
    for i, run in enumerate(runs):
        if run is None:
            continue
        us = np.asarray(samples[i]) * 1e3
        rows[i].update({"measured_us": float(np.median(us)), "spread_us": float(us.max() - us.min()),
                        "min_us": float(us.min()), "max_us": float(us.max()), "repeats": int(us.size),
                        "rounds": rounds, "round_us": ";".join(f"{m:.3f}" for m in medians[i]), "status": "ok"})
    del workspaces, xs, ws_, runs
    return rows


def measure_layer(layer: str, n_mappings: int, *, repeats: int = 10, warmup: int = 2, sets: int = 2,
                  seed: int = 0, rounds: int = 1) -> list[dict[str, Any]]:
    problem = parse_layer(layer)
    rows = measure_plans(problem, validation_plans(problem, n_mappings, seed), layer=layer,
                         repeats=repeats, warmup=warmup, sets=sets, rounds=rounds)
    for row in rows:
        print(f"{layer:10s} {row['label']:24s} {row.get('measured_us', '')!s:>12.12s} us  {row['params']}", flush=True)
    return rows


def measure(layers, n_mappings: int, **kw) -> list[dict[str, Any]]:
    rows = []
    for layer in layers:
        rows += measure_layer(layer, n_mappings, **kw)
        cuda.synchronize()
    return rows
