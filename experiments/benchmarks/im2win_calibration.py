"""Each im2win kernel, and each step of the im2col + cuBLAS baseline, timed ALONE on calibration problems
that are not the bench's 12 layers (what ``megasim.algorithms.im2win.calibration`` fits the task kinds
``im2win_transform``, ``im2win_conv``, ``im2win_conv@VARIANT``, ``im2col_transform``, ``im2col_gemm`` and
``naive_direct`` on), and, with ``--tiles``, the tiled kernel's build choices timed on the bench
layers (how the default tile and staging were chosen; never fitted).

**Kinds** (``--kinds``, default on): per problem of ``megasim.algorithms.im2win.calibration.CAL_PROBLEMS``
and per case of ``calibration_cases`` (the transform; the optimized kernel at each filter tile of
``CAL_TILES``; every variant of the ablation at its default tile; torch's ``unfold`` and its ``matmul`` on an
im2col matrix made before; the naive direct convolution, ``naive_direct``; ``--cost-names`` keeps the cases
of the cost names given): the window tensor is
written once, then ``--inner`` launches of the kind's kernel alone are enqueued back to back between CUDA
events (``time_cuda_queued``; Numba's kernels as packed launches, ``FrozenLaunch``, so a kernel of a few
microseconds is timed at the device's pace; the JSON's ``host_bound_ms`` tells the fit which rows are still
the host's), median of ``--repeats`` samples. The conv output is checked against torch's float64
convolution (``rel_err``; above 1e-4 the row is marked).
Rows: ``kind, cost_name, problem, variant, m_b, n_b, k_b, m_t, n_t, staging, max_registers, math, regs,
median_ms, rel_err, status``.

**Kernel boundary** (``--gap``; alone with ``--no-kinds``): the gap between two real kernels queued back to
back on one stream (``launch_gap``). A one-wave kernel of dependent FMA chains (~20 us) is launched 200
times back to back (packed launches, ``gpu.runtime.fast_launch.FrozenLaunch``: the host's ~3 us per launch
stays behind the device), against the same kernel at twice the chain launched 100 times: the same work
with 100 boundaries fewer, so the gap is the difference / 100. The two alternate (after 0.5 s of warm-up
at the same load, so the clocks are where they settle), median of ``GAP_ROUNDS`` pairs. Writes
``DIR/im2win_launch_gap.json``: a check of the spec's ``kernel_boundary_ns``, which ``megasim calibrate``
measures on empty kernels queued back to back (H200: 1.35 us there, 1.73 us here); nothing is fitted to it.

**Tiles** (``--tiles``): per bench layer at ``--tile-batch``, the optimized kernel (transform +
convolution, as the bench times it) at each build of ``TILE_BUILDS`` (tile, register cap, staging, the
micro-kernel's K loop written out or rolled), with its ``rel_err``. Rows: ``layer, batch, m_b, n_b, k_b,
m_t, n_t, staging, unroll, max_registers, regs, median_ms, tflops, rel_err, status``.

Writes ``DIR/im2win_calibration.csv`` / ``.json`` and ``DIR/im2win_tiles.csv`` / ``.json`` (device,
versions, git SHA, date); DIR defaults to ``$OUT``.

    bash gpu/on_device.sh python3 -m experiments.benchmarks.im2win_calibration [--tiles] [--no-kinds]
        [--cost-names im2col_transform im2col_gemm naive_direct]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from megasim.algorithms.im2win.calibration import IM2COL_KINDS, NAIVE_DIRECT, PACKED_HOST_BOUND_MS

TOL = 1e-4
# (m_b, n_b, k_b, m_t, n_t, max_registers, staging, unroll); max_registers None: the rule (register_cap), 255:
# no cap, 168: three 128-thread blocks per SM; unroll False: the micro-kernel's K loop rolled
TILE_BUILDS = ((128, 128, 16, 8, 8, None, "registers", False), (64, 128, 16, 8, 8, None, "registers", False),
               (128, 128, 16, 8, 8, None, "registers", True), (64, 128, 16, 8, 8, None, "registers", True),
               (64, 128, 16, 8, 8, 168, "registers", True), (128, 128, 8, 8, 8, None, "registers", True),
               (64, 128, 8, 8, 8, 168, "registers", True), (128, 128, 16, 8, 8, None, "async", True),
               (64, 128, 16, 8, 8, 168, "async", True), (128, 128, 16, 8, 8, 255, "registers", True))


def _inputs(p, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((p.n, p.c, p.h, p.w), dtype=np.float32)
    w = rng.standard_normal((p.k, p.c, p.r, p.s), dtype=np.float32) * np.float32(math.sqrt(2 / (p.c * p.r * p.s)))
    return x, w


def _err(torch, y, ref):
    return float(torch.linalg.vector_norm(torch.as_tensor(y, device="cuda").double() - ref)
                 / torch.linalg.vector_norm(ref))


def im2col_row(torch, row: dict, p, xt, wt, ref, repeats: int, inner: int) -> dict:
    """``row`` with the time of one step of im2col + cuBLAS alone, as the bench runs it: ``unfold`` of the
    input (``im2col_transform``) or ``matmul`` of the filter matrix by an im2col matrix made before
    (``im2col_gemm``); the product checked against float64 either way."""
    from gpu.runtime.timing import time_cuda_queued
    F = torch.nn.functional
    try:
        wm = wt.reshape(p.k, -1)
        cols = F.unfold(xt, (p.r, p.s), padding=p.padding, stride=p.stride)
        y = torch.matmul(wm, cols)
        torch.cuda.synchronize()
        row["rel_err"] = _err(torch, y.reshape(p.n, p.k, p.out_h, p.out_w), ref)
        del y
        if row["kind"] == "im2col_transform":
            del cols
            fn = lambda _i: F.unfold(xt, (p.r, p.s), padding=p.padding, stride=p.stride)   # noqa: E731
        else:
            fn = lambda _i: torch.matmul(wm, cols)                                           # noqa: E731
        row["median_ms"] = time_cuda_queued(fn, inner=inner, warmup=2, repeats=repeats).median_ms
        if row["rel_err"] > TOL:
            row["status"] = "failed: rel_err"
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        row["status"] = f"error: {type(exc).__name__}: {exc}"[:200]
    return row


def packed(configured, args):
    """A configured Numba kernel and its arguments as one packed launch (``FrozenLaunch``: ~3 us of host per
    launch instead of Numba's ~20-40 us of dispatch), so a kernel of a few microseconds is timed at the
    device's pace, not the host's (``PACKED_HOST_BOUND_MS``)."""
    from gpu.runtime.fast_launch import FrozenLaunch
    return FrozenLaunch(configured.dispatcher, configured.griddim, configured.blockdim, configured.sharedmem, args)


def naive_direct_row(torch, row: dict, p, xt, wt, ref, repeats: int, inner: int) -> dict:
    """``row`` with the time of the naive direct convolution's launch alone (the bench's ``direct``), its output
    checked against float64."""
    from numba import cuda

    from gpu.kernels.im2win.direct import DIRECT_THREADS, direct_blocks, direct_kernel, direct_params
    from gpu.runtime.timing import time_cuda_queued
    try:
        y = torch.empty((p.n, p.k, p.out_h, p.out_w), device="cuda")
        args = (cuda.as_cuda_array(xt), cuda.as_cuda_array(wt), cuda.as_cuda_array(y), cuda.to_device(direct_params(p)))
        configured = direct_kernel[direct_blocks(p), DIRECT_THREADS]
        configured(*args)
        torch.cuda.synchronize()
        row["rel_err"] = _err(torch, y, ref)
        step = packed(configured, args)
        row["median_ms"] = time_cuda_queued(lambda _i: step(), inner=inner, warmup=2, repeats=repeats).median_ms
        if row["rel_err"] > TOL:
            row["status"] = "failed: rel_err"
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        row["status"] = f"error: {type(exc).__name__}: {exc}"[:200]
    return row


def kind_rows(torch, cuda, repeats, inner, log, cost_names=None) -> list[dict]:
    from gpu import im2win
    from gpu.runtime.timing import time_cuda_queued
    from megasim.algorithms.im2win.calibration import calibration_cases
    from megasim.workloads import parse_layer
    rows = []
    cases = [c for c in calibration_cases() if cost_names is None or c["cost_name"] in cost_names]
    by_problem: dict[str, list] = {}
    for case in cases:
        by_problem.setdefault(case["problem"], []).append(case)
    for pi, (text, group) in enumerate(by_problem.items()):
        p = parse_layer(text)
        x, w = _inputs(p, [44, 7, pi])
        xt, wt = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), stride=p.stride, padding=p.padding)
        xd, wd = cuda.as_cuda_array(xt), cuda.as_cuda_array(wt)
        for case in group:
            row = {k: case.get(k) for k in ("kind", "cost_name", "problem", "variant", "m_b", "n_b", "k_b", "m_t",
                                            "n_t", "staging", "max_registers", "math")}
            row.update(regs="", median_ms=math.nan, rel_err=math.nan, status="ok")
            if case["kind"] in (*IM2COL_KINDS, NAIVE_DIRECT):
                step = im2col_row if case["kind"] in IM2COL_KINDS else naive_direct_row
                rows.append(step(torch, row, p, xt, wt, ref, repeats, inner))
                log(f"{row['cost_name']:26s} {text:44s} {row['median_ms']:9.4f} ms err {row['rel_err']:.1e} "
                    f"{row['status']}")
                continue
            try:
                tiles = {k: case[k] for k in ("m_b", "n_b", "k_b", "m_t", "n_t") if case.get(k) is not None}
                launch = im2win.prepare(xd, wd, p.stride, p.padding, variant=case["variant"],
                                        max_registers=case.get("max_registers"), staging=case.get("staging"),
                                        math=case.get("math") or "fp32", **tiles)
                launch.run()
                torch.cuda.synchronize()
                row["rel_err"] = _err(torch, launch.output, ref)
                row["regs"] = launch.regs_per_thread or ""
                (tf, targs), (cf, cargs) = launch.steps
                step = packed(tf, targs) if case["kind"] == "im2win_transform" else packed(cf, cargs)
                stats = time_cuda_queued(lambda _i: step(), inner=inner, warmup=2, repeats=repeats)
                row["median_ms"] = stats.median_ms
                if row["rel_err"] > TOL:
                    row["status"] = "failed: rel_err"
                del launch
            except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
                row["status"] = f"error: {type(exc).__name__}: {exc}"[:200]
            rows.append(row)
            log(f"{row['cost_name']:26s} {text:44s} {row.get('m_b')!s:>4} {row.get('staging')!s:9s} "
                f"{row['median_ms']:9.4f} ms err {row['rel_err']:.1e} regs {row['regs']} {row['status']}")
        del xt, wt, ref
        torch.cuda.empty_cache()
    return rows


GAP_THREADS = 128
GAP_BLOCKS_PER_SM = 4           # one wave, 16 warps per SM (the kernel takes few registers)
GAP_KERNEL_US = 20.0            # the short kernel's length; the host's packed launch is ~3 us
GAP_LAUNCHES = 200              # short kernels per sequence (the long one: half as many)
GAP_ROUNDS = 9


def _fma_chain_kernel(cuda):
    from numba import float32

    @cuda.jit
    def fma_chain(out, prm):
        i = cuda.grid(1)
        a = float32(i) * float32(1e-7)
        for _ in range(prm[0]):
            a = a * float32(0.999999) + float32(1e-7)
        out[i] = a
    return fma_chain


def launch_gap(torch, cuda, log) -> dict:
    """The gap between two real kernels queued back to back (module docstring)."""
    from gpu.runtime.fast_launch import FrozenLaunch
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    blocks = sms * GAP_BLOCKS_PER_SM
    out = cuda.device_array(blocks * GAP_THREADS, dtype=np.float32)
    kernel = _fma_chain_kernel(cuda)
    stream = torch.cuda.current_stream()

    def seq_ms(launch, count: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(count):
            launch()
        end.record(stream)
        stream.synchronize()
        return start.elapsed_time(end)
    def chain(iters: int) -> FrozenLaunch:        # (all arguments arrays: the packed launch takes them)
        return FrozenLaunch(kernel, blocks, GAP_THREADS, 0, (out, cuda.to_device(np.array([iters], np.int32))))
    probe = chain(20_000)
    seq_ms(probe, 10)
    iters = max(500, int(20_000 * GAP_KERNEL_US / (seq_ms(probe, 20) / 20 * 1e3)))
    short, long_ = chain(iters), chain(2 * iters)
    warm = 0.0
    while warm < 500.0:                      # the clocks settle under this load
        warm += seq_ms(short, GAP_LAUNCHES)
    pairs = [(seq_ms(short, GAP_LAUNCHES), seq_ms(long_, GAP_LAUNCHES // 2)) for _ in range(GAP_ROUNDS)]
    gaps_ns = sorted((a - b) * 1e6 / (GAP_LAUNCHES - GAP_LAUNCHES // 2) for a, b in pairs)
    gap_ns = float(np.median(gaps_ns))
    log(f"kernel boundary: {iters} iterations, {GAP_LAUNCHES} x {pairs[0][0] / GAP_LAUNCHES * 1e3:.2f} us against "
        f"{GAP_LAUNCHES // 2} x {pairs[0][1] / (GAP_LAUNCHES // 2) * 1e3:.2f} us: gap {gap_ns:.0f} ns "
        f"(rounds {gaps_ns[0]:.0f} .. {gaps_ns[-1]:.0f})")
    return {"kernel_boundary_ns": max(0.0, gap_ns), "gap_ns_rounds": gaps_ns, "iterations": iters,
            "short_sequence_ms": [a for a, _ in pairs], "long_sequence_ms": [b for _, b in pairs],
            "blocks": blocks, "threads": GAP_THREADS,
            "method": f"a one-wave FMA-chain kernel ({blocks} x {GAP_THREADS}, {iters} dependent FMAs per thread, "
                      f"~{GAP_KERNEL_US:.0f} us) launched {GAP_LAUNCHES} times back to back (packed launches) against "
                      f"twice the chain {GAP_LAUNCHES // 2} times, CUDA events around each sequence, alternating "
                      f"after 0.5 s of warm-up; median over {GAP_ROUNDS} pairs of the difference / "
                      f"{GAP_LAUNCHES - GAP_LAUNCHES // 2}"}


def tile_rows(torch, cuda, batch, repeats, inner, log) -> list[dict]:
    from gpu import im2win
    from gpu.runtime.timing import time_cuda_queued
    from megasim.workloads import parse_layer
    rows = []
    for i in range(1, 13):
        p = parse_layer(f"im2win/conv{i}").with_batch(batch)
        x, w = _inputs(p, [44, 8, i])
        xt, wt = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        del x, w
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), stride=p.stride, padding=p.padding)
        xd, wd = cuda.as_cuda_array(xt), cuda.as_cuda_array(wt)
        for m_b, n_b, k_b, m_t, n_t, regs, staging, unroll in TILE_BUILDS:
            row = {"layer": f"conv{i}", "batch": batch, "m_b": m_b, "n_b": n_b, "k_b": k_b, "m_t": m_t, "n_t": n_t,
                   "staging": staging, "unroll": unroll, "max_registers": regs if regs is not None else "rule",
                   "regs": "",
                   "median_ms": math.nan, "tflops": math.nan, "rel_err": math.nan, "status": "ok"}
            try:
                launch = im2win.prepare(xd, wd, p.stride, p.padding, m_b=m_b, n_b=n_b, k_b=k_b, m_t=m_t, n_t=n_t,
                                        max_registers=regs, staging=staging, unroll=unroll)
                launch.run()
                torch.cuda.synchronize()
                row["rel_err"] = _err(torch, launch.output, ref)
                row["regs"] = launch.regs_per_thread or ""
                stats = time_cuda_queued(lambda _i: launch.run(), inner=inner, warmup=1, repeats=repeats)
                row.update(median_ms=stats.median_ms, tflops=p.direct_flops / stats.median_ms / 1e9)
                if row["rel_err"] > TOL:
                    row["status"] = "failed: rel_err"
                del launch
            except Exception as exc:  # noqa: BLE001
                row["status"] = f"error: {type(exc).__name__}: {exc}"[:200]
            rows.append(row)
            log(f"conv{i:<3d} {m_b:4d}x{n_b:<4d}x{k_b:<3d} {staging:9s} {'unrolled' if unroll else 'rolled  '} cap {row['max_registers']!s:5s} regs "
                f"{row['regs']!s:4s} {row['median_ms']:9.3f} ms {row['tflops']:6.2f} TFLOPS err {row['rel_err']:.1e} "
                f"{row['status']}")
            torch.cuda.synchronize()
            cuda.current_context().deallocations.clear()
        del xt, wt, ref
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", action="store_true", help="also time TILE_BUILDS on the bench layers")
    ap.add_argument("--no-kinds", action="store_true", help="skip the calibration cases")
    ap.add_argument("--cost-names", nargs="+", default=None,
                    help="time only the calibration cases of these cost names (e.g. im2col_transform im2col_gemm)")
    ap.add_argument("--gap", action="store_true", help="measure the gap between real kernels back to back")
    ap.add_argument("--tile-batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from numba import cuda

    from experiments.benchmarks.winograd_bench import device_meta
    from experiments.provenance import provenance, write_results
    torch.backends.cudnn.allow_tf32 = False
    out_dir = Path(args.out or os.environ.get("OUT") or ".")
    meta = {**provenance(), **device_meta(torch, cuda), "tolerance": TOL, "repeats": args.repeats,
            "inner": args.inner}
    started = time.time()

    def log(text):
        print(f"{time.time() - started:7.1f}s {text}", flush=True)

    bad = 0
    if args.gap:
        import json
        out_dir.mkdir(parents=True, exist_ok=True)
        gap = launch_gap(torch, cuda, log)
        (out_dir / "im2win_launch_gap.json").write_text(json.dumps({"meta": meta, **gap}, indent=1, default=str) + "\n")
    if not args.no_kinds:
        rows = kind_rows(torch, cuda, args.repeats, args.inner, log, args.cost_names)
        write_results(rows, out_dir, "im2win_calibration",
                      {**meta, "method": f"each kind's kernel alone, CUDA events around {args.inner} back-to-back "
                                         f"launches (Numba's kernels as packed launches, torch's as torch issues "
                                         f"them), median of {args.repeats}", "host_bound_ms": PACKED_HOST_BOUND_MS})
        bad += sum(r["status"] != "ok" for r in rows)
    if args.tiles:
        rows = tile_rows(torch, cuda, args.tile_batch, args.repeats, args.inner, log)
        write_results(rows, out_dir, "im2win_tiles",
                      {**meta, "method": f"transform + conv as the bench times them, CUDA events around "
                                         f"{args.inner} back-to-back runs, median of {args.repeats}"})
        bad += sum(r["status"] != "ok" for r in rows)
    log(f"done, {bad} rows not ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
