"""Moving a calibrated spec to another GPU of the same architecture: re-measure the machine, keep the kinds.

A calibration (``megasim calibrate``) has two halves. The first is what the microbenchmarks of
``gpu.calibrate.measure`` measure directly on a machine: DRAM and L2 bandwidth, the L2's effective capacity,
the FP32 rate, latencies, launch and dispatch costs. The second is fitted: each task kind's
``TaskCost`` (how its code uses an SM: efficiency, fixed time, readiness, per-block bandwidth,
megakernel overheads) and the spec-wide fitted rules (``mixed_kinds_sm_factor``,
``younger_block_weight``), which describe the kernels' code on the architecture.

``transferred_spec`` takes the fitted half from a spec calibrated on one GPU and the measured half from
a ``Measurements`` record of another (its ``values`` only; its per-kind times are not used), so a
second GPU of the same architecture (the H100 beside the H200: the same GH100 SMs and clocks, a
different memory system) can be predicted from one run of the microbenchmarks, with no fit. What it
assumes: the kinds' code runs at the same per-SM efficiency on both GPUs (true for the same SM
architecture and compiler; not for another architecture, whose kinds need their own calibration).
Every replaced value's source names the new device; every kept value keeps its source, so the file
says which half came from where.

Both halves must come from the same probes. The kinds of a spec were fitted beside its measured values,
so a value measured on the new GPU by a changed probe (the L2 bandwidth probe, fixed 2026-11-25: the old
one read 9.9 TB/s on the H200, the fixed one 4.48 on both GPUs) would move the predictions by the probe
change, not by the GPU; ``keep`` names the fields to take from the calibrated spec instead. (Moved with
the fixed probe's H100 reading, the committed H200 spec predicts the H100's runs 7% slow on average,
MAPE 7.7%; with the old probe's reading on both sides 4.7%, with the H200's value kept 4.2%.)
"""

from __future__ import annotations

import dataclasses

from megasim.calibration.measurements import Measurements
from megasim.calibration.winograd import measured_base, sanity_rules
from megasim.errors import SpecError
from megasim.hardware.spec import GPUSpec

# Measured values that are not properties of the GPU but fits of earlier calibrations, kept from the
# calibrated spec if a measurements record carries them.
FITTED_VALUES = ("mixed_kinds_sm_factor", "younger_block_weight")


def transferred_values(m: Measurements) -> list[str]:
    """The fields of `m` that a transfer may replace: every measured value but the fitted ones."""
    return sorted(k for k in m.values if k not in FITTED_VALUES)


def transferred_spec(calibrated: GPUSpec, m: Measurements, name: str | None = None,
                     keep: tuple[str, ...] = ()) -> GPUSpec:
    """`calibrated` with every field `m` measured directly replaced by `m`'s value (its source naming
    `m`'s device and date), except the fields in `keep`; task costs and fitted rules unchanged. `name`
    defaults to the device's. The physical floors of ``sanity_rules`` are applied with the kept fields'
    values in place (an atomic latency below a kept L2 latency is still rejected)."""
    allowed = transferred_values(m)
    keep = tuple(dict.fromkeys(keep))
    unknown = [k for k in keep if k not in allowed]
    if unknown:
        raise SpecError(f"keep={unknown[0]!r} is not allowed: the measurements hold {', '.join(allowed)}")
    kept = {k: {"value": getattr(calibrated, k), "method": f"kept from {calibrated.name}"} for k in keep}
    ruled = sanity_rules({**{k: m.values[k] for k in allowed}, **kept})     # also checks the entries' form
    values = {k: v for k, v in ruled.items() if k not in keep}
    # measured_base applies sanity_rules again: a no-op on ruled values (the floors are idempotent).
    # Named first, so that a measured value the spec refuses is reported against the new spec's name.
    spec = measured_base(dataclasses.replace(calibrated, name=name or m.device), dataclasses.replace(m, values=values))
    description = (f"{calibrated.name}'s task costs and fitted rules (calibrated there), with the values "
                   f"measured on {m.device} on {m.date} by gpu.calibrate.measure's microbenchmarks "
                   f"({len(values)} fields{'; kept from ' + calibrated.name + ': ' + ', '.join(keep) if keep else ''}); "
                   f"nothing fitted on {m.device}")
    return dataclasses.replace(spec, description=description)
