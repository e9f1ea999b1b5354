"""Probe: how the shape of the map changes the dense twin's and ECR's time on the same grid (GPU only).

The cases are ``megasim.calibration.sparse.map_shape_cases()``: 396 blocks of 128 pixels (3 per SM on
132 SMs), k_tile 32, C = 128, one filter tile, on maps of widths 16 to 448 (the block count fixed, so
every block does the same multiply-adds), plus VGG-19 conv2_1 and conv2_2 at batch 1. Three kernels
per map: the dense twin, the dense twin built with ``probe_preload`` (each chunk's window loaded into
registers before the multiplies, as ECR loads it), and ECR at sparsity 0.5. Every output is checked
against a float64 reference (the preload build computes the same convolution). Timed kernel only: CUDA
events around 10 back-to-back launches, median of ``--repeats``. The model's predictions of the same
cases were committed before the run (``experiments.studies.sparse_model.conv_map_shape``).

    bash gpu/on_device.sh python -m gpu.probes.conv_map_shape [--out DIR]
    bash gpu/on_device.sh python -m gpu.probes.conv_map_shape --vgg 1 16 [--out DIR]

Writes DIR/conv_map_shape_measured.csv + .json (device, driver, versions, git SHA, date). ``--vgg B..``
instead times the dense twin and its preload build on VGG-19's 16 conv layers at batches B (the
tiling the benchmark uses; at batch > 1, 3 launches per sample), into DIR/dense_preload_vgg.csv.
``--fused B..`` times the fused dense twin (conv + ReLU + 2x2/2 max-pool, PECR's twin) with its two
load placements ("inline", "channel") on VGG-19's 5 pooled layers at batches B, into
DIR/fused_loads_vgg.csv. ``--tail`` times ``megasim.calibration.sparse.wave_tail_cases()`` instead: the
dense twin and ECR on grids of 0.5 to 2 waves of one filter tile, into DIR/wave_tail_measured.csv.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

NAME = "conv_map_shape_measured"
WEIGHT_SEED0 = 20_000
TOL = 1e-5
INNER = 10
VARIANTS = ("inline", "chunk", "channel")      # the dense twin's load placements (gpu.kernels.sparse.kernels.DENSE_LOADS)
FUSED_VARIANTS = ("inline", "channel")         # the fused twin's (gpu.kernels.sparse.kernels.FUSED_DENSE_LOADS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--vgg", type=int, nargs="+", default=None, metavar="BATCH")
    ap.add_argument("--fused", type=int, nargs="+", default=None, metavar="BATCH")
    ap.add_argument("--tail", action="store_true", help="the wave-tail cases")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        print(f"error: --repeats {args.repeats} is not allowed: it must be at least 1", file=sys.stderr)
        return 2

    import torch
    from numba import cuda

    from experiments.provenance import provenance, write_results
    from experiments.benchmarks.winograd_bench import device_meta
    from gpu.kernels.sparse import kernels as sk
    from gpu.runtime.timing import time_cuda_queued
    from megasim.calibration.sparse import map_shape_cases, wave_tail_cases
    from megasim.algorithms.sparse.tiling import PoolSpec, choose_tiling, grid, pooled_hw
    from megasim.workloads import parse_layer
    from megasim.workloads.sparse import SparsitySpec, sparse_feature_map

    dmeta = device_meta(torch, cuda)
    sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
    rows = []
    if args.vgg:
        from megasim.workloads.sparse import vgg19_sparse_layers
        cases = [{"op": "direct", "kind": "direct", "variant": v, "problem": p.spec_string(), "layer": p.name,
                  "batch": b, "sparsity": 0.5, "pattern": "uniform", "seed": li, "pool": None, "force_k_tile": None}
                 for b in args.vgg for li, p in enumerate(vgg19_sparse_layers(b)) for v in VARIANTS]
        name, inner = "dense_preload_vgg", (INNER if max(args.vgg) == 1 else 3)
    elif args.fused:
        from megasim.workloads.sparse import VGG19_POOLED, vgg19_sparse_layers
        cases = [{"op": "direct_fused", "kind": "direct_fused", "variant": v, "problem": p.spec_string(), "layer": p.name,
                  "batch": b, "sparsity": 0.5, "pattern": "uniform", "seed": li, "pool": [2, 2], "force_k_tile": None}
                 for b in args.fused for li, p in enumerate(vgg19_sparse_layers(b)) if p.name in VGG19_POOLED
                 for v in FUSED_VARIANTS]
        name, inner = "fused_loads_vgg", (INNER if max(args.fused) == 1 else 3)
    elif args.tail:
        cases, name, inner = wave_tail_cases(), "wave_tail_measured", INNER
    else:
        cases, name, inner = map_shape_cases(), NAME, INNER
    print(f"{'kind':7s} {'variant':8s} {'problem':30s} {'blocks':>6s} {'us':>8s} {'err':>8s} {'regs':>4s}")
    for i, case in enumerate(cases):
        p = parse_layer(case["problem"])
        pool = PoolSpec(*case["pool"]) if case["pool"] else None
        t = choose_tiling(p, case["kind"], sm_count, k_tile=case["force_k_tile"], pool=pool)
        x = sparse_feature_map((p.n, p.c, p.h, p.w), SparsitySpec(case["sparsity"], case["pattern"], seed=case["seed"]))
        w = np.random.default_rng(WEIGHT_SEED0 + i).standard_normal((p.k, p.c, p.r, p.s)).astype(np.float32)
        xd, wd = cuda.to_device(x), cuda.to_device(w)
        y = cuda.device_array((p.n, p.k) + (pooled_hw(p, pool) if pool else (p.out_h, p.out_w)), np.float32)
        loads = {"dense_loads": case["variant"]} if case["kind"] in ("direct", "direct_fused") else {}
        if pool:
            kern = sk.fused_kernel(False, t.k_tile, t.c_chunk, p.r, p.s, p.stride, pool.size, pool.stride, **loads)
        else:
            kern = sk.conv_kernel(case["kind"] == "ecr", t.k_tile, t.c_chunk, p.r, p.s, p.stride, **loads)
        shape = grid(p, t)
        launch = kern[shape, t.threads]
        launch(xd, wd, y, p.padding)
        cuda.synchronize()
        ref = torch.nn.functional.conv2d(torch.from_numpy(x).double().cuda(), torch.from_numpy(w).double().cuda(),
                                         stride=p.stride, padding=p.padding)
        if pool:
            ref = torch.nn.functional.max_pool2d(torch.relu(ref), pool.size, pool.stride)
        ref = ref.cpu().numpy()
        err = float(np.linalg.norm(y.copy_to_host() - ref) / np.linalg.norm(ref))
        stats = time_cuda_queued(lambda _i: launch(xd, wd, y, p.padding), inner=inner, warmup=3, repeats=args.repeats)
        regs = int(kern.compile(tuple(kern.typeof_pyval(a) for a in (xd, wd, y, p.padding))).regs_per_thread)
        row = {**case, "k_tile": t.k_tile, "blocks": shape[0] * shape[1], "width": p.w, "median_ms": stats.median_ms,
               "min_ms": stats.min_ms, "max_ms": stats.max_ms, "measured_us": stats.median_ms * 1e3, "rel_err": err,
               "regs": regs}
        rows.append(row)
        print(f"{case['kind']:7s} {case['variant']:8s} {case['problem']:30s} {row['blocks']:6d} {row['measured_us']:8.1f} "
              f"{err:8.1e} {regs:4d}", flush=True)
    bad = [r for r in rows if not (r["rel_err"] <= TOL) or not math.isfinite(r["median_ms"])]
    meta = {**provenance(), **dmeta, "script": "gpu.probes.conv_map_shape", "repeats": args.repeats, "inner": INNER,
            "tolerance": TOL, "method": f"kernel only: CUDA events around {inner} back-to-back launches, median"}
    out = args.out or "experiments/results/conv_map_shape"
    csv_path, _ = write_results(rows, out, name, meta)
    print(f"wrote {csv_path}; {len(rows)} cases, {len(bad)} failed the {TOL:g} check")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
