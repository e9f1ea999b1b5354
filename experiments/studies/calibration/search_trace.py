"""Where two runs of one calibration fit part: every point the batched least squares simulates, and its
residuals, logged as float hex, then two logs compared point by point.

``trace``: run ``megasim calibrate`` with ``megasim.calibration.lsq.least_squares_batched`` wrapped so that
each search (a stage of a kind's fit) records its start and every (point, residuals) pair. ``compare``: the
first search whose points or residuals differ between two traces, the point where they part, and the
singular values of that search's first finite-difference Jacobian (a zero one is a direction the runs leave
loose, along which SciPy's step is whatever the BLAS's rounding makes of it). Nothing is fitted here beyond
what ``megasim calibrate`` fits; ``trace`` runs on any CPU, as long as the refit.

    python -m experiments.studies.calibration.search_trace trace TRACE.json calibrate --algo winograd \
        --out SPEC --from-measurements M.json
    python -m experiments.studies.calibration.search_trace compare A.json B.json [--out DIVERGENCE.json]
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np


def trace(out: str, argv: list[str]) -> int:
    """``megasim calibrate`` (argv) with every search's points and residuals written to ``out``."""
    import megasim.calibration.lsq as lsq
    original = lsq.least_squares_batched
    searches: list[dict[str, Any]] = []

    def traced(residuals_many, *args, **kwargs):
        points: list = []
        searches.append({"x0": [float(v).hex() for v in np.asarray(args[0], float)], "points": points})

        def logged(xs):
            rs = residuals_many(xs)
            for x, r in zip(xs, rs):
                points.append([[float(v).hex() for v in np.asarray(x)], [float(v).hex() for v in np.asarray(r)]])
            return rs
        return original(logged, *args, **kwargs)

    lsq.least_squares_batched = traced
    from megasim.cli.main import main
    t0 = time.time()
    rc = main(argv)
    with open(out, "w") as fh:
        json.dump({"rc": rc, "seconds": time.time() - t0, "searches": searches}, fh)
    return rc


def _floats(hexes) -> np.ndarray:
    return np.array([float.fromhex(v) for v in hexes])


def first_jacobian_singular_values(search: dict[str, Any]) -> list[float]:
    """The singular values of a search's first Jacobian: its start and the n forward-difference points after it."""
    pts = search["points"]
    x = np.array([_floats(p[0]) for p in pts])
    r = np.array([_floats(p[1]) for p in pts])
    n = x.shape[1]
    jac = np.column_stack([(r[i + 1] - r[0]) / (x[i + 1] - x[0])[i] for i in range(n)])
    return np.linalg.svd(jac, compute_uv=False).tolist()


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Where two traces part: each search of ``a`` (in the order they began) beside the search of ``b`` with
    the same start and the same residuals there (the same cost name's runs; the kinds are fitted on threads side
    by side, so the order may differ), and the first
    point or residuals that differ. Searches of ``a`` whose start ``b`` never ran follow a difference
    already found (a later stage starts from an earlier one's fit)."""
    unused = list(b["searches"])
    unmatched = 0
    for s, sa in enumerate(a["searches"]):
        sb = next((x for x in unused if x["x0"] == sa["x0"] and x["points"][:1] == sa["points"][:1]), None)
        if sb is None:
            unmatched += 1
            continue
        unused.remove(sb)
        for i, (pa, pb) in enumerate(zip(sa["points"], sb["points"])):
            if pa[0] != pb[0] or pa[1] != pb[1]:
                return {"search": s, "point": i,
                        "what": "point" if pa[0] != pb[0] else "residuals at the same point",
                        "a": _floats(pa[0]).tolist(), "b": _floats(pb[0]).tolist(),
                        "first_jacobian_singular_values": first_jacobian_singular_values(sa)}
        if len(sa["points"]) != len(sb["points"]):
            return {"search": s, "point": min(len(sa["points"]), len(sb["points"])), "what": "length"}
    if unmatched:
        return {"search": None, "what": f"{unmatched} searches of the first trace have starts the second never ran"}
    return {"search": None, "what": "identical", "searches": len(a["searches"]),
            "points": sum(len(x["points"]) for x in a["searches"])}


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "trace":
        return trace(argv[1], argv[2:])
    if len(argv) >= 3 and argv[0] == "compare":
        traces = []
        for path in argv[1:3]:
            try:
                with open(path) as fh:
                    traces.append(json.load(fh))
            except (OSError, ValueError) as err:
                print(f"search_trace compare: {path!r} is not a trace written by 'search_trace trace': {err}",
                      file=sys.stderr)
                return 2
            if not isinstance(traces[-1], dict) or not isinstance(traces[-1].get("searches"), list):
                print(f"search_trace compare: {path!r} is not a trace written by 'search_trace trace' "
                      "(no 'searches' list)", file=sys.stderr)
                return 2
        result = compare(*traces)
        text = json.dumps(result, indent=1)
        if "--out" in argv:
            with open(argv[argv.index("--out") + 1], "w") as fh:
                fh.write(text + "\n")
        print(text)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
