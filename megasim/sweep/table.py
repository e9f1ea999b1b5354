"""A sweep's results table: one file, one row per point, every row with its provenance.

The file is Parquet (``.parquet``, needs pyarrow) or CSV (``.csv``); without a suffix choice, Parquet
when pyarrow imports, else CSV. The columns (``COLUMNS``) are fixed, so a table written by one run is
read by the next; ``point_key`` identifies the point (``megasim.sweep.points``): a rerun skips the keys
already in the table and a key is never written twice.

Writes are whole-file and atomic (a temporary file beside the table, then a rename), so an interrupted
sweep leaves the table as it was at its last flush: complete rows only. The runner flushes every few
seconds, so a sweep killed half-way keeps what it had finished.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Iterable

from megasim.errors import InputError

# name -> type; the order is the file's column order
COLUMNS: dict[str, type] = {
    "point_key": str, "status": str, "reason": str,
    "layer": str, "problem": str, "batch": int, "gpu": str, "gpu_name": str, "gpu_spec_hash": str,
    "algorithm": str, "schedule": str, "mode": str, "sweep_param": str, "point": str,
    "predicted_us": float, "param": str, "taskgraph_hash": str, "tasks": int, "evaluations": int, "best_point": str,
    "sim_wall_s": float, "sim_cpu_s": float, "worker": str,
    "sweep": str, "sweep_hash": str, "megasim_version": str, "model_fingerprint": str, "git_sha": str,
    "git_dirty": str, "date_utc": str,
}
FORMATS = (".parquet", ".csv")


def have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def default_suffix() -> str:
    return ".parquet" if have_pyarrow() else ".csv"


def check_path(path: str | Path, source: str = "out") -> Path:
    """The table's path; InputError for a suffix other than .parquet / .csv, or .parquet without pyarrow."""
    path = Path(path)
    if path.suffix not in FORMATS:
        raise InputError(f"{source} {str(path)!r} is not allowed: the table's name must end in .parquet or .csv")
    if path.suffix == ".parquet" and not have_pyarrow():
        raise InputError(f"{source} {str(path)!r}: writing Parquet needs pyarrow, which is not installed "
                         f"(pip install pyarrow, or name the table .csv)")
    return path


def normalise(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every column, each value of its column's type (None where there is none)."""
    out: dict[str, Any] = {}
    for name, kind in COLUMNS.items():
        value = row.get(name)
        if value is None or value == "" and kind is not str:
            out[name] = None if kind is not str else ""
        else:
            try:
                out[name] = kind(float(value)) if kind is int else kind(value)
            except (TypeError, ValueError):
                out[name] = None
    return out


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a table file (none if it does not exist); InputError if it cannot be read as one."""
    path = check_path(path)
    if not path.exists():
        return []
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            rows = pq.read_table(path).to_pylist()
        else:
            with open(path, newline="") as fh:
                rows = list(csv.DictReader(fh))
    except (OSError, ValueError) as err:
        raise InputError(f"table {str(path)!r} cannot be read as a sweep table: {' '.join(str(err).split())}") from None
    if rows and "point_key" not in rows[0]:
        raise InputError(f"table {str(path)!r} is not a sweep table: it has no point_key column")
    return [normalise(r) for r in rows]


def write_table(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """All `rows` to `path`, atomically (a temporary file, then a rename)."""
    path = check_path(path)
    rows = [normalise(r) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        types = {str: pa.string(), int: pa.int64(), float: pa.float64()}
        schema = pa.schema([(name, types[kind]) for name, kind in COLUMNS.items()])
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    else:
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
            writer.writeheader()
            writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    os.replace(tmp, path)


class ResultsTable:
    """The rows of one table held in memory: those read from the file, then the new ones as they come;
    ``flush`` writes them all. A key already present is not added again."""

    def __init__(self, path: str | Path) -> None:
        self.path = check_path(path)
        self.rows: list[dict[str, Any]] = read_table(self.path)
        self._keys = {r["point_key"] for r in self.rows}
        self.added = 0
        self._dirty = False

    def keys(self, include_failed: bool = True) -> set[str]:
        if include_failed:
            return set(self._keys)
        return {r["point_key"] for r in self.rows if r["status"] == "ok"}

    def stale_keys(self, fingerprint: str) -> set[str]:
        """The keys whose rows another model version computed (their ``model_fingerprint`` is not
        `fingerprint`: ``megasim.search.cache.model_fingerprint``, a hash of the model's source)."""
        return {r["point_key"] for r in self.rows if r.get("model_fingerprint") not in (None, "", fingerprint)}

    def drop(self, keys: set[str]) -> None:
        """Forget the rows of `keys` (a failed point to be run again)."""
        if keys & self._keys:
            self.rows = [r for r in self.rows if r["point_key"] not in keys]
            self._keys -= keys
            self._dirty = True

    def add(self, row: dict[str, Any]) -> bool:
        """Add one row unless its key is there; whether it was added."""
        key = row["point_key"]
        if key in self._keys:
            return False
        self._keys.add(key)
        self.rows.append(normalise(row))
        self.added += 1
        self._dirty = True
        return True

    def flush(self, order: dict[str, int] | None = None) -> None:
        """Write the table if anything changed; with `order` (key -> position), rows sorted by it (rows
        not in it keep their place after those that are)."""
        if order is not None:
            last = len(order)
            self.rows.sort(key=lambda r: order.get(r["point_key"], last))
        if self._dirty or order is not None:
            write_table(self.path, self.rows)
            self._dirty = False
