"""Moving a calibrated spec to another GPU of the same architecture: re-measure the machine, keep the kinds.

A calibration (``megasim calibrate``) has two halves. The first is what the microbenchmarks of
``gpu.calibrate`` measure directly on a machine: DRAM and L2 bandwidth, the L2's effective capacity,
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
"""

from __future__ import annotations

import dataclasses

from megasim.calibration import Measurements, measured_base
from megasim.hardware.spec import GPUSpec

# Measured values that are not properties of the GPU but fits of earlier calibrations, kept from the
# calibrated spec if a measurements record carries them.
FITTED_VALUES = ("mixed_kinds_sm_factor", "younger_block_weight")


def transferred_spec(calibrated: GPUSpec, m: Measurements, name: str | None = None) -> GPUSpec:
    """`calibrated` with every field `m` measured directly replaced by `m`'s value (its source naming
    `m`'s device and date); task costs and fitted rules unchanged. `name` defaults to the device's."""
    values = {k: v for k, v in m.values.items() if k not in FITTED_VALUES}
    measured = dataclasses.replace(m, values=values)
    spec = measured_base(calibrated, measured)
    description = (f"{calibrated.name}'s task costs and fitted rules (calibrated there), with the values "
                   f"measured on {m.device} on {m.date} by gpu.calibrate's microbenchmarks "
                   f"({len(values)} fields); nothing fitted on {m.device}")
    return dataclasses.replace(spec, name=name or m.device, description=description)
