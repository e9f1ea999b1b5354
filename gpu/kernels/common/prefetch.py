"""Prefetch into L2 (``prefetch.global.L2``), for kernels that read a block's whole input before they can
start writing: a thread issues prefetches for lines it will load later, so they are in flight at once
without holding registers.

- ``prefetch_l2(src, si)``: ``prefetch.global.L2 [addr]`` of ``src.flat[si]``: the L2 fetches the line that
  holds it; nothing comes back to the thread, and nothing waits on it. A later load of that line finds it
  in L2 (or merges with the fetch in flight).

Why: ``gpu.kernels.winograd.nchw``'s output transform loads 81 values of M per thread, then stages its
outputs through shared memory behind a barrier; with loads alone, the bytes in flight per SM were bounded
by the registers that hold them, and the launch ran at 2.97 TB/s where the NHWC one (no barrier) ran at
3.97 (experiments/results/nvidia-h200/nchw_transforms*.csv).

Contract (not checked on the GPU): ``src`` a C-contiguous float32 device array, ``0 <= si < src.size``.
Under the CUDA simulator the prefetch does nothing (contract asserted).
"""

from __future__ import annotations

from numba import config, types

__all__ = ["prefetch_l2", "py_prefetch_l2"]


def py_prefetch_l2(src, si):
    """The simulator's form: nothing to fetch; the index is checked."""
    assert 0 <= si < src.size, f"prefetch at {si} of {src.size}"


if config.ENABLE_CUDASIM:
    prefetch_l2 = py_prefetch_l2

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    from gpu.kernels.common.async_copy import element_address

    @intrinsic
    def prefetch_l2(typingctx, src, si):
        """prefetch.global.L2 of src.flat[si] (module contract)."""
        if not (isinstance(src, types.Array) and src.layout == "C" and isinstance(si, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            a = element_address(context, builder, sig.args[0], args[0], sig.args[1], args[1], 1, ir.IntType(64))
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "prefetch.global.L2 [$0];",
                               "l,~{memory}", side_effect=True)
            builder.call(asm, [a])
            return context.get_dummy_value()

        return types.void(src, si), codegen
