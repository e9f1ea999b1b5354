"""Probe: how much DRAM bandwidth a hog on S SMs leaves to the other SMs (GPU only; gpu.probes.dram_hog_kernel).

For each S: the hog alone (its own bandwidth), then the hog beside the spec's DRAM probe (a 2 GiB
device-to-device copy, torch ``copy_``, read + write bytes / median time, as ``gpu.calibrate.measure`` measures
``dram_bw_gbps``), and a census (small blocks launched under the hog that land on a hog SM: must be 0).
S = 0 is the copy alone. The copy's bandwidth under the hog is what the model is given as the DRAM
bandwidth of a GPU of 132 - S SMs (``experiments.studies.fusion.winograd_contention``).

    bash gpu/on_device.sh python -m gpu.probes.dram_hog [--sms 0 8 16 32 48 64] [--latency] [--out DIR]

``--latency`` adds the spec's latency probes beside each hog (DRAM and L2 pointer chases, an atomic
chain; ``Latencies``): what a kernel that cannot keep many loads in flight meets there.

Writes DIR/dram_hog.csv + .json (device, driver, versions, git SHA, date).
"""

from __future__ import annotations

import argparse
import os
import time

NAME = "dram_hog"
COPY_BYTES = 2 ** 31


def copy_gbps(torch, src, dst, repeats: int = 10) -> float:
    from gpu.runtime.timing import time_cuda
    ms = time_cuda(lambda i: dst.copy_(src), warmup=2, repeats=repeats).median_ms
    return 2 * src.numel() * 4 / (ms * 1e6)


class Latencies:
    """The spec's latency probes (gpu.calibrate.measure: one thread chasing a random cycle through 1 GiB, each
    run from a fresh start, and through 4 MiB; 20,000 dependent atomics), prepared once so that they can
    run beside the hog (their kernels are loaded first: a module load waits for the hog to end)."""

    STEPS = 20000

    def __init__(self) -> None:
        import numpy as np
        from numba import cuda

        from gpu.calibrate.measure import random_cycle
        rng = np.random.default_rng(1)
        self.arrays = {key: (cuda.to_device(random_cycle(nbytes // 4, rng)), nbytes // 4)
                       for key, nbytes in (("dram", 2 ** 30), ("l2", 2 ** 22))}
        self.ctr = cuda.to_device(np.zeros(64, np.int32))
        self.out = cuda.device_array(1, np.int32)
        self.rng = rng
        self.measure()          # loads both kernels

    def measure(self) -> dict[str, float]:
        from gpu.calibrate.measure import _atomic_chain, _chase, per_step_ns
        d, n = self.arrays["dram"]
        l2, _ = self.arrays["l2"]
        return {
            "dram_latency_ns": per_step_ns(lambda k: _chase[1, 1](d, int(self.rng.integers(0, n)), k, self.out),
                                           self.STEPS),
            "l2_latency_ns": per_step_ns(lambda k: _chase[1, 1](l2, 0, k, self.out), self.STEPS),
            "atomic_latency_ns": per_step_ns(lambda k: _atomic_chain[1, 1](self.ctr, k, self.out), self.STEPS),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", nargs="+", type=int, default=[0, 8, 16, 24, 32, 48, 64, 96])
    ap.add_argument("--latency", action="store_true", help="also the spec's latency probes beside each hog")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import torch
    from numba import cuda

    from experiments.provenance import provenance, write_results
    from experiments.benchmarks.winograd_bench import device_meta, device_slug
    from gpu.probes.dram_hog_kernel import DramHog

    dmeta = device_meta(torch, cuda)
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    n_sm = dmeta["sm_count"]
    lat = Latencies() if args.latency else None
    rows = []
    for s in args.sms:
        if s == 0:
            rows.append({"hog_sms": 0, "victim_sms": n_sm, "copy_gbps": round(copy_gbps(torch, src, dst), 1),
                         **({k: round(v, 1) for k, v in lat.measure().items()} if lat else {})})
            print(rows[-1], flush=True)
            continue
        hog = DramHog(s, max_seconds=30.0)
        with hog:
            time.sleep(0.2)
        alone = hog.stats
        with hog:
            census = hog.census(n_sm * 16)
            gbps = copy_gbps(torch, src, dst)
            latencies = lat.measure() if lat else {}
        beside = hog.stats
        hog.release()
        rows.append({"hog_sms": s, "victim_sms": n_sm - s, "copy_gbps": round(gbps, 1),
                     "hog_gbps_alone": round(alone.gbps, 1), "hog_gbps_beside_copy": round(beside.gbps, 1),
                     "census_blocks_on_hog_sms": census, "sms_used": beside.sms_used,
                     "threads_per_block": beside.threads_per_block, "regs_per_thread": beside.regs_per_thread,
                     "registers_left_per_sm": beside.registers_left_per_sm, "timed_out": beside.timed_out,
                     "covered": beside.covered, "alone_timed_out": alone.timed_out,
                     **{k: round(v, 1) for k, v in latencies.items()}})
        print(rows[-1], flush=True)
    meta = provenance({**dmeta, "script": "gpu.probes.dram_hog", "copy_bytes": COPY_BYTES,
                       "method": "copy: torch copy_ of 2 GiB, 2 x bytes / median of 10 (gpu.runtime.timing.time_cuda, default "
                                 "stream); hog: gpu.probes.dram_hog_kernel.DramHog on a torch stream beside it"})
    out = args.out or os.path.join("experiments/results", device_slug(dmeta["device"]), NAME)
    write_results(rows, out, NAME, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
