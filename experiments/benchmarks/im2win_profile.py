"""Per-kernel device times of the implementations the im2win algorithm choice ranks, and one im2win conv
launch alone, for Nsight Compute (diagnosis; nothing here is fitted).

**Kinds** (``--kinds LAYER:BATCH ...``): per point, im2win at its default tile (the transform, then the
convolution) and our Winograd non-fused pipeline and fused megakernel at the plans the bench ran
(``--bench``'s ``detail``, prepared, NHWC, as ``im2win_bench`` runs them), each warmed up, then every
kernel launched once, one after another, between ``cuda.profile_start()`` and ``cuda.profile_stop()``.
Under ``ncu --metrics gpu__time_duration.sum`` that gives each kernel's device time (what the model's
launches are compared with: ``megasim.sim``'s per-launch span); ``DIR/im2win_profile_kinds.json`` lists
the launches in the order they ran (point, implementation, kind). Each whole implementation is also timed
as the bench times it (CUDA events around back-to-back runs; ``totals``), a check that it ran: under ncu
the host's launches are slower, so a run shorter than its launches' host cost (conv11's Winograd, ~0.1 ms)
is host-bound there; the bench's own times are the reference.

**Conv** (``--conv LAYER:BATCH``): the im2win conv kernel (transform run before, outside the range) at the
default build, or at ``--build`` ``m_b,n_b,k_b,m_t,n_t,max_registers,staging`` (empty fields: defaults),
launched once in the range, for ``ncu --set full``.

    bash gpu/on_device.sh ncu --profile-from-start off --cache-control none --clock-control none --csv \\
        --metrics gpu__time_duration.sum --log-file DIR/kinds_ncu.csv \\
        python3 -m experiments.benchmarks.im2win_profile --kinds conv7:64 conv11:64 --out DIR
    bash gpu/on_device.sh ncu --profile-from-start off --set full -o DIR/conv9 \\
        python3 -m experiments.benchmarks.im2win_profile --conv conv9:128 --out DIR

A few seconds per point plus the kernels' compilation; without ncu it runs the same (a check).

At commit 7c813ad this script also had ``--swizzle-ab`` (the conv kernel at the default build against the same
build with its staging stores swizzled, ``make_conv_kernel(swizzle=True)``; results
``experiments/results/nvidia-h200/im2win_profile/im2win_swizzle_ab.json``): the swizzle lost (0.952x at batch
128) and was removed with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

BENCH = "experiments/results/nvidia-h200/im2win_bench.csv"


def _point(text: str):
    from megasim.workloads import parse_layer
    layer, batch = text.split(":")
    return layer, int(batch), parse_layer(f"im2win/{layer}", batch=int(batch))


def _inputs(torch, p, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((p.n, p.c, p.h, p.w), dtype=np.float32)
    w = rng.standard_normal((p.k, p.c, p.r, p.s), dtype=np.float32) * np.float32(math.sqrt(2 / (p.c * p.r * p.s)))
    return torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()


def _err(torch, y, ref) -> float:
    return float(torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref))


def kinds(torch, cuda, points, bench_csv: str, inner: int, repeats: int) -> dict:
    from experiments.figures.algorithm_choice import measured_plan
    from experiments.provenance import read_rows
    from gpu import im2win
    from gpu.prepared_conv import prepare_conv2d
    from gpu.runtime.timing import time_cuda_queued
    bench = {(r["layer"], int(r["batch"]), r["impl"]): r for r in read_rows(Path(bench_csv))}
    order, totals, keep = [], [], []
    runs = []
    for i, (layer, batch, p) in enumerate(points):
        xt, wt = _inputs(torch, p, [44, 9, i])
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), stride=p.stride, padding=p.padding)
        xd, wd = cuda.as_cuda_array(xt), cuda.as_cuda_array(wt)
        launch = im2win.prepare(xd, wd, p.stride, p.padding)
        launch.run()
        torch.cuda.synchronize()
        err = _err(torch, torch.as_tensor(launch.output, device="cuda"), ref)
        steps = [(f, a) for f, a in launch.steps]
        runs.append((layer, batch, "im2win", [("im2win_transform", steps[0]), ("im2win_conv", steps[1])]))
        t = time_cuda_queued(lambda _i: launch.run(), inner=inner, warmup=2, repeats=repeats).median_ms
        totals.append({"layer": layer, "batch": batch, "impl": "im2win", "median_ms": t, "rel_err": err,
                       "plan": launch.plan.param_string()})
        keep.append(launch)
        xh = xt.permute(0, 2, 3, 1).contiguous()
        xhd = cuda.as_cuda_array(xh)
        for impl in ("winograd_nonfused", "winograd_fused"):
            row = bench.get((layer, batch, impl))
            if row is None or not row.get("detail"):
                continue
            plan = measured_plan(row["detail"])
            conv = prepare_conv2d(p, plan, layout="NHWC")
            y = conv(xhd, wd)
            torch.cuda.synchronize()
            err = _err(torch, torch.as_tensor(y, device="cuda").permute(0, 3, 1, 2), ref)
            t = time_cuda_queued(lambda _i, conv=conv, y=y: conv(xhd, wd, out=y), inner=inner, warmup=2,
                                 repeats=repeats).median_ms
            totals.append({"layer": layer, "batch": batch, "impl": impl, "median_ms": t, "rel_err": err,
                           "plan": row["detail"]})
            names = [getattr(fn._dispatcher, "__name__", "kernel") for fn in conv._launches]
            runs.append((layer, batch, impl, [(n, (fn, None)) for n, fn in zip(names, conv._launches)]))
            keep.append((conv, y))
        keep.append((xt, wt, xh))
        del ref
    torch.cuda.synchronize()
    cuda.profile_start()
    for layer, batch, impl, launches in runs:
        for name, (fn, args) in launches:
            if args is None:
                fn(None)
            else:
                fn(*args)
            torch.cuda.synchronize()
            order.append({"layer": layer, "batch": batch, "impl": impl, "kind": name})
    cuda.profile_stop()
    return {"launch_order": order, "totals": totals}


def conv_alone(torch, cuda, point, build) -> dict:
    from gpu import im2win
    layer, batch, p = point
    xt, wt = _inputs(torch, p, [44, 10])
    xd, wd = cuda.as_cuda_array(xt), cuda.as_cuda_array(wt)
    keys = ("m_b", "n_b", "k_b", "m_t", "n_t", "max_registers", "staging")
    given = {k: (v if k == "staging" else int(v)) for k, v in zip(keys, (build or "").split(",")) if v}
    launch = im2win.prepare(xd, wd, p.stride, p.padding, **given)
    launch.run()
    torch.cuda.synchronize()
    fn, args = launch.steps[1]
    cuda.profile_start()
    fn(*args)
    torch.cuda.synchronize()
    cuda.profile_stop()
    return {"layer": layer, "batch": batch, "plan": launch.plan.param_string(), "build": given,
            "regs": launch.regs_per_thread, "shared_bytes": launch.shared_bytes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", nargs="*", default=[], help="LAYER:BATCH points (im2win layers)")
    ap.add_argument("--conv", default=None, help="LAYER:BATCH: one im2win conv launch alone")
    ap.add_argument("--build", default=None, help="m_b,n_b,k_b,m_t,n_t,max_registers,staging for --conv")
    ap.add_argument("--bench", default=BENCH)
    ap.add_argument("--inner", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from numba import cuda

    from experiments.benchmarks.winograd_bench import device_meta
    from experiments.provenance import provenance
    torch.backends.cudnn.allow_tf32 = False
    out = Path(args.out or os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    meta = {**provenance(), **device_meta(torch, cuda)}
    if args.kinds:
        result = kinds(torch, cuda, [_point(t) for t in args.kinds], args.bench, args.inner, args.repeats)
        (out / "im2win_profile_kinds.json").write_text(json.dumps({**meta, **result}, indent=1, default=str))
        for r in result["totals"]:
            print(f"{r['layer']:>6} b{r['batch']:<4} {r['impl']:<18} {r['median_ms']:8.4f} ms err {r['rel_err']:.1e}")
    if args.conv:
        result = conv_alone(torch, cuda, _point(args.conv), args.build)
        name = f"im2win_profile_conv_{args.conv.replace(':', '_b')}.json"
        (out / name).write_text(json.dumps({**meta, **result}, indent=1, default=str))
        print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
