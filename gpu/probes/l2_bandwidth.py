"""Is the L2 bandwidth probe reading L2? (a diagnostic)

``gpu.calibrate.measure.probe_l2`` measured 23.5 TB/s on an H100 and 9.9 on an H200, whose L2 is the same. Its
threads re-read the same elements every round from the same SM, about 64 KiB per SM, which fits an L1.
This times the new probe (``probe_l2``: 128-bit loads, 4 in flight per thread, launches queued) with
each round's reads rotated by ``rotate`` blocks (``_read_vec4``): 0 re-reads from the same SM as the old
pattern did; a rotation coprime to the SM count sends every re-read to another SM. Each setting is
measured ``--repeats`` times, interleaved, after a kernel with no shared memory and after one with the
most static-limit dynamic shared memory (the carveout the runtime leaves L1 may differ). It also times
the old kernel itself (``read4_old``, its code unchanged: the round loop's body does not
depend on the round) and counts the global loads in its PTX (5: the step's 4 and the tail's 1, all
inside the loops, so its loads were not hoisted out of the round loop; the PTX is kept beside the JSON).

    bash gpu/on_device.sh python -m gpu.probes.l2_bandwidth --out $OUT/l2bw      # ~20 s
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path
from megasim.provenance import git_sha

ROTATIONS = (0, 1, 37, 101)


def _old_kernel():
    """``gpu.calibrate.measure._read4`` without rotation, the L2 probe's earlier kernel."""
    from numba import cuda, float32

    @cuda.jit
    def read4_old(a, reps, out):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        n = a.size
        s0 = float32(0.0)
        s1 = float32(0.0)
        s2 = float32(0.0)
        s3 = float32(0.0)
        for _ in range(reps):
            j = i
            while j + 3 * stride < n:
                s0 += a[j]
                s1 += a[j + stride]
                s2 += a[j + 2 * stride]
                s3 += a[j + 3 * stride]
                j += 4 * stride
            while j < n:
                s0 += a[j]
                j += stride
        out[i] = s0 + s1 + s2 + s3
    return read4_old


def old_probe(sm: int) -> dict:
    """The old kernel timed two ways: as the calibration once did (64 rounds minus 1 round, median of 15
    each, host launch cost inside both) and as ``probe_l2`` now times (256 rounds, launches queued);
    and its PTX's global loads."""
    import numpy as np
    from numba import cuda

    from gpu.calibrate.measure import _ms
    from gpu.runtime.timing import time_cuda_queued
    kern = _old_kernel()
    a = cuda.to_device(np.random.default_rng(0).random(2 * 2 ** 20, dtype=np.float32))
    grid, block = sm * 16, 256
    out = cuda.device_array(grid * block, np.float32)
    kern[grid, block](a, 1, out)
    ms64 = _ms(lambda: kern[grid, block](a, 64, out))
    ms1 = _ms(lambda: kern[grid, block](a, 1, out))
    ms256 = time_cuda_queued(lambda i: kern[grid, block](a, 256, out), inner=10, warmup=3, repeats=7).median_ms
    ptx = next(iter(kern.inspect_asm().values()))
    return {"gbps_old_timing": 63 * a.nbytes / ((ms64 - ms1) * 1e6), "ms_64_rounds": ms64, "ms_1_round": ms1,
            "gbps_queued_256": 256 * a.nbytes / (ms256 * 1e6), "ptx_ld_global": ptx.count("ld.global"),
            "ptx": ptx}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from numba import cuda

    from gpu.calibrate.measure import _empty_dyn, probe_l2
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    sm = int(dev.MULTIPROCESSOR_COUNT)
    big_shared = int(dev.MAX_SHARED_MEMORY_PER_BLOCK)          # without opt-in: 48 KiB
    dummy = cuda.device_array(1, dtype="float32")
    rows, methods = [], {}
    for rep in range(args.repeats):
        for before, shared in (("no shared memory", 0), (f"{big_shared} B of shared memory", big_shared)):
            for rotate in ROTATIONS:
                _empty_dyn[sm * 8, 128, 0, shared](dummy)
                cuda.synchronize()
                gbps, methods[rotate] = probe_l2(sm, rotate)
                rows.append({"repeat": rep, "before": before, "rotate": rotate, "gbps": gbps})
                print(f"rep {rep}  after a kernel with {before:>26}  rotate {rotate:>3}: {gbps / 1e3:6.2f} TB/s", flush=True)
    old = [old_probe(sm) for _ in range(args.repeats)]
    for o in old:
        print(f"old kernel: {o['gbps_old_timing'] / 1e3:6.2f} TB/s timed as before (64 rounds {o['ms_64_rounds'] * 1e3:.1f} "
              f"us, 1 round {o['ms_1_round'] * 1e3:.1f} us), {o['gbps_queued_256'] / 1e3:6.2f} TB/s timed as now; "
              f"{o['ptx_ld_global']} ld.global in its PTX", flush=True)
    summary = []
    for before in dict.fromkeys(r["before"] for r in rows):
        for rotate in ROTATIONS:
            vals = [r["gbps"] for r in rows if r["before"] == before and r["rotate"] == rotate]
            summary.append({"before": before, "rotate": rotate, "median_gbps": statistics.median(vals),
                            "min_gbps": min(vals), "max_gbps": max(vals)})
    result = {"device": name, "sm_count": sm, "git_sha": git_sha(),
              "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "methods": methods, "rows": rows, "summary": summary,
              "old_kernel": [{k: v for k, v in o.items() if k != "ptx"} for o in old]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "l2_bandwidth_probe.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "read4_old.ptx").write_text(old[0]["ptx"])
    return result


if __name__ == "__main__":
    main()
