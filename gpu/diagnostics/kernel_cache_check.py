"""The on-disk kernel cache (``gpu.kernels.cache``) end to end on a GPU: two processes, one cache folder.

Each process runs ``gpu.winograd.conv2d`` fused and non-fused (NHWC, F(4x4)) on an awkward small shape with fresh
random inputs, checks the output against a float64 reference (normwise relative error), and reports the
seconds of its first calls (compilation, or loading from the cache), the dispatchers' cache hits and misses
and the error. The first process starts from an empty folder (it compiles and writes), the second finds the
entries (it loads): the second's first calls should take well under a second and its error be the same.

    bash gpu/on_device.sh python -m gpu.diagnostics.kernel_cache_check [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPE = (3, 19, 21, 13, 11)     # N, C, K, H, W: no dimension a multiple of a tile


def one_process(folder: str) -> dict:
    """Runs in a child process: the calls, their times, the cache counters and the errors."""
    import numpy as np

    from gpu.kernels import cache
    from gpu.kernels.winograd import megakernel as mk
    cache.set_directory(folder)
    from gpu.winograd import conv2d
    n, c, k, h, w = SHAPE
    rng = np.random.default_rng()
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    f = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((n, h, w, k))
    for r in range(3):
        for s in range(3):
            ref += np.einsum("nhwc,kc->nhwk", xp[:, r:r + h, s:s + w, :], f[:, :, r, s].astype(np.float64))
    out = {}
    for schedule in ("fused", "nonfused"):
        t0 = time.perf_counter()
        y = conv2d(x, f, schedule=schedule, layout="NHWC", m=4)
        out[f"{schedule}_first_call_s"] = round(time.perf_counter() - t0, 3)
        out[f"{schedule}_rel_err"] = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    kernels = [mk.kernels_for("fp32").megakernel, *vars(mk.transform_kernels_for(4)).values(),
               mk.kernels_for("fp32").gemm_kernel, mk.restore_kernel]
    out["cache_hits"] = sum(sum(getattr(d, "_cache_hits", {}).values()) for d in kernels)
    out["cache_misses"] = sum(sum(getattr(d, "_cache_misses", {}).values()) for d in kernels)
    out["entries"] = len(list(Path(folder).glob("*/*.nbk")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help="write the two processes' reports here (JSON)")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(one_process(args.child)))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        reports = []
        for label in ("empty cache", "filled cache"):
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gpu.diagnostics.kernel_cache_check", "--child", folder],
                                  capture_output=True, text=True, check=True)
            report = {"process": label, "wall_s": round(time.perf_counter() - t0, 2),
                      **json.loads(done.stdout.strip().splitlines()[-1])}
            reports.append(report)
            print(json.dumps(report))
    if args.out:
        import datetime as dt
        import platform

        import numba_cuda
        from numba import cuda

        from megasim.provenance import git_sha
        dev = cuda.get_current_device()
        meta = {"device": dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name),
                "compute_capability": list(dev.compute_capability), "git_sha": git_sha(),
                "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "python": platform.python_version(), "numba_cuda": numba_cuda.__version__,
                "command": "python -m gpu.diagnostics.kernel_cache_check"}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "shape_nckhw": SHAPE, "reports": reports}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
