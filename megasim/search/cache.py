"""A results cache in Kernel Tuner's cache-file format, so a search can be replayed without
re-simulating (or re-measuring), and Kernel Tuner's own strategies can replay our spaces.

The file is Kernel Tuner's JSON: ``version``, ``device_name``, ``kernel_name``, ``problem_size``,
``tune_params_keys``, ``tune_params``, ``objective`` and ``cache``, a dict keyed by the parameter
values comma-joined in ``tune_params_keys`` order. Each entry holds the parameters, ``time`` in
milliseconds (Kernel Tuner's unit), ``times``, ``compile_time``, ``verification_time``,
``benchmark_time``, ``strategy_time``, ``framework_time`` and ``timestamp``; a point that cannot run
stores the string ``"InvalidConfig"`` as its time (``"RuntimeFailedConfig"`` when the model itself
failed), as Kernel Tuner stores failed configurations, and its reason under ``megasim_reason``. Other megasim fields
(absolute D_IG/D_GO, the --param string, the taskgraph hash) are extra keys of the entry, which
Kernel Tuner ignores.

``device_name`` is the GPU spec name plus a hash of the whole spec and a fingerprint of the model's
source, so a cache never replays against a different calibration or model version; ``problem_size`` is the problem's spec string. ``Cache.load`` checks both
and the parameter keys against what the caller expects.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from megasim.errors import MegasimError
from megasim.hardware.spec import finite_number
from megasim.input_files import read_text
from megasim.search.record import Record
from megasim.search.space import SearchSpace

KERNEL_NAME = "winograd_megakernel"
CACHE_VERSION = "1.0.0"
INVALID = "InvalidConfig"
RUNTIME_FAILED = "RuntimeFailedConfig"   # the model itself failed (a bug), not the parameters
_RESERVED = {"time", "times", "compile_time", "verification_time", "benchmark_time", "strategy_time",
             "framework_time", "timestamp", "megasim_reason"}


_MODEL_SOURCES = ("algorithms", "sim", "taskgraph.py", "schedule.py", "orders.py", "ready.py", "plan.py")
# Bump when the meaning of a point changes (evaluators.point_plan: multiples -> absolute D_IG, D_GO).
POINT_VERSION = 1


def model_fingerprint() -> str:
    """A hash of the model's source (algorithms, task orders, engine): a cache made by another model version
    must not be replayed as if it were this one's prediction."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"points-v{POINT_VERSION}".encode())
    for name in _MODEL_SOURCES:
        path = root / name
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:8]


def device_name(spec: Any, model: str | None = None) -> str:
    """GPU spec name + a hash of every spec field + the model fingerprint (`model`, default: this
    checkout's): the 'device' a cache's times belong to."""
    data = asdict(spec) if is_dataclass(spec) else dict(spec)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{data.get('name', 'gpu')}-{digest}-model-{model or model_fingerprint()}"


@dataclass
class Cache:
    """An in-memory cache file; the engine-free mutable holder of results (writes only in save)."""

    device_name: str
    problem_size: str
    tune_params: dict[str, list]
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    kernel_name: str = KERNEL_NAME

    @classmethod
    def for_space(cls, space: SearchSpace, device: str, problem_size: str) -> "Cache":
        return cls(device, problem_size, {p.name: list(p.values) for p in space.parameters})

    @property
    def keys(self) -> list[str]:
        return list(self.tune_params)

    def matches(self, space: SearchSpace) -> bool:
        return self.keys == list(space.names)

    def get(self, space: SearchSpace, point: dict[str, Any]) -> Record | None:
        entry = self.entries.get(space.key(point))
        if entry is None:
            return None
        extras = {k: v for k, v in entry.items() if k not in _RESERVED and k not in space.names}
        extras["cached"] = True
        if isinstance(entry["time"], str):
            return Record(dict(point), None, entry.get("megasim_reason", entry["time"]), extras)
        return Record(dict(point), float(entry["time"]) * 1e3, None, extras)

    def put(self, space: SearchSpace, record: Record) -> None:
        extras = {k: v for k, v in record.extras.items() if k not in ("cached",) and k not in _RESERVED}
        entry: dict[str, Any] = {**{n: record.params[n] for n in space.names}, **extras}
        sim_s = float(record.extras.get("sim_wall_s", 0.0) or 0.0)
        if record.valid:
            ms = float(record.time_us) / 1e3
            entry.update(time=ms, times=[ms])
        else:
            failed = RUNTIME_FAILED if (record.reason or "").startswith("model error") else INVALID
            entry.update(time=failed, times=[], megasim_reason=record.reason)
        entry.update(compile_time=0.0, verification_time=0, benchmark_time=sim_s * 1e3, strategy_time=0,
                     framework_time=0.0,
                     timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        self.entries[space.key(record.params)] = entry

    def to_json(self) -> dict[str, Any]:
        return {"version": CACHE_VERSION, "device_name": self.device_name, "kernel_name": self.kernel_name,
                "problem_size": self.problem_size, "tune_params_keys": self.keys,
                "tune_params": self.tune_params, "objective": "time", "cache": self.entries}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path, space: SearchSpace | None = None, device: str | None = None,
             problem_size: str | None = None) -> "Cache":
        """Read a cache file; MegasimError if it is not one or does not belong to this space/GPU/problem."""
        try:
            text = read_text(path, f"cache file {path}", "cache file", error=MegasimError)
        except (OSError, UnicodeDecodeError) as err:
            raise MegasimError(f"cache file {path}: not a readable Kernel Tuner cache ({err})") from None
        try:
            data = json.loads(text)
            cache = cls(data["device_name"], data["problem_size"],
                        {k: list(data["tune_params"][k]) for k in data["tune_params_keys"]},
                        dict(data["cache"]), data.get("kernel_name", KERNEL_NAME))
        except RecursionError:      # JSON nested deeper than the parser recurses
            raise MegasimError(f"cache file {path}: not a readable Kernel Tuner cache (its JSON nests too deeply)") from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise MegasimError(f"cache file {path}: not a readable Kernel Tuner cache ({err})") from None
        if not isinstance(cache.entries, dict):
            raise MegasimError(f"cache file {path}: not a readable Kernel Tuner cache ('cache' must be an object)")
        for key, entry in cache.entries.items():
            time = entry.get("time") if isinstance(entry, dict) else None
            if isinstance(time, str):       # a configuration that failed: InvalidConfig, RuntimeFailedConfig, ...
                continue
            # a NaN, negative, zero or overflowing time was replayed as the best point ("predicted -5,000.0 us")
            if not finite_number(time) or not time > 0 or not math.isfinite(time * 1e3):
                what = f"time={time!r}" if isinstance(entry, dict) else f"{entry!r}"
                raise MegasimError(f"cache file {path}: entry {key!r} {what} is not allowed: its time must be a finite "
                                   f"number of milliseconds > 0, or a failure such as {INVALID!r}")
        if space is not None and not cache.matches(space):
            raise MegasimError(f"cache file {path}: parameters {cache.keys} differ from the space's {list(space.names)}")
        if device is not None and cache.device_name != device:
            raise MegasimError(f"cache file {path} belongs to device {cache.device_name}, not {device}")
        if problem_size is not None and cache.problem_size != problem_size:
            raise MegasimError(f"cache file {path} belongs to problem {cache.problem_size}, not {problem_size}")
        return cache

    @classmethod
    def open(cls, path: str | Path, space: SearchSpace, device: str, problem_size: str) -> "Cache":
        """Load the cache at path if it exists (checked), else a new empty one."""
        if Path(path).exists():
            return cls.load(path, space, device, problem_size)
        return cls.for_space(space, device, problem_size)
