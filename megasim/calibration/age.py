"""The warp schedulers' preference for older blocks: measured from a traced run, fitted as the spec's
``younger_block_weight`` (c9bd757).

Traced on the H200 (``gpu.calibrate.occupancy.measure_block_end_order``), the blocks of a GEMM launch
that start together on an SM end one by one: on every SM the k-th of four ends at 0.92, 0.96, 1.02 and
1.10 of their mean (resnet-4; within 0.3 us across the 132 SMs), on every layer traced. The model's SM
split its busy time equally, so an SM's blocks ended together; the slots of a wave then freed a whole
SM at a time, and a grid's last partial wave stacked up on a few SMs where the GPU spreads it one block
per SM. Grids of 2.2-4.4 waves were predicted 10-15% slow on that account (resnet-4, yolov3-5).

``block_end_order`` is the statistic, computed the same way from a measured trace and from a
simulation: per SM, the blocks dispatched before any of its blocks ended (the first wave), their
ends sorted; the mean over SMs of the k-th end, from the launch's first claim. ``fit_age_weight``
chooses ``younger_block_weight`` so that the simulated order, divided by its mean, matches the
measured one (bounded scalar search, least squares), the kinds' costs held.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from megasim.calibration.reproducible import rounded_scalar
from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec

AGE_WEIGHT_BOUNDS = (0.5, 1.0)


def block_end_order(claim_ns, end_ns, sm) -> tuple[list[float], int]:
    """(mean end of the k-th first-wave block to end on an SM, in us from the first claim, for k = 0..;
    the number of SMs averaged). An SM counts when it ran the modal number of first-wave blocks."""
    claim, end, sm = (np.asarray(a, np.float64) for a in (claim_ns, end_ns, sm))
    keep = np.isfinite(claim) & np.isfinite(end)
    claim, end, sm = claim[keep], end[keep], sm[keep].astype(np.int64)
    if not claim.size:
        raise SpecError("block_end_order: no task with a claim and an end")
    t0 = claim.min()
    firsts = []
    for s in np.unique(sm):
        on = sm == s
        first = on & (claim < end[on].min())
        firsts.append(np.sort(end[first] - t0) / 1e3)
    k = int(np.bincount([len(f) for f in firsts]).argmax())
    rows = np.array([f for f in firsts if len(f) == k])
    return rows.mean(axis=0).tolist(), int(rows.shape[0])


def normalised(order) -> np.ndarray:
    order = np.asarray(order, np.float64)
    return order / order.mean()


def end_order_case(row: Mapping[str, Any], plan_params: str = ""):
    """The (TaskGraph, Schedule) of a measured row: its kind's non-fused launch of its layer, as run
    (``kernel``, ``style``)."""
    from megasim.calibration.cases import kind_cases, variant_case
    params = row.get("plan_params", plan_params)
    sub, sched = kind_cases((row["layer"],), params)[row["kind"]][0][1:]
    return variant_case(sub, sched, row)


def simulated_end_order(spec: GPUSpec, case) -> list[float]:
    from megasim.sim import simulate
    r = simulate(*case, spec)
    return block_end_order(r.claim_ns, r.end_ns, r.sm)[0]


def end_order_checks(spec: GPUSpec, rows: list[dict[str, Any]], plan_params: str = "", cases=None,
                     map_fn: Callable = map) -> list[dict]:
    """Per measured row: its end order over its mean, measured, simulated with ``spec`` and simulated
    with every block alike (``younger_block_weight`` None). ``map_fn``: how the simulations are mapped
    (``map``, or a process pool's)."""
    cases = cases or [end_order_case(r, plan_params) for r in rows]
    equal = dataclasses.replace(spec, younger_block_weight=None)
    sims = list(map_fn(simulated_end_order, [spec] * len(cases) + [equal] * len(cases), list(cases) * 2))
    return [{"layer": r["layer"], "kind": r["kind"], "measured": normalised(r["end_us"]).round(4).tolist(),
             "simulated": normalised(sim).round(4).tolist(),
             "simulated_equal_sharing": normalised(alike).round(4).tolist()}
            for r, sim, alike in zip(rows, sims[:len(cases)], sims[len(cases):])]


def fit_age_weight(spec: GPUSpec, rows: list[dict[str, Any]], plan_params: str = "",
                   on_evaluation: Callable[[int], None] | None = None,
                   map_fn: Callable = map) -> tuple[float, str, list[dict]]:
    """(``younger_block_weight``, how it was fitted, a check row per measured row). Each row gives
    ``layer, kind, kernel, style`` and ``end_us`` (``block_end_order`` of its trace); the loss is the
    sum over rows and ranks of (simulated / its mean - measured / its mean) squared. ``on_evaluation(n)``
    after the n-th value of rho simulated; ``map_fn``: how its rows are simulated (``map``, or a process
    pool's: the same numbers)."""
    from scipy.optimize import minimize_scalar
    if not rows:
        raise SpecError("fit_age_weight: no traced end-order rows to fit")
    cases = [end_order_case(r, plan_params) for r in rows]
    measured = [normalised(r["end_us"]) for r in rows]

    evaluations = [0]

    def loss(rho: float) -> float:
        evaluations[0] += 1
        if on_evaluation is not None:
            on_evaluation(evaluations[0])
        s = dataclasses.replace(spec, younger_block_weight=float(rho))
        total = 0.0
        for order, meas in zip(map_fn(simulated_end_order, [s] * len(cases), cases), measured):
            sim = normalised(order)
            if sim.shape != meas.shape:
                return 1e3      # a different number of blocks per SM: not comparable
            total += float(np.sum((sim - meas) ** 2))
        return rounded_scalar(total)     # megasim.calibration.reproducible: one path on every machine

    res = minimize_scalar(loss, bounds=AGE_WEIGHT_BOUNDS, method="bounded", options={"xatol": 2e-3})
    rho = float(res.x)
    checks = end_order_checks(dataclasses.replace(spec, younger_block_weight=rho), rows, plan_params, cases, map_fn)
    rms = math.sqrt(float(res.fun) / sum(len(m) for m in measured))
    where = ", ".join(f"{r['layer']} {r['kind']} ({r['kernel']} {r['style']})" for r in rows)
    how = (f"the end order of the blocks that start together on an SM, traced ({where}; "
           f"gpu.calibrate.occupancy.measure_block_end_order), simulated with the fitted kinds' costs; "
           f"bounded search in {list(AGE_WEIGHT_BOUNDS)}, rms error {rms:.4f} of the mean end")
    return rho, how, checks
