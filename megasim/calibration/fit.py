"""The per-kind cost fit: one kind's TaskCost fields chosen so that its simulated runs match its measured ones.

``fit_kind`` minimises the squared log error of a kind's simulated times (its cases,
``megasim.calibration.cases``) against the measured medians:

- the first round, (``compute_efficiency``, ``fixed_ns``) on each kind's non-fused kernel alone:
  Nelder-Mead on log(efficiency) and fixed_ns, a bounded, deterministic search. Two layers and two
  unknowns per kind: the flop-heavy kind (the GEMM) is pinned by its efficiency, the memory-bound
  transforms by their fixed time;
- the second round, on each kind's tasks alone at several occupancies (``gpu.calibrate.occupancy``):
  the fields of ``FREE_ROUND2`` that ``megasim.calibration.winograd.kind_fits`` frees (efficiency,
  fixed time, ``block_sm_ready``, ``block_dram_bw_gbps``, ``megakernel_fixed_ns``,
  ``coresident_stretch``; ``memory_overlap`` for the kinds of ``PIPELINED_KINDS``, and in a second
  stage ``further_block_sm_ready`` for those of ``FURTHER_READY_KINDS``), by SciPy's bounded least
  squares (``least_squares_cost``; its batched search in ``megasim.calibration.lsq``), each field
  within ``BOUNDS``, started from ``START`` or a spec's own values, searched in log space except those
  in ``LINEAR``, each held weakly to its start (``PRIOR_WEIGHT``) so that a field the runs leave loose
  stays there, on every machine.

``least_squares_cost`` is shared by the Winograd and the sparse calibrations
(``megasim.calibration.sparse``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np

from megasim.calibration.pool import simulated_kind_us
from megasim.calibration.reproducible import rounded_scalar, sum_of_squares
from megasim.hardware.spec import GPUSpec, TaskCost

# The first round's bounds (efficiency, fixed time) and the SM-sharing fields' bounds.
EFF_BOUNDS = (0.005, 1.0)
FIXED_BOUNDS_NS = (0.0, 200_000.0)
SHARE_BOUNDS = (0.02, 1.0)

# Free parameters of a kind's TaskCost in the second round, their bounds and starting points; fitted
# in log space except those in LINEAR (in us).
# How a block shares its SM: ``block_sm_ready`` (independent stalls, throughput saturating smoothly
# with the blocks resident; megasim.sim.servers.ReadinessSharedServer). Not
# ``block_sm_share`` (a hard cap, min(share, 1/n)), which the first specs fitted: it saturates at 1/share
# blocks, so a block of another kind in a saturated SM's free slot costs the others nothing, and the
# mixed-kind runs show otherwise (b7e0e92).
# ``coresident_stretch``: how a block's memory phase slows with the other blocks on its SM;
# its single-kind runs at 1, 2 and 3 blocks per SM pin it, and how kinds slow each other follows from it.
FREE_ROUND2 = ("compute_efficiency", "fixed_ns", "block_sm_ready", "block_dram_bw_gbps", "megakernel_fixed_ns",
               "coresident_stretch")
# ``memory_overlap``: the kinds whose kernel pipelines its loads (the GEMM's cp.async double
# buffer loads the next k-step while it computes this one) also fit how much of their memory phase runs
# beside their compute phase; the transforms load, then compute.
PIPELINED_KINDS = ("gemm",)
# ``further_block_sm_ready``: the readiness of a kind's blocks after the first on an SM, so
# that the gains of a second and of a third block are fitted apart (one parameter ties them together:
# the GEMM's kernel gains 1.32x and 1.52x at 2 and 3 blocks per SM, the one-parameter curve through
# 1.32x gives 1.42x). Fitted for the GEMMs in a second stage, started from the first stage's fit with
# the curve unchanged (further = first), so it can only lower the fit's error: freed from the start for
# every kind, the least squares stopped in worse minima (gemm@t32 rms 0.027 -> 0.063, itrans 0.069 ->
# 0.074) and the transforms gained nothing (ftrans 0.097, otrans 0.153 either way).
FURTHER_READY_KINDS = ("gemm",)
# ``sm_fixed_ns``: the GEMMs also fit the SM time each task spends beside its flops (prologue and epilogue: the
# accumulator tile zeroed and stored), which co-resident blocks do not hide and which does not scale with the
# channels. Without it the GEMM's own kernel alone drifts from -8% at C = 8 to +6% at C = 512 against its fitted
# cost (the calibration layers' C = 16, 64 and 512 rows fit at rms 0.040); with it the same rows fit at 0.018 and
# shapes of C = 8-512 that no calibration layer has are within -2.4..+2.1% (docs/findings.md, "The GEMM's epilogue").
EPILOGUE_KINDS = ("gemm",)
# Fields fitted in a second stage, each started at the first stage's value of the field named beside it.
STAGE2 = {"further_block_sm_ready": "block_sm_ready"}
BOUNDS = {"compute_efficiency": EFF_BOUNDS, "fixed_ns": FIXED_BOUNDS_NS, "block_sm_share": SHARE_BOUNDS,
          "block_sm_ready": SHARE_BOUNDS, "block_dram_bw_gbps": (0.5, 1000.0), "megakernel_fixed_ns": (0.0, 100_000.0),
          "coresident_stretch": (0.0, 0.95), "memory_overlap": (0.0, 1.0), "further_block_sm_ready": SHARE_BOUNDS,
          "sm_fixed_ns": (1.0, 100_000.0)}
START = {"compute_efficiency": 0.5, "fixed_ns": 500.0, "block_sm_share": 0.5, "block_sm_ready": 0.5,
         "block_dram_bw_gbps": None, "megakernel_fixed_ns": 1000.0, "coresident_stretch": 0.3,
         "memory_overlap": 0.5, "further_block_sm_ready": 0.5, "sm_fixed_ns": 300.0}
LINEAR = ("fixed_ns", "megakernel_fixed_ns")
# A second start of a fit from scratch, at the other end of the direction its single-kind runs leave loose
# (docs/calibration.md, Known limits): a block that keeps its SM busy and whose loads hardly slow beside
# others, against START's half-ready block slowed by a third. The fit with the least error is kept.
ALT_STARTS = ({"block_sm_ready": 0.95, "coresident_stretch": 0.05},)
# The least squares' stopping rule (SciPy's xtol, ftol and gtol) and each stage's budget of points
# simulated, Jacobian points included (``megasim.calibration.lsq``).
FIT_TOL = 1e-8
ROUND2_MAX_EVALS = 150
ROUND1_MAX_EVALS = 60
# Every JACOBIAN_REFRESH-th Jacobian by finite differences, Broyden updates between; a stage stops when its
# best squared error has fallen by less than STALL_RTOL over the points of STALL_JACOBIANS Jacobians
# (fields + 1 points: its rms log error by less than 1%, while the runs' medians repeat to about 1%).
JACOBIAN_REFRESH = 3
STALL_JACOBIANS = 1
STALL_RTOL = 0.02
# The least squares' prior: every field is also held to its start by a residual PRIOR_WEIGHT * (x - x0) in the
# search's coordinates (log, or us for LINEAR fields). It makes the search well posed where a kind's runs leave a
# direction loose (a zero column in the Jacobian, whose step SciPy takes from the BLAS's rounding: another machine,
# another spec; megasim.calibration.lsq), and it keeps such a field near its start instead of wherever the runs'
# noise carries it. An e-fold (or 1 us) from the start costs 0.01 of squared error, against 0.02-0.15 for a kind's
# own runs (18-24 runs at rms 0.03-0.08), so a field its runs pin moves little and a loose one stays. 0.1 was chosen, before any
# validation, as the weight at which three measurement sets of one H200 give specs that agree: the fused
# schedule's predicted time on the calibration layers spreads 3.9% across them at 0.1, 10.5% at 0.03 and 15.7%
# at 0.01, the cost names' mean rms log error rising 0.053 -> 0.058 (docs/findings.md).
PRIOR_WEIGHT = 0.1
# An update (megasim.calibration.update) refits fields a kernel change moved, from the spec's own values: there the
# runs must move them (at 0.1 a field its runs pin weakly, such as megakernel_fixed_ns, stayed 60% of the way back
# to its old value), and the prior only keeps the search well posed.
UPDATE_PRIOR_WEIGHT = 0.01


def rms_log_error(simulated_us, measured_us) -> float:
    """The rms over runs of log(simulated / measured): how a fit's error is stated."""
    return float(np.sqrt(np.mean(np.log(np.asarray(simulated_us, float) / np.asarray(measured_us, float)) ** 2)))


def starts_for(free, alt_starts) -> list[Mapping[str, float]]:
    """The starts of `alt_starts` that name only fields in `free` (the others are skipped)."""
    return [alt for alt in alt_starts if set(alt) <= set(free)]


def least_squares_cost(start: TaskCost, free, bounds, starts, linear, residuals_of, max_evals: int, *,
                       diff_step: float, tol: float | None = None,
                       residuals_many: Callable[[list[TaskCost]], list[np.ndarray]] | None = None,
                       on_evaluation: Callable[[int, float], None] | None = None, refresh: int = 1,
                       stall_rtol: float | None = None, prior_weight: float = PRIOR_WEIGHT) -> TaskCost:
    """``start`` with its ``free`` fields chosen by SciPy's bounded least squares on
    ``residuals_of(cost)`` (e.g. log simulated / measured times). Fields in ``linear`` are searched
    linearly in thousands (us for ns fields), the others in log space; each is clipped to its
    ``bounds`` and started at ``starts``. Shared by the Winograd and the sparse calibrations.

    With ``residuals_many`` (the residuals of several costs at once), the search is
    ``megasim.calibration.lsq.least_squares_batched``: each Jacobian's points in one batch, ``max_evals``
    counting every point simulated, ``on_evaluation(points, best half sum of squares)`` after each batch;
    ``tol`` is then SciPy's xtol, ftol and gtol, ``refresh`` the finite-difference Jacobians' period
    (Broyden updates between), ``stall_rtol`` the stall rule's over ``STALL_JACOBIANS`` Jacobians and
    ``prior_weight`` the weight holding each field to its start. Without ``residuals_many`` (the sparse and
    im2win fits, through ``fit_log_times``) it is SciPy's own search, with no prior and no rounding."""
    from scipy.optimize import least_squares

    def to_x(name, v):
        return v / 1000.0 if name in linear else math.log(v)

    def cost_of(x) -> TaskCost:
        kw = {}
        for name, v in zip(free, x):
            lo, hi = bounds[name]
            value = np.clip(v * 1000.0 if name in linear else math.exp(v), lo, hi)
            # the batched search's values are rounded as its points are (megasim.calibration.reproducible)
            kw[name] = rounded_scalar(value) if residuals_many is not None else float(value)
        return dataclasses.replace(start, **kw)

    x0 = [to_x(n, starts[n]) for n in free]
    lo = [to_x(n, bounds[n][0]) if bounds[n][0] > 0 or n in linear else -50.0 for n in free]
    hi = [to_x(n, bounds[n][1]) for n in free]
    if residuals_many is not None:
        from megasim.calibration.lsq import least_squares_batched
        tol = 1e-8 if tol is None else tol
        res = least_squares_batched(lambda xs: residuals_many([cost_of(x) for x in xs]), x0, lo, hi,
                                    max_evals=max_evals, diff_step=diff_step, xtol=tol, ftol=tol, gtol=tol,
                                    refresh=refresh, on_evaluation=on_evaluation,
                                    stall_points=None if stall_rtol is None else STALL_JACOBIANS * (len(free) + 1),
                                    stall_rtol=stall_rtol or 0.0, prior_weight=prior_weight)
        return cost_of(res.x)
    tols = {} if tol is None else {"xtol": tol, "ftol": tol, "gtol": tol}
    res = least_squares(lambda x: residuals_of(cost_of(x)), x0, bounds=(lo, hi), max_nfev=max_evals,
                        diff_step=diff_step, **tols)
    return cost_of(res.x)


def fit_log_times(start: TaskCost, free, bounds, starts, linear, simulate_us: Callable[[TaskCost], np.ndarray],
                  measured_us, max_evals: int) -> dict[str, Any]:
    """``least_squares_cost`` on log(simulated / measured) times: the fitted cost, its simulated and the
    measured times, the rms log error and the evaluations. ``simulate_us(cost)``: the simulated times of
    the runs, in the order of ``measured_us``. Shared by the sparse and im2win calibrations."""
    meas = np.asarray(measured_us, float)
    evals = [0]

    def residuals(cost: TaskCost) -> np.ndarray:
        evals[0] += 1
        return np.log(simulate_us(cost) / meas)

    best = least_squares_cost(start, free, bounds, starts, linear, residuals, max_evals, diff_step=1e-3)
    sim = np.asarray(simulate_us(best), float)
    return {"cost": best, "simulated_us": sim.tolist(), "measured_us": meas.tolist(),
            "rms_log_error": rms_log_error(sim, meas), "evaluations": evals[0]}


def fit_kind(spec: GPUSpec, kind: str, cases, measured_us: list[float], max_evals: int = 60,
             free: tuple[str, ...] = ("compute_efficiency", "fixed_ns"),
             simulate_cost: Callable[[TaskCost], list[float]] | None = None,
             start_values: Mapping[str, float] | None = None,
             simulate_costs: Callable[[list[TaskCost]], list[list[float]]] | None = None,
             on_evaluation: Callable[[int, float], None] | None = None,
             tol: float | None = None, alt_starts: tuple[Mapping[str, float], ...] = (),
             prior_weight: float = PRIOR_WEIGHT) -> dict[str, Any]:
    """Fit the ``free`` TaskCost fields of one kind so that the simulated times of ``cases`` match
    ``measured_us`` (least squares in log time); returns the cost, the fit's error and its evaluations.

    (compute_efficiency, fixed_ns), the first round: Nelder-Mead on log(efficiency) and fixed_ns,
    bounded by clipping. More free fields (the second round): scipy's bounded least_squares (trust
    region) in log space (fixed times in us, linearly), started from ``START`` or, for the fields it
    names, from ``start_values`` (``megasim.calibration.update``: a spec's own values); each of its
    stages simulates at most ``max_evals`` points, Jacobian points included, and stops at ``tol``
    (``FIT_TOL``; ``megasim.calibration.lsq``). Each of ``alt_starts`` (fields and values replacing those
    starts; one naming a field not free is skipped) runs the first stage again from there, and the fit
    with the least squared error goes on (``ALT_STARTS``). ``prior_weight``: how firmly each field is held to
    its start (``PRIOR_WEIGHT``; an update's ``UPDATE_PRIOR_WEIGHT``).

    ``simulate_costs(costs)`` gives the cases' simulated times for several costs at once (``kind_fits``
    passes a ``CasePool``'s: the points of a Jacobian simulated side by side); ``simulate_cost(cost)``
    one cost's; default: ``simulated_kind_us`` here. ``on_evaluation(points simulated, rms log error
    of the best point)`` reports progress."""
    meas = np.asarray(measured_us, float)
    start = spec.task_cost(kind)
    evals = [0]
    if simulate_costs is None:
        if simulate_cost is None:
            def simulate_cost(cost: TaskCost) -> list[float]:
                return simulated_kind_us(spec, kind, cost, cases)

        def simulate_costs(costs: list[TaskCost]) -> list[list[float]]:
            return [simulate_cost(c) for c in costs]

    def sims_of(costs: list[TaskCost]) -> list[np.ndarray]:
        evals[0] += len(costs)
        return [np.asarray(v, float) for v in simulate_costs(list(costs))]

    def report(n: int, half_sse: float) -> None:
        if on_evaluation is not None:
            on_evaluation(evals[0], math.sqrt(2.0 * half_sse / meas.size))

    if tuple(free) == ("compute_efficiency", "fixed_ns"):
        from scipy.optimize import minimize

        def cost_of(x) -> TaskCost:
            eff = rounded_scalar(np.clip(math.exp(x[0]), *EFF_BOUNDS))
            fixed = rounded_scalar(np.clip(x[1] * 1000.0, *FIXED_BOUNDS_NS))
            return dataclasses.replace(start, compute_efficiency=eff, fixed_ns=fixed)

        memo: dict[tuple, float] = {}

        def loss(x) -> float:
            key = tuple(np.round(x, 6))
            if key not in memo:
                memo[key] = sum_of_squares(np.log(sims_of([cost_of(x)])[0] / meas))
                report(len(memo), 0.5 * min(memo.values()))
            return memo[key]

        x0 = np.array([math.log(start.compute_efficiency), start.fixed_ns / 1000.0 + 0.5])
        res = minimize(loss, x0, method="Nelder-Mead",
                       options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6, "initial_simplex":
                                np.array([x0, x0 + [-1.0, 0.0], x0 + [0.0, 2.0]])})
        best = cost_of(res.x)
        evaluations = len(memo)
    else:
        # (a dict merge, not dict(**): start_values may name block_dram_bw_gbps too)
        starts = {**START, "block_dram_bw_gbps": spec.tb_max_dram_bw_gbps, **(start_values or {})}

        def residuals_many(costs: list[TaskCost]) -> list[np.ndarray]:
            return [np.log(s / meas) for s in sims_of(costs)]

        # Finite differences of a discrete-event simulation: a step of 2% (of the log or linear
        # parameter) sees through the small jumps that event reorderings cause.
        first = tuple(f for f in free if f not in STAGE2)
        tol = FIT_TOL if tol is None else tol
        search = {"diff_step": 2e-2, "tol": tol, "residuals_many": residuals_many, "on_evaluation": report,
                  "refresh": JACOBIAN_REFRESH, "stall_rtol": STALL_RTOL, "prior_weight": prior_weight}
        fits = [least_squares_cost(start, first, BOUNDS, {**starts, **alt}, LINEAR, None, max_evals, **search)
                for alt in ({}, *starts_for(first, alt_starts))]
        if len(fits) == 1:
            best = fits[0]
        else:
            errors = [sum_of_squares(r) for r in residuals_many(fits)]
            best = fits[errors.index(min(errors))]
        if first != tuple(free):          # the second stage: all free, from the first stage's fit
            starts = {f: getattr(best, STAGE2.get(f, f)) for f in free}
            best = least_squares_cost(best, free, BOUNDS, starts, LINEAR, None, max_evals, **search)
        evaluations = evals[0]
    sim = list(simulate_costs([best])[0])
    return {"cost": best, "simulated_us": sim, "measured_us": list(map(float, meas)),
            "rms_log_error": rms_log_error(sim, meas),
            "evaluations": evaluations}
