"""Updating a calibrated spec after a kernel change: new traced claims, and only the named costs refitted.

A full calibration (``megasim.calibration.winograd.calibrated_spec``) fits every kind's TaskCost from generic
starting points on that kind's runs alone. Several of those fields trade off against each other on
single-kind runs and are told apart only by schedules that mix kinds: a block's readiness
(``block_sm_ready``) and how its memory phase slows beside other blocks (``coresident_stretch``). A
refit from scratch may therefore land in another minimum that fits the single-kind runs as well and
the fused schedules much worse (2026-11-26: a 3xTF32 refit moved the output transform's
``coresident_stretch`` from 0.39 to its bound 0.95 and predicted every fused mapping 12-34% slow).

When a kernel change touches only part of the megakernel's per-task path (its claim, its signal, its
tail), the task bodies, and with them every cost that describes how a body uses an SM, are unchanged.
``updated_spec`` re-measures what the change can move and keeps the rest:

- each kind's ``megakernel_claim_ns`` is taken from the new measurements' traced runs (as a full
  calibration does: the mean claim -> ready time of the kind's traced persistent run);
- the fields named in ``refit`` (e.g. ``megakernel_fixed_ns``, what the megakernel adds once a task is
  ready) are fitted on the new single-kind runs (``gpu.calibrate.occupancy``'s queued rows), each
  started from the spec's own value, every other field held; ``field@name`` refits a field of one cost
  name only (``compute_efficiency@gemm``: a change to one kind's body leaves the others' bodies alone); a
  transform that mixed-kind runs time is refitted after the others, on those runs too, with the GEMM as refitted
  (``megasim.calibration.winograd.beside_fits``: its single-kind runs leave its DRAM rate against its SM share
  loose);
- the kinds measured only by their non-fused kernel (first-round rows) and the spec-wide fitted rules
  (``mixed_kinds_sm_factor``, ``younger_block_weight``) and measured GPU values are kept, but for one: a
  spec without ``megakernel_reset_ns`` (fitted before the model priced the reset kernel before each
  megakernel launch) gets the measurements' (``megasim.calibration.winograd.reset_entry``) before the
  refit, so that the refitted ``megakernel_fixed_ns`` no longer holds it;
- a spec's costs of the kinds' own kernels (``GPUSpec.kernel_task_costs``) are kept: the refitted fields
  are the joint costs', fitted on all their rows as a calibration fits them (the own kernels' costs aside).

Every changed value's source names the new measurements; every kept value keeps its source. As for a
full calibration, nothing is fitted to a fused run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from megasim.calibration.cases import natural_cases, natural_rows
from megasim.calibration.fit import FREE_ROUND2
from megasim.calibration.measurements import Measurements, source
from megasim.calibration.winograd import beside_rows, kind_fits, reset_entry, with_measured_claim
from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec, base_kind

BY = "megasim update-spec"
REFITTABLE = FREE_ROUND2 + ("memory_overlap", "further_block_sm_ready", "sm_fixed_ns")


def check_refit(spec: GPUSpec, refit: tuple[str, ...]) -> None:
    """SpecError unless every refit field is refittable and each FIELD@NAME names a cost of `spec`
    (checked before the refit, which takes minutes)."""
    if isinstance(refit, str) or not all(isinstance(f, str) for f in refit):
        raise SpecError(f"refit={refit!r} is not allowed: give a tuple of field names")
    bad = [f for f in refit if f.split("@", 1)[0] not in REFITTABLE]
    if bad:
        raise SpecError(f"refit field {bad[0]!r} is not allowed: want some of {', '.join(REFITTABLE)}, "
                        f"each alone or as FIELD@KIND")
    # FIELD@NAME: NAME a cost of the spec, or a variant (kind@variant) of one of its kinds, which the refit
    # then gives a cost of its own, started from its kind's
    unknown = [f for f in refit if "@" in f and base_kind(f.split("@", 1)[1]) not in spec.task_costs]
    if unknown:
        raise SpecError(f"refit field {unknown[0]!r} names no task cost of {spec.name}: want one of "
                        f"{', '.join(sorted(spec.task_costs))}")


def updated_spec(spec: GPUSpec, m: Measurements, refit: tuple[str, ...] = ("megakernel_fixed_ns",),
                 layers: tuple[str, ...] | None = None, max_evals: int | None = None,
                 workers: int | None = None, beside_gemm: bool = True) -> tuple[GPUSpec, dict[str, Any]]:
    """``spec`` with each measured kind's ``megakernel_claim_ns`` from ``m``'s traced runs and the
    ``refit`` fields of its TaskCost refitted on ``m``'s single-kind runs (module docstring), the transforms
    that mixed-kind runs time on those too, after the others (``beside_gemm``; False: on their single-kind runs
    alone), and a report: per kind, each changed field before and after, and the fit's rms log error."""
    check_refit(spec, refit)
    layers = tuple(layers or m.layers)
    natural_of, params_of = natural_cases(m, layers)
    sources = dict(spec.sources)
    report: dict[str, Any] = {"layers": list(layers), "refit": list(refit), "kinds": {}}
    base = spec
    added = ()
    reset = reset_entry(m.values, m.extra) if spec.megakernel_reset_ns is None else None
    if reset is not None:
        # A spec fitted before the model priced the megakernel's reset: the measured value goes in first, so
        # that the refitted fields no longer hold it (megasim.calibration.winograd.reset_entry).
        base = dataclasses.replace(base, megakernel_reset_ns=reset["value"])
        sources["megakernel_reset_ns"] = source(m, reset["method"], BY)
        report["megakernel_reset_ns"] = reset["value"]
        added = ("megakernel_reset_ns added",)
    for name, natural in natural_of.items():
        rows = natural_rows(m, natural, params_of)
        before = base.task_cost(name).megakernel_claim_ns
        base, claim = with_measured_claim(base, name, rows)
        if claim is not None:
            sources[f"task_costs.{name}.megakernel_claim_ns"] = source(m, claim["method"], BY)
            report["kinds"].setdefault(name, {})["megakernel_claim_ns"] = {"before": before, "after": claim["value"]}
    costs = dict(base.task_costs)
    # (the joint costs, on all their rows, as the calibration fitted them: its own kernels' costs aside; the
    # transforms that mixed-kind runs time last, on those runs too, beside the GEMM as refitted: beside_fits)
    mixed = {name: rows for name, rows in beside_rows(m).items() if name in natural_of} if beside_gemm else {}
    for only, beside in ((set(natural_of) - set(mixed), None), (set(mixed), mixed)):
        if not refit or not only:
            continue
        jobs, fits = kind_fits(dataclasses.replace(base, task_costs=costs, kernel_task_costs={}), m, layers, natural_of,
                               params_of, max_evals, workers, refit=tuple(refit), only=only, mixed=beside)
        for job, fit in zip(jobs, fits):
            name = job["kind"]
            old = base.task_cost(name)
            costs[name] = fit["cost"]
            entry = report["kinds"].setdefault(name, {})
            with_mixed = (f", and the {job['n_mixed']} mixed-kind runs it takes part in, beside the GEMM"
                          if job["n_mixed"] else "")
            how = (f"{', '.join(job['free'])} refitted on {name}'s tasks alone on {', '.join(layers)} "
                   f"({job['n_rows']} runs, gpu.calibrate.occupancy, the host's launch cost hidden{with_mixed}), "
                   f"started from {spec.name}'s value{'s' if len(job['free']) > 1 else ''}, its other costs held; "
                   f"rms log error {fit['rms_log_error']:.3f}")
            if name not in spec.task_costs:   # a new variant: its held fields are its kind's, with their sources
                kind = base_kind(name)
                for f in (x.name for x in dataclasses.fields(old)):
                    if f not in job["free"] and f"task_costs.{kind}.{f}" in spec.sources:
                        sources[f"task_costs.{name}.{f}"] = f"{spec.sources[f'task_costs.{kind}.{f}']} ({kind}'s, held)"
            for f in job["free"]:
                sources[f"task_costs.{name}.{f}"] = source(m, how, BY)
                entry[f] = {"before": getattr(old, f), "after": getattr(fit["cost"], f)}
            entry["rms_log_error"] = fit["rms_log_error"]
            entry["cases"] = [c[0] for c in job["cases"]]
            entry["measured_us"] = fit["measured_us"]
            entry["simulated_us"] = fit["simulated_us"]
    if not report["kinds"]:
        raise SpecError("measurements: no traced or single-kind megakernel runs to update from "
                        "(gpu.calibrate.occupancy's rows; these measurements have none)")
    what = ", ".join(("megakernel_claim_ns",) + tuple(refit))
    out = dataclasses.replace(base, task_costs=costs, sources=sources,
                              description=f"{spec.description}; {'; '.join(added + (f'{what} updated',))} "
                                          f"{m.date} on {m.device}")
    return out, report
