"""One run of the im2win tensor-core build (transform + conv, batch 128) between ``cuda.profile_start()`` and
``cuda.profile_stop()``, for Nsight Compute: the conv kernel at the default tile (64 x 128 x 16, 4 warps) with
``TcOptions(fragments, chain_k)`` and the given staging, after one warm-up run.

    bash gpu/on_device.sh ncu --profile-from-start off -k regex:conv --section WarpStateStats \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SpeedOfLight \\
        --csv --page raw python3 -m experiments.studies.im2win_tc.profile_one im2win/conv5

(``experiments/results/nvidia-h200/im2win_3xtf32/profile_conv5.json`` summarises such runs; the build of
21ee5f4 was profiled the same way from a copy of that commit's ``gpu/kernels/im2win/conv.py``.)
"""

from __future__ import annotations

import argparse
import math
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layer")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--fragments", default="packed")
    ap.add_argument("--chain-k", type=int, default=8)
    ap.add_argument("--staging", default="registers", choices=("registers", "async"))
    args = ap.parse_args(argv)
    import numpy as np
    from numba import cuda

    from experiments.studies.im2win_tc.tiles import DirectLaunch
    from gpu.kernels.im2win.conv import TcOptions
    from megasim.workloads import parse_layer

    p = parse_layer(args.layer, source="layer").with_batch(args.batch)
    rng = np.random.default_rng(1)
    xd = cuda.to_device(rng.standard_normal((p.n, p.c, p.h, p.w)).astype(np.float32))
    wd = cuda.to_device((rng.standard_normal((p.k, p.c, p.r, p.s)) * math.sqrt(2 / (p.c * p.r * p.s))).astype(np.float32))
    launch = DirectLaunch(p, xd, wd, (64, 128, 16, 8, 8), args.staging, TcOptions(args.fragments, args.chain_k))
    launch.run()
    cuda.synchronize()
    cuda.profile_start()
    launch.run()
    cuda.synchronize()
    cuda.profile_stop()
    print(f"{args.layer} batch {p.n}: {launch.regs_per_thread} registers, {launch.shared_bytes} bytes of shared memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
