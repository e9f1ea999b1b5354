"""ECR and PECR on the GPU against our dense kernels and cuDNN: VGG-19's 16 conv layers, sparsity swept.

For each VGG-19 conv layer (3x3, stride 1, padding 1) at batch 1 and a real batch (16), and each
sparsity of the sweep (uniform zeros; clustered zeros at a few sparsities), one seeded input map
(``megasim.workloads.sparse``: the model regenerates the same map from the row's sparsity, pattern and
seed) and fresh normal weights, the script times, kernel only: CUDA events around ``--inner`` (10)
back-to-back runs, so the host's launch cost (Numba ~20 us, cuDNN a few us) hides behind the device
work; the median per run (``median_ms``); ``single_launch_ms`` is one run between two events, host
launch cost included:

- ``ecr``: ECR convolution (compression inside the kernel); ``direct``: its dense twin (the same code
  without the zero test); ``cudnn``: cuDNN's fastest FP32 algorithm (FMA math, no TF32), chosen once
  per layer and batch: Find's successful algorithms within 1.5x of its fastest (at most 4) are each
  timed here as below, and the fastest is kept (Find's own single timing picked IMPLICIT_GEMM over
  the 1.3x faster IMPLICIT_PRECOMP_GEMM on some layers from one run to the next);
- on the 5 layers VGG-19 pools after (conv1_2, conv2_2, conv3_4, conv4_4, conv5_4), 2x2/2 pooling:
  ``pecr`` (conv+ReLU+max-pool in one kernel), ``direct_fused`` (its dense twin), ``unfused_ecr`` and
  ``unfused_direct`` (conv, ReLU and max-pool kernels: 3 launches), and ``cudnn_chain`` (cuDNN conv,
  then PyTorch's ReLU and max_pool2d).

Every timed output is checked against a float64 reference (torch on the GPU): max |error| / max |ref|
must be <= 1e-5 for our kernels and <= 1e-3 for cuDNN (its FFT and Winograd algorithms round
differently; 2e-5 is typical at batch 16), else the row is marked failed. The same problem, the same input and the same output shape for every
side; inputs are not rotated (each input fits in the L2 at batch 1, for every side alike).

Writes ``DIR/sparse_bench.csv`` + ``.json`` (device, driver, versions, git SHA, date).
DIR defaults to ``$OUT`` or ``experiments/results/<device-slug>/``.

    bash gpu/on_device.sh python -m experiments.benchmarks.sparse_bench [--quick] [--batches 1 16]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from megasim.workloads.sparse import (
    VGG19_POOLED,
    SparsitySpec,
    sparse_feature_map,
    vgg19_sparse_layers,
)

NAME = "sparse_bench"
SPARSITIES = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
CLUSTERED = (0.5, 0.8, 0.95)
CONV_OPS = ("ecr", "direct", "cudnn")
CUDNN_CANDIDATES = 4            # Find's fastest algorithms re-timed here
CUDNN_WITHIN = 1.5              # ... those within this factor of Find's fastest
POOL_OPS = ("pecr", "direct_fused", "unfused_ecr", "unfused_direct", "cudnn_chain")
TOL = 1e-5           # our kernels: direct sums in FP32
TOL_CUDNN = 1e-3     # cuDNN's fastest FP32 algorithms (FFT, Winograd) round differently: as winograd_bench


def tolerance(op: str) -> float:
    return TOL_CUDNN if op.startswith("cudnn") else TOL


def cases(batches, quick: bool):
    """(layer index, problem, batch, sparsity, pattern, seed) of the sweep."""
    out = []
    for batch in batches:
        for li, p in enumerate(vgg19_sparse_layers(batch)):
            if quick and li % 5:
                continue
            for s in SPARSITIES:
                out.append((li, p, s, "uniform", li))
            if batch == batches[0]:
                for s in CLUSTERED:
                    out.append((li, p, s, "clustered", 100 + li))
    return out


def layer_weights(li: int, p) -> np.ndarray:
    """The sweep's weights of layer index `li` (problem `p`): seeded normal values, He-scaled."""
    w = np.random.default_rng(5000 + li).standard_normal((p.k, p.c, p.r, p.s)).astype(np.float32)
    w *= np.float32(math.sqrt(2.0 / (p.c * p.r * p.s)))
    return w


def cudnn_candidates(found) -> list[str]:
    """Find's successful algorithms within CUDNN_WITHIN of its fastest, fastest first, at most
    CUDNN_CANDIDATES: the ones this script times itself before choosing."""
    ok = sorted((r for r in found if r.ok and math.isfinite(r.time_ms)), key=lambda r: r.time_ms)
    return [r.algo for r in ok if r.time_ms <= CUDNN_WITHIN * ok[0].time_ms][:CUDNN_CANDIDATES]


def fastest_algo(conv, found, xt, wt, y, inner: int) -> str:
    """Of ``cudnn_candidates(found)``, the fastest by this script's own timing (time_cuda_queued,
    2 warm-ups, 5 samples)."""
    from gpu.runtime.timing import time_cuda_queued

    timed = {}
    for algo in cudnn_candidates(found):
        def fn(_i, algo=algo):
            conv.forward(xt, wt, y, algo)
        timed[algo] = time_cuda_queued(fn, inner=inner, warmup=2, repeats=5).median_ms
    return min(timed, key=timed.get)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--inner", type=int, default=10, help="back-to-back launches per timed sample")
    ap.add_argument("--quick", action="store_true", help="every fifth layer only")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import torch
    from numba import cuda

    from experiments.provenance import provenance, write_results
    from experiments.benchmarks.winograd_bench import device_meta, device_slug
    from gpu import sparse
    from gpu.cudnn_legacy import CudnnConv, CudnnError, best_ok
    from gpu.runtime.timing import time_cuda, time_cuda_queued

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dmeta = device_meta(torch, cuda)
    out_dir = Path(args.out or os.environ.get("OUT") or f"experiments/results/{device_slug(dmeta['device'])}")
    meta = {**provenance(), **dmeta, "repeats": args.repeats, "warmup": args.warmup, "tolerance": {"ours": TOL, "cudnn": TOL_CUDNN},
            "method": f"kernel only: CUDA events around {args.inner} back-to-back runs, per-run median; same input "
                      "for every side; float64 torch reference"}
    rows: list[dict] = []
    cudnn_cache: dict[tuple, tuple] = {}
    started = time.time()
    for li, p, s, pattern, seed in cases(args.batches, args.quick):
        x = sparse_feature_map((p.n, p.c, p.h, p.w), SparsitySpec(s, pattern, seed=seed))
        w = layer_weights(li, p)
        xt = torch.from_numpy(x).cuda()
        wt = torch.from_numpy(w).cuda()
        xd, wd = cuda.as_cuda_array(xt), cuda.as_cuda_array(wt)
        ref_conv = torch.nn.functional.conv2d(xt.double(), wt.double(), padding=p.padding)
        pooled = p.name in VGG19_POOLED
        ref_pool = torch.nn.functional.max_pool2d(torch.relu(ref_conv), 2, 2) if pooled else None
        base = {"layer": p.name, "batch": p.n, "C": p.c, "K": p.k, "HW": p.h, "sparsity": s,
                "measured_sparsity": float((x == 0).mean()), "pattern": pattern, "seed": seed}
        ops = CONV_OPS + (POOL_OPS if pooled else ())
        for op in ops:
            row = dict(base, op=op)
            try:
                if op in ("cudnn", "cudnn_chain"):
                    key = (p.name, p.n)
                    if key not in cudnn_cache:
                        conv = CudnnConv(p.n, p.c, p.k, p.h, p.w, r=p.r, s=p.s, padding=p.padding, math="fp32")
                        y = torch.empty(conv.shape_y, device="cuda")
                        found = conv.find(xt, wt, y)
                        if best_ok(found) is None:
                            raise CudnnError("cuDNN Find returned no usable algorithm")
                        cudnn_cache[key] = (conv, y, fastest_algo(conv, found, xt, wt, y, args.inner))
                    conv, y, algo = cudnn_cache[key]
                    if op == "cudnn":
                        def fn(_i, conv=conv, y=y, algo=algo, xt=xt, wt=wt):
                            conv.forward(xt, wt, y, algo)
                        fn(0)
                        out = y
                    else:
                        def fn(_i, conv=conv, y=y, algo=algo, xt=xt, wt=wt):
                            conv.forward(xt, wt, y, algo)
                            return torch.nn.functional.max_pool2d(torch.relu(y), 2, 2)
                        out = fn(0)
                    row["detail"] = algo
                    row["k_tile"] = ""
                else:
                    kw = {"pool": 2, "pool_stride": 2} if op in POOL_OPS else {}
                    launch = sparse.prepare(op, xd, wd, p.stride, p.padding, **kw)

                    def fn(_i, launch=launch):
                        launch.run()
                    fn(0)
                    out = torch.as_tensor(launch.output, device="cuda")
                    row["k_tile"] = launch.tiling.k_tile
                    row["regs"] = launch.regs_per_thread
                torch.cuda.synchronize()
                ref = ref_pool if op in POOL_OPS else ref_conv
                err = float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                stats = time_cuda_queued(fn, inner=args.inner, warmup=args.warmup, repeats=args.repeats)
                single = time_cuda(fn, warmup=1, repeats=max(5, args.repeats // 4))
                row.update(stats.as_row(), single_launch_ms=single.median_ms, rel_err=err,
                           status="ok" if err <= tolerance(op) else "failed: rel_err")
            except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
                row.update(median_ms=math.nan, status=f"error: {type(exc).__name__}: {exc}"[:200])
            rows.append(row)
            print(f"{p.name:14s} N={p.n:2d} s={s:.2f} {pattern:9s} {op:14s} "
                  f"{row.get('median_ms', math.nan) * 1e3:10.1f} us  err {row.get('rel_err', math.nan):.1e} "
                  f"{row['status'] if row['status'] != 'ok' else ''}", flush=True)
        write_results(rows, out_dir, NAME, meta)
    bad = [r for r in rows if r["status"] != "ok"]
    print(f"{len(rows)} rows in {time.time() - started:.0f} s, {len(bad)} not ok; wrote {out_dir / NAME}.csv")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
