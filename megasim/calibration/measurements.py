"""The measurement file's model: what ``gpu.calibrate.measure`` hands the calibration, and its checks.

``gpu.calibrate.measure`` (and ``gpu.calibrate.occupancy``, its second round) measure on the GPU and
hand the calibration (``megasim.calibration.winograd.calibrated_spec``) a ``Measurements`` record: the
values it measured directly (bandwidths, FP32 rate, latencies, launch costs), each with the method that
gave it, and the time of each task kind's NON-FUSED kernel run alone on a few calibration layers
(``CALIBRATION_LAYERS``), with the variants of the second round (the kind's kernel at forced shared
memory, the megakernel running only that kind; rows with their ``timing``, ``kernel``, ``style``,
``blocks_per_sm``), and in ``extra`` the traced end orders and the mixed-kind runs. Saved as
``<GPU>.measurements.json``, it is read back through ``Measurements.from_dict``, which checks every field,
so ``megasim calibrate --from-measurements`` re-runs the fit from a saved file.

Every spec field the calibration sets names its source (``source``): ``measured <date> on <device> by
megasim calibrate (<method>)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from megasim.errors import SpecError
from megasim.hardware.spec import finite_number

# The layers whose single-kind runs a calibration measures: 16, 64 and 512 input channels over many waves, and
# 512 over a few. The two shapes are none of the paper's 13 layers. Without the few-channel one the costs
# extrapolate to few channels from C = 64 and the fused/non-fused speedup of yolov3-1 (C = 32) came out 13% low;
# without the few-wave one (1440 GEMM tasks, about 5 waves) the GEMM's megakernel cost falls into either of two
# basins that the other layers' runs cannot tell apart, and resnet-4's fused mappings came out 6-13% slow on some
# sets (docs/calibration.md, "Calibration layers").
CALIBRATION_LAYERS = ("resnet-1", "vgg-3", "N=32,C=16,K=64,H=96,W=96", "N=32,C=512,K=512,H=9,W=9")


def measured_time(text: Any) -> float | None:
    """A measured time from a table cell: None for an empty cell (a failed run), else the number, which
    must be finite and > 0 (ValueError otherwise)."""
    if text is None or str(text).strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} is not a finite number > 0")
    return value


@dataclass
class Measurements:
    """What `gpu.calibrate.measure` measured. ``values``: spec field -> {"value", "method"}; ``kind_times``:
    rows {"layer", "kind", "tasks", "median_ms", "min_ms", "max_ms"} of each kind's non-fused kernel alone,
    at ``plan_params`` or at a row's own ``"plan_params"`` (e.g. the transforms at 4 pairs per thread,
    the fused schedule's default, beside the non-fused default of 1)."""

    device: str
    date: str
    preset: str
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    kind_times: list[dict[str, Any]] = field(default_factory=list)
    plan_params: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def layers(self) -> tuple[str, ...]:
        """The layers ``kind_times`` has runs of, in the order of their first run."""
        return tuple(dict.fromkeys(r["layer"] for r in self.kind_times))

    def only_layers(self, layers: Sequence[str]) -> "Measurements":
        """These measurements cut to the runs of `layers`: the single-kind rows and every list of per-layer rows in
        ``extra`` (the mixed-kind runs, the block end order, the megakernel ticket's rows); the probes' values and
        every other entry as they are."""
        keep = set(layers)

        def cut(value: Any) -> Any:
            per_layer = isinstance(value, list) and all(isinstance(r, Mapping) and "layer" in r for r in value)
            return [r for r in value if r["layer"] in keep] if per_layer else value
        return dataclasses.replace(self, kind_times=[r for r in self.kind_times if r["layer"] in keep],
                                   extra={key: cut(value) for key, value in self.extra.items()})

    @classmethod
    def from_dict(cls, data: Any, origin: str = "measurements") -> "Measurements":
        """Measurements from parsed JSON, every field checked (one-line SpecError naming `origin` and the
        field): device, date, preset and plan_params strings; values {field: {"value": finite number}};
        kind_times rows with layer and kind strings and finite positive times."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{origin} is not allowed: it must hold one JSON object (gpu.calibrate.measure's "
                            f"Measurements), not a {type(data).__name__}")
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise SpecError(f"{origin}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        missing = [k for k in ("device", "date", "preset", "values") if k not in data]
        if missing:
            raise SpecError(f"{origin} is not allowed: it has no {missing[0]!r} (gpu.calibrate.measure's "
                            f"Measurements have device, date, preset, values)")
        for key in ("device", "date", "preset", "plan_params"):
            if key in data and not isinstance(data[key], str):
                raise SpecError(f"{origin}: {key}={data[key]!r} is not allowed: it must be a string")
        for key, kind in (("values", dict), ("kind_times", list), ("extra", dict)):
            if key in data and not isinstance(data[key], kind):
                raise SpecError(f"{origin}: {key} is not allowed as a {type(data[key]).__name__}: it must be a "
                                f"JSON {'object' if kind is dict else 'list'}")
        for name, entry in data["values"].items():
            value = entry.get("value") if isinstance(entry, dict) else None
            if not finite_number(value):
                field = f"values.{name}" if name.isidentifier() else f"values[{name!r}]"   # (a key may hold a newline)
                raise SpecError(f"{origin}: {field} = {entry!r} is not allowed: it must be an object whose "
                                f"'value' is a finite number")
        for i, row in enumerate(data.get("kind_times", [])):
            if not isinstance(row, dict):
                raise SpecError(f"{origin}: kind_times[{i}] is not allowed: it must be an object")
            for key in ("layer", "kind"):
                if not isinstance(row.get(key), str):
                    raise SpecError(f"{origin}: kind_times[{i}].{key}={row.get(key)!r} is not allowed: it must be a string")
            for key in ("median_ms", "min_ms", "max_ms"):
                v = row.get(key)
                if key in row and (not finite_number(v) or v <= 0):
                    raise SpecError(f"{origin}: kind_times[{i}].{key}={v!r} is not allowed: it must be a finite "
                                    f"number > 0")
            if "median_ms" not in row:
                raise SpecError(f"{origin}: kind_times[{i}] has no 'median_ms' (each row times one kind)")
        return cls(**data)


def source(m: Measurements, method: str, by: str = "megasim calibrate") -> str:
    return f"measured {m.date} on {m.device} by {by} ({method})"
