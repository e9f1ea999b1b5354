"""Where a device diagnostic's rows go: ``$OUT/<name>`` (the device runner fetches ``$OUT``), as JSON
with the provenance every result file carries (``megasim.calibration.validation.run_meta``: commit, date, Python,
command) and the device's name."""

from __future__ import annotations

import json
import os

from numba import cuda


def write_result(name: str, rows: list[dict], module: str) -> str:
    """Write ``{"meta": ..., "rows": rows}`` to ``$OUT/name`` (or ./name); print and return the path."""
    from megasim.calibration.validation import run_meta
    meta = run_meta({"device": str(cuda.get_current_device().name),
                     "command": f"bash gpu/on_device.sh python -m {module}"})
    path = os.path.join(os.environ.get("OUT", "."), name)
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"wrote {path}")
    return path
