"""im2win on the GPU against its ablation, a naive direct convolution, im2col + cuBLAS and cuDNN: the im2win
paper's 12 layers (Table 2, ``im2win/conv1`` ... ``conv12``) at batch 128 (the paper's) and 64.

Implementations (``IMPLS``):

- ``im2win``: ``gpu.im2win`` (transform + Alg. 3), its default tile (no tile argument: ``m_b`` 64,
  ``n_b`` 128, ``k_b`` 16, 8 x 8 register tiles, registers capped at 168: three blocks per SM); ``im2win_basic`` (Alg. 2), ``im2win_no_microkernel`` (1 x 1 register tiles,
  32 x 32 block tile), ``im2win_no_vector``, ``im2win_no_prefetch``: the ablation, each a build parameter
  of the same kernel factory, at the default tile;
- ``im2win_tuned``: the optimized kernel at the fastest, per layer and batch, of ``TUNE_BUILDS`` (tiles
  and staging), each timed here first (3 runs), as cuDNN's Find does for its algorithms (``detail``
  names the choice);
- ``winograd_fused``, ``winograd_nonfused`` (3 x 3, stride-1 layers only: conv6 ... conv12): our Winograd
  kernels at the plan the model ranks fastest for that schedule (``winograd_plan``: the tile and pairs
  of ``megasim.algorithms.winograd.choice``'s best candidate on this GPU's calibrated spec,
  ``winograd_spec_path``, the fused mapping Algorithm 1's recommended one), prepared once (``gpu.prepared_conv.prepare_conv2d``, NHWC, the layer's padding) and
  run on a preallocated output; ``detail`` is the plan that ran, its mapping included; ``extra_bytes``
  not recorded;
- ``im2win_3xtf32``: the same kernel built with ``math="3xtf32"`` (``gpu.im2win.prepare(math="3xtf32")``:
  its micro-kernel on TF32 tensor cores, each FP32 operand split into big + small TF32 parts, three
  m16n8k8 MMAs per product, FP32-level error), at ``--tc-tile`` (default ``MATH_DEFAULT_TILES["3xtf32"]``)
  and its staging (``--tc-staging``);
- ``direct``: the naive direct convolution of ``gpu.kernels.im2win.direct`` (one thread per output);
- ``im2col_cublas``: torch ``unfold`` + ``matmul`` (cuBLAS SGEMM, TF32 off), as the paper's PyTorch
  im2col + cuBLAS;
- ``cudnn_best_fp32``: cuDNN's fastest FP32 algorithm (FMA math, no TF32) through the legacy Find API
  (``gpu.cudnn_legacy``): Find's successful algorithms within 1.5x of its fastest (at most 4) are
  re-timed here and the fastest kept (``detail`` names it).

Per (layer, batch, impl): fresh standard-normal inputs (He-scaled weights); the output's normwise
relative error ``||y - ref|| / ||ref||`` against torch's float64 convolution (``rel_err``; rows above
``TOL`` = 1e-4 are marked failed); the median time per run of CUDA events around ``--inner``
back-to-back runs (``gpu.runtime.timing.time_cuda_queued``: the transform and the convolution for
im2win, unfold and matmul for im2col, both inside the timing); ``tflops`` = the direct convolution's
``2*N*K*C*R*S*P*Q`` / time; ``extra_bytes``: device memory the implementation allocates beyond input,
filter and output (the im2win tensor, the im2col matrix, cuDNN's workspace for the chosen algorithm).

Writes ``DIR/im2win_bench.csv`` + ``.json`` (device, driver, versions, git SHA, date, method), rewritten
after every layer; DIR defaults to ``$OUT`` or ``experiments/results/<device-slug>/``. Prints a table.

    bash gpu/on_device.sh python3 -m experiments.benchmarks.im2win_bench [--layers conv5 conv12]
        [--batch 128 64] [--impls im2win cudnn_best_fp32] [--repeats 5] [--out DIR]

The default run (12 layers x 2 batches x 9 impls, Winograd on 7 layers) takes a few minutes on an H100.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

NAME = "im2win_bench"
IM2WIN_IMPLS = {"im2win": "optimized", "im2win_basic": "basic", "im2win_no_microkernel": "no_microkernel",
                "im2win_no_vector": "no_vector", "im2win_no_prefetch": "no_prefetch"}
WINOGRAD_IMPLS = {"winograd_fused": "fused", "winograd_nonfused": "nonfused"}
IMPLS = (*IM2WIN_IMPLS, "im2win_tuned", "im2win_3xtf32", "direct", "im2col_cublas", "cudnn_best_fp32", *WINOGRAD_IMPLS)
# im2win_tuned's candidates, as cuDNN's Find: (m_b, n_b, k_b, m_t, n_t, staging), registers capped by the
# kernel's rule (register_cap: at least two blocks and 12 warps per SM)
TUNE_BUILDS = ((64, 128, 16, 8, 8, "registers"), (128, 128, 16, 8, 8, "registers"), (64, 128, 8, 8, 8, "registers"),
               (128, 128, 8, 8, 8, "registers"), (64, 64, 8, 8, 8, "registers"), (64, 128, 16, 8, 8, "async"),
               (128, 128, 16, 8, 8, "async"))
LAYERS = tuple(f"im2win/conv{i}" for i in range(1, 13))
TOL = 1e-4
CUDNN_CANDIDATES = 4
CUDNN_WITHIN = 1.5
COLUMNS = ("layer", "batch", "impl", "median_ms", "tflops", "extra_bytes", "rel_err")


def _args(argv):
    from megasim.errors import InputError
    from megasim.workloads import parse_layer
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS), help="layer names (conv5, Conv5 or im2win/conv5)")
    ap.add_argument("--batch", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), help=f"of: {', '.join(IMPLS)}")
    ap.add_argument("--tile", default=None, help="im2win's tile as m_b,n_b,k_b,m_t,n_t (default: the plug-in's)")
    ap.add_argument("--tc-tile", default=None, help="im2win_3xtf32's tile as m_b,n_b,k_b,m_t,n_t (default: "
                    "gpu.im2win.MATH_DEFAULT_TILES['3xtf32'])")
    ap.add_argument("--tc-staging", default="registers", choices=("registers", "async"),
                    help="im2win_3xtf32's staging")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--inner", type=int, default=2, help="back-to-back runs per timed sample")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    unknown = [i for i in args.impls if i not in IMPLS]
    if unknown:
        raise InputError(f"--impls {unknown[0]!r} is not allowed (allowed: {', '.join(IMPLS)})")
    bad = [b for b in args.batch if b < 1]
    if bad:
        raise InputError(f"--batch {bad[0]} is not allowed: a batch is a positive integer")
    args.problems = [parse_layer(name, source="--layers") for name in args.layers]
    for flag in ("tile", "tc_tile"):
        text = getattr(args, flag)
        if text is None:
            continue
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            values = []
        if len(values) != 5:
            raise InputError(f"--{flag.replace('_', '-')} {text!r} is not allowed: give five integers m_b,n_b,k_b,m_t,n_t")
        setattr(args, flag, dict(zip(("m_b", "n_b", "k_b", "m_t", "n_t"), values)))
    return args


WINOGRAD_SPEC = "megasim/hardware/calibrated/h100_from_h200.json"     # the Winograd plans' spec off an H100/H200


def winograd_spec_path(device_name: str) -> str:
    """The calibrated spec the bench ranks Winograd plans on for this GPU (``choice.CALIBRATED_SPECS``: the
    H200's own fit on an H200, the H100 transfer on an H100), else ``WINOGRAD_SPEC``."""
    from megasim.algorithms.winograd.choice import CALIBRATED_SPECS
    for fragment, file in CALIBRATED_SPECS.items():
        if fragment in str(device_name).upper():
            return f"megasim/hardware/calibrated/{file}"
    return WINOGRAD_SPEC


def winograd_plan(problem, schedule: str, spec_path: str = WINOGRAD_SPEC):
    """The Winograd plan the model ranks fastest for ``schedule`` (``megasim.algorithms.winograd.choice``'s
    candidates, layout NHWC, on ``spec_path``: the plan ``experiments.figures.algorithm_choice``
    predicts on that spec), its fused mapping left to the full problem's recommended one (the candidate
    may have been simulated at a smaller batch)."""
    from dataclasses import replace

    from megasim.algorithms.winograd.choice import choose
    from megasim.hardware.files import load_spec
    choice = choose(problem, load_spec(spec_path), layout="NHWC", spec_reason="bench")
    best = min((c for c in choice.candidates if c.plan.schedule == schedule), key=lambda c: c.predicted_us)
    plan = best.plan
    if schedule == "fused":
        plan = replace(plan, params=replace(plan.params, d_ig=None, d_go=None, m=None))
    return plan


def _cudnn_best(torch, conv, xt, wt, y, inner):
    """(algorithm, workspace bytes): of Find's successful algorithms within CUDNN_WITHIN of its fastest (at
    most CUDNN_CANDIDATES), the fastest by our own timing."""
    from gpu.runtime.timing import time_cuda_queued
    found = conv.find(xt, wt, y)
    ok = sorted((r for r in found if r.ok and math.isfinite(r.time_ms)), key=lambda r: r.time_ms)
    if not ok:
        raise RuntimeError("cuDNN Find returned no usable algorithm")
    timed = {}
    for r in [r for r in ok if r.time_ms <= CUDNN_WITHIN * ok[0].time_ms][:CUDNN_CANDIDATES]:
        timed[r.algo] = time_cuda_queued(lambda _i, a=r.algo: conv.forward(xt, wt, y, a), inner=inner, warmup=1,
                                         repeats=3).median_ms
    algo = min(timed, key=timed.get)
    return algo, int(conv.workspace_size(algo) or 0)


def _impl(torch, cuda, impl, p, xt, wt, tile, inner, winograd_spec=WINOGRAD_SPEC, tc_tile=None, tc_staging="registers"):
    """(fn(i) enqueuing one run, output tensor getter, extra bytes, detail) of an implementation."""
    F = torch.nn.functional
    if impl in IM2WIN_IMPLS:
        from gpu import im2win
        variant = IM2WIN_IMPLS[impl]
        kw = tile if (tile and variant not in ("basic", "no_microkernel")) else {}
        launch = im2win.prepare(cuda.as_cuda_array(xt), cuda.as_cuda_array(wt), p.stride, p.padding,
                                variant=variant, **kw)
        detail = launch.plan.param_string() + (f",regs={launch.regs_per_thread}" if launch.regs_per_thread else "")
        return (lambda _i: launch.run()), (lambda: torch.as_tensor(launch.output, device="cuda")), \
            launch.extra_bytes, detail, launch
    if impl == "im2win_3xtf32":
        from gpu import im2win
        launch = im2win.prepare(cuda.as_cuda_array(xt), cuda.as_cuda_array(wt), p.stride, p.padding, math="3xtf32",
                                staging=tc_staging, **(tc_tile or {}))
        detail = (launch.plan.param_string() + f",math=3xtf32,staging={tc_staging}"
                  + (f",regs={launch.regs_per_thread}" if launch.regs_per_thread else ""))
        return (lambda _i: launch.run()), (lambda: torch.as_tensor(launch.output, device="cuda")), \
            launch.extra_bytes, detail, launch
    if impl == "im2win_tuned":
        from gpu import im2win
        from gpu.runtime.timing import time_cuda
        xd, wd = cuda.as_cuda_array(xt), cuda.as_cuda_array(wt)
        timed = {}
        for build in TUNE_BUILDS:
            launch = im2win.prepare(xd, wd, p.stride, p.padding, m_b=build[0], n_b=build[1], k_b=build[2],
                                    m_t=build[3], n_t=build[4], staging=build[5])
            timed[build] = time_cuda(lambda _i, launch=launch: launch.run(), warmup=1, repeats=3).median_ms
            del launch
        build = min(timed, key=timed.get)
        launch = im2win.prepare(xd, wd, p.stride, p.padding, m_b=build[0], n_b=build[1], k_b=build[2], m_t=build[3],
                                n_t=build[4], staging=build[5])
        detail = launch.plan.param_string() + f",staging={build[5]},regs={launch.regs_per_thread}"
        return (lambda _i: launch.run()), (lambda: torch.as_tensor(launch.output, device="cuda")), \
            launch.extra_bytes, detail, launch
    if impl in WINOGRAD_IMPLS:
        from dataclasses import replace

        from gpu.prepared_conv import prepare_conv2d
        plan = winograd_plan(p, WINOGRAD_IMPLS[impl], winograd_spec)
        xh = xt.permute(0, 2, 3, 1).contiguous()
        xd, wd = cuda.as_cuda_array(xh), cuda.as_cuda_array(wt)
        conv = prepare_conv2d(p, plan, layout="NHWC")
        y = conv(xd, wd)
        return (lambda _i: conv(xd, wd, out=y)), (lambda: torch.as_tensor(y, device="cuda").permute(0, 3, 1, 2)), \
            "", f"{conv.plan.schedule} {conv.plan.param_string()} (prepared, NHWC)", (xh, conv)
    if impl == "direct":
        from gpu.kernels.im2win.direct import DIRECT_THREADS, direct_blocks, direct_kernel, direct_params
        y = torch.empty((p.n, p.k, p.out_h, p.out_w), device="cuda")
        args = (cuda.as_cuda_array(xt), cuda.as_cuda_array(wt), cuda.as_cuda_array(y),
                cuda.to_device(direct_params(p)))
        configured = direct_kernel[direct_blocks(p), DIRECT_THREADS]
        return (lambda _i: configured(*args)), (lambda: y), 0, "one thread per output", args
    if impl == "im2col_cublas":
        wm = wt.reshape(p.k, -1)
        out = {}

        def fn(_i):
            cols = F.unfold(xt, (p.r, p.s), padding=p.padding, stride=p.stride)     # (N, C*R*S, P*Q)
            out["y"] = torch.matmul(wm, cols)
        cols_bytes = p.n * p.c * p.r * p.s * p.out_h * p.out_w * 4
        return fn, (lambda: out["y"].reshape(p.n, p.k, p.out_h, p.out_w)), cols_bytes, "unfold + matmul", None
    if impl == "cudnn_best_fp32":
        from gpu.cudnn_legacy import CudnnConv
        conv = CudnnConv(p.n, p.c, p.k, p.h, p.w, r=p.r, s=p.s, padding=p.padding, stride=p.stride, math="fp32")
        y = torch.empty(conv.shape_y, device="cuda")
        algo, ws = _cudnn_best(torch, conv, xt, wt, y, inner)
        return (lambda _i: conv.forward(xt, wt, y, algo)), (lambda: y), ws, algo, conv
    raise ValueError(impl)


def _table(rows) -> str:
    """TFLOPS per layer (rows) and implementation (columns), per batch, plus geometric-mean ratios."""
    out = []
    for batch in sorted({r["batch"] for r in rows}, reverse=True):
        sub = [r for r in rows if r["batch"] == batch]
        impls = [i for i in IMPLS if any(r["impl"] == i for r in sub)]
        out.append(f"batch {batch}: TFLOPS (x = failed)")
        out.append(f"{'layer':14s}" + "".join(f"{i[:13]:>14s}" for i in impls))
        layers = list(dict.fromkeys(r["layer"] for r in sub))
        for layer in layers:
            cells = []
            for i in impls:
                r = next((r for r in sub if r["layer"] == layer and r["impl"] == i), None)
                cells.append("" if r is None else (f"{r['tflops']:.2f}" if r["status"] == "ok" else "x"))
            out.append(f"{layer:14s}" + "".join(f"{c:>14s}" for c in cells))
        for ours in ("im2win", "im2win_3xtf32"):
            for base in ("cudnn_best_fp32", "im2col_cublas", "im2win"):
                ratios = []
                for layer in layers:
                    a = next((r for r in sub if r["layer"] == layer and r["impl"] == ours and r["status"] == "ok"), None)
                    b = next((r for r in sub if r["layer"] == layer and r["impl"] == base and r["status"] == "ok"), None)
                    if a and b and base != ours:
                        ratios.append(b["median_ms"] / a["median_ms"])
                if ratios:
                    out.append(f"{ours} speed-up over {base}: geometric mean {math.exp(np.mean(np.log(ratios))):.2f}x "
                               f"over {len(ratios)} layers (min {min(ratios):.2f}, max {max(ratios):.2f})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import torch
    from numba import cuda

    from experiments.benchmarks.winograd_bench import device_meta, device_slug
    from experiments.provenance import provenance, write_results
    from gpu.runtime.timing import time_cuda_queued

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dmeta = device_meta(torch, cuda)
    out_dir = Path(args.out or os.environ.get("OUT") or f"experiments/results/{device_slug(dmeta['device'])}")
    meta = {**provenance(), **dmeta, "tolerance": TOL, "repeats": args.repeats, "warmup": args.warmup,
            "inner": args.inner, "tile": args.tile, "tc_tile": args.tc_tile, "tc_staging": args.tc_staging,
            "winograd_spec": winograd_spec_path(dmeta["device"]),
            "method": f"CUDA events around {args.inner} back-to-back runs, median per run of {args.repeats} samples; "
                      "fresh standard-normal inputs per (layer, batch); normwise error against torch float64"}
    wspec = meta["winograd_spec"]
    rows: list[dict] = []
    started = time.time()
    for batch in args.batch:
        for base in args.problems:
            p = base.with_batch(batch)
            layer = (base.name or base.spec_string()).removeprefix("im2win/")
            rng = np.random.default_rng([44, batch, len(rows)])
            x = rng.standard_normal((p.n, p.c, p.h, p.w), dtype=np.float32)
            w = rng.standard_normal((p.k, p.c, p.r, p.s), dtype=np.float32) * np.float32(math.sqrt(2 / (p.c * p.r * p.s)))
            xt, wt = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
            del x, w
            ref = torch.nn.functional.conv2d(xt.double(), wt.double(), stride=p.stride, padding=p.padding)
            ref_norm = float(torch.linalg.vector_norm(ref))
            for impl in args.impls:
                if impl in WINOGRAD_IMPLS and not (p.r == p.s == 3 and p.stride == 1):
                    continue        # Winograd F(m x m, 3 x 3): 3 x 3 filters, stride 1 only
                row = {"layer": layer, "batch": batch, "impl": impl, "median_ms": math.nan, "tflops": math.nan,
                       "extra_bytes": "", "rel_err": math.nan}
                keep = None
                try:
                    fn, output, extra, detail, keep = _impl(torch, cuda, impl, p, xt, wt, args.tile, args.inner,
                                                            wspec, args.tc_tile, args.tc_staging)
                    fn(0)
                    torch.cuda.synchronize()
                    err = float(torch.linalg.vector_norm(output().double() - ref)) / ref_norm
                    stats = time_cuda_queued(fn, inner=args.inner, warmup=args.warmup, repeats=args.repeats)
                    row.update(median_ms=stats.median_ms, tflops=p.direct_flops / stats.median_ms / 1e9,
                               extra_bytes=int(extra) if extra != "" else "", rel_err=err, detail=detail,
                               status="ok" if err <= TOL else "failed: rel_err")
                except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
                    row.update(status=f"error: {type(exc).__name__}: {exc}"[:200], detail="")
                del keep
                rows.append(row)
                print(f"{layer:7s} N={batch:3d} {impl:22s} {row['median_ms']:9.3f} ms {row['tflops']:7.2f} TFLOPS "
                      f"extra {row['extra_bytes'] if row['extra_bytes'] != '' else '-':>12} err {row['rel_err']:.1e} "
                      f"{row['status'] if row['status'] != 'ok' else ''} {row.get('detail', '')}", flush=True)
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                cuda.current_context().deallocations.clear()
            del xt, wt, ref
            torch.cuda.empty_cache()
            meta["elapsed_s"] = round(time.time() - started, 1)
            write_results(rows, out_dir, NAME, meta)
    print(_table(rows))
    bad = [r for r in rows if r["status"] != "ok"]
    print(f"{len(rows)} rows in {time.time() - started:.0f} s, {len(bad)} not ok; wrote {out_dir / NAME}.csv")
    return 1 if bad else 0


if __name__ == "__main__":
    from megasim.errors import MegasimError
    try:
        sys.exit(main())
    except MegasimError as exc:
        print(f"im2win_bench: error: {exc}", file=sys.stderr)
        sys.exit(2)
