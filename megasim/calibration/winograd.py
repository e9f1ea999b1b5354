"""Turning microbenchmark measurements into a GPU spec: the pure half of `megasim calibrate`.

``gpu.calibrate.measure`` measures on the GPU and hands this module a ``Measurements`` record
(``megasim.calibration.measurements``): the values it measured directly (bandwidths, FP32 rate,
latencies, launch costs), each with the method that gave it, and the time of each task kind's NON-FUSED
kernel run alone on a few calibration layers. ``calibrated_spec`` starts from the preset of the detected
GPU, replaces the measured fields (``measured_base``, after the physical floors of ``sanity_rules``;
source ``measured <date> on <device> by megasim calibrate (<method>)``) and fits each kind's TaskCost:

- the kind's launch of the non-fused schedule is cut out of the layer's TaskGraph as a graph of its
  own and simulated alone with the already-measured spec (``megasim.calibration.cases``);
- its costs are chosen to minimise the squared log error of those simulated times against the
  measured ones over the calibration layers (``megasim.calibration.fit``): ``compute_efficiency`` and
  ``fixed_ns`` in the first round.

Round 2 (``gpu.calibrate.occupancy``): each kind's tasks alone at several occupancies (its kernel with
forced shared memory, the megakernel running only that kind, per task and persistent), timed with the
host's launch cost hidden; ``calibrated_spec`` then fits the second round's costs per kind on those runs
(``kind_fits``: efficiency, fixed time, ``block_sm_ready``, ``block_dram_bw_gbps``,
``megakernel_fixed_ns``, ...), simulating each run as it was measured. The runs of a kind's own kernel at
forced lower occupancy are checks, not fitted, for the transforms (``forced_occupancy``). Last, each cost name
is fitted again on its own kernel's runs alone, its cost in the non-fused pipeline's launches (``kernel_fits``,
``GPUSpec.kernel_task_costs``): its own kernel is another build than its function in the megakernel.

Each kind's ``megakernel_claim_ns`` (a megakernel block's claim of a task: ticket, table row,
counter look, acquire fence) is not fitted: it is the mean claim -> ready time of the kind's traced
persistent run of 1 block per SM (``with_measured_claim``), so the fitted ``megakernel_fixed_ns`` is what
the megakernel adds once the task is ready (the whole overhead after ready would also delay tasks whose
claim overlaps a wait on their parents). The spec's ``younger_block_weight`` (``megasim.calibration.age``)
is fitted around the kinds' fits.

How kinds share an SM follows from each kind's own costs, and for the transforms also from the mixed-kind runs
(two kinds' non-fused tasks interleaved in one megakernel launch) they take part in: their single-kind runs leave a
block's DRAM rate against its share of the SM loose, so each transform is fitted after the other kinds, beside the
GEMM, on its own runs and those mixed runs (``beside_fits``, the GEMM held). Every mixed-kind run is reported as a
check, and they fit the spec-wide ``mixed_kinds_sm_factor`` only when asked (``fit_mixed=True``, ``megasim
calibrate --fit-mixed-factor``): no one factor fits them across layers, and the factor they gave slowed fused
mappings of held-out layers by about 7% (docs/findings.md, "Calibration and validation").

Never fitted to fused runs (DESIGN.md: "The model predicts, it does not fit the test"): the only
megakernel runs used hold one kind's tasks (the mixed-kind runs two kinds' non-fused tasks, no dependencies).
Everything here is CPU-only; ``megasim calibrate --from-measurements`` re-runs the fit from a saved
measurements file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from megasim.calibration.age import end_order_checks, fit_age_weight
from megasim.calibration.cases import (mixed_case, mixed_checks, mixed_fit_case, natural_cases, natural_rows, row_label,
                                      variant_case)
from megasim.calibration.fit import (ALT_STARTS, EPILOGUE_KINDS, FREE_ROUND2, FURTHER_READY_KINDS, LINEAR,
                                     PIPELINED_KINDS, PRIOR_WEIGHT, ROUND1_MAX_EVALS, ROUND2_MAX_EVALS, STAGE2,
                                     UPDATE_PRIOR_WEIGHT, fit_kind, rms_log_error, starts_for)
from megasim.calibration.measurements import Measurements, source
from megasim.calibration.pool import CasePool
from megasim.calibration.reproducible import sum_of_squares
from megasim.errors import SpecError
from megasim.hardware.spec import (
    OPTIONAL_FIELDS,
    GPUSpec,
    TaskCost,
    base_kind,
    spec_field_names,
)


@dataclass(frozen=True)
class CalibrationProgress:
    """What a calibration is doing, for a progress display: its ``stage`` (``STAGES``), what in it (the
    cost name being fitted, the probe being measured; ``""`` for a stage that fits one spec field), the
    points it has simulated so far and its budget, and the rms log error of its best point (None before
    the first)."""

    stage: str
    kind: str = ""
    evaluations: int = 0
    max_evaluations: int = 0
    rms_log_error: float | None = None
    done: bool = False


STAGES = ("measuring", "first pass", "younger_block_weight", "kinds", "beside the GEMM", "own kernels",
          "mixed_kinds_sm_factor", "checks")


# The kinds whose own kernel at forced lower occupancy is fitted all the same: the GEMMs. Their own kernel
# and the megakernel's GEMM agree at equal occupancy once the megakernel's per-task costs are counted (one
# TaskCost fits both, rms 0.013-0.019), and their eight parameters need those rows: without them, 8 runs
# for 8 parameters, the t = 32 GEMM fitted a curve that left the fused t = 32 runs 7.5% fast (150ee9f).
FORCED_FITTED_KINDS = ("gemm",)


def forced_occupancy(row: Mapping[str, Any]) -> bool:
    """A run of a kind's non-fused kernel held below its natural occupancy by dynamic shared memory.

    For the transforms (not ``FORCED_FITTED_KINDS``) these runs are simulated and reported
    as checks, not fitted. The non-fused schedule
    only ever runs a kind's kernel at its natural occupancy; the occupancy curve the predictions of
    fused schedules use is the megakernel's, and the megakernel runs (per task, persistent grids of 1
    and 2 blocks per SM) pin it. The two kernels' curves differ: at 1 block per SM the output
    transform takes 208 us in its own kernel and 135 us in the megakernel (resnet-1, pairs=4), a
    per-byte difference one TaskCost cannot express, and fitting both left the megakernel's output
    transform 10-35% slow (rms 0.153; 0.052 without them). Shared memory that leaves the occupancy
    unchanged slows the kernel by at most 5% (gpu.probes.l1_carveout), so the forced runs do
    measure occupancy, of a kernel the fused predictions do not run."""
    return row.get("kernel") == "per_kind" and int(row.get("extra_shared_bytes") or 0) > 0

def sanity_rules(values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Physical floors applied to probe results before they enter a spec (each rule says why).

    An atomic executes at L2, so its round trip cannot be shorter than an L2 load's: an
    ``atomic_latency_ns`` below ``l2_latency_ns`` is a probe artefact (on the H200 the dependent-atomic
    chain gave 9.7 ns, the L2 pointer chase 153 ns); the L2 latency is used instead, and said so.
    Every measured-values path goes through here, so the entries' form is checked here too: each is
    ``{"value": number, "method": text}`` (a measurements file edited by hand gets a one-line error)."""
    for k, entry in values.items():
        if not isinstance(entry, dict) or "value" not in entry:
            raise SpecError(f"measurements: {k}={entry!r} is not allowed: each value is {{\"value\": number, \"method\": text}}")
        if isinstance(entry["value"], bool) or not isinstance(entry["value"], (int, float)):
            raise SpecError(f"measurements: {k}={entry['value']!r} is not allowed: it must be a number")
    values = {k: dict(v) for k, v in values.items()}
    a, l2 = values.get("atomic_latency_ns"), values.get("l2_latency_ns")
    if a and l2 and a["value"] < l2["value"]:
        values["atomic_latency_ns"] = {
            "value": l2["value"],
            "method": (f"the dependent-atomic probe gave {a['value']:.1f} ns, below the L2 load latency, so it is "
                       f"rejected as an artefact; the L2 pointer-chase latency is used (atomics resolve at L2)")}
    return values


RESET_METHOD = ("the queued probe's megakernel run less its plain one (gpu.calibrate.occupancy.probe_queued_launch): "
                "what PreparedSchedule.run does for a megakernel launch of an empty map (the counter and control "
                "reset kernel, then the megakernel) queued behind a spin kernel, {mega:.0f} ns, less an empty "
                "4-argument kernel queued the same way, {plain:.0f} ns")


def reset_entry(values: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """``megakernel_reset_ns`` as a measured value ({"value", "method"}) from the queued-launch probe of
    ``gpu.calibrate.occupancy`` (round 2): ``extra["occupancy_round"]["queued_megakernel_launch_ns"]`` (the
    reset kernel and an empty megakernel, queued) less ``values["queued_launch_ns"]`` (an empty plain
    kernel, queued), floored at 0; None when the measurements lack either (a first round alone)."""
    plain = values.get("queued_launch_ns")
    mega = (extra.get("occupancy_round") or {}).get("queued_megakernel_launch_ns")
    if plain is None or mega is None:
        return None
    return {"value": max(0.0, float(mega) - float(plain["value"])),
            "method": RESET_METHOD.format(mega=float(mega), plain=float(plain["value"]))}


def measured_base(preset: GPUSpec, m: Measurements) -> GPUSpec:
    """The preset with the directly measured fields replaced (sources say how they were measured).
    ``megakernel_reset_ns``, when the measurements do not give it as a value, is derived from the
    queued-launch probe's two runs (``reset_entry``; measurements taken before it was a value).
    ``block_l2_bw_ratio`` is the measured bandwidths' own (``l2_bw_gbps / dram_bw_gbps``) unless the
    measurements give it: the rule every calibration's per-block rates were fitted under."""
    names = set(spec_field_names()) | set(OPTIONAL_FIELDS)
    kwargs, sources = {}, dict(preset.sources)
    values = dict(m.values)
    if "megakernel_reset_ns" not in values:
        entry = reset_entry(values, m.extra)
        if entry is not None:
            values["megakernel_reset_ns"] = entry
    for name, entry in sanity_rules(values).items():
        if name not in names:
            raise SpecError(f"measurements: {name!r} is not a GPU spec field")
        value = entry["value"]
        field_type = next(f.type for f in dataclasses.fields(GPUSpec) if f.name == name)
        kwargs[name] = int(round(value)) if field_type == "int" else float(value)
        sources[name] = source(m, entry["method"])
    if "block_l2_bw_ratio" not in kwargs:
        # The per-block rates are fitted under the ratio the measured bandwidths imply (GPUSpec).
        kwargs["block_l2_bw_ratio"] = None
        sources.pop("block_l2_bw_ratio", None)
    return dataclasses.replace(preset, sources=sources, **kwargs)


def with_measured_claim(spec: GPUSpec, kind: str, rows: list[dict[str, Any]]) -> tuple[GPUSpec, dict[str, Any] | None]:
    """``spec`` with ``kind``'s ``megakernel_claim_ns`` set to the mean claim -> ready time of its
    traced megakernel rows (``trace_claim_ns``, gpu.calibrate.occupancy.traced_parts), and how it was
    measured; ``spec`` unchanged and None when no row was traced (measurements taken before 6ffb6b1)."""
    traced = [r for r in rows if r.get("trace_claim_ns") is not None]
    if not traced:
        return spec, None
    value = float(np.mean([r["trace_claim_ns"] for r in traced]))
    where = ", ".join(f"{r['layer']}{' [' + r['plan_params'] + ']' if r.get('plan_params') else ''}" for r in traced)
    method = (f"mean over the tasks of {kind}'s traced megakernel runs alone as a persistent grid of 1 block per "
              f"SM ({where}; counters at zero) of ready - claim: ticket, task-table row, counter look and acquire "
              f"fence (globaltimer, gpu.calibrate.occupancy.traced_parts)")
    cost = dataclasses.replace(spec.task_cost(kind), megakernel_claim_ns=value)
    return dataclasses.replace(spec, task_costs={**spec.task_costs, kind: cost}), {"value": value, "method": method}


def _fit_job(job: dict[str, Any], pool: CasePool, stage: str,
             progress: Callable[[CalibrationProgress], None] | None) -> dict[str, Any]:
    """One kind's fit and its check simulations (a thread's unit of work; the simulations run on ``pool``,
    under the keys ``kind`` and ``kind + " checks"``)."""
    spec, kind = job["spec"], job["kind"]
    starts = 1 + len(starts_for(job["free"], job["alt_starts"]))
    budget = job["evals"] * (starts + (1 if any(f in STAGE2 for f in job["free"]) else 0))

    def on_evaluation(n: int, rms: float) -> None:
        if progress is not None:
            progress(CalibrationProgress(stage, kind, n, budget, rms))

    fit = fit_kind(spec, kind, job["cases"], job["measured_us"], max_evals=job["evals"], free=job["free"],
                   simulate_costs=lambda costs: pool.simulate_batch([(kind, spec, kind, c) for c in costs]),
                   start_values=job.get("start_values"), on_evaluation=on_evaluation,
                   alt_starts=job["alt_starts"], prior_weight=job["prior_weight"])
    fit["check_simulated_us"] = pool.simulate(f"{kind} checks", spec, kind, fit["cost"]) if job["checks"] else []
    if job.get("own_kernel"):       # what the spec's (joint) cost gives the same runs, to compare (kernel_fits)
        fit["joint_simulated_us"] = pool.simulate(kind, spec, kind, spec.task_cost(kind))
    if progress is not None:
        progress(CalibrationProgress(stage, kind, fit["evaluations"], budget, fit["rms_log_error"], done=True))
    return fit


def kind_fits(base: GPUSpec, m: Measurements, layers, natural_of, params_of, max_evals, workers,
              only: set[str] | None = None, refit: tuple[str, ...] | None = None,
              progress: Callable[[CalibrationProgress], None] | None = None, stage: str = "kinds",
              start_costs: Mapping[str, TaskCost] | None = None,
              own_kernel: bool = False, mixed: Mapping[str, list[dict[str, Any]]] | None = None,
              alt_starts: tuple[Mapping[str, float], ...] | None = None, epilogue: bool = False
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(jobs, fits): each cost name's fit on its rows (``only``: these cost names alone). The fits run
    in threads, their simulations over ``workers`` processes (``CasePool``: the result does not depend
    on ``workers``). ``refit`` (``megasim.calibration.update``): only these second-round fields are
    free (``"field"`` for every kind, ``"field@name"`` for cost name ``name`` alone), started from
    ``base``'s values, and the kinds without second-round rows are not fitted. ``start_costs``: a cost
    name's second-round fit starts from the values of its entry there, or of its kind's (a variant
    such as gemm@t32 from gemm's), instead of ``START``. ``own_kernel``: fit each cost name's cost in its
    own kernel (``GPUSpec.kernel_task_costs``) on the rows it fits that ran its own kernel (the megakernel's
    rows left out; ``kernel_fits``). ``mixed``: per cost name, mixed-kind rows fitted beside its own (the other
    kind of each at ``base``'s cost; ``beside_fits``). ``alt_starts``: a second-round fit's further starts
    (default ``ALT_STARTS`` from scratch, none in an update). ``epilogue``: the ``EPILOGUE_KINDS`` also fit
    ``sm_fixed_ns`` (an update may refit it whatever ``epilogue`` says). ``progress`` receives a
    ``CalibrationProgress`` of ``stage`` after each batch of simulations of each fit (from the fits' threads)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    jobs = []
    for name, natural in natural_of.items():
        if only is not None and name not in only:
            continue
        if refit is not None and not any("@" not in f or f.split("@", 1)[1] == name for f in refit):
            continue                      # an update that refits none of this cost name's fields needs no rows of it
        rows = natural_rows(m, natural, params_of)
        if not rows and ("@" in name or refit is not None):
            continue                      # a variant the measurements do not time: priced as its kind (or, in
            #                               an update, a kind not re-measured: kept as the spec has it)
        queued = [r for r in rows if r.get("timing") == "queued"]
        forced_fitted = base_kind(name) in FORCED_FITTED_KINDS
        fitted_rows = ([r for r in queued if forced_fitted or not forced_occupancy(r)]
                       or [r for r in rows if r.get("timing", "events") == "events"])
        if own_kernel:
            if not queued:
                continue                  # (a first-round kind's one fit is its own kernel's already)
            rows = [r for r in rows if r.get("kernel") != "megakernel"]
            fitted_rows = [r for r in fitted_rows if r.get("kernel") != "megakernel"]
        for layer in layers:     # a variant (gemm@t32) is timed on some layers only: priced as its kind elsewhere
            if "@" not in name and not any(r["layer"] == layer for r in fitted_rows):
                raise SpecError(f"measurements: no time of kind {name!r} on layer {layer!r}")
        if not queued:
            for layer in layers:
                if sum(r["layer"] == layer for r in fitted_rows) != 1:
                    raise SpecError(f"measurements: need one time of kind {name!r} on layer {layer!r}")

        def case_of(r, natural=natural):
            g, sch = variant_case(*natural[(r["layer"], params_of(r))][1:], r)
            at = f" [{params_of(r)}]" if params_of(r) != m.plan_params else ""
            return (f"{r['layer']} {row_label(r)}{at}", g, sch, r.get("timing", "events"))

        round2 = bool(queued)
        if refit is not None and not round2:
            continue
        free = (tuple(f for f in FREE_ROUND2 if f != "megakernel_fixed_ns"
                      or any(r.get("kernel") == "megakernel" for r in fitted_rows))
                + (("memory_overlap",) if base_kind(name) in PIPELINED_KINDS else ())
                + (("further_block_sm_ready",) if base_kind(name) in FURTHER_READY_KINDS else ())
                + (("sm_fixed_ns",) if base_kind(name) in EPILOGUE_KINDS and (epilogue or refit is not None) else ())
                if round2 else ("compute_efficiency", "fixed_ns"))
        start_values = None
        if refit is not None:
            free = tuple(f for f in free if f in refit or f"{f}@{name}" in refit)
            if not free:
                continue
            own = base.task_cost(name)
            # each field from the spec's own value (one unset, or at 0 in log space, from START's)
            start_values = {f: v for f in free if (v := getattr(own, f)) is not None and (v > 0 or f in LINEAR)}
        elif round2 and start_costs and (own := start_costs.get(name, start_costs.get(base_kind(name)))):
            start_values = {f: v for f in free if (v := getattr(own, f)) is not None and (v > 0 or f in LINEAR)}
        checks = [r for r in rows if r not in fitted_rows]
        beside = list((mixed or {}).get(name, ()))
        kind_spec, claim = with_measured_claim(base, name, rows)
        jobs.append({"spec": kind_spec, "kind": name, "claim": claim,
                     "cases": [case_of(r) for r in fitted_rows] + [mixed_fit_case(r, m.plan_params) for r in beside],
                     "params": " and ".join(dict.fromkeys(params_of(r) or "defaults" for r in fitted_rows)),
                     "measured_us": [float(r["median_ms"]) * 1000.0 for r in fitted_rows + beside],
                     "n_mixed": len(beside),
                     "evals": max_evals or (ROUND2_MAX_EVALS if round2 else ROUND1_MAX_EVALS), "free": free,
                     "round2": round2, "start_values": start_values,
                     "alt_starts": (() if not round2 or refit is not None
                                    else ALT_STARTS if alt_starts is None else alt_starts),
                     "prior_weight": PRIOR_WEIGHT if refit is None else UPDATE_PRIOR_WEIGHT,
                     "n_rows": len(fitted_rows), "forced_fitted": forced_fitted, "own_kernel": own_kernel,
                     "checks": [case_of(r) for r in checks],
                     "check_measured_us": [float(r["median_ms"]) * 1000.0 for r in checks]})
    cases_by_key = {}
    for j in jobs:
        cases_by_key[j["kind"]] = j["cases"]
        cases_by_key[f"{j['kind']} checks"] = j["checks"]
    with CasePool(cases_by_key, workers or os.cpu_count() or 1) as pool:
        with ThreadPoolExecutor(max(len(jobs), 1)) as threads:
            fits = list(threads.map(lambda j: _fit_job(j, pool, stage, progress), jobs))
    return jobs, fits


def calibrated_spec(preset: GPUSpec, m: Measurements, layers: tuple[str, ...] | None = None,
                    max_evals: int | None = None, workers: int | None = None,
                    progress: Callable[[CalibrationProgress], None] | None = None,
                    fit_mixed: bool = False, fit_epilogue: bool = True) -> tuple[GPUSpec, dict[str, Any]]:
    """The calibrated spec and a report of the per-kind fits.

    A kind measured at one occupancy (its non-fused kernel, ``timing`` events: the first round) gets
    (compute_efficiency, fixed_ns). A kind with ``queued`` rows (``gpu.calibrate.occupancy``: its tasks
    alone at several occupancies and in the megakernel, the host hidden) is fitted on those rows only,
    with ``block_sm_ready``, ``block_dram_bw_gbps`` and ``megakernel_fixed_ns`` free too; its other
    rows are simulated and reported as a check. The kinds are fitted side by side, their simulations
    spread over ``workers`` processes (``megasim.calibration.pool``; default: the CPU count; the
    result does not depend on it).

    With traced end-order rows (``extra.block_end_order``), the spec's ``younger_block_weight`` is
    fitted first (``megasim.calibration.age``) on a first fit of those rows' kinds at equal sharing,
    and every kind is then fitted with it in place; the transforms that mixed-kind runs
    (``extra.mixed_kind_rows``) time, and their variants, after the others, beside the GEMM (``beside_fits``);
    then each cost name's own kernel (``kernel_fits``). The mixed-kind runs are simulated with the fitted spec
    and reported (``mixed_checks``); with ``fit_mixed`` they also fit ``mixed_kinds_sm_factor``
    (``fit_mixed_factor``), last. With ``fit_epilogue`` (the default) the GEMMs (``EPILOGUE_KINDS``) also fit
    ``sm_fixed_ns``, the SM time of each task's prologue and epilogue (docs/calibration.md, "The GEMM's epilogue";
    ``fit_epilogue=False`` leaves it unset, as calibrations did before it).
    ``progress`` receives a ``CalibrationProgress`` as each stage starts and after each batch of simulations
    (from the fits' threads: it must be thread-safe)."""
    def tell(stage: str, **kw) -> None:
        if progress is not None:
            progress(CalibrationProgress(stage, **kw))

    base = measured_base(preset, m)
    layers = tuple(layers or m.layers)
    m = m.only_layers(layers)       # every row the fit reads (mixed-kind runs, end order too) is of these layers
    if any(r.get("timing") == "queued" for r in m.kind_times) and base.queued_launch_ns is None:
        raise SpecError("measurements: queued-timed rows need the queued_launch_ns measurement (gpu.calibrate.occupancy)")
    natural_of, params_of = natural_cases(m, layers)
    report: dict[str, Any] = {"layers": list(layers), "plan_params": m.plan_params, "kinds": {}}
    end_rows = m.extra.get("block_end_order") or []
    if end_rows:
        # The schedulers' preference for older blocks (megasim.calibration.age), fitted on the traced
        # end order of the kinds' first-wave blocks, with those kinds fitted first at equal sharing;
        # then every kind is fitted with it in place.
        only = {r["kind"] for r in end_rows}
        tell("first pass")
        jobs, fits = kind_fits(base, m, layers, natural_of, params_of, max_evals, workers, only,
                               progress=progress, stage="first pass", epilogue=fit_epilogue)
        first = dataclasses.replace(base, task_costs={**base.task_costs,
                                                      **{j["kind"]: f["cost"] for j, f in zip(jobs, fits)}})
        tell("younger_block_weight")
        with _scalar_pool(workers) as map_fn:
            rho, how, checks = fit_age_weight(first, end_rows, m.plan_params, map_fn=map_fn,
                                              on_evaluation=lambda n: tell("younger_block_weight", evaluations=n))
        base = dataclasses.replace(base, younger_block_weight=rho,
                                   sources={**base.sources, "younger_block_weight": source(m, how)})
        report["younger_block_weight"] = rho
        report["end_order_checks_first_pass"] = checks
        # The GEMMs' fits with rho in place start from the first pass's (rho moves them little)
        start_costs = {j["kind"]: f["cost"] for j, f in zip(jobs, fits)}
    else:
        start_costs = None
    tell("kinds")
    # (the kinds fitted beside the GEMM, and their variants, after it: beside_fits)
    mixed_of = beside_rows(m)
    jobs, fits = kind_fits(base, m, layers, natural_of, params_of, max_evals, workers, progress=progress,
                           start_costs=start_costs, only=set(natural_of) - beside_names(mixed_of, natural_of),
                           epilogue=fit_epilogue)
    costs: dict[str, TaskCost] = {}
    sources = dict(base.sources)
    _record_fits(jobs, fits, m, layers, costs, sources, report)
    if "default" in base.task_costs:
        costs["default"] = base.task_costs["default"]
    spec = dataclasses.replace(base, task_costs=costs, sources=sources,
                               description=f"{preset.description}; calibrated {m.date} on {m.device}")
    spec = beside_fits(spec, m, mixed_of, layers, natural_of, params_of, max_evals, workers, report, progress)
    spec = kernel_fits(spec, m, layers, natural_of, params_of, max_evals, workers, report, progress,
                       epilogue=fit_epilogue)
    mixed = m.extra.get("mixed_kind_rows") or []
    with _scalar_pool(workers) as map_fn:
        if mixed:
            cases = [mixed_case(r["layer"], tuple(r["kind"].split("+")), r.get("plan_params", m.plan_params))
                     for r in mixed]
            if fit_mixed:
                tell("mixed_kinds_sm_factor")
                report["mixed_checks_unfitted"] = mixed_checks(spec, mixed, m.plan_params, cases, map_fn)
                factor, how = fit_mixed_factor(spec, mixed, m.plan_params, map_fn=map_fn,
                                               on_evaluation=lambda n: tell("mixed_kinds_sm_factor", evaluations=n))
                spec = dataclasses.replace(spec, mixed_kinds_sm_factor=factor,
                                           sources={**spec.sources, "mixed_kinds_sm_factor": source(m, how)})
                report["mixed_kinds_sm_factor"] = factor
        if mixed or end_rows:
            tell("checks")
        if mixed:
            report["mixed_checks"] = mixed_checks(spec, mixed, m.plan_params, cases, map_fn)
        if end_rows:
            report["end_order_checks"] = end_order_checks(spec, end_rows, m.plan_params, map_fn=map_fn)
    return spec, report


def _record_fits(jobs, fits, m: Measurements, layers, costs: dict[str, TaskCost], sources: dict[str, str],
                 report: dict[str, Any], note: str = "") -> None:
    """Each fit's cost into ``costs``, the sources of its fields into ``sources`` (``note`` added to each), and
    its report entry (fields, runs, simulated and measured times, checks) into ``report["kinds"]``."""
    for job, fit in zip(jobs, fits):
        kind, free = job["kind"], job["free"]
        costs[kind] = fit["cost"]
        n_own = job["n_rows"]
        if job["round2"]:
            beside = (f"; and the {job['n_mixed']} mixed-kind runs it takes part in (its tasks interleaved with "
                      f"the GEMM's in one megakernel launch, the GEMM at its fitted cost)" if job["n_mixed"] else "")
            how = (f"{kind}'s tasks alone on {', '.join(layers)} at --param {job['params']}: "
                   f"{n_own} runs (its non-fused kernel at its own "
                   f"{'and at forced lower occupancy' if job['forced_fitted'] else 'occupancy'}, the "
                   f"megakernel running only these tasks per task and as persistent grids of 1 and 2 blocks per "
                   f"SM{'' if job['forced_fitted'] else '; its kernel at forced lower occupancy is a check'}), timed "
                   f"with the host's launch cost hidden (gpu.calibrate.occupancy){beside}; "
                   f"{', '.join(free)} fitted jointly so that megasim's simulation of each run matches its "
                   f"median, rms log error {fit['rms_log_error']:.3f}{note}")
        else:
            how = (f"{kind}'s non-fused kernel alone on {', '.join(layers)} at --param "
                   f"{m.plan_params or 'defaults'}; fitted so that megasim's simulation of that launch matches "
                   f"the measured median, rms log error {fit['rms_log_error']:.3f}")
        for name in free:
            sources[f"task_costs.{kind}.{name}"] = source(m, how)
        if job["claim"] is not None:
            sources[f"task_costs.{kind}.megakernel_claim_ns"] = source(m, job["claim"]["method"])
        sim, meas = fit["simulated_us"], fit["measured_us"]
        report["kinds"][kind] = {**{name: getattr(fit["cost"], name) for name in free},
                                 "megakernel_claim_ns": fit["cost"].megakernel_claim_ns,
                                 "block_sm_share": fit["cost"].block_sm_share,
                                 "block_sm_ready": fit["cost"].block_sm_ready,
                                 "further_block_sm_ready": fit["cost"].further_block_sm_ready,
                                 "cases": [c[0] for c in job["cases"]],
                                 "measured_us": meas, "simulated_us": sim, "rms_log_error": fit["rms_log_error"],
                                 "single_kind_rms_log_error": rms_log_error(sim[:n_own], meas[:n_own]),
                                 "mixed_runs": job["n_mixed"],
                                 "evaluations": fit["evaluations"],
                                 "checks": [{"case": c[0], "measured_us": mu, "simulated_us": su} for c, mu, su in
                                            zip(job["checks"], job["check_measured_us"], fit["check_simulated_us"])]}


# The kinds fitted beside the GEMM, on their single-kind runs and the mixed-kind runs they take part in
# (``beside_fits``): the transforms. Their single-kind runs leave one direction loose (a block's DRAM rate against
# how much of its SM it takes, docs/calibration.md, "Beside the GEMM"): on the H200 two basins fit an input
# transform's runs alike (rms 0.055 and 0.054 at 14 and 22 GB/s per block) and predict a fused schedule 14% apart;
# the mixed runs, where its blocks share SMs with the GEMM's as in the fused megakernel, tell them apart (-3% against
# -13%). The GEMM's own runs pin it (rms 0.03): it is held.
BESIDE_KINDS = ("itrans", "otrans")
# Their fits start from ``START`` and ``ALT_STARTS`` and from START at higher per-block DRAM rates (multiples of the
# plain read loop's one-block rate, ``tb_max_dram_bw_gbps``): the basins lie along that rate (on the H200 at
# 14 and 21 GB/s, 3-4x the read loop's 4.9), and from the two rate-agnostic starts the search stopped in the worse
# one on one of four measurement sets (rms log error 0.065 at 20.8 GB/s; from the rate starts 0.060 at 14.7). The
# least error is kept.
BESIDE_RATE_STARTS = (2.0, 4.0)


def beside_rows(m: Measurements) -> dict[str, list[dict[str, Any]]]:
    """Per cost name of a ``BESIDE_KINDS`` kind, the mixed-kind rows of ``m`` whose tasks include its own."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in m.extra.get("mixed_kind_rows") or []:
        graph = mixed_case(r["layer"], tuple(r["kind"].split("+")), r.get("plan_params", m.plan_params))[0]
        for k in np.unique(graph.kind):
            name = graph.cost_names[int(k)]
            if base_kind(name) in BESIDE_KINDS:
                out.setdefault(name, []).append(r)
    return out


def beside_names(mixed: Mapping[str, Any], natural_of) -> set[str]:
    """The cost names ``beside_fits`` fits (not the kinds stage): each of ``mixed`` (``beside_rows``) that has
    single-kind rows, and its variants."""
    kinds = {base_kind(name) for name in mixed if name in natural_of}
    return {name for name in natural_of if base_kind(name) in kinds}


def beside_fits(spec: GPUSpec, m: Measurements, mixed: Mapping[str, list[dict[str, Any]]], layers, natural_of,
                params_of, max_evals, workers, report: dict[str, Any],
                progress: Callable[[CalibrationProgress], None] | None = None) -> GPUSpec:
    """``spec`` with each ``BESIDE_KINDS`` cost name that mixed-kind runs time (``mixed``: ``beside_rows``) fitted
    on its single-kind runs and those mixed runs together (the other kind of each at ``spec``'s cost), from scratch
    (``START``, ``ALT_STARTS`` and ``BESIDE_RATE_STARTS``, the least error kept); then its variants (another tile of
    the same code: ``itrans@m6``), which no mixed run times, on their own runs from its cost. ``report["kinds"]``
    gets the fits (``mixed_runs``: how many mixed runs a fit took; ``single_kind_rms_log_error``)."""
    mixed = {name: rows for name, rows in mixed.items() if name in natural_of}
    if not mixed:
        return spec
    if progress is not None:
        progress(CalibrationProgress("beside the GEMM"))
    costs, sources = dict(spec.task_costs), dict(spec.sources)
    rates = tuple({"block_dram_bw_gbps": f * spec.tb_max_dram_bw_gbps} for f in BESIDE_RATE_STARTS)
    jobs, fits = kind_fits(spec, m, layers, natural_of, params_of, max_evals, workers, only=set(mixed),
                           progress=progress, stage="beside the GEMM", mixed=mixed, alt_starts=ALT_STARTS + rates)
    _record_fits(jobs, fits, m, layers, costs, sources, report)
    variants = beside_names(mixed, natural_of) - set(mixed)
    if variants:
        jobs, fits = kind_fits(dataclasses.replace(spec, task_costs=costs), m, layers, natural_of, params_of,
                               max_evals, workers, only=variants, progress=progress, stage="beside the GEMM",
                               start_costs={name: costs[base_kind(name)] for name in variants}, alt_starts=())
        _record_fits(jobs, fits, m, layers, costs, sources, report,
                     note="; started from its kind's fit beside the GEMM (no mixed-kind run times this variant)")
    return dataclasses.replace(spec, task_costs=costs, sources=sources)

def kernel_fits(spec: GPUSpec, m: Measurements, layers, natural_of, params_of, max_evals, workers,
                report: dict[str, Any], progress: Callable[[CalibrationProgress], None] | None = None,
                epilogue: bool = False) -> GPUSpec:
    """``spec`` with each second-round cost name's cost in its own kernel (``GPUSpec.kernel_task_costs``),
    fitted as a kind of its own: on the runs of its own kernel that its megakernel cost was fitted on too
    (natural occupancy; the GEMMs' forced ones), every field its own kernel reads free, from scratch (the
    kinds' starts, ``ALT_STARTS`` too, the prior). The kind's own kernel and the megakernel's device function
    are different builds, and one cost left the own kernel's runs off by up to 11% (the input transform slow,
    the output transform fast) to fit the megakernel's; the megakernel's cost keeps the joint fit of every
    occupancy, which is what pins how its blocks share an SM (docs/calibration.md, "A kind's own kernel").
    A cost name gets its own-kernel cost only where that fits its own kernel's runs better (rms log error)
    than its joint cost does: with few runs the prior holds the fit near the kinds' generic starts. The
    report's ``own_kernels`` (``kept``: whether it did). ``epilogue``: as ``kind_fits``'s."""
    if progress is not None:
        progress(CalibrationProgress("own kernels"))
    jobs, fits = kind_fits(spec, m, layers, natural_of, params_of, max_evals, workers, progress=progress,
                           stage="own kernels", own_kernel=True, epilogue=epilogue)
    kernel_costs: dict[str, TaskCost] = {}
    sources = dict(spec.sources)
    report["own_kernels"] = {}
    for job, fit in zip(jobs, fits):
        name = job["kind"]
        joint_rms = rms_log_error(fit["joint_simulated_us"], fit["measured_us"])
        kept = fit["rms_log_error"] < joint_rms
        report["own_kernels"][name] = {**{f: getattr(fit["cost"], f) for f in job["free"]},
                                       "cases": [c[0] for c in job["cases"]], "measured_us": fit["measured_us"],
                                       "simulated_us": fit["simulated_us"], "rms_log_error": fit["rms_log_error"],
                                       "joint_simulated_us": fit["joint_simulated_us"], "joint_rms_log_error": joint_rms,
                                       "kept": kept, "evaluations": fit["evaluations"]}
        if not kept:
            continue
        kernel_costs[name] = dataclasses.replace(fit["cost"], megakernel_fixed_ns=0.0, megakernel_claim_ns=None)
        how = (f"{name}'s tasks alone in its own kernel on {', '.join(layers)} at --param {job['params']}: "
               f"{job['n_rows']} runs (natural occupancy{', and forced lower' if job['forced_fitted'] else ''}), "
               f"timed with the host's launch cost hidden (gpu.calibrate.occupancy); {', '.join(job['free'])} "
               f"fitted jointly so that megasim's simulation of each run matches its median, rms log error "
               f"{fit['rms_log_error']:.3f} (its joint cost: {joint_rms:.3f})")
        for field_name in job["free"]:
            sources[f"kernel_task_costs.{name}.{field_name}"] = source(m, how)
    return dataclasses.replace(spec, kernel_task_costs=kernel_costs, sources=sources)


@contextlib.contextmanager
def _scalar_pool(workers: int | None):
    """``map`` over a Dask LocalCluster of ``workers`` processes (default: the CPU count; 1: this process)
    for the scalar fits' few simulations per evaluation (rho, the mixed-kinds factor)."""
    import os
    n = workers or os.cpu_count() or 1
    if n <= 1:
        yield map
        return
    from megasim.sweep.cluster import client_map, open_client
    with open_client(workers=n) as client:
        yield client_map(client)


MIXED_FACTOR_BOUNDS = (0.5, 1.0)


def fit_mixed_factor(spec: GPUSpec, rows: list[dict[str, Any]], plan_params: str = "",
                     on_evaluation: Callable[[int], None] | None = None, map_fn: Callable = map) -> tuple[float, str]:
    """The spec's ``mixed_kinds_sm_factor``: chosen so that the simulations of the
    mixed-kind runs (two kinds' non-fused tasks interleaved in one megakernel launch, counters zeroed;
    ``gpu.calibrate.occupancy.time_mixed_kinds``) match their medians (least squares in log time,
    bounded scalar search over ``MIXED_FACTOR_BOUNDS``), the kinds' own costs fitted before and held.

    Why: each kind's costs come from runs of that kind alone; a fused schedule mixes kinds on an SM.
    With the kinds' costs fitted well alone (the output transform's rms 0.15 -> 0.04, 150ee9f), the
    megakernel runs that mix kinds came out faster than measured (the mixed-kind runs by up to 8%, the
    fused validation runs by about 4% on average), and nothing in a kind's own runs can say by how
    much. The mixed-kind runs are calibration runs, not validated mappings. ``map_fn``: how each
    evaluation's runs are simulated (``map``, or a process pool's: the same numbers)."""
    from scipy.optimize import minimize_scalar
    meas = np.array([float(r["median_ms"]) * 1000.0 for r in rows])
    cases = [mixed_case(r["layer"], tuple(r["kind"].split("+")), r.get("plan_params", plan_params)) for r in rows]
    evaluations = [0]

    def loss(factor: float) -> float:
        sims = mixed_checks(dataclasses.replace(spec, mixed_kinds_sm_factor=float(factor)), rows, plan_params,
                            cases, map_fn)
        evaluations[0] += 1
        if on_evaluation is not None:
            on_evaluation(evaluations[0])
        return sum_of_squares(np.log(np.array([c["simulated_us"] for c in sims]) / meas))   # calibration.reproducible

    res = minimize_scalar(loss, bounds=MIXED_FACTOR_BOUNDS, method="bounded", options={"xatol": 2e-3})
    factor = float(res.x)
    rms = math.sqrt(float(res.fun) / len(rows))    # the loss at res.x, not simulated again
    where = ", ".join(f"{r['layer']} {r['kind']}" for r in rows)
    return factor, (f"the {len(rows)} mixed-kind runs ({where}: two kinds' non-fused tasks interleaved in one "
                    f"megakernel launch, counters zeroed, host hidden; gpu.calibrate.occupancy.time_mixed_kinds) "
                    f"simulated with the fitted kinds' costs; bounded search in {list(MIXED_FACTOR_BOUNDS)}, "
                    f"rms log error {rms:.3f}")
