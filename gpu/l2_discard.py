"""Dropping a dead intermediate from L2 without writing it back: ``discard.global.L2`` (PTX ISA 7.4, sm_80+).

L2 is a write-back cache: a line an input transform writes into V (or a GEMM into M) is written to DRAM
when it is evicted, even after its last reader is done with it. Measured under ncu (session 32,
``experiments.fusion_ceiling``): the fused megakernel at its best mappings moves about as many DRAM bytes
as the non-fused pipeline (resnet-1: 223 MB read, 204 MB written; x and y are 103 MB together), so fusion
was saving no DRAM traffic at all. ``discard.global.L2 [a], 128`` invalidates the 128-byte line at ``a``
in L2 without writing it back; afterwards the line's contents are indeterminate (a weak write of an
unknown value), so it may be issued only by the last reader of every byte of the line, after that
reader's loads (in the warp that read it: after a ``cuda.syncwarp()``; in a block: after
``cuda.syncthreads()``).

- ``discard_line(a, i)``: discards the line holding ``a.flat[i:i + LINE_FLOATS]``; ``a`` a C-contiguous
  float32 device array whose data is 128-byte aligned (``cuda.device_array``'s are 256-byte aligned),
  ``i`` a multiple of ``LINE_FLOATS``.
- ``warp_lines_read()``: the barrier before a warp discards what its lanes read: ``cuda.syncwarp()``
  (the simulator has none: there it is ``cuda.syncthreads()``, stronger, so every thread of the block
  must call it, as the output transforms do);
- ``L2_DISCARD``: whether the Winograd tasks discard what they were the last to read
  (``MEGASIM_L2_DISCARD``: ``on`` / ``off``; read once, at import: it decides what Numba compiles;
  ``gpu.winograd_device`` says where).

Under the CUDA simulator the line is *poisoned* instead (its 32 floats set to NaN, the contract
asserted): a task that discards a line somebody still reads turns the convolution's output into NaN, so
the simulator tests catch a discard that is not the last read, which the GPU would show only now and then.
"""

from __future__ import annotations

import math

from numba import config, cuda, types

from gpu.switches import env_choice

LINE_BYTES = 128
LINE_FLOATS = LINE_BYTES // 4
L2_DISCARD = env_choice("MEGASIM_L2_DISCARD", ("on", "off"), "off") == "on"

__all__ = ["L2_DISCARD", "LINE_FLOATS", "discard_line", "py_discard_line", "warp_lines_read"]


def py_discard_line(a, i):
    """The simulator's discard: the line's floats become NaN (contract asserted)."""
    flat = a.reshape(-1)
    assert i % LINE_FLOATS == 0 and 0 <= i and i + LINE_FLOATS <= flat.size, \
        f"discard of floats [{i}, {i + LINE_FLOATS}) of {flat.size}: want a whole, aligned line"
    for k in range(LINE_FLOATS):
        flat[i + k] = math.nan


if config.ENABLE_CUDASIM:
    discard_line = py_discard_line

    @cuda.jit(device=True)
    def warp_lines_read():
        """The simulator's stand-in for the warp barrier: the block's (it has no cuda.syncwarp)."""
        cuda.syncthreads()
else:
    @cuda.jit(device=True)
    def warp_lines_read():
        """Every lane of the warp has done its loads (cuda.syncwarp orders them before what follows)."""
        cuda.syncwarp()

    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    from gpu.async_copy import element_address

    @intrinsic
    def discard_line(typingctx, a, i):
        """discard.global.L2 of the 128-byte line at a.flat[i] (module contract)."""
        if not (isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float32
                and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            addr = element_address(context, builder, sig.args[0], args[0], sig.args[1], args[1], 1, ir.IntType(64))
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "discard.global.L2 [$0], 128;",
                               "l,~{memory}", side_effect=True)
            builder.call(asm, [addr])
            return context.get_dummy_value()

        return types.void(a, i), codegen
