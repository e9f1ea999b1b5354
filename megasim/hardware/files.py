"""Reading and writing GPU spec files (JSON).

Format (schema_version 1)::

    {"schema_version": 1, "name": "H100-SXM", "description": "...",
     "values": {"sm_count": {"value": 132, "source": "NVIDIA H100 datasheet"}, ...},
     "task_costs": {"default": {"compute_efficiency": {"value": 0.5, "source": "..."},
                                "fixed_ns": {"value": 0, "source": "..."}},
                    "gemm": {...}}}

Every field of GPUSpec must appear under "values" with a value and a source, except the optional
ones (``megasim.hardware.spec.OPTIONAL_FIELDS``, e.g. ``megakernel_launch_ns``); unknown fields are rejected
(a typo must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from megasim.errors import SpecError
from megasim.input_files import parse_json, read_text
from megasim.hardware.spec import OPTIONAL_FIELDS, SCHEMA_VERSION, GPUSpec, TaskCost, finite_number, spec_field_names

_COST_FIELDS = ("compute_efficiency", "fixed_ns", "ns_per_other_op", "block_sm_share", "ns_per_step",
                "block_dram_bw_gbps", "megakernel_fixed_ns", "block_sm_ready", "ns_per_iteration",
                "ns_per_replay", "megakernel_claim_ns", "coresident_stretch", "memory_overlap",
                "further_block_sm_ready", "launch_fixed_ns", "sm_fixed_ns")
_COST_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TaskCost)}
_COST_ALWAYS = ("compute_efficiency", "fixed_ns")   # the others are written only when not default


def _entry(where: str, raw: Any) -> tuple[float, str]:
    if not isinstance(raw, dict) or "value" not in raw or "source" not in raw:
        raise SpecError(f"{where} must be an object with 'value' and 'source', got {raw!r}")
    value, source = raw["value"], raw["source"]
    if not finite_number(value):
        raise SpecError(f"{where}.value={value!r} is not allowed: it must be a finite number")
    if not isinstance(source, str) or not source.strip():
        raise SpecError(f"{where}.source must be a non-empty string, got {source!r}")
    return value, source


def _costs(origin: str, data: dict, key: str, sources: dict[str, str]) -> dict[str, TaskCost]:
    """The TaskCost entries under ``key`` (``task_costs``, ``kernel_task_costs``) of a spec file's JSON,
    their sources added to ``sources`` as ``key.name.field``."""
    raw_costs = data.get(key, {})
    if not isinstance(raw_costs, dict):
        raise SpecError(f"spec {origin}: '{key}' must be an object")
    costs: dict[str, TaskCost] = {}
    for kind, raw in raw_costs.items():
        if not isinstance(raw, dict):
            raise SpecError(f"spec {origin}: {key}.{kind} must be an object")
        unknown = sorted(set(raw) - set(_COST_FIELDS))
        if unknown:
            raise SpecError(f"spec {origin}: unknown task cost field {unknown[0]!r} (allowed: {', '.join(_COST_FIELDS)})")
        cost_kwargs = {}
        for cf in _COST_FIELDS:
            if cf in raw:
                cost_kwargs[cf], sources[f"{key}.{kind}.{cf}"] = _entry(f"spec {origin}: {key}.{kind}.{cf}", raw[cf])
        try:
            costs[kind] = TaskCost(**cost_kwargs)
        except SpecError as err:
            raise SpecError(f"spec {origin}: {key}.{kind}: {err}") from None
    return costs


def spec_from_dict(data: Any, origin: str = "<dict>") -> GPUSpec:
    """Build a GPUSpec from the parsed JSON of a spec file; `origin` names it in errors."""
    if not isinstance(data, dict):
        raise SpecError(f"spec {origin}: top level must be a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SpecError(f"spec {origin}: schema_version={version!r} is not supported (allowed: {SCHEMA_VERSION})")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or any(ord(ch) < 32 for ch in name):
        # a newline in the name split the commands' one-line reports (`on x\ny (spec file ...)`)
        raise SpecError(f"spec {origin}: 'name' must be a non-empty string without control characters, got {name!r}")
    allowed_top = {"schema_version", "name", "description", "values", "task_costs", "kernel_task_costs"}
    unknown = sorted(set(data) - allowed_top)
    if unknown:
        raise SpecError(f"spec {origin}: unknown top-level key {unknown[0]!r} (allowed: {', '.join(sorted(allowed_top))})")
    values = data.get("values")
    if not isinstance(values, dict):
        raise SpecError(f"spec {origin}: 'values' must be an object")
    names = spec_field_names()
    unknown = sorted(set(values) - set(names) - set(OPTIONAL_FIELDS))
    if unknown:
        raise SpecError(f"spec {origin}: unknown field {unknown[0]!r} (allowed: {', '.join(names)})")
    missing = [n for n in names if n not in values]
    if missing:
        raise SpecError(f"spec {origin}: missing field {missing[0]!r}")
    kwargs: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for n in names:
        kwargs[n], sources[n] = _entry(f"spec {origin}: values.{n}", values[n])
    for n in OPTIONAL_FIELDS:
        if n in values:
            kwargs[n], sources[n] = _entry(f"spec {origin}: values.{n}", values[n])
    costs = _costs(origin, data, "task_costs", sources)
    kernel_costs = _costs(origin, data, "kernel_task_costs", sources)
    try:
        return GPUSpec(name=name, description=str(data.get("description", "")),
                       task_costs=costs, kernel_task_costs=kernel_costs, sources=sources, **kwargs)
    except SpecError as err:
        raise SpecError(f"spec {origin}: {err}") from None


def spec_to_dict(spec: GPUSpec) -> dict[str, Any]:
    """The JSON-ready form of a spec; `spec_from_dict(spec_to_dict(s)) == s`."""
    values = {n: {"value": getattr(spec, n), "source": spec.sources.get(n, "unknown")}
              for n in spec_field_names()}
    for n in OPTIONAL_FIELDS:
        if n == "block_l2_bw_ratio" and spec.l2_ratio_implied:
            continue                        # (the default: implied by the bandwidths)
        if getattr(spec, n) is not None:
            values[n] = {"value": getattr(spec, n), "source": spec.sources.get(n, "unknown")}
    out = {"schema_version": SCHEMA_VERSION, "name": spec.name, "description": spec.description,
           "values": values, "task_costs": _costs_dict(spec, "task_costs")}
    if spec.kernel_task_costs:
        out["kernel_task_costs"] = _costs_dict(spec, "kernel_task_costs")
    return out


def _costs_dict(spec: GPUSpec, key: str) -> dict[str, Any]:
    """The JSON-ready form of a spec's cost table ``key`` (its fields at their defaults left out)."""
    return {kind: {cf: {"value": getattr(cost, cf), "source": spec.sources.get(f"{key}.{kind}.{cf}", "unknown")}
                   for cf in _COST_FIELDS if cf in _COST_ALWAYS or getattr(cost, cf) != _COST_DEFAULTS[cf]}
            for kind, cost in getattr(spec, key).items()}


def load_spec(path: str | Path) -> GPUSpec:
    """Read a spec file; any problem is a one-line SpecError naming the file."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise SpecError(f"spec file {path!r} is not allowed: give the path of a JSON spec file")
    path = Path(path)
    try:
        text = read_text(path, f"spec file {str(path)!r}", "spec file", error=SpecError)
    except OSError as err:
        raise SpecError(f"spec file {str(path)!r} cannot be read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise SpecError(f"spec file {str(path)!r} is not UTF-8 text: a spec file is JSON") from None
    data = parse_json(text, f"spec file {str(path)!r}", SpecError)
    return spec_from_dict(data, origin=repr(str(path)))


def dump_spec(spec: GPUSpec, path: str | Path) -> None:
    Path(path).write_text(json.dumps(spec_to_dict(spec), indent=2) + "\n")
