"""Device-side clocks for recording a measured timeline: the global nanosecond timer (%globaltimer)
and the id of the SM a block runs on (%smid), read with one PTX instruction each (inline asm through
a Numba intrinsic, as numba-cuda does for nanosleep). Under the CUDA simulator (no PTX) they fall back
to the host's nanosecond clock and SM 0, so traced kernels still run in CI."""

from __future__ import annotations

import time

from numba import config

if config.ENABLE_CUDASIM:
    def globaltimer() -> int:
        return time.perf_counter_ns()

    def smid() -> int:
        return 0
else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    @intrinsic
    def globaltimer(typingctx):
        """Nanoseconds of the GPU's global timer (mov.u64 %globaltimer; side effect: never hoisted)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %globaltimer;", "=l",
                               side_effect=True)
            return builder.call(asm, [])
        return types.int64(), codegen

    @intrinsic
    def smid(typingctx):
        """The SM this thread runs on (mov.u32 %smid)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), []), "mov.u32 $0, %smid;", "=r",
                               side_effect=True)
            return builder.call(asm, [])
        return types.int32(), codegen
