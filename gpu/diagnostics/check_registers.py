"""The registers per thread the model's lowerings give each kernel, against what this GPU's compiler gives it.

A task kind's registers decide how many of its blocks an SM holds (``megasim.sim.occupancy``), so a lowering
constant that a kernel change left behind moves every prediction of that kernel's launches, and no timing
shows it. This compiles, on the GPU machine, each kernel whose registers a lowering states (through Numba's
own compiler and the driver, as the kernels run; an offline toolkit's ptxas can give other counts) and
compares the two by the blocks per SM each gives at the kind's threads:

- Winograd: the transform kernels of each tile (``TRANSFORM_REGISTERS_BY_TILE``), the GEMM kernel
  (``GEMM_FAST_PATHS_BY_MATH``) and the two megakernels (``MEGAKERNEL_REGISTERS``,
  ``PERSISTENT_MEGAKERNEL_REGISTERS``), FP32;
- sparse: the convolution and fused kernels of every (kind, k_tile) of ``KERNEL_REGISTERS`` (3 x 3, stride 1,
  the lowering's own channel chunks).

    bash gpu/on_device.sh python3 -m gpu.diagnostics.check_registers --out $OUT/registers.json

One line per kernel; exit status 1 when a modelled count gives other blocks per SM than the compiled one.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

from megasim.hardware import get_gpu
from megasim.sim.occupancy import Footprint, occupancy


@dataclass(frozen=True)
class Check:
    """One kernel: its name, the lowering's registers, the compiler's, its threads per block, and the
    blocks per SM each count gives (registers and threads alone)."""
    kernel: str
    threads: int
    modelled: int
    compiled: int
    modelled_blocks_per_sm: int
    compiled_blocks_per_sm: int

    @property
    def agrees(self) -> bool:
        return self.modelled_blocks_per_sm == self.compiled_blocks_per_sm


def _blocks(spec, threads: int, registers: int) -> int:
    return occupancy(spec, Footprint(threads, registers, 0)).blocks_per_sm


def _compiled_registers(dispatcher, signature) -> int:
    return int(dispatcher.compile(signature).regs_per_thread)


def winograd_kernels() -> list[tuple[str, int, int, object, tuple]]:
    """(name, threads, modelled registers, dispatcher, signature) of each Winograd kernel a lowering prices."""
    from numba import types

    from gpu.kernels.winograd import megakernel as mk
    from megasim.algorithms.winograd.lowering import (GEMM_FAST_PATHS_BY_MATH, MEGAKERNEL_REGISTERS,
                                                      PERSISTENT_MEGAKERNEL_REGISTERS, TRANSFORM_REGISTERS_BY_TILE,
                                                      WinogradConfig)

    i32_2, i32_1, i64_2 = (types.Array(types.int32, 2, "C"), types.Array(types.int32, 1, "C"),
                           types.Array(types.int64, 2, "C"))
    f3, f4 = types.Array(types.float32, 3, "C"), types.Array(types.float32, 4, "C")
    threads = WinogradConfig().transform_threads
    out = []
    for m, (ftrans, itrans, otrans) in sorted(TRANSFORM_REGISTERS_BY_TILE.items()):
        tk = mk.transform_kernels_for(m)
        out += [(f"ftrans F({m}x{m})", threads, ftrans, tk.ftrans_kernel, (i32_2, i32_1, f4, f3)),
                (f"itrans F({m}x{m})", threads, itrans, tk.itrans_kernel, (i32_2, i32_1, f4, f3)),
                (f"otrans F({m}x{m})", threads, otrans, tk.otrans_kernel, (i32_2, i32_1, f3, f4))]
    kernels = mk.kernels_for("fp32")
    gemm_threads = WinogradConfig().gemm_threads
    for key, (registers, _shared) in sorted(GEMM_FAST_PATHS_BY_MATH["fp32"].items()):
        out.append((f"gemm_kernel {key}", gemm_threads, registers, kernels.gemm_kernel, (i32_2, i32_1, f3, f3, f3)))
    mega_args = (i32_2, i32_1, i32_1, i32_1, f4, f4, f3, f3, f3, f4, i64_2, types.int32, types.int32, types.int32)
    out += [("megakernel", gemm_threads, MEGAKERNEL_REGISTERS, kernels.megakernel, mega_args),
            ("megakernel_persistent", gemm_threads, PERSISTENT_MEGAKERNEL_REGISTERS, kernels.megakernel_persistent,
             mega_args)]
    return out


def sparse_kernels() -> list[tuple[str, int, int, object, tuple]]:
    """(name, threads, modelled registers, dispatcher, signature) of each sparse kernel ``KERNEL_REGISTERS`` names."""
    from numba import types

    from gpu.kernels.sparse import kernels as sk
    from megasim.algorithms.sparse.lowering import KERNEL_REGISTERS
    from megasim.algorithms.sparse.tiling import PIXELS_PER_BLOCK, WINDOW_ELEMENTS_PER_CHUNK

    f4 = types.Array(types.float32, 4, "C")
    args = (f4, f4, f4, types.int64)
    r = s = 3
    pool = pool_stride = 2
    patch = (pool - 1) + r      # stride 1
    out = []
    for (kind, k_tile), registers in sorted(KERNEL_REGISTERS.items()):
        sparse = kind in ("ecr", "pecr")
        if kind in ("ecr", "direct"):
            kernel = sk.conv_kernel(sparse, k_tile, WINDOW_ELEMENTS_PER_CHUNK // (r * s), r, s, 1)
        else:
            kernel = sk.fused_kernel(sparse, k_tile, WINDOW_ELEMENTS_PER_CHUNK // (patch * patch), r, s, 1, pool,
                                     pool_stride)
        out.append((f"{kind} k_tile={k_tile}", PIXELS_PER_BLOCK, registers, kernel, args))
    return out


def check(kernels, spec) -> list[Check]:
    checks = []
    for name, threads, modelled, dispatcher, signature in kernels:
        compiled = _compiled_registers(dispatcher, signature)
        checks.append(Check(name, threads, modelled, compiled, _blocks(spec, threads, modelled),
                            _blocks(spec, threads, compiled)))
    return checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the checks as JSON here")
    args = ap.parse_args(argv)
    from numba import config, cuda
    if config.ENABLE_CUDASIM or not cuda.is_available():
        print("check_registers: needs a real CUDA GPU (the simulator has no registers)", file=sys.stderr)
        return 2
    from experiments.provenance import provenance
    spec = get_gpu("H200")      # 65,536 registers and 2,048 threads per SM, as every sm_80/sm_90 GPU
    checks = check(winograd_kernels() + sparse_kernels(), spec)
    print(f"{'kernel':36s} {'threads':>7s} {'modelled':>8s} {'compiled':>8s} {'blocks/SM':>13s}")
    for c in checks:
        mark = "" if c.agrees else "   DIFFERS"
        print(f"{c.kernel:36s} {c.threads:7d} {c.modelled:8d} {c.compiled:8d} "
              f"{c.modelled_blocks_per_sm:6d} {c.compiled_blocks_per_sm:6d}{mark}")
    bad = [c for c in checks if not c.agrees]
    print(f"{len(checks) - len(bad)} of {len(checks)} kernels at the modelled blocks per SM")
    if args.out:
        with open(args.out, "w") as f:
            device = cuda.get_current_device().name
            json.dump({"meta": provenance({"device": device.decode() if isinstance(device, bytes) else device,
                                           "driver": ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))}),
                       "checks": [{**asdict(c), "agrees": c.agrees} for c in checks]}, f,
                      indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
