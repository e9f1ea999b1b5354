"""Tilings of the im2win kernel's tensor-core build (``gpu.im2win.prepare(math="3xtf32")``) on a few layers,
with the FP32 build's default beside them: correctness at full size and time per run.

Per layer (default ``LAYERS``: im2win/conv1, conv5, conv8, conv11 at batch 128: an 11 x 11 stride-4 layer
of 3 channels, a 5 x 5 one, the largest 3 x 3 one, a small-image 3 x 3 one with 256 channels) and build
(``BUILDS``, by default those marked so, to keep the compiles few: name, tile m_b,n_b,k_b,m_t,n_t, staging,
math, and for the tensor-core build's other micro-kernels its ``TcOptions``; the thread tile only fixes the
threads, m_b*n_b/(m_t*n_t), and with them the register cap ``register_cap``). Builds without options run
through ``gpu.im2win.prepare`` (the op's path); builds with options launch the transform and the conv kernel
directly (``DirectLaunch``: the same kernels, grid and arguments). Per build: the normwise error of the output
against torch's float64 convolution (``rel_err``), the median time per run (transform + convolution, CUDA
events around ``--inner`` back-to-back runs, ``--repeats`` samples), TFLOPS (``2 N K C R S P Q`` / time), the
conv kernel's registers per thread and shared memory. The tile floor of each layer is its FLOPs at a third
of the H200's dense TF32 peak (494 / 3 TFLOP/s) or its compulsory bytes (x read, the im2win tensor written and
read, w read, y written) at 4.2 TB/s, whichever is longer (``floor_ms``).

Writes ``DIR/im2win_tc_tiles.csv`` + ``.json`` (DIR: ``--out``, else ``$OUT``, else
``experiments/results/<device>/im2win_3xtf32/``) and ``DIR/best_tile.txt``: the tensor-core build with
all errors within 1e-4 and the least geometric-mean time over the layers, as ``m_b,n_b,k_b,m_t,n_t staging``
(what ``experiments.benchmarks.im2win_bench --tc-tile --tc-staging`` takes). About a minute on an H200,
most of it compiling the builds.

    bash gpu/on_device.sh python3 -m experiments.studies.im2win_tc.tiles [--layers conv5 conv8] [--batch 128]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

NAME = "im2win_tc_tiles"
LAYERS = ("im2win/conv1", "im2win/conv5", "im2win/conv8", "im2win/conv11")
TC_PEAK_TFLOPS = 494.0 / 3          # H200 dense TF32 tensor-core peak, three MMAs per FP32 product
DRAM_TBPS = 4.2
TOL = 1e-4
# (name, (m_b, n_b, k_b, m_t, n_t), staging, math, extra): extra None, or the tensor-core build's TcOptions as
# tc=(fragments, chain_k) and/or its max_registers (then launched by DirectLaunch)
BUILDS = (("fp32_default", (64, 128, 16, 8, 8), "registers", "fp32", None),
          ("tc_64x128_k16", (64, 128, 16, 8, 8), "registers", "3xtf32", None),       # 4 warps of 64 x 32
          ("tc_64x128_k8", (64, 128, 8, 8, 8), "registers", "3xtf32", None),
          ("tc_64x128_k16_async", (64, 128, 16, 8, 8), "async", "3xtf32", None),
          ("tc_64x64_k16", (64, 64, 16, 4, 8), "registers", "3xtf32", None),          # 4 warps of 32 x 32
          ("tc_64x128_w8", (64, 128, 16, 4, 8), "registers", "3xtf32", None),         # 8 warps of 32 x 32
          ("tc_128x64_k16", (128, 64, 16, 8, 8), "registers", "3xtf32", None),        # 4 warps of 32 x 64
          ("tc_128x128_k16", (128, 128, 16, 8, 8), "registers", "3xtf32", None),      # 8 warps of 64 x 32
          # the micro-kernel's options and register caps (``gpu.kernels.im2win.conv.TcOptions``)
          ("tc_rows_chain8", (64, 128, 16, 8, 8), "registers", "3xtf32", dict(tc=("rows", 8))),
          ("tc_rows_chain16", (64, 128, 16, 8, 8), "registers", "3xtf32", dict(tc=("rows", 16))),
          ("tc_packed_chain8", (64, 128, 16, 8, 8), "registers", "3xtf32", dict(tc=("packed", 8))),
          ("tc_packed_chain16", (64, 128, 16, 8, 8), "registers", "3xtf32", dict(tc=("packed", 16))),
          ("tc_64x128_r255", (64, 128, 16, 8, 8), "registers", "3xtf32", dict(max_registers=255)),  # 2 blocks/SM
          ("tc_64x64_r128", (64, 64, 16, 4, 8), "registers", "3xtf32", dict(max_registers=128)))    # 4 blocks/SM
DEFAULT_BUILDS = ("fp32_default", "tc_64x128_k16", "tc_64x128_k16_async", "tc_64x64_k16", "tc_64x128_w8",
                  "tc_64x128_r255", "tc_64x64_r128")


class DirectLaunch:
    """The transform and a conv kernel built here (``make_conv_kernel(math="3xtf32", tc=..., max_registers=...)``)
    on device x and w, as ``gpu.runtime.im2win_kernels`` launches them: ``run()``, ``output``,
    ``regs_per_thread``, ``shared_bytes``."""

    def __init__(self, p, xd, wd, tile, staging: str, tc, max_registers: int | None = None) -> None:
        import numpy as np
        from numba import cuda

        from gpu.kernels.im2win.conv import conv_blocks, conv_offsets, conv_params, make_conv_kernel
        from gpu.kernels.im2win.transform import transform_kernel, transform_magic, transform_params
        from megasim.algorithms.im2win.tiling import TRANSFORM_THREADS, im2win_shape, transform_blocks

        m_b, n_b, k_b, m_t, n_t = tile
        self.kernel = make_conv_kernel(m_b, n_b, k_b, m_t, n_t, math="3xtf32", staging=staging, tc=tc,
                                       max_registers=max_registers)
        self.J = cuda.device_array(im2win_shape(p), np.float32)
        self.output = cuda.device_array((p.n, p.k, p.out_h, p.out_w), np.float32)
        self._t = transform_kernel[transform_blocks(p), TRANSFORM_THREADS]
        self._t_args = (xd, self.J, cuda.to_device(transform_params(p)), cuda.to_device(transform_magic(p)))
        self._c = self.kernel[conv_blocks(p, m_b, n_b), self.kernel.threads]
        self._c_args = (self.J, wd, self.output, cuda.to_device(conv_params(p, m_b)), cuda.to_device(conv_offsets(p, k_b)))
        compiled = self.kernel.compile(tuple(self.kernel.typeof_pyval(a) for a in self._c_args))
        self.regs_per_thread = int(compiled.regs_per_thread)
        self.shared_bytes = int(compiled.shared_mem_per_block)

    def run(self) -> None:
        self._t(*self._t_args)
        self._c(*self._c_args)


def floor_ms(p) -> float:
    """max(FLOPs at TC_PEAK_TFLOPS, compulsory bytes at DRAM_TBPS), in ms (module docstring)."""
    from megasim.algorithms.im2win.tiling import im2win_elements
    nbytes = 4 * (p.n * p.c * p.h * p.w + 2 * im2win_elements(p) + p.k * p.c * p.r * p.s + p.n * p.k * p.out_h * p.out_w)
    return max(p.direct_flops / (TC_PEAK_TFLOPS * 1e9), nbytes / (DRAM_TBPS * 1e9))


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--builds", nargs="+", default=list(DEFAULT_BUILDS),
                    help="of: " + ", ".join(b[0] for b in BUILDS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--inner", type=int, default=2)
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import torch
    from numba import cuda

    from experiments.benchmarks.winograd_bench import device_meta, device_slug
    from experiments.provenance import provenance, write_results
    from gpu import im2win
    from gpu.kernels.im2win.conv import TcOptions
    from gpu.runtime.timing import time_cuda_queued
    from megasim.workloads import parse_layer

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    builds = [b for b in BUILDS if b[0] in args.builds]
    dmeta = device_meta(torch, cuda)
    out_dir = Path(args.out or os.environ.get("OUT") or f"experiments/results/{device_slug(dmeta['device'])}/im2win_3xtf32")
    meta = {**provenance(), **dmeta, "builds": {b[0]: dict(tile=b[1], staging=b[2], math=b[3], tc=b[4]) for b in builds},
            "repeats": args.repeats, "inner": args.inner, "tc_peak_tflops": TC_PEAK_TFLOPS, "dram_tbps": DRAM_TBPS,
            "method": f"CUDA events around {args.inner} back-to-back runs (transform + conv), median per run of "
                      f"{args.repeats} samples; torch.randn inputs on the device (w scaled by sqrt(2/CRS)); "
                      "normwise error against torch float64"}
    rows: list[dict] = []
    started = time.time()
    for name in args.layers:
        p = parse_layer(name, source="--layers").with_batch(args.batch)
        layer = (p.name or p.spec_string()).removeprefix("im2win/")
        gen = torch.Generator(device="cuda").manual_seed(45)
        xt = torch.randn((p.n, p.c, p.h, p.w), device="cuda", generator=gen)
        wt = torch.randn((p.k, p.c, p.r, p.s), device="cuda", generator=gen) * math.sqrt(2 / (p.c * p.r * p.s))
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), stride=p.stride, padding=p.padding)
        ref_norm = float(torch.linalg.vector_norm(ref))
        xd, wd = cuda.as_cuda_array(xt), cuda.as_cuda_array(wt)
        for bname, tile, staging, mth, tcopt in builds:
            row = {"layer": layer, "batch": p.n, "build": bname, "math": mth, "staging": staging,
                   "tile": ",".join(map(str, tile)), "median_ms": math.nan, "tflops": math.nan, "rel_err": math.nan,
                   "floor_ms": floor_ms(p), "regs": "", "shared_bytes": "", "status": "ok"}
            try:
                if tcopt is None:
                    launch = im2win.prepare(xd, wd, p.stride, p.padding, math=mth, staging=staging,
                                            **dict(zip(("m_b", "n_b", "k_b", "m_t", "n_t"), tile)))
                else:
                    tc = TcOptions(*tcopt["tc"]) if "tc" in tcopt else None
                    launch = DirectLaunch(p, xd, wd, tile, staging, tc, tcopt.get("max_registers"))
                launch.run()
                torch.cuda.synchronize()
                y = torch.as_tensor(launch.output, device="cuda")
                err = float(torch.linalg.vector_norm(y.double() - ref)) / ref_norm
                stats = time_cuda_queued(lambda _i: launch.run(), inner=args.inner, warmup=1, repeats=args.repeats)
                row.update(median_ms=stats.median_ms, tflops=p.direct_flops / stats.median_ms / 1e9, rel_err=err,
                           regs=launch.regs_per_thread, shared_bytes=launch.shared_bytes,
                           status="ok" if err <= TOL else "failed: rel_err")
                del launch, y
            except Exception as exc:  # noqa: BLE001 - recorded, the study goes on
                row["status"] = f"error: {type(exc).__name__}: {exc}"[:200]
            rows.append(row)
            print(f"{layer:7s} {bname:22s} {row['median_ms']:8.3f} ms {row['tflops']:7.2f} TFLOPS err "
                  f"{row['rel_err']:.1e} regs {row['regs']} floor {row['floor_ms']:.3f} ms {row['status']}", flush=True)
            torch.cuda.synchronize()
        del xt, wt, ref, xd, wd
        torch.cuda.empty_cache()
        meta["elapsed_s"] = round(time.time() - started, 1)
        write_results(rows, out_dir, NAME, meta)
    best = None
    for bname, tile, staging, mth, tcopt in builds:
        mine = [r for r in rows if r["build"] == bname]
        if not mine or any(r["status"] != "ok" for r in mine):
            continue
        g = math.exp(sum(math.log(r["median_ms"]) for r in mine) / len(mine))
        print(f"{bname:22s} geomean {g:.3f} ms")
        if mth != "fp32" and tcopt is None and (best is None or g < best[0]):      # a tile the op can run
            best = (g, tile, staging)
    if best is not None:
        (out_dir / "best_tile.txt").write_text(f"{','.join(map(str, best[1]))} {best[2]}\n")
        print(f"best tensor-core build: {best[1]} {best[2]}")
    return 0 if best is not None else 1


if __name__ == "__main__":
    sys.exit(main())
