"""The gap between two real kernels queued back to back: the spec's ``kernel_boundary_ns``.

The model starts each kernel of a pipeline ``kernel_boundary_ns`` after the previous one's last block ends,
and a kernel timed alone queued behind a spin kernel (``gpu.calibrate.occupancy.time_queued``, how the
calibration times every single-kind run) ``queued_launch_ns`` after the timing starts. Both come from empty
kernels: ``queued_launch_ns`` is an empty kernel's queued time; the empty-kernel probe
(``gpu.calibrate.measure.probe_boundary``) times a stream of 200 empty one-block kernels. Between kernels that
fill the GPU the gap is longer: the non-fused pipeline's launches take about as long inside the pipeline as
alone on the H200 (docs/findings.md, "The gap between real kernels"), where the empty kernels' 1.4 us would
make each one 2.2 us shorter.

This probe times kernels of the kind the pipelines run: ``waves`` waves of ``blocks_per_sm`` blocks per SM, each
block's 128 threads running ``iters`` dependent FMAs (no memory traffic but one store per block), queued alone
(T1) and ``kernels`` of them back to back (Tn). Each queued run pays one ``queued_launch_ns`` start and each
kernel its body T1 - ``queued_launch_ns``, so the gap between two of them, as the model reads it, is

    boundary = (Tn - T1) / (n - 1) - (T1 - queued_launch_ns).

``boundary_rows`` times several shapes (the calibration keeps the median of ``CALIBRATION_SHAPES``);
``python -m gpu.calibrate.boundary --out FILE.json`` prints and saves every shape's rows (GPU machine).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda, float32

log = logging.getLogger(__name__)

# (blocks_per_sm, waves, iters): full-GPU kernels of about 2-20 us, one and several waves.
CALIBRATION_SHAPES = ((4, 1, 2000), (4, 4, 500), (4, 4, 2000), (2, 8, 500))
KERNELS = 4


@cuda.jit
def busy_kernel(out, iters, writes):
    """Grid: any, 128 threads per block. Each thread runs ``iters`` dependent FMAs, then stores ``writes`` floats
    (coalesced: the block's 128 threads write consecutive floats; ``out`` holds grid x 128 x writes)."""
    x = float32(cuda.threadIdx.x)
    for _ in range(iters):
        x = x * float32(0.9999999) + float32(1e-7)
    base = cuda.blockIdx.x * 128 * writes + cuda.threadIdx.x
    for j in range(writes):
        out[base + j * 128] = x


@cuda.jit
def busy_kernel_b(out, iters, writes):
    """``busy_kernel``'s code as another kernel (a pipeline's next kernel is another function)."""
    x = float32(cuda.threadIdx.x)
    for _ in range(iters):
        x = x * float32(0.9999999) + float32(1e-7)
    base = cuda.blockIdx.x * 128 * writes + cuda.threadIdx.x
    for j in range(writes):
        out[base + j * 128] = x


def alternating_row(sm: int, spin, queued_launch_ns: float, smem_b: int, other_kernel: bool,
                    blocks_per_sm: int = 1, waves: int = 4, iters: int = 500, repeats: int = 20) -> dict[str, Any]:
    """The gap between two different kernels: A (``busy_kernel``, no dynamic shared memory) and B (the same
    code, or ``busy_kernel_b`` when ``other_kernel``, with ``smem_b`` bytes of dynamic shared memory), queued
    A, B, A, B: gap = (T_ABAB - q - 2 (T_A - q) - 2 (T_B - q)) / 3."""
    from gpu.calibrate.occupancy import _opt_in, time_queued
    grid = sm * blocks_per_sm * waves
    out = cuda.device_array(grid * 128, np.float32)
    kb = busy_kernel_b if other_kernel else busy_kernel
    busy_kernel[grid, 128](out, iters, 1)
    kb[grid, 128](out, iters, 1)
    cuda.synchronize()
    if smem_b > 48 * 1024:
        _opt_in(kb, smem_b)

    def a():
        busy_kernel[grid, 128, 0, 0](out, iters, 1)

    def b():
        kb[grid, 128, 0, smem_b](out, iters, 1)

    def abab():
        a(); b(); a(); b()

    ta, _ = time_queued(lambda i: a(), spin, warmup=3, repeats=repeats)
    tb, _ = time_queued(lambda i: b(), spin, warmup=3, repeats=repeats)
    tab, _ = time_queued(lambda i: abab(), spin, warmup=3, repeats=repeats)
    q = queued_launch_ns
    t_a, t_b, t_abab = ta.median_ms * 1e6, tb.median_ms * 1e6, tab.median_ms * 1e6
    return {"smem_b": smem_b, "other_kernel": other_kernel, "grid": grid, "iters": iters,
            "a_ns": t_a, "b_ns": t_b, "abab_ns": t_abab,
            "boundary_ns": (t_abab - q - 2 * (t_a - q) - 2 * (t_b - q)) / 3}


def boundary_row(sm: int, spin, queued_launch_ns: float, blocks_per_sm: int, waves: int, iters: int,
                 writes: int = 1, kernels: int = KERNELS, repeats: int = 20) -> dict[str, Any]:
    """One shape's queued times (one kernel, ``kernels`` back to back) and the gap it implies, in ns."""
    from gpu.calibrate.occupancy import time_queued
    if kernels < 2:
        raise ValueError(f"kernels={kernels!r} is not allowed: the gap needs at least 2 kernels")
    grid = sm * blocks_per_sm * waves
    out = cuda.device_array(grid * 128 * writes, np.float32)
    busy_kernel[grid, 128](out, iters, writes)
    cuda.synchronize()

    def run(n):
        for _ in range(n):
            busy_kernel[grid, 128](out, iters, writes)

    one, _ = time_queued(lambda i: run(1), spin, warmup=3, repeats=repeats)
    many, host = time_queued(lambda i: run(kernels), spin, warmup=3, repeats=repeats)
    t1, tn = one.median_ms * 1e6, many.median_ms * 1e6
    return {"blocks_per_sm": blocks_per_sm, "waves": waves, "iters": iters, "writes": writes,
            "bytes_written": grid * 128 * writes * 4, "grid": grid, "kernels": kernels,
            "one_ns": t1, "many_ns": tn, "host_issue_ms": host,
            "boundary_ns": (tn - t1) / (kernels - 1) - (t1 - queued_launch_ns)}


def boundary_rows(sm: int, spin, queued_launch_ns: float, shapes=CALIBRATION_SHAPES) -> list[dict[str, Any]]:
    """``boundary_row`` of each (blocks_per_sm, waves, iters) of ``shapes``."""
    return [boundary_row(sm, spin, queued_launch_ns, *shape) for shape in shapes]


def probe_kernel_boundary(sm: int, spin, queued_launch_ns: float) -> tuple[float, str, list[dict[str, Any]]]:
    """(kernel_boundary_ns, how it was measured, the rows): the median gap over ``CALIBRATION_SHAPES``."""
    rows = boundary_rows(sm, spin, queued_launch_ns)
    value = statistics.median(r["boundary_ns"] for r in rows)
    how = (f"kernels of 128-thread blocks running dependent FMAs ({', '.join(f'{b}/SM x {w} waves x {i} FMAs' for b, w, i in CALIBRATION_SHAPES)}), "
           f"queued alone (T1) and {KERNELS} back to back (Tn) behind a spin kernel; gap = (Tn - T1) / "
           f"{KERNELS - 1} - (T1 - queued_launch_ns), median over the shapes (gpu.calibrate.boundary)")
    return value, how, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file of the rows")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from gpu.calibrate.occupancy import Spinner, probe_queued_launch
    from gpu.calibrate.validate import device_info
    from megasim.provenance import git_sha
    sm = cuda.get_current_device().MULTIPROCESSOR_COUNT
    spin = Spinner()
    queued = probe_queued_launch(sm, spin)["queued_launch_ns"]
    shapes = CALIBRATION_SHAPES + ((1, 1, 2000), (1, 4, 2000), (8, 2, 1000), (4, 16, 200), (4, 1, 20000),
                                   (4, 4, 500, 16), (4, 4, 500, 64), (4, 4, 500, 256), (4, 16, 100, 64),
                                   (4, 16, 100, 256))
    rows = boundary_rows(sm, spin, queued, shapes)
    for r in rows:
        print(f"{r['blocks_per_sm']}/SM x {r['waves']:2d} waves x {r['iters']:5d} FMAs, {r['bytes_written'] / 2**20:6.1f} MiB written: one {r['one_ns'] / 1e3:7.2f} us, "
              f"{r['kernels']} back to back {r['many_ns'] / 1e3:7.2f} us -> gap {r['boundary_ns'] / 1e3:5.2f} us")
    alternating = [alternating_row(sm, spin, queued, smem, other) for other in (False, True)
                   for smem in (0, 16 * 1024, 46 * 1024, 100 * 1024, 160 * 1024)]
    for r in alternating:
        print(f"A (no shared memory) then {'another kernel' if r['other_kernel'] else 'the same kernel'} with "
              f"{r['smem_b'] // 1024:3d} KiB: A {r['a_ns'] / 1e3:6.2f} us, B {r['b_ns'] / 1e3:6.2f} us, ABAB "
              f"{r['abab_ns'] / 1e3:7.2f} us -> gap {r['boundary_ns'] / 1e3:5.2f} us")
    doc = {"what": __doc__.splitlines()[0], "queued_launch_ns": queued, "alternating": alternating, "device": device_info(), "git_sha": git_sha(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "calibration_value_ns": statistics.median(r["boundary_ns"] for r in rows[:len(CALIBRATION_SHAPES)]),
           "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"queued_launch_ns {queued:.0f}; calibration value {doc['calibration_value_ns']:.0f} ns; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
