"""Measuring the validation plans on the GPU: the measured half of `megasim validate --algo NAME`.

For each layer, the plans of ``megasim.calibration.validation.validation_plans`` (the algorithm
plug-in's hook) are built from the same ``megasim.plan.build`` the model uses (so the TaskGraph, and
its hash, are the ones predicted), run through the GPU executor (``gpu.runtime.execute.PreparedRun``:
the algorithm's kernel table, arrays uploaded once; Winograd's non-fused schedule on the per-kind
kernels, its other schedules on the megakernel; the sparse kernels one launch per kind) and timed
with ``time_cuda``: ``warmup`` untimed runs, then ``repeats`` runs between CUDA events, inputs rotated
over ``sets`` workspaces, in ``rounds`` rounds over the layer's plans (round-robin, so slow drift falls
on every plan alike). Inputs come from the table (``KernelTable.inputs``: Winograd's standard normal;
the sparse family's the map the plan's sparsity describes, the one the model counts from); plans
with one ``input_key`` share them, and plans of one graph share workspaces. The row holds the median
of all runs (``measured_us``), the spread (max - min, ``spread_us``) and each round's median
(``round_us``). A plan that fails (a kernel error) is a row with ``measured_us`` empty and the error
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
from gpu.runtime.execute import PreparedRun
from gpu.runtime.table import kernel_table
from gpu.runtime.timing import time_cuda
from megasim.plan import build
from megasim.calibration.validation import validation_plans
from megasim.workloads import parse_layer

log = logging.getLogger(__name__)


def device_name() -> str:
    """The current device's name ("CUDA simulator" under Numba's simulator, whose device has none)."""
    name = getattr(cuda.get_current_device(), "name", "CUDA simulator")
    return name.decode() if isinstance(name, bytes) else str(name)


def _prepare(problem, label: str, plan, algorithm: str, sets: int, inputs: dict, workspaces: dict, row: dict):
    """(PreparedRun, its workspaces) of one plan; fills ``row``'s taskgraph hash."""
    table = kernel_table(algorithm)
    graph, schedule, plan = build(problem, plan)
    ikey = table.input_key(plan)
    if ikey not in inputs:
        inputs[ikey] = [tuple(cuda.to_device(a) for a in table.inputs(problem, plan, i)) for i in range(sets)]
    run = PreparedRun(problem, plan, graph, schedule)
    wkey = (graph.hash, ikey)
    if wkey not in workspaces:
        workspaces[wkey] = [run.workspace(x, w) for x, w in inputs[ikey]]
    row["taskgraph_hash"] = graph.hash
    return run, workspaces[wkey]


def measure_plans(problem, plans, *, layer: str = "", algorithm: str = "winograd", repeats: int = 10,
                  warmup: int = 2, sets: int = 2, rounds: int = 1) -> list[dict[str, Any]]:
    """Measure (label, Plan) pairs of one problem: a row per plan, in order (see the module docstring).

    With ``rounds`` > 1 the plans are timed round-robin, ``repeats`` runs each per round, so a drift of
    the GPU's clocks over the minutes of a layer falls on every plan alike; ``measured_us`` is the median
    of all ``rounds * repeats`` runs and ``round_us`` the medians of each round (';'-separated), from
    which ``megasim.calibration.validation`` reads how well the measurement itself orders two plans."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds={rounds!r} is not allowed: it must be an integer >= 1")
    device = device_name()
    sha = git_sha()
    inputs: dict = {}
    workspaces: dict = {}
    rows, runs = [], []          # runs[i]: (prepared run, workspaces) of rows[i], None once failed
    for label, plan in plans:
        row = {"layer": layer or problem.name, "algorithm": algorithm, "schedule": plan.schedule, "label": label,
               "params": plan.param_string(), "device": device, "git_sha": sha}
        try:
            runs.append(_prepare(problem, label, plan, algorithm, sets, inputs, workspaces, row))
        except Exception as exc:  # noqa: BLE001 - a failing plan is a record, the run goes on
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
    del workspaces, inputs, runs
    return rows


def measure_layer(layer: str, n_mappings: int, *, algorithm: str = "winograd", repeats: int = 10, warmup: int = 2,
                  sets: int = 2, seed: int = 0, rounds: int = 1) -> list[dict[str, Any]]:
    problem = parse_layer(layer)
    rows = measure_plans(problem, validation_plans(problem, n_mappings, seed, algorithm), layer=layer,
                         algorithm=algorithm, repeats=repeats, warmup=warmup, sets=sets, rounds=rounds)
    for row in rows:
        print(f"{layer:10s} {row['label']:24s} {row.get('measured_us', '')!s:>12.12s} us  {row['params']}", flush=True)
    return rows


def measure(layers, n_mappings: int, **kw) -> list[dict[str, Any]]:
    rows = []
    for layer in layers:
        rows += measure_layer(layer, n_mappings, **kw)
        cuda.synchronize()
    return rows
