"""Compiled kernels kept on disk between processes, keyed by what determines their code.

Numba compiles a kernel the first time it is launched with a signature (type inference, lowering,
NVVM, ptxas): for the Winograd megakernels several seconds each, about 50 s for the kernels one
validation sweep launches, and every new process pays it again: each worker of a GPU sweep, each
``megasim validate``. Numba's own cache (``cuda.jit(cache=True)``) cannot hold these kernels: it keys an
entry by the function's bytecode and its pickled closure, and the kernels here are made by factories
whose closures hold other dispatchers, which pickle with an id drawn anew in every process, so no key
ever matches in another process (and generated kernels have no source file for its index).

``persist(dispatcher, *factory_args)`` gives a dispatcher a cache keyed instead by:
- the source of every module its code can come from (``SOURCES``: gpu/kernels/ and the Winograd
  algorithm's modules whose constants the kernels read): any edit there misses every entry;
- the kernel's qualified name and the arguments of the factory that made it (the caller names them:
  they must determine the generated code, e.g. the GEMM math, the tile of a build of its own, the
  register caps), and its jit options;
- the argument types of the launch, the device's compute capability, the numba-cuda and Python versions.

An entry is the compiled kernel as numba-cuda serialises it for its own cache (``_Kernel._reduce_states``:
PTX and cubin, entry name, signature, options), written to a temporary file and renamed into place, so
workers compiling the same kernel at once never read a torn entry. Entries sit in one folder per source
digest; the first write of a process keeps the ``KEPT_SOURCE_VERSIONS`` most recently written folders (its
own among them) and removes older ones, so the cache stays bounded as the sources change. An entry that cannot be read or
rebuilt is compiled again (and rewritten). The default folder is ``~/.cache/megasim/kernels``;
``set_directory`` moves it or turns the cache off (None). Under Numba's CUDA simulator nothing is
compiled and ``persist`` returns the dispatcher unchanged. This relies on numba-cuda 0.30's dispatcher
internals (``_cache``, ``_Kernel._rebuild``); where they are missing the dispatcher compiles as usual.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from numba import config

__all__ = ["DEFAULT_DIRECTORY", "KEPT_SOURCE_VERSIONS", "SOURCES", "SourceKeyedCache", "directory", "kernel_key", "persist",
           "prune", "set_directory", "source_digest"]

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCES = ("gpu/kernels", "megasim/algorithms/winograd")
DEFAULT_DIRECTORY = Path.home() / ".cache" / "megasim" / "kernels"
# Entries live in one folder per source digest; a process that writes keeps the most recently written
# KEPT_SOURCE_VERSIONS folders (its own among them) and removes the rest, so edits do not grow the cache without end.
KEPT_SOURCE_VERSIONS = 4
_pruned: set[Path] = set()
_directory: Path | None = DEFAULT_DIRECTORY


def set_directory(path: str | os.PathLike | None) -> None:
    """Keep entries in ``path`` from now on (created when first written); None turns the cache off for
    dispatchers persisted afterwards and stops loads and saves of those persisted before."""
    global _directory
    _directory = None if path is None else Path(path)


def directory() -> Path | None:
    """The folder entries go to (None: the cache is off)."""
    return _directory


@lru_cache(maxsize=None)
def source_digest() -> str:
    """SHA-256 over the path and bytes of every .py file under ``SOURCES`` (sorted by path)."""
    h = hashlib.sha256()
    for folder in SOURCES:
        for f in sorted((ROOT / folder).rglob("*.py")):
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def kernel_key(qualname: str, factory_args: tuple, targetoptions: dict, signature: str,
               compute_capability: tuple) -> str:
    """The hex key of one compiled kernel (see the module docstring for what goes in)."""
    import numba_cuda
    parts = (source_digest(), qualname, repr(tuple(factory_args)), repr(sorted(targetoptions.items())), signature,
             repr(tuple(compute_capability)), numba_cuda.__version__, f"{sys.version_info[0]}.{sys.version_info[1]}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class SourceKeyedCache:
    """A dispatcher's ``_cache``: ``load_overload`` / ``save_overload`` as numba-cuda's dispatcher calls them."""

    def __init__(self, dispatcher, factory_args: tuple) -> None:
        self._qualname = getattr(dispatcher.py_func, "__qualname__", repr(dispatcher.py_func))
        self._module = getattr(dispatcher.py_func, "__module__", "")
        self._args = tuple(factory_args)
        self._options = dict(dispatcher.targetoptions)

    @staticmethod
    def _compute_capability() -> tuple:
        from numba import cuda
        return tuple(cuda.get_current_device().compute_capability)

    def _path(self, sig) -> Path | None:
        if _directory is None:
            return None
        key = kernel_key(f"{self._module}.{self._qualname}", self._args, self._options, str(sig),
                         self._compute_capability())
        return _directory / source_digest()[:16] / f"{key}.nbk"

    def load_overload(self, sig, target_context):
        path = self._path(sig)
        if path is None or not path.is_file():
            return None
        from numba.cuda.dispatcher import _Kernel
        try:
            target_context.refresh()
            return _Kernel._rebuild(**pickle.loads(path.read_bytes()))
        except Exception:  # noqa: BLE001 - an unreadable or stale entry: compile instead (and rewrite it)
            return None

    def save_overload(self, sig, kernel) -> None:
        path = self._path(sig)
        if path is None or getattr(kernel, "launch_config_sensitive", False):
            return
        from numba.cuda.serialize import dumps
        tmp = None
        try:
            data = dumps(kernel._reduce_states())
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except Exception:  # noqa: BLE001 - a cache that cannot be written (read-only home, full disk): compile next time
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return
        if path.parent.parent not in _pruned:
            _pruned.add(path.parent.parent)
            prune(path.parent.parent, keep=path.parent.name)


def prune(folder: Path, keep: str, versions: int = KEPT_SOURCE_VERSIONS) -> None:
    """Remove the source-version folders of ``folder`` beyond the ``versions`` most recently written, never ``keep``."""
    try:
        found = sorted((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    kept = [p for p in found if p.name == keep] + [p for p in found if p.name != keep][:max(versions - 1, 0)]
    for p in found:
        if p not in kept:
            shutil.rmtree(p, ignore_errors=True)


def persist(dispatcher, *factory_args):
    """``dispatcher`` with its compiled kernels kept on disk, keyed by ``factory_args`` (what the factory that
    made it was called with; they must determine its code) among the rest (module docstring); returns it."""
    if config.ENABLE_CUDASIM or not hasattr(dispatcher, "_cache"):
        return dispatcher
    try:
        from numba.cuda.dispatcher import _Kernel
    except ImportError:
        return dispatcher
    if not hasattr(_Kernel, "_rebuild"):
        return dispatcher
    dispatcher._cache = SourceKeyedCache(dispatcher, factory_args)
    return dispatcher
