"""Checks the Winograd executors on a real GPU at sizes the simulator cannot run, and times them
roughly (for orientation only; the experiments measure properly).

    bash gpu/on_device.sh python -m gpu.diagnostics.selfcheck [--quick]

Prints one line per (layer, m, variant): normwise relative error against the float64 oracle, whether
the output equals the non-fused one bit for bit, and the median time of the launch sequence (CUDA
events, device arrays in and out, after one warm-up).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import cuda

from gpu.runtime import executor as ex
from gpu.winograd import _plan, _schedule, reference
from megasim.algorithms.winograd.lowering import WinogradConfig
from megasim.workloads.problem import ConvProblem

LAYERS = [  # N, C, K, H, W
    (1, 3, 5, 5, 7),
    (2, 37, 45, 13, 11),
    (8, 64, 64, 28, 28),
    (32, 128, 128, 28, 28),
]
VARIANTS = [  # name, schedule, style, dispatch, blocks_per_sm
    ("nonfused", "nonfused", None, None, None),
    ("fused-ticket", "fused", None, None, None),
    ("fused-blockidx", "fused", "per_task", "blockidx", None),
    ("fused-persistent", "fused", "persistent", "ticket", None),
]


def _time_ms(fn, reps: int) -> float:
    fn()
    cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = cuda.event(), cuda.event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop))
    return float(np.median(times))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the two smallest layers only")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    layers = LAYERS[:2] if args.quick else LAYERS
    rng = np.random.default_rng(0)
    for n, c, k, h, w in layers:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
        ref = reference(x, wt) if n * k * h * w * c <= 2e8 else None
        for m in (4, 2):
            cfg = WinogradConfig(m=m)
            plan = _plan(ConvProblem(n, c, k, h, w), cfg)
            d_x = cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
            d_w = cuda.to_device(wt)
            base = None
            for name, sched_name, style, dispatch, bps in VARIANTS:
                sched = _schedule(plan, sched_name, None, style, dispatch, bps)
                kernels = "per_kind" if sched_name == "nonfused" else "megakernel"
                ws = ex.workspace(plan, d_x, d_w)
                t0 = time.perf_counter()
                ex.run_schedule(plan, sched, ws, kernels=kernels)
                first_s = time.perf_counter() - t0
                y = ws.Y.copy_to_host().transpose(0, 3, 1, 2)
                err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref)) if ref is not None else float("nan")
                base = y if base is None else base
                same = bool(np.array_equal(y, base))
                ms = _time_ms(lambda: ex.run_schedule(plan, sched, ws, kernels=kernels, check=False), args.reps)
                print(f"N={n} C={c} K={k} H={h} W={w} m={m} {name:17s} tasks={plan.graph.num_tasks:6d} "
                      f"graph={plan.graph.hash} rel_err={err:.2e} same_as_nonfused={same} first_call_s={first_s:.1f} median_ms={ms:.3f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
