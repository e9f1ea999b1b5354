"""Where a device diagnostic's rows go: ``<out_dir>/<name>`` (on the GPU machine ``--out $OUT``, the folder
the device runner fetches), as JSON
with the provenance every result file carries (``megasim.calibration.validation.run_meta``: commit, date, Python,
command) and the device's name."""

from __future__ import annotations

import json
import os

from numba import cuda


def out_dir_arg(argv: list[str] | None, description: str, default: str | None = ".") -> str | None:
    """The ``--out DIR`` of a diagnostic's command line (`default` when not given)."""
    import argparse
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=default, help="output folder (on the GPU machine: --out $OUT)")
    return ap.parse_args(argv).out


def write_result(name: str, rows: list[dict], module: str, out_dir: str = ".") -> str:
    """Write ``{"meta": ..., "rows": rows}`` to ``out_dir/name``; print and return the path."""
    from megasim.calibration.validation import run_meta
    meta = run_meta({"device": str(cuda.get_current_device().name),
                     "command": f"bash gpu/on_device.sh python -m {module}"})
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"wrote {path}")
    return path
