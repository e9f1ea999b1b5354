"""Compile a kernel for a GPU that is not here: PTX through libnvvm, then ``ptxas -v`` for its registers,
spills and shared memory, plus instruction counts from the PTX.

Iterating on a kernel's code generation (does the loop unroll, do the accumulators stay in registers,
how many integer instructions per FMA) needs no GPU: only a CUDA toolkit's libnvvm, libdevice and
``ptxas`` (found through CUDA_HOME, default /usr/local/cuda). Numba asks NVRTC for the list of
supported architectures and its path; where NVRTC is absent both are answered here (the PTX comes from
NVVM alone). Timing still needs the device.

    CUDA_HOME=/usr/local/cuda-13.0 python -m gpu.diagnostics.offline_compile gemm_kernel megakernel
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from megasim.algorithms.winograd.lowering import GEMM_MATHS, DEFAULT_GEMM_MATH

PTX_COUNTS = {
    "ffma": r"\bfma\.rn\.f32",
    "ld_shared": r"\bld\.shared",
    "ld_shared_v4": r"\bld\.shared\.v4",
    "st_shared": r"\bst\.shared",
    "ld_global": r"\bld\.global",
    "ld_global_v4": r"\bld\.global(?:\.\w+)*\.v4",
    "cp_async": r"\bcp\.async\.c[ag]\b",
    "bar_sync": r"\bbar\.sync|\bbarrier\.sync",
    "ld_local": r"\bld\.local",
    "st_local": r"\bst\.local",
    "int_ops": r"\b(?:add|sub|mul|mad|shl|shr|and|or|selp|setp)\.(?:s|u|b|lo\.s|lo\.u|wide\.s|wide\.u)(?:32|64)",
}

DEFAULT_CUDA_HOME = "/usr/local/cuda"


def _allow_without_nvrtc(cc: tuple[int, int]) -> None:
    """Let Numba compile PTX with libnvvm alone: no NVRTC library, no driver (device functions are
    then compiled for ``cc``)."""
    from numba.cuda import cuda_paths, dispatcher
    from numba.cuda.cudadrv import nvrtc
    try:
        dispatcher.get_current_device()
    except Exception:  # noqa: BLE001 - no driver here
        class _Target:
            compute_capability = cc
        dispatcher.get_current_device = lambda: _Target
    try:
        nvrtc.get_supported_ccs()
    except Exception:  # noqa: BLE001 - no NVRTC: answer for it
        nvrtc.get_supported_ccs = lambda: ((7, 5), (8, 0), (8, 6), (8, 9), (9, 0))
        cuda_paths._get_nvrtc_path = lambda: ("absent", None)


def compile_report(pyfunc, signature, cc: tuple[int, int] = (9, 0), name: str = "kernel",
                   max_registers: int | None = None, cuda_home: str = DEFAULT_CUDA_HOME) -> dict:
    """PTX instruction counts and ``ptxas -v`` resources of ``pyfunc`` compiled as a kernel (with
    ``max_registers``: ptxas's -maxrregcount, as ``cuda.jit(max_registers=...)`` passes it)."""
    _allow_without_nvrtc(cc)
    from numba import cuda
    ptx, _ = cuda.compile_ptx(pyfunc, signature, cc=cc)
    report = {"kernel": name, **{k: len(re.findall(p, ptx)) for k, p in PTX_COUNTS.items()}}
    ptxas = Path(cuda_home) / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{name}.ptx"
        src.write_text(ptx)
        cmd = [str(ptxas), f"-arch=sm_{cc[0]}{cc[1]}", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")]
        if max_registers:
            cmd.append(f"-maxrregcount={max_registers}")
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"ptxas failed on {name}: {run.stderr.strip().splitlines()[-1:]}")
    for key, pat in (("registers", r"Used (\d+) registers"), ("spill_stores", r"(\d+) bytes spill stores"),
                     ("spill_loads", r"(\d+) bytes spill loads"), ("stack_bytes", r"(\d+) bytes stack frame"),
                     ("shared_static", r"(\d+) bytes smem")):
        found = re.findall(pat, run.stderr)
        report[key] = max(int(v) for v in found) if found else 0
    report["ptx"] = ptx
    return report


def _one_block_per_task(task):
    """A kernel running ``task(group, index, ...)`` of table row blockIdx.x (like gpu.kernels.winograd.megakernel.gemm_kernel)."""
    from numba import cuda

    def kern(table, prm, V, U, M):
        b = cuda.blockIdx.x
        task(table[b, 1], table[b, 2], prm, V, U, M)
    return kern


def _kernels(gemm_math: str = "fp32") -> dict:
    """The project's Winograd kernels with their argument types (the GEMM-running ones in ``gemm_math``)."""
    from numba import types

    from gpu.kernels.winograd import megakernel as mk
    from gpu.kernels.winograd.gemm_tc import make_gemm_tc
    from gpu.kernels.winograd.gemm_vec import make_gemm_staged, make_gemm_vec

    i32_2 = types.Array(types.int32, 2, "C")
    i32_1 = types.Array(types.int32, 1, "C")
    i64_2 = types.Array(types.int64, 2, "C")
    f3 = types.Array(types.float32, 3, "C")
    f4 = types.Array(types.float32, 4, "C")
    gemm_args = (i32_2, i32_1, f3, f3, f3)
    mega_args = (i32_2, i32_1, i32_1, i32_1, f4, f4, f3, f3, f3, f4, i64_2, types.int32, types.int32, types.int32)
    math_kernels = mk.kernels_for(gemm_math)
    out = {
        "gemm_kernel": (math_kernels.gemm_kernel.py_func, gemm_args),
        "ftrans_kernel": (mk.ftrans_kernel.py_func, (i32_2, i32_1, f4, f3)),
        "itrans_kernel": (mk.itrans_kernel.py_func, (i32_2, i32_1, f4, f3)),
        "otrans_kernel": (mk.otrans_kernel.py_func, (i32_2, i32_1, f3, f4)),
        "megakernel": (math_kernels.megakernel.py_func, mega_args),
        "megakernel_persistent": (math_kernels.megakernel_persistent.py_func, mega_args),
        # the builds for conv2d's default implementation alone (gpu.kernels.winograd.megakernel.SPECIALISED)
        "megakernel_specialised": (mk.kernels_for(gemm_math, True).megakernel.py_func, mega_args),
        "megakernel_persistent_specialised": (mk.kernels_for(gemm_math, True).megakernel_persistent.py_func, mega_args),
    }
    for m in mk.OWN_BUILD_TILES:    # F(5x5)'s and F(6x6)'s own builds
        out[f"megakernel_m{m}"] = (mk.kernels_for(gemm_math, m=m).megakernel.py_func, mega_args)
        out[f"megakernel_persistent_m{m}"] = (mk.kernels_for(gemm_math, m=m).megakernel_persistent.py_func, mega_args)
        out[f"ftrans_kernel_m{m}"] = (mk.transform_kernels_for(m).ftrans_kernel.py_func, (i32_2, i32_1, f4, f3))
        out[f"itrans_kernel_m{m}"] = (mk.transform_kernels_for(m).itrans_kernel.py_func, (i32_2, i32_1, f4, f3))
        out[f"otrans_kernel_m{m}"] = (mk.transform_kernels_for(m).otrans_kernel.py_func, (i32_2, i32_1, f3, f4))
    for layout in ((64, 64, 8, 128, 2), (64, 64, 16, 128, 2), (32, 64, 8, 128, 4)):
        out["gemm_vec_" + "x".join(map(str, layout))] = (_one_block_per_task(make_gemm_vec(*layout)), gemm_args)
    # issue #3's staging experiments (gpu.kernels.winograd.gemm_vec.make_gemm_staged; bench_gemm's variant suffixes)
    for layout in ((64, 64, 8, 128, 2), (64, 64, 16, 128, 2), (128, 64, 16, 128, 1)):
        for staging, stages, suffix in (("v", 2, "v"), ("a", 2, "a2"), ("a", 3, "a3"), ("c", 2, "c2"), ("c", 3, "c3")):
            out["gemm_vec_" + "x".join(map(str, layout)) + suffix] = (
                _one_block_per_task(make_gemm_staged(*layout, staging=staging, stages=stages)), gemm_args)
    # 8 x 16 outputs per thread (thread_cols=16; bench_gemm's suffix "w"), in kernels of their own
    for layout in ((128, 128, 16, 128, 1), (128, 128, 8, 128, 1), (64, 128, 16, 64, 1), (128, 64, 16, 128, 2)):
        for stages, unroll in ((4, 1), (4, 2), (3, 2)):
            out["gemm_vec_" + "x".join(map(str, layout)) + f"a{stages}u{unroll}i32w"] = (
                _one_block_per_task(make_gemm_staged(*layout, staging="a", stages=stages, unroll=unroll,
                                                     index_bits=32, thread_cols=16)), gemm_args)
    # the tensor-core GEMM (gpu.kernels.winograd.gemm_tc; bench_gemm's --tc-variants)
    for layout in ((64, 64, 16, 128, 4), (64, 64, 32, 128, 3), (32, 64, 16, 128, 4), (128, 64, 16, 128, 3)):
        out["gemm_tc_" + "x".join(map(str, layout))] = (_one_block_per_task(make_gemm_tc(*layout)), gemm_args)
    out["gemm_tc_64x64x16x128x3t"] = (_one_block_per_task(make_gemm_tc(64, 64, 16, 128, 3, "trunc")), gemm_args)
    out.update(_sparse_kernels())
    return out


def _sparse_kernels() -> dict:
    """gpu.kernels.sparse.kernels' convolution kernels for 3x3, stride 1, at each filter tile they are used with."""
    from numba import types

    from gpu.kernels.sparse import kernels as sk

    f4 = types.Array(types.float32, 4, "C")
    args = (f4, f4, f4, types.int64)
    out = {}
    for sparse, name in ((True, "ecr"), (False, "direct")):
        for k_tile in (32, 16, 8, 4):
            out[f"{name}_k{k_tile}"] = (sk.conv_kernel(sparse, k_tile, 4, 3, 3, 1).py_func, args)
    for sparse, name in ((True, "pecr"), (False, "direct_fused")):
        for k_tile in (8, 4, 2):
            out[f"{name}_k{k_tile}"] = (sk.fused_kernel(sparse, k_tile, 2, 3, 3, 1, 2, 2).py_func, args)
    return out


def _own_cap(name: str) -> int | None:
    """The register cap a kernel is compiled with on the device (``cuda.jit(max_registers=...)``)."""
    from gpu.kernels.winograd import megakernel as mk
    if name.startswith("megakernel_persistent"):     # every build of either megakernel takes its kind's cap
        return mk.PERSISTENT_MAX_REGISTERS
    if name.startswith("megakernel"):
        return mk.MEGAKERNEL_MAX_REGISTERS
    return mk.GEMM_KERNEL_MAX_REGISTERS if name == "gemm_kernel" else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernels", nargs="*", help="names (default: all)")
    ap.add_argument("--ptx-dir", default=None, help="write each kernel's PTX here")
    ap.add_argument("--max-registers", type=int, default=None, help="register cap per thread (ptxas; default: "
                    "the kernel's own, 128 for the per-task megakernel and the GEMM kernel)")
    ap.add_argument("--gemm-math", choices=GEMM_MATHS, default=None,
                    help="the GEMM math of gemm_kernel and the megakernels (default: fp32)")
    ap.add_argument("--cuda-home", default=DEFAULT_CUDA_HOME, help=f"the CUDA toolkit whose bin/ptxas to run "
                    f"(default {DEFAULT_CUDA_HOME})")
    args = ap.parse_args(argv)
    kernels = _kernels(args.gemm_math or DEFAULT_GEMM_MATH)
    names = args.kernels or list(kernels)
    unknown = [n for n in names if n not in kernels]
    if unknown:
        print(f"error: unknown kernel {unknown[0]!r}; known: {', '.join(kernels)}", file=sys.stderr)
        return 2
    cols = ["registers", "spill_stores", "spill_loads", "ffma", "ld_shared", "ld_shared_v4", "st_shared",
            "ld_global", "ld_global_v4", "cp_async", "bar_sync", "int_ops", "ld_local"]
    print(f"{'kernel':28s} " + " ".join(f"{c:>12s}" for c in cols))
    for n in names:
        fn, sig = kernels[n]
        rep = compile_report(fn, sig, name=n, max_registers=args.max_registers or _own_cap(n), cuda_home=args.cuda_home)
        print(f"{n:28s} " + " ".join(f"{rep[c]:12d}" for c in cols))
        if args.ptx_dir:
            Path(args.ptx_dir).mkdir(parents=True, exist_ok=True)
            (Path(args.ptx_dir) / f"{n}.ptx").write_text(rep["ptx"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
