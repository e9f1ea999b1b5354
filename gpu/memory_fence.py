"""The megakernel's release and acquire fence, ``dependency_fence()``: ``fence.acq_rel.gpu`` or ``fence.sc.gpu``.

The dependency-counter protocol (``gpu.megakernel``'s docstring) needs a release pattern in the parent
(block barrier; thread 0: fence, then the relaxed atomic decrement) and an acquire pattern in the child
(thread 0: the atomic read that sees 0, then a fence; block barrier). In the PTX memory model
(PTX ISA, "Memory Consistency Model": release and acquire patterns) a ``fence.acq_rel`` is enough for both:
the barrier puts the other threads' writes before thread 0's fence in causality order, and release is
cumulative. ``fence.sc`` (what ``cuda.threadfence()``, ``membar.gl``, compiles to) adds a single total
order over all sc fences that this protocol does not use.

``MEGASIM_DEPENDENCY_FENCE`` (read at import) picks it: "sc" (the default: ``cuda.threadfence()``, as
every measurement before session 23) or "acq_rel" (session 23's experiment: does the lighter fence
shorten the ~0.8 us a signal takes on the H200, gpu.record_timeline's "signal"?). Under the CUDA
simulator both are ``cuda.threadfence()`` (the simulator's threads share one memory).
"""

from __future__ import annotations

import os

from numba import config, cuda

FENCES = ("sc", "acq_rel")
DEPENDENCY_FENCE = os.environ.get("MEGASIM_DEPENDENCY_FENCE", "sc")
if DEPENDENCY_FENCE not in FENCES:
    raise ValueError(f"MEGASIM_DEPENDENCY_FENCE={DEPENDENCY_FENCE!r}: want one of {FENCES}")

if DEPENDENCY_FENCE == "sc" or config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def dependency_fence():
        """The megakernel's release / acquire fence: fence.sc.gpu (``cuda.threadfence()``)."""
        cuda.threadfence()
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def dependency_fence(typingctx):
        """The megakernel's release / acquire fence: fence.acq_rel.gpu."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "fence.acq_rel.gpu;", "~{memory}",
                               side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()
        return types.void(), codegen
