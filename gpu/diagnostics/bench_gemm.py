"""GEMM-phase benchmark: our Winograd GEMM kernels against cuBLAS bmm on the Table-2 layers.

For each layer (batch 64, F(4x4, 3x3): 36 GEMMs (tiles x C) @ (C x K)) this fills V (36, tiles, C)
and U (36, C, K) with fresh normal float32 (``--sets`` copies, rotated so runs do not hit L2), then
times with CUDA events (median of ``--repeats``):

- ``cublas``: ``torch.bmm(V, U, out=M)`` (TF32 off) on the same tensors;
- ``prod``: ``gpu.kernels.winograd.megakernel.gemm_kernel`` with the default WinogradConfig (what the executors run:
  ``gemm_task``, which dispatches to the specialised path for the default config);
- ``generic``: ``gpu.kernels.winograd.device.gemm_generic`` in the same launch (the runtime-sized path);
- ``vec_TxGKxKSxNTxSK[S][rR]``: ``gpu.kernels.winograd.gemm_vec.make_gemm_vec(T, GK, KS, NT, SK)`` variants
  (``--vec-variants``; a suffix ``rR`` compiles the kernel with at most R registers per thread); with a
  staging suffix S, ``gpu.kernels.winograd.gemm_vec.make_gemm_staged`` (issue #3's staging experiments): ``v`` 128-bit
  global loads, ``aN`` B by cp.async through an N-stage ring (A as ``v``), ``cN`` A and B by cp.async
  (N-stage ring, A untransposed); ``a`` / ``c`` need sm_80+; after a ``v`` or ``a`` staging, ``uU`` writes
  the k-steps of a stage out U at a time (``make_gemm_staged(unroll=U)``), and ``i32`` runs its index
  arithmetic in 32 bits (``index_bits=32``; h200_gemm/index32/ (in git at 871d7d7)), and ``w`` gives each
  thread 8 x 16 outputs instead of 8 x 8 (``thread_cols=16``);
- ``tc_TxGKxKSxNTxS[t]``: ``gpu.kernels.winograd.gemm_tc.make_gemm_tc(T, GK, KS, NT, S)`` (``--tc-variants``): tensor
  cores, FP32-accurate by the 3xTF32 split, S-stage cp.async ring (sm_80+); suffix ``t``: the truncating
  split (``split="trunc"``). (A pass-major MMA order, "p", and paired-k fragment loads, "k", were tried
  too: slower / no faster; in git history.)

Every kernel launches one block per GEMM task in the non-fused order (e, group, k-tile) and is
checked against a float64 bmm (rel err <= 1e-4). Prints a table (ms, TFLOP/s, % of cuBLAS) and the
kernels' resource report (registers, shared memory, local memory, occupancy, PTX local loads/stores),
and writes ``gemm_bench.{csv,json}`` and ``gemm_resources.{csv,json}`` to ``--out`` (default $OUT).

    bash gpu/on_device.sh python -m gpu.diagnostics.bench_gemm --vec-variants 128x64x8x128x1 64x64x8x128x2r128
    bash gpu/on_device.sh python -m gpu.diagnostics.bench_gemm --vec-variants 64x64x8x128x2 64x64x8x128x2v 64x64x8x128x2c3
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import traceback

import numpy as np


def parse_config(s: str) -> tuple[int, int, int, int]:
    """'TxGKxKSxNT' -> (T, GK, KS, NT), or a one-line exit naming the value."""
    try:
        v = tuple(int(x) for x in s.split("x"))
    except ValueError:
        v = ()
    if len(v) != 4:
        raise SystemExit(f"config {s!r} is not allowed: want TxGKxKSxNT, e.g. 64x64x8x128")
    return v


VARIANT_RE = re.compile(r"^(\d+)x(\d+)x(\d+)x(\d+)x(\d+)(?:(v)|([ac])(\d))?(?:u(\d))?(i32)?(w)?(?:r(\d+))?$")


def parse_variant(s: str) -> tuple[tuple[int, int, int, int, int], str | None, int, int | None, int, int, int]:
    """'TxGKxKSxNTxSK[v|aN|cN][uU][i32][w][rR]' -> ((T, GK, KS, NT, SK), staging or None, stages, register
    cap or None, k-step unroll, index bits, thread columns (w: 16, else 8)), or a one-line exit."""
    m = VARIANT_RE.match(s)
    if not m or ((m.group(9) or m.group(10) or m.group(11)) and not (m.group(6) or m.group(7))):
        raise SystemExit(f"--vec-variants {s!r} is not allowed: want TxGKxKSxNTxSK[v|aN|cN][uU][i32][w][rR] (uU, "
                         f"i32 and w with a staging), e.g. 64x64x8x128x2r128, 64x64x8x128x2v, 64x64x16x128x2c3, "
                         f"64x64x16x128x2a4u4r128, 64x64x16x128x2a4i32, 128x128x16x128x1a4u2i32w")
    layout = tuple(int(m.group(i)) for i in range(1, 6))
    staging = m.group(6) or m.group(7)
    stages = int(m.group(8)) if m.group(8) else 2
    unroll = int(m.group(9)) if m.group(9) else 1
    return (layout, staging, stages, int(m.group(12)) if m.group(12) else None, unroll,
            32 if m.group(10) else 64, 16 if m.group(11) else 8)


def occupancy(regs: int, smem: int, threads: int) -> int:
    """Blocks per SM on sm_90 (65536 registers allocated per warp in 256s, 228 KiB shared with 1 KiB
    reserved per block, 2048 threads, 32 blocks)."""
    warps = -(-threads // 32)
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = 65536 // (per_warp * warps) if regs else 32
    by_smem = (228 * 1024) // (smem + 1024)
    return max(0, min(by_regs, by_smem, 2048 // threads, 32))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="*", default=None)
    ap.add_argument("--vec-variants", nargs="*", default=[],
                    help="TxGKxKSxNTxSK[v|aN|cN][uU][i32][w][rR] (gpu.kernels.winograd.gemm_vec; w: 8 x 16 outputs per thread)")
    ap.add_argument("--tc-variants", nargs="*", default=[], help="TxGKxKSxNTxS[t] (gpu.kernels.winograd.gemm_tc, 3xTF32)")
    ap.add_argument("--no-generic", action="store_true")
    ap.add_argument("--prod-configs", nargs="*", default=[], help="TxGKxKSxNT configs run through gemm_kernel")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default="gemm_bench_out", help="output folder (on the GPU machine: --out $OUT)")
    args = ap.parse_args(argv)

    import torch
    from numba import cuda
    from experiments.provenance import provenance, write_results
    from gpu.runtime import executor as ex
    from gpu.kernels.winograd import megakernel as mk
    from gpu.kernels.winograd import device as dev
    from gpu.kernels.winograd.gemm_tc import make_gemm_tc
    from gpu.kernels.winograd.gemm_vec import make_gemm_staged, make_gemm_vec
    from gpu.baselines import fp32_torch_flags, gemm_phase_shape
    from gpu.runtime.timing import time_cuda
    from megasim.algorithms.winograd.lowering import WinogradConfig, winograd_shape
    from megasim.workloads import TABLE2_NAMES, parse_layer

    flags = fp32_torch_flags()
    layers = args.layers or list(TABLE2_NAMES)
    default = WinogradConfig()

    def wrap(fn, max_registers=None):
        @cuda.jit(max_registers=max_registers)
        def kern(table, prm, V, U, M):
            b = cuda.blockIdx.x
            fn(table[b, 1], table[b, 2], prm, V, U, M)
        return kern

    # name -> (kernel, T, GK, KS, NT, shared bytes)
    os.makedirs(args.out, exist_ok=True)
    prod = mk.kernels_for(default.gemm_math)      # the GEMM math of WinogradConfig() (fp32)
    kernels = {"prod": (prod.gemm_kernel, default.tiles_per_group, default.gemm_k_tile, default.gemm_k_step,
                        default.gemm_threads,
                        dev.gemm_shared_bytes(default.tiles_per_group, default.gemm_k_tile, default.gemm_k_step,
                                              default.gemm_threads, default.gemm_math))}
    for fk in args.prod_configs:  # gemm_kernel (gemm_task dispatch) with another config
        T, GK, KS, NT = parse_config(fk)
        kernels[f"prod_{fk}"] = (prod.gemm_kernel, T, GK, KS, NT, dev.gemm_shared_bytes(T, GK, KS, NT,
                                                                                       default.gemm_math))
    if not args.no_generic:
        kernels["generic"] = (wrap(dev.gemm_generic), default.tiles_per_group, default.gemm_k_tile,
                              default.gemm_k_step, default.gemm_threads,
                              dev.gemm_shared_bytes(default.tiles_per_group, default.gemm_k_tile,
                                                    default.gemm_k_step, 0))

    for s in args.vec_variants:
        (T, GK, KS, NT, SK), staging, stages, regs_cap, unroll, index_bits, cols = parse_variant(s)
        try:
            fn = (make_gemm_staged(T, GK, KS, NT, SK, staging, stages, unroll, index_bits, cols) if staging
                  else make_gemm_vec(T, GK, KS, NT, SK))
        except ValueError as exc:
            raise SystemExit(f"--vec-variants {s!r}: {exc}")
        kernels[f"vec_{s}"] = (wrap(fn, regs_cap), T, GK, KS, NT, fn.shared_bytes)

    for s in args.tc_variants:
        try:
            m = re.match(r"^(\d+)x(\d+)x(\d+)x(\d+)x(\d+)(t?)$", s)
            if not m:
                raise ValueError("no match")
            T, GK, KS, NT, S = (int(m.group(i)) for i in range(1, 6))
            fn = make_gemm_tc(T, GK, KS, NT, S, "trunc" if m.group(6) else "rna")
        except ValueError as exc:
            raise SystemExit(f"--tc-variants {s!r} is not allowed: want TxGKxKSxNTxS[t], e.g. "
                             f"64x64x16x128x4 or 64x64x16x128x3t (t: the truncating split) ({exc})")
        kernels[f"tc_{s}"] = (wrap(fn), T, GK, KS, NT, fn.shared_bytes)

    dv = cuda.get_current_device()
    meta = provenance({"device": dv.name.decode() if isinstance(dv.name, bytes) else str(dv.name),
                       "torch": torch.__version__, "torch_flags": flags, "repeats": args.repeats,
                       "sets": args.sets, "batch": args.batch, "kernels": list(kernels),
                       "gemm_math_of_prod": default.gemm_math})
    rows, res_rows = [], []
    print(f"{'layer':11s} {'kernel':22s} {'ms':>8s} {'TFLOP/s':>8s} {'%cuBLAS':>8s} {'rel_err':>9s}")
    for name in layers:
        p = parse_layer(name, batch=args.batch)
        sh = gemm_phase_shape(p)
        gen = torch.Generator(device="cuda").manual_seed(1234)
        V = [torch.randn((sh.batch, sh.rows, sh.inner), device="cuda", generator=gen) for _ in range(args.sets)]
        U = [torch.randn((sh.batch, sh.inner, sh.cols), device="cuda", generator=gen) for _ in range(args.sets)]
        M = [torch.empty((sh.batch, sh.rows, sh.cols), device="cuda") for _ in range(args.sets)]
        nV = [cuda.as_cuda_array(t) for t in V]
        nU = [cuda.as_cuda_array(t) for t in U]
        nM = [cuda.as_cuda_array(t) for t in M]
        ref = torch.bmm(V[0].double(), U[0].double())
        refn = torch.linalg.vector_norm(ref)

        def err():
            return float(torch.linalg.vector_norm(M[0].double() - ref) / refn)

        def cub(i):
            torch.bmm(V[i], U[i], out=M[i])
        M[0].fill_(float("nan"))
        cub(0)
        e_cub = err()
        st = time_cuda(cub, warmup=args.warmup, repeats=args.repeats, rotate=args.sets)
        cub_ms = st.median_ms
        base = dict(layer=name, tiles=sh.rows, C=sh.inner, K=sh.cols, flops=sh.flops)
        rows.append(dict(base, kernel="cublas", median_ms=cub_ms, min_ms=st.min_ms,
                         tflops=sh.flops / cub_ms / 1e9, pct_cublas=100.0, rel_err=e_cub, status="ok"))
        print(f"{name:11s} {'cublas':22s} {cub_ms:8.3f} {sh.flops / cub_ms / 1e9:8.2f} {100.0:8.1f} {e_cub:9.2e}")
        for kname, (kern, T, GK, KS, NT, smem) in kernels.items():
            try:
                cfg = WinogradConfig(tiles_per_group=T, gemm_k_tile=GK, gemm_k_step=KS, gemm_threads=NT)
                wsh = winograd_shape(p, cfg)
                prm = cuda.to_device(ex.pack_params(p, cfg, wsh))
                e_, g_, kt_ = np.meshgrid(np.arange(36), np.arange(wsh.groups), np.arange(wsh.k_tiles), indexing="ij")
                table = np.full((e_.size, mk.TABLE_COLS), -1, np.int32)
                table[:, mk.T_KIND] = dev.GEMM
                table[:, mk.T_GROUP] = g_.ravel()
                table[:, mk.T_INDEX] = (e_ * wsh.k_tiles + kt_).ravel()
                d_table = cuda.to_device(table)
                nblk = table.shape[0]

                def run(i, kern=kern, NT=NT, smem=smem, d_table=d_table, prm=prm, nblk=nblk):
                    kern[nblk, NT, 0, smem](d_table, prm, nV[i], nU[i], nM[i])
                M[0].fill_(float("nan"))
                run(0)
                e = err()
                st = time_cuda(run, warmup=args.warmup, repeats=args.repeats, rotate=args.sets)
                ms = st.median_ms
                ok = e <= 1e-4
                rows.append(dict(base, kernel=kname, median_ms=ms, min_ms=st.min_ms, tflops=sh.flops / ms / 1e9,
                                 pct_cublas=100.0 * cub_ms / ms, rel_err=e, status="ok" if ok else "WRONG"))
                print(f"{name:11s} {kname:22s} {ms:8.3f} {sh.flops / ms / 1e9:8.2f} {100 * cub_ms / ms:8.1f} "
                      f"{e:9.2e}{'' if ok else '  WRONG'}")
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                rows.append(dict(base, kernel=kname, status=f"error: {type(exc).__name__}: {exc}"))
        del V, U, M, nV, nU, nM, ref
        torch.cuda.empty_cache()
        sys.stdout.flush()

    # resource report
    print("\nkernel                 regs  smem_dyn  local  blocks/SM  warps/SM  ld.local st.local  ptx_ffma ptx_ld.shared"
          "  cp.async ld.global.v4")
    reports = dict(kernels)
    reports["megakernel"] = (mk.kernels_for(default.gemm_math).megakernel, 0, 0, 0, max(default.transform_threads, default.gemm_threads),
                             kernels["prod"][5])
    for kname, (kern, T, GK, KS, NT, smem) in reports.items():
        try:
            if not kern.overloads:
                continue
            first = lambda d: next(iter(d.values())) if isinstance(d, dict) else d  # noqa: E731
            regs = first(kern.get_regs_per_thread())
            local = first(kern.get_local_mem_per_thread())
            static = first(kern.get_shared_mem_per_block())
            ptx = first(kern.inspect_asm())
            if kname in ("prod", "megakernel") or kname.startswith(("prod_", "vec_", "tc_")):
                with open(os.path.join(args.out, f"ptx_{kname}.ptx"), "w") as fh:
                    fh.write(ptx)
            counts = {k: len(re.findall(pat, ptx)) for k, pat in
                      (("ld_local", r"ld\.local"), ("st_local", r"st\.local"), ("ffma", r"fma\.rn\.f32"),
                       ("ld_shared", r"ld\.shared"), ("cp_async", r"cp\.async\.c[ag]\b"),
                       ("ld_global_v4", r"ld\.global(?:\.\w+)*\.v4"))}
            blocks = occupancy(regs, smem + static, NT)
            r = dict(kernel=kname, regs=regs, shared_dynamic=smem, shared_static=static, local_bytes=local,
                     threads=NT, blocks_per_sm=blocks, warps_per_sm=blocks * NT // 32, **counts)
            res_rows.append(r)
            print(f"{kname:22s} {regs:4d} {smem:9d} {local:6d} {blocks:10d} {blocks * NT // 32:9d} "
                  f"{counts['ld_local']:8d} {counts['st_local']:8d} {counts['ffma']:9d} {counts['ld_shared']:9d}"
                  f" {counts['cp_async']:9d} {counts['ld_global_v4']:13d}")
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            print(kname, "resource report failed:", exc)

    # summary: per layer, ms and % of cuBLAS of each kernel
    print("\nsummary (% of cuBLAS; geometric mean over layers)")
    for kname in kernels:
        pcts = [r["pct_cublas"] for r in rows if r["kernel"] == kname and r.get("status") == "ok"]
        if pcts:
            print(f"  {kname:22s} {math.exp(sum(math.log(x) for x in pcts) / len(pcts)):6.1f}%  "
                  f"(min {min(pcts):.1f}, max {max(pcts):.1f}, {len(pcts)} layers)")
    write_results(rows, args.out, "gemm_bench", meta)
    write_results(res_rows, args.out, "gemm_resources", meta)
    bad = [r for r in rows if r.get("status") != "ok"]
    print(f"\nwrote {args.out}/gemm_bench.{{csv,json}}, gemm_resources.{{csv,json}}; {len(bad)} bad rows")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
