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

Across the GPUs of one host (``megasim validate --gpus``): ``measure_on_gpus(client, layers, n)`` runs
``measure_unit`` on the workers of ``megasim.sweep.gpus.gpu_cluster``, one unit per task: a layer, or
with ``per_task`` a contiguous chunk of a layer's plans (``mapping_units``; each worker builds a
layer's plan list once, the same deterministic list, and takes its chunk), so the rows are the same
rows in the same order as ``measure``'s, each tagged with its device (``cuda_device``); a worker keeps the
last layer's plan list and device inputs for its next chunk of that layer. ``warm_up``
compiles the kernels and opens the CUDA context of a worker before a timed sweep. ``timer`` (default
``time_cuda``) is the timing function; ``gpu.runtime.timing.time_host`` runs on Numba's simulator.
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from typing import Any, Callable

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


# The device inputs of the last layer measured with ``reuse_inputs`` (measure_unit): the next unit of the same
# layer (a chunk of its plans, e.g. on a GPU worker of ``measure_on_gpus``) takes them instead of drawing and
# uploading them again (the inputs of a plan depend on the problem, the input key and the set index alone:
# ``KernelTable.inputs``; the kernels only read them). One layer's are held: another layer's replace them.
_SHARED_INPUTS: dict[str, Any] = {"owner": None, "inputs": {}}


def release_inputs() -> None:
    """Drop the device inputs kept for the next unit of a layer (``measure_unit``)."""
    _SHARED_INPUTS["owner"] = None
    _SHARED_INPUTS["inputs"] = {}


def _inputs_of(table, problem, plan, ikey, sets: int, reuse: bool) -> list:
    """The `sets` device input tuples of a plan with input key `ikey`: drawn and uploaded, or with `reuse`
    those kept from an earlier unit of the same (algorithm, problem, sets)."""
    if not reuse:
        return [table.inputs(problem, plan, i) for i in range(sets)]
    owner = (table.algorithm, problem, sets)
    if _SHARED_INPUTS["owner"] != owner:
        release_inputs()               # free the last layer's device memory first
        _SHARED_INPUTS["owner"] = owner
    kept = _SHARED_INPUTS["inputs"]
    if ikey not in kept:
        kept[ikey] = [table.inputs(problem, plan, i) for i in range(sets)]
    return kept[ikey]


def _prepare(problem, label: str, plan, algorithm: str, sets: int, inputs: dict, workspaces: dict, row: dict,
             reuse_inputs: bool = False):
    """(PreparedRun, its workspaces) of one plan; fills ``row``'s taskgraph hash."""
    table = kernel_table(algorithm)
    graph, schedule, plan = build(problem, plan)
    ikey = table.input_key(plan)
    if ikey not in inputs:
        inputs[ikey] = _inputs_of(table, problem, plan, ikey, sets, reuse_inputs)
    run = PreparedRun(problem, plan, graph, schedule)
    wkey = (graph.hash, ikey)
    if wkey not in workspaces:
        workspaces[wkey] = [run.workspace(x, w) for x, w in inputs[ikey]]
    row["taskgraph_hash"] = graph.hash
    return run, workspaces[wkey]


def measure_plans(problem, plans, *, layer: str = "", algorithm: str = "winograd", repeats: int = 10,
                  warmup: int = 2, sets: int = 2, rounds: int = 1,
                  timer: Callable[..., Any] | None = None, reuse_inputs: bool = False) -> list[dict[str, Any]]:
    """Measure (label, Plan) pairs of one problem: a row per plan, in order (see the module docstring).
    ``reuse_inputs``: keep this problem's device inputs for the next call on it (``measure_unit``), and
    take those kept by the last call when it was on the same problem (``release_inputs`` drops them).

    With ``rounds`` > 1 the plans are timed round-robin, ``repeats`` runs each per round, so a drift of
    the GPU's clocks over the minutes of a layer falls on every plan alike; ``measured_us`` is the median
    of all ``rounds * repeats`` runs and ``round_us`` the medians of each round (';'-separated), from
    which ``megasim.calibration.validation`` reads how well the measurement itself orders two plans.
    ``timer``: the timing function (``time_cuda``'s signature; default ``time_cuda``)."""
    timer = timer or time_cuda
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
            runs.append(_prepare(problem, label, plan, algorithm, sets, inputs, workspaces, row, reuse_inputs))
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
                st = timer(lambda k: prep.run(wss[k]), warmup=warmup, repeats=repeats, rotate=sets)
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


@functools.lru_cache(maxsize=32)
def _layer_plans(layer: str, n_mappings: int, seed: int, algorithm: str) -> tuple:
    """A layer's validation plans (deterministic), built once per process for all its chunks."""
    return tuple(validation_plans(parse_layer(layer), n_mappings, seed, algorithm))


def mapping_units(layers, n_mappings: int, per_task: int | None = None) -> list[tuple[str, int, int]]:
    """The units of a sweep: (layer, start, stop) slices of each layer's plan list, ``per_task`` plans
    each (None: a whole layer per unit). A slice past a layer's last plan (it has fewer than
    ``n_mappings``) is empty and measures nothing."""
    if per_task is not None and (isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 1):
        raise ValueError(f"per_task={per_task!r} is not allowed: it must be None or an integer >= 1")
    step = per_task or n_mappings
    return [(layer, start, min(start + step, n_mappings)) for layer in layers for start in range(0, n_mappings, step)]


def measure_unit(unit: tuple[str, int, int], n_mappings: int, *, algorithm: str = "winograd", repeats: int = 10,
                 warmup: int = 2, sets: int = 2, seed: int = 0, rounds: int = 1,
                 timer: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """Measure the plans ``start:stop`` of a layer's ``n_mappings`` validation plans (``mapping_units``). The
    layer's plan list (``_layer_plans``) and device inputs (``measure_plans``'s ``reuse_inputs``) are kept for
    this process's next unit of the same layer."""
    layer, start, stop = unit
    plans = _layer_plans(layer, n_mappings, seed, algorithm)[start:stop]
    if not plans:
        return []
    rows = measure_plans(parse_layer(layer), plans, layer=layer, algorithm=algorithm, repeats=repeats,
                         warmup=warmup, sets=sets, rounds=rounds, timer=timer, reuse_inputs=True)
    for row in rows:
        print(f"{layer:10s} {row['label']:24s} {row.get('measured_us', '')!s:>12.12s} us  {row['params']}", flush=True)
    cuda.synchronize()
    return rows


def measure_layer(layer: str, n_mappings: int, **kw) -> list[dict[str, Any]]:
    """Measure a layer's validation plans in one process (``measure_unit`` of the whole layer)."""
    return measure_unit((layer, 0, n_mappings), n_mappings, **kw)


def measure(layers, n_mappings: int, **kw) -> list[dict[str, Any]]:
    """Measure the layers one after another on this process's device."""
    rows = []
    try:
        for layer in layers:
            rows += measure_layer(layer, n_mappings, **kw)
    finally:
        release_inputs()
    return rows


def _unit_layer(unit: tuple[str, int, int]) -> str:
    return unit[0]


def measure_on_gpus(client, layers, n_mappings: int, *, per_task: int | None = None, timeline: list | None = None,
                    **kw) -> list[dict[str, Any]]:
    """``measure``'s rows, measured on the GPU workers of `client` (``megasim.sweep.gpus.gpu_cluster``), one
    unit (``mapping_units``) per task, each row tagged with its device under ``cuda_device``.

    The units go out largest layer first (by multiply-adds, then by input size, which the host work of a
    unit follows: the longest work starts first and the short ones fill the end), a worker staying on one
    layer's chunks while other layers are left (``map_on_gpus``'s affinity: it builds that layer's plan
    list and draws its inputs once) and joining a layer another worker is on only where that ends the
    layer sooner; the rows come back in the order of ``measure``. ``timeline``: a list that receives one
    dict per unit, in ``mapping_units``'s order (``map_on_gpus``'s, plus ``unit``, its name, and ``rows``, the
    (start, stop) positions of its rows in the rows returned)."""
    from megasim.sweep.gpus import map_on_gpus, tag_rows
    units = mapping_units(layers, n_mappings, per_task)

    def size(layer: str) -> tuple[int, int]:
        p = parse_layer(layer)
        return -p.n * p.h * p.w * p.c * p.k * p.r * p.s, -p.n * p.h * p.w * p.c

    sizes = {layer: size(layer) for layer in dict.fromkeys(layers)}
    order = sorted(range(len(units)), key=lambda i: sizes[units[i][0]])      # stable: chunks keep their order
    times: list = []
    results = map_on_gpus(client, measure_unit, [units[i] for i in order], n_mappings, affinity=_unit_layer,
                          timeline=times, **kw)
    back: list[Any] = [None] * len(units)
    spans: list[Any] = [None] * len(units)
    for i, result, span in zip(order, results, times):
        back[i] = result
        spans[i] = {**span, "item": i, "unit": f"{units[i][0]}[{units[i][1]}:{units[i][2]}]"}
    if timeline is not None:
        offset = 0
        for span, (_, rows) in zip(spans, back):
            span["rows"] = (offset, offset + len(rows))      # its rows' positions in the rows returned
            offset += len(rows)
        timeline.extend(spans)
    return tag_rows(back)


def device_count() -> int:
    """How many CUDA devices this process sees."""
    return len(cuda.gpus)


def device_info() -> dict[str, Any]:
    """This process's device: name, compute capability, PCI bus id, UUID and the driver's CUDA version
    (a worker's, to record which GPU measured what)."""
    dev = cuda.get_current_device()
    info: dict[str, Any] = {"name": device_name()}
    for key, get in (("compute_capability", lambda: ".".join(map(str, dev.compute_capability))),
                     ("pci_bus_id", lambda: f"{dev.PCI_DOMAIN_ID:04x}:{dev.PCI_BUS_ID:02x}:{dev.PCI_DEVICE_ID:02x}"),
                     ("uuid", lambda: str(dev.uuid)),
                     ("driver_cuda_api", lambda: ".".join(map(str, cuda.cudadrv.driver.driver.get_version())))):
        try:
            info[key] = get()
        except Exception as exc:  # noqa: BLE001 - metadata only (the simulator has none of these)
            info[key] = f"unknown ({type(exc).__name__})"
    return info


def warm_up(layer: str, n_mappings: int, *, algorithm: str = "winograd", seed: int = 0,
            timer: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Measure a layer's plans once each (one run, one round), so that this process's kernels are compiled
    and its CUDA context is open before a timed sweep; returns ``device_info`` and the seconds it took."""
    start = time.perf_counter()
    plans = validation_plans(parse_layer(layer), n_mappings, seed, algorithm)
    rows = measure_plans(parse_layer(layer), plans, layer=layer, algorithm=algorithm, repeats=1, warmup=1, sets=1,
                         rounds=1, timer=timer)
    cuda.synchronize()
    failed = [r["label"] for r in rows if r.get("status") != "ok"]
    return {**device_info(), "warm_up_s": round(time.perf_counter() - start, 3), "warm_up_plans": len(rows),
            "warm_up_failed": failed}
