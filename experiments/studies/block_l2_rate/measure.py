"""One block's read rate from the L2 against its rate from DRAM, on the GPU: ``GPUSpec.block_l2_bw_ratio``.

A block moves its bytes no faster than its kind's per-block rate b on its misses and ``b * ratio`` on all
its bytes (``megasim.sim.resources.block_rates``). A calibration from a GPU's bandwidths takes the ratio
``l2_bw / dram_bw`` (1.05 on the H200), the rule its per-block rates were fitted under. This probe measures it
instead: the same read kernel, one block, from DRAM (``gpu.calibrate.measure.probe_tb_dram``: 256 MiB once)
and from the L2 (``probe_tb_l2``: a buffer the whole GPU has just read, 4 times), at 128 and 256 threads and
two buffer sizes; with loads in flight per thread fixed, Little's law gives the latencies' ratio (DRAM over
L2), which the chase probes measure too.

    bash gpu/on_device.sh python3 -m experiments.studies.block_l2_rate.measure --out $OUT/block_l2_rate   # ~30 s
"""
from __future__ import annotations

import argparse
import statistics

from experiments.provenance import nvidia_smi, provenance, write_results


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    from numba import cuda

    from gpu.calibrate.measure import probe_chase, probe_tb_dram, probe_tb_l2
    sm = int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    rows = []
    dram = [probe_tb_dram()[0] for _ in range(args.repeats)]
    rows.append({"probe": "dram", "threads": 128, "mib": 256, "gbps_median": statistics.median(dram),
                 "gbps_runs": " ".join(f"{v:.3f}" for v in dram)})
    for threads in (128, 256):
        for mib in (8, 16):
            l2 = [probe_tb_l2(sm, mib, threads)[0] for _ in range(args.repeats)]
            rows.append({"probe": "l2", "threads": threads, "mib": mib, "gbps_median": statistics.median(l2),
                         "gbps_runs": " ".join(f"{v:.3f}" for v in l2)})
    dram_lat = probe_chase(2 ** 30, 20000, fresh=True)
    l2_lat = probe_chase(4 * 2 ** 20, 50000, fresh=False)
    base = rows[0]["gbps_median"]
    for r in rows:
        r["over_dram"] = r["gbps_median"] / base
        print(f"{r['probe']:5s} {r['threads']:4d} threads {r['mib']:4d} MiB  {r['gbps_median']:8.3f} GB/s  "
              f"{r['over_dram']:.3f}x one block's DRAM rate")
    print(f"latency: DRAM {dram_lat:.1f} ns, L2 {l2_lat:.1f} ns, ratio {dram_lat / l2_lat:.3f}")
    dev = cuda.get_current_device()
    write_results(rows, args.out, "block_l2_rate", provenance({
        "script": "block_l2_rate.measure", "device": dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name),
        "driver": (nvidia_smi(("driver_version",)) or [{}])[0].get("driver_version"),
        "dram_latency_ns": dram_lat, "l2_latency_ns": l2_lat,
        "latency_ratio": dram_lat / l2_lat, "block_l2_bw_ratio": rows[1]["over_dram"]}))


if __name__ == "__main__":
    main()
