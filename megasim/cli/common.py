"""What the commands of `megasim` share: argparse value types that refuse out-of-range numbers, the
GPU spec from --gpu or --spec, checked readers of JSON input files, an early check that an output path
can be written, and a progress line for long work.

Every check raises (or, as an argparse type, reports) one line naming the value, the flag or file it
came from and what is allowed. Progress goes to stderr and only on a terminal: library code reports
its stages through a callback (``megasim.plan.predict(..., progress=)``), which ``Progress`` is.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from megasim.errors import InputError, MegasimError
from megasim.input_files import parse_json, read_text


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: it must be an integer") from None
        if value < low or (high is not None and value > high):
            allowed = f">= {low:,}" if high is None else f"in [{low:,}, {high:,}]"
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: it must be an integer {allowed}")
        return value
    parse.__name__ = "integer"
    return parse


def text(what: str) -> Callable[[str], str]:
    """An argparse type: a non-empty string without control characters."""
    def parse(value: str) -> str:
        if not value.strip() or any(ord(ch) < 32 for ch in value):
            raise argparse.ArgumentTypeError(f"{value!r} is not allowed: give {what}")
        return value
    parse.__name__ = "text"
    return parse


def spec_of(args: argparse.Namespace):
    """The GPUSpec of --spec FILE, else of --gpu NAME; InputError when both or neither are given."""
    from megasim.hardware import get_gpu, load_spec, preset_names
    if getattr(args, "spec", None) is not None and getattr(args, "gpu", None) is not None:
        raise InputError(f"--gpu {args.gpu!r} and --spec {args.spec!r} are given together: give one of them "
                         f"(--spec is a spec file, instead of a preset)")
    if getattr(args, "spec", None) is not None:
        if not str(args.spec).strip():
            raise InputError(f"--spec {args.spec!r} is not allowed: give the path of a JSON spec file")
        return load_spec(args.spec)
    if not getattr(args, "gpu", None):
        raise InputError("give --gpu NAME (one of " + ", ".join(preset_names()) + ") or --spec FILE")
    return get_gpu(args.gpu)


def gpu_label(spec, args: argparse.Namespace) -> str:
    """The GPU as the output names it: the spec's name, and the spec file when --spec gave one (a calibrated
    spec and the preset of the same name predict differently: 'on H200' named both)."""
    path = getattr(args, "spec", None)
    return f"{spec.name} (spec file {path})" if path else spec.name


def read_json(path: str, flag: str) -> Any:
    """The parsed JSON of the file `path` given to `flag`; one-line InputError if it cannot be read."""
    try:
        raw = read_text(path, f"{flag} {path!r}", "JSON file")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{flag} {path!r} cannot be read: {getattr(err, 'strerror', None) or err}") from None
    return parse_json(raw, f"{flag} {path!r}")


def read_measurements(path: str, flag: str):
    """A gpu.calibrate.measure Measurements file, checked field by field (Measurements.from_dict)."""
    from megasim.calibration.measurements import Measurements
    return Measurements.from_dict(read_json(path, flag), origin=f"{flag} {path!r}")


def check_out_path(path: str | None, flag: str, suffix: str | None = None) -> None:
    """InputError unless `path` can be written (a file is made and removed in its folder): checked before
    long work, so a typo costs nothing."""
    if path is None:
        return
    p = Path(path)
    if not str(path).strip():
        raise InputError(f"{flag} {path!r} is not allowed: give a file path")
    if p.is_dir():
        raise InputError(f"{flag} {path!r} is not allowed: it is a folder; give a file path")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{flag} {path!r} is not allowed: its folder {str(parent)!r} does not exist")
    if suffix and p.suffix.lower() != suffix:
        raise InputError(f"{flag} {path!r} is not allowed: it must end in {suffix}")
    import os
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"{flag} {path!r} is not allowed: it cannot be written (permissions)")
    import tempfile
    try:        # a file made and removed in the folder: os.access says yes to root on /proc and read-only mounts
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as err:
        raise InputError(f"{flag} {path!r} is not allowed: its folder {str(parent)!r} cannot be written "
                         f"({err.strerror or err})") from None


def finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


class Progress:
    """A one-line progress report on a terminal: call it with what is being done; once the work has
    taken `after_s`, stderr shows ``megasim: <message> (<elapsed> s)``, refreshed every `every_s`,
    and the line is cleared at the end. Silent when the stream is not a terminal (pipes, tests)."""

    def __init__(self, stream: TextIO | None = None, after_s: float = 2.0, every_s: float = 1.0,
                 enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.after_s, self.every_s = after_s, every_s
        self.message = "working"
        self._start = time.monotonic()
        self._done = threading.Event()
        self._shown = False
        self._thread: threading.Thread | None = None

    def __call__(self, message: str) -> None:
        self.message = message

    def __enter__(self) -> "Progress":
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _tick(self) -> None:
        if self._done.wait(self.after_s):
            return
        while not self._done.is_set():
            self.stream.write(f"\r\033[Kmegasim: {self.message} ({time.monotonic() - self._start:.0f} s)")
            self.stream.flush()
            self._shown = True
            self._done.wait(self.every_s)


def gpu_module(name: str, command: str | None = None):
    """Import gpu.calibrate.<name> (numba, a CUDA device) lazily; a one-line MegasimError without them,
    naming the megasim `command` that needs it (default: `name`; calibrate imports `measure`)."""
    import importlib
    what = f"megasim {command or name}"
    try:
        from numba import config, cuda
    except ImportError as err:
        raise MegasimError(f"{what} needs numba-cuda and a CUDA GPU ({err}); install the [gpu] extra on a GPU machine") from None
    if config.ENABLE_CUDASIM:
        raise MegasimError(f"{what} needs a real CUDA GPU, not Numba's simulator (NUMBA_ENABLE_CUDASIM=1)")
    try:
        available = cuda.is_available()
    except Exception:  # noqa: BLE001 - any driver problem means no GPU here
        available = False
    if not available:
        raise MegasimError(f"{what} needs a CUDA GPU and none was found (run it on the GPU machine: bash gpu/on_device.sh {what} ...)")
    return importlib.import_module(f"gpu.calibrate.{name}")


def repo_relative(path: str) -> str:
    repo = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(repo))
    except ValueError:
        return str(path)


def layers_of(names: list[str], flag: str) -> list[str]:
    """Layer names (``table2`` expanded to the paper's 13), each checked by parse_layer."""
    from megasim.workloads import TABLE2_NAMES, parse_layer
    layers = [n for name in names for n in (TABLE2_NAMES if name == "table2" else (name,))]
    for name in layers:
        parse_layer(name, source=flag)
    return layers
