"""How many thread blocks of a launch fit on one SM at once.

All blocks of a launch share one footprint, the largest over the task kinds the launch runs (a
megakernel is compiled once, for its largest device function). The blocks per SM are the minimum of
four limits (CUDA occupancy rules): the block limit, threads, registers (allocated per warp in units
of 256) and shared memory (allocated in units of 128 bytes, plus 1 KB the system reserves per block
on cc >= 8.0, which the presets' per-SM figures already exclude for simplicity).
"""

from __future__ import annotations

from dataclasses import dataclass

from megasim.errors import SimulationError
from megasim.hardware.spec import GPUSpec

WARP = 32
REG_ALLOC_UNIT = 256
SMEM_ALLOC_UNIT = 128


@dataclass(frozen=True)
class Footprint:
    threads: int
    registers_per_thread: int
    shared_bytes: int


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    limited_by: str


def occupancy(spec: GPUSpec, fp: Footprint) -> Occupancy:
    if fp.threads > 1024 or fp.threads < 1:
        raise SimulationError(f"blocks of {fp.threads} threads cannot launch: 1..1024 threads are allowed")
    if fp.registers_per_thread > spec.max_registers_per_thread:
        raise SimulationError(f"{fp.registers_per_thread} registers per thread exceed {spec.name}'s "
                              f"limit of {spec.max_registers_per_thread}")
    if fp.shared_bytes > spec.max_shared_mem_per_block_bytes:
        raise SimulationError(f"{fp.shared_bytes} bytes of shared memory per block exceed {spec.name}'s "
                              f"limit of {spec.max_shared_mem_per_block_bytes}")
    warps = -(-fp.threads // WARP)
    regs_per_warp = -(-(fp.registers_per_thread * WARP) // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    smem = -(-fp.shared_bytes // SMEM_ALLOC_UNIT) * SMEM_ALLOC_UNIT
    limits = {
        "blocks": spec.max_blocks_per_sm,
        "threads": spec.max_threads_per_sm // (warps * WARP),
        "registers": spec.registers_per_sm // (regs_per_warp * warps),
        "shared memory": spec.shared_mem_per_sm_bytes // smem if smem else spec.max_blocks_per_sm,
    }
    limited_by = min(limits, key=limits.__getitem__)
    if limits[limited_by] < 1:
        field, has, needs = {
            "blocks": ("max_blocks_per_sm", spec.max_blocks_per_sm, 1),
            "threads": ("max_threads_per_sm", spec.max_threads_per_sm, warps * WARP),
            "registers": ("registers_per_sm", spec.registers_per_sm, regs_per_warp * warps),
            "shared memory": ("shared_mem_per_sm_bytes", spec.shared_mem_per_sm_bytes, smem),
        }[limited_by]
        raise SimulationError(f"not one block fits on an SM of {spec.name}: a block of {fp.threads} threads, "
                              f"{fp.registers_per_thread} registers per thread and {fp.shared_bytes:,} bytes of shared "
                              f"memory needs {field}={needs:,}, the spec has {has:,}; allowed: a smaller block (fewer "
                              f"threads) or a spec with more")
    return Occupancy(limits[limited_by], limited_by)
