"""The gap between two real kernels queued back to back: a check of the spec's ``kernel_boundary_ns``.

The model starts each kernel of a pipeline ``kernel_boundary_ns`` after the previous one's last block ends, and a
kernel timed alone queued behind a spin kernel (``gpu.calibrate.occupancy.time_queued``, how the calibration times
every single-kind run) ``queued_launch_ns`` after the timing starts. Both are measured on empty kernels
(``gpu.calibrate.measure.probe_boundary`` times a stream of 200 empty one-block kernels: 1.4 us on the H200). This
probe times kernels like the pipelines' instead: ``waves`` waves of ``blocks_per_sm`` 128-thread blocks per SM, each
thread running ``iters`` dependent FMAs and then storing ``writes`` floats; queued alone (T1) and ``kernels`` of them
back to back (Tn). Each queued run pays one ``queued_launch_ns`` start and each kernel its body T1 -
``queued_launch_ns``, so the gap between two of them, as the model reads it, is

    gap = (Tn - T1) / (n - 1) - (T1 - queued_launch_ns)                      (``gap_ns``)

and between two different kernels A and B queued A, B, A, B (B another kernel or the same one with dynamic shared
memory, which may reconfigure the SM's carveout) ``alternating_gap_ns``. On the H200 every shape gives 1.2-1.6 us,
the empty kernels' value, whatever the bytes written, the kernel or the shared memory (docs/findings.md, "The
non-fused pipeline across channel counts"); the calibration keeps the empty-kernel probe.

    bash gpu/on_device.sh python3 -m gpu.calibrate.boundary --out $OUT/boundary.json
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

# (blocks_per_sm, waves, iters[, writes]): full-GPU kernels of about 15-430 us, one and several waves, and writing up
# to 1 GiB.
SHAPES = ((4, 1, 2000), (4, 4, 500), (4, 4, 2000), (2, 8, 500), (1, 1, 2000), (1, 4, 2000), (8, 2, 1000),
          (4, 16, 200), (4, 1, 20000), (4, 4, 500, 16), (4, 4, 500, 64), (4, 4, 500, 256), (4, 16, 100, 64),
          (4, 16, 100, 256))
KERNELS = 4


def gap_ns(one_ns: float, many_ns: float, kernels: int, queued_launch_ns: float) -> float:
    """The gap between two of ``kernels`` alike kernels queued back to back (``many_ns``), one alone ``one_ns``."""
    return (many_ns - one_ns) / (kernels - 1) - (one_ns - queued_launch_ns)


def alternating_gap_ns(a_ns: float, b_ns: float, abab_ns: float, queued_launch_ns: float) -> float:
    """The gap between kernels A and B queued A, B, A, B (``abab_ns``), each alone ``a_ns``, ``b_ns``."""
    q = queued_launch_ns
    return (abab_ns - q - 2 * (a_ns - q) - 2 * (b_ns - q)) / 3


@cuda.jit(device=True)
def _busy(out, iters, writes):
    x = float32(cuda.threadIdx.x)
    for _ in range(iters):
        x = x * float32(0.9999999) + float32(1e-7)
    base = cuda.blockIdx.x * 128 * writes + cuda.threadIdx.x
    for j in range(writes):
        out[base + j * 128] = x


@cuda.jit
def busy_kernel(out, iters, writes):
    """Grid: any, 128 threads per block. Each thread runs ``iters`` dependent FMAs, then stores ``writes`` floats
    (coalesced: the block's 128 threads write consecutive floats; ``out`` holds grid x 128 x writes)."""
    _busy(out, iters, writes)


@cuda.jit
def busy_kernel_b(out, iters, writes):
    """``busy_kernel`` as another kernel (a pipeline's next kernel is another function)."""
    _busy(out, iters, writes)


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
            "boundary_ns": alternating_gap_ns(t_a, t_b, t_abab, q)}


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
            "boundary_ns": gap_ns(t1, tn, kernels, queued_launch_ns)}


def boundary_rows(sm: int, spin, queued_launch_ns: float, shapes=SHAPES) -> list[dict[str, Any]]:
    """``boundary_row`` of each (blocks_per_sm, waves, iters) of ``shapes``."""
    return [boundary_row(sm, spin, queued_launch_ns, *shape) for shape in shapes]


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
    rows = boundary_rows(sm, spin, queued)
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
           "median_gap_ns": statistics.median(r["boundary_ns"] for r in rows),
           "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"queued_launch_ns {queued:.0f}; median gap {doc['median_gap_ns']:.0f} ns; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
