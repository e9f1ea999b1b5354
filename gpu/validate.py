"""Measuring the validation mappings on the GPU: the measured half of `megasim validate`.

For each layer, the mappings of ``megasim.validation.validation_plans`` are built from the same
``megasim.plan.build`` the model uses (so the TaskGraph, and its hash, are the ones predicted), run
through ``PreparedSchedule`` (arrays uploaded once; the non-fused schedule with the per-kind kernels,
every other schedule with the megakernel) and timed with ``time_cuda``: ``warmup`` untimed runs, then
``repeats`` runs between CUDA events, inputs rotated over ``sets`` workspaces. The row holds the median
(``measured_us``) and the spread (max - min, ``spread_us``). A mapping that fails (a kernel error) is
a row with ``measured_us`` empty and the error in ``status``.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from typing import Any

import numpy as np
from numba import cuda

from gpu import executor as ex
from gpu.prepared import PreparedSchedule
from gpu.timing import time_cuda
from megasim.plan import build
from megasim.validation import validation_plans
from megasim.workloads import parse_layer

log = logging.getLogger(__name__)


def device_name() -> str:
    dev = cuda.get_current_device()
    return dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)


def measure_plans(problem, plans, *, layer: str = "", repeats: int = 10, warmup: int = 2,
                  sets: int = 2) -> list[dict[str, Any]]:
    """Measure (label, Plan) pairs of one problem: a row per plan, in order (see the module docstring)."""
    device = device_name()
    git_sha = os.environ.get("MEGASIM_GIT_SHA", "")
    rng = np.random.default_rng(11)
    xs = [cuda.to_device(rng.standard_normal((problem.n, problem.h, problem.w, problem.c), dtype=np.float32))
          for _ in range(sets)]
    ws_ = [cuda.to_device(rng.standard_normal((problem.k, problem.c, 3, 3), dtype=np.float32)) for _ in range(sets)]
    workspaces: dict = {}
    rows = []
    for label, plan in plans:
        t0 = time.perf_counter()
        row = {"layer": layer or problem.name, "schedule": plan.schedule, "label": label,
               "params": plan.param_string(), "device": device, "git_sha": git_sha}
        try:
            graph, schedule, plan = build(problem, plan)
            key = plan.config
            if key not in workspaces:
                wplan = ex.make_plan(problem, plan.config, graph)
                workspaces[key] = (wplan, [ex.workspace(wplan, xs[i], ws_[i]) for i in range(sets)])
            wplan, wss = workspaces[key]
            if wplan.graph.hash != graph.hash:
                wplan = ex.make_plan(problem, plan.config, graph)
            kernels = "per_kind" if plan.schedule == "nonfused" else "megakernel"
            prep = PreparedSchedule(wplan, schedule, kernels=kernels)
            st = time_cuda(lambda i: prep.run(wss[i]), warmup=warmup, repeats=repeats, rotate=sets)
            prep.check()
            row.update({"measured_us": st.median_ms * 1e3, "spread_us": (st.max_ms - st.min_ms) * 1e3,
                        "min_us": st.min_ms * 1e3, "max_us": st.max_ms * 1e3, "repeats": st.repeats,
                        "taskgraph_hash": graph.hash, "status": "ok"})
        except Exception as exc:  # noqa: BLE001 - a failing mapping is a record, the run goes on
            traceback.print_exc()
            row.update({"measured_us": "", "status": f"error {type(exc).__name__}: {exc}"[:300]})
        log.info("%s %-22s %10s us (%.1f s)", row["layer"], label, row.get("measured_us"), time.perf_counter() - t0)
        rows.append(row)
    del workspaces, xs, ws_
    return rows


def measure_layer(layer: str, n_mappings: int, *, repeats: int = 10, warmup: int = 2, sets: int = 2,
                  seed: int = 0) -> list[dict[str, Any]]:
    problem = parse_layer(layer)
    rows = measure_plans(problem, validation_plans(problem, n_mappings, seed), layer=layer,
                         repeats=repeats, warmup=warmup, sets=sets)
    for row in rows:
        print(f"{layer:10s} {row['label']:24s} {row.get('measured_us', '')!s:>12.12s} us  {row['params']}", flush=True)
    return rows


def measure(layers, n_mappings: int, **kw) -> list[dict[str, Any]]:
    rows = []
    for layer in layers:
        rows += measure_layer(layer, n_mappings, **kw)
        cuda.synchronize()
    return rows
