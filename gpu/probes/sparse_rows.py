"""Probe: what ECR pays when the lanes of a warp read different weight rows (GPU only).

ECR's multiply loop reads, per stored nonzero, the weight row of that nonzero (128-bit shared loads
of 4 filters). On a dense map all lanes read the same row at each iteration; on a sparse one they
read different rows, and the loads are replayed where rows share banks. This times, on the same
seeded maps as ``experiments.benchmarks.sparse_bench``, the real ECR kernel beside a probe build that reads row 0
for every nonzero (``conv_kernel(..., probe_same_row=True)``: same loads, same loop, same
multiply-adds, only the row differs; its output is wrong and is not checked). The difference is the
cost of the distinct rows (``experiments.studies.sparse_model.sparse_row_conflicts`` counts them without a GPU).

    bash gpu/on_device.sh python -m gpu.probes.sparse_rows [--out DIR]

Writes DIR/probe_sparse_rows.csv + .json (device, versions, commit, date).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

LAYERS = (("vgg19/conv3_2", 1), ("vgg19/conv3_2", 16), ("vgg19/conv1_2", 16), ("vgg19/conv5_1", 16))
SPARSITIES = (0.0, 0.2, 0.5, 0.7, 0.9, 0.99)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)

    import torch
    from numba import cuda

    from experiments.provenance import provenance, write_results
    from experiments.benchmarks.winograd_bench import device_meta, device_slug
    from gpu.kernels.sparse import kernels as sk
    from gpu.runtime.timing import time_cuda_queued
    from megasim.algorithms.sparse.tiling import choose_tiling, grid
    from megasim.workloads import parse_layer
    from megasim.workloads.sparse import SparsitySpec, sparse_feature_map

    dmeta = device_meta(torch, cuda)
    sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
    rows = []
    print(f"{'layer':14s} {'N':>3s} {'sparsity':>8s} {'k_tile':>6s} {'ECR us':>9s} {'same row us':>11s} {'ECR / same row':>14s}")
    for li, (layer, batch) in enumerate(LAYERS):
        p = parse_layer(layer, batch=batch)
        t = choose_tiling(p, "ecr", sm_count)
        w = np.random.default_rng(5000 + li).standard_normal((p.k, p.c, p.r, p.s)).astype(np.float32)
        w *= np.float32(math.sqrt(2.0 / (p.c * p.r * p.s)))
        wd = cuda.to_device(w)
        y = cuda.device_array((p.n, p.k, p.out_h, p.out_w), np.float32)
        shape = grid(p, t)
        inner = 10 if batch == 1 else 3
        for s in SPARSITIES:
            xd = cuda.to_device(sparse_feature_map((p.n, p.c, p.h, p.w), SparsitySpec(s, seed=li)))
            times = {}
            for probe in (False, True):
                kern = sk.conv_kernel(True, t.k_tile, t.c_chunk, p.r, p.s, p.stride, probe_same_row=probe)[shape, t.threads]
                times[probe] = time_cuda_queued(lambda _i, k=kern: k(xd, wd, y, p.padding), inner=inner, warmup=2,
                                                repeats=args.repeats).median_ms * 1000.0
            rows.append({"layer": layer, "batch": batch, "sparsity": s, "k_tile": t.k_tile, "ecr_us": times[False],
                         "same_row_us": times[True], "ratio": times[False] / times[True]})
            print(f"{layer:14s} {batch:3d} {s:8.2f} {t.k_tile:6d} {times[False]:9.1f} {times[True]:11.1f} "
                  f"{times[False] / times[True]:14.3f}")
    out = Path(args.out or f"experiments/results/{device_slug(dmeta['device'])}/sparse")
    meta = {**provenance(), **dmeta, "script": "gpu.probes.sparse_rows", "repeats": args.repeats,
            "method": "kernel only: CUDA events around back-to-back runs (10 at batch 1, 3 at batch 16), median"}
    csv_path, _ = write_results(rows, out, "probe_sparse_rows", meta)
    print(f"wrote {csv_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
