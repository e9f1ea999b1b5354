"""Provenance of experiment results, and the one writer every script uses (CSV + JSON side by side).

``provenance()`` records what produced a result: the git commit (and whether the tree had uncommitted
changes), the UTC date, the machine (hostname, CPU model), and the versions of Python and the
libraries the model depends on. ``write_results`` writes ``DIR/NAME.csv`` (the rows, for plotting and
diffing) and ``DIR/NAME.json`` (``{"meta": ..., "rows": ...}``, the same rows with the metadata).
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any
from megasim.provenance import git_sha

_REPO = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=_REPO, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def nvidia_smi(fields: tuple[str, ...]) -> list[dict[str, str]]:
    """Every GPU of the host as nvidia-smi lists it, one dict of `fields` (its --query-gpu names) per GPU;
    one dict with the key ``error`` where nvidia-smi cannot be run."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return [{"error": f"{type(exc).__name__}: {exc}"}]
    return [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.stdout.strip().splitlines()]


def provenance(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What produced a result: commit, date, machine, versions; `extra` (parameters, GPU spec) is merged in."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    meta: dict[str, Any] = {
        "git_sha": git_sha() or None,     # .git_sha on the GPU machine's copy, else git
        "git_dirty": bool(status) if status is not None else None,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in ("numpy", "scipy", "simpy", "matplotlib", "megasim")},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    if extra:
        meta.update(extra)
    return meta


def write_results(rows: list[dict[str, Any]], out_dir: str | Path, name: str,
                  meta: dict[str, Any]) -> tuple[Path, Path]:
    """Write DIR/NAME.csv and DIR/NAME.json; returns their paths. Columns are the union of the rows'
    keys in first-seen order (a row without a key leaves that cell empty)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    csv_path, json_path = out / f"{name}.csv", out / f"{name}.json"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=_jsonable) + "\n")
    return csv_path, json_path


def read_rows(csv_path: str | Path) -> list[dict[str, str]]:
    """The rows of a results CSV, as strings (the plotting side converts what it uses)."""
    with Path(csv_path).open(newline="") as fh:
        return list(csv.DictReader(fh))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):        # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
