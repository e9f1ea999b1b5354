"""The megakernel's release and acquire fence, ``dependency_fence()``: ``fence.acq_rel.gpu`` or ``fence.sc.gpu``.

The dependency-counter protocol (``gpu.kernels.winograd.megakernel``'s docstring) needs a release pattern in the parent
(block barrier; thread 0: fence, then the relaxed atomic decrement) and an acquire pattern in the child
(thread 0: the atomic read that sees 0, then a fence; block barrier). In the PTX memory model
(PTX ISA, "Memory Consistency Model": release and acquire patterns) a ``fence.acq_rel`` is enough for both:
the barrier puts the other threads' writes before thread 0's fence in causality order, and release is
cumulative. ``fence.sc`` (what ``cuda.threadfence()``, ``membar.gl``, compiles to) adds a single total
order over all sc fences that this protocol does not use.

``MEGASIM_DEPENDENCY_FENCE`` (read at import) picks it: "sc" (the default: ``cuda.threadfence()``, as
every measurement before session 23) or "acq_rel" (session 23's experiment: does the lighter fence
shorten the ~0.8 us a signal takes on the H200, gpu.diagnostics.record_timeline's "signal"?). Under the CUDA
simulator both are ``cuda.threadfence()`` (the simulator's threads share one memory).
"""

from __future__ import annotations

from numba import config, cuda

from gpu.runtime.switches import env_choice

FENCES = ("sc", "acq_rel")
DEPENDENCY_FENCE = env_choice("MEGASIM_DEPENDENCY_FENCE", FENCES, "sc")

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


# -- the child's first look at its counters -------------------------------------------------------------
# MEGASIM_ACQUIRE (read at import): how thread 0 takes its first look at a task's counters. "load" (the
# default since session 24): one ``ld.acquire.gpu`` per counter, which is an acquire by itself (PTX ISA,
# memory consistency model: an acquire operation synchronizes with the parent's release pattern when it
# reads the value the parent's decrement wrote), so a task whose parents are done needs no fence; the
# fence stays after a wait (``_wait_zero`` polls with relaxed atomics). "fence" (until session 24): a
# relaxed ``atomic.add(counters, c, 0)`` per counter, then ``dependency_fence()`` (the acquire pattern).
# H200, the 13 layers at their best mappings: "load" 0.9% (FP32 GEMM) / 1.4% (3xTF32) faster, the
# non-fused control 0.1% (experiments/results/nvidia-h200/probe_dispatch/acquire/). Under the CUDA
# simulator both are the atomic read (the simulator's threads share one memory).
ACQUIRES = ("load", "fence")
ACQUIRE = env_choice("MEGASIM_ACQUIRE", ACQUIRES, "load")
ACQUIRE_BY_LOAD = ACQUIRE == "load"

if config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def load_acquire(arr, i):
        """The simulator's ld.acquire.gpu: an atomic read."""
        return cuda.atomic.add(arr, i, 0)
else:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.cuda.extending import intrinsic as _intrinsic

    from gpu.kernels.common.async_copy import element_address

    def _is_int32_array(arr) -> bool:
        return isinstance(arr, _types.Array) and arr.dtype == _types.int32

    def _global_address(context, builder, sig, args):
        """The 64-bit global address of ``args[0][args[1]]``, for inline PTX."""
        return element_address(context, builder, sig.args[0], args[0], sig.args[1], args[1], 1, _ir.IntType(64))

    @_intrinsic
    def load_acquire(typingctx, arr, i):
        """``ld.acquire.gpu.global.s32`` of ``arr[i]`` (a C-contiguous int32 device array, flat index)."""
        if not (_is_int32_array(arr) and isinstance(i, _types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.IntType(32), [_ir.IntType(64)]),
                                "ld.acquire.gpu.global.s32 $0, [$1];", "=r,l,~{memory}", side_effect=True)
            return builder.call(asm, [_global_address(context, builder, sig, args)])
        return _types.int32(arr, i), codegen


# -- the parent's decrement ----------------------------------------------------------------------------
# MEGASIM_SIGNAL (read at import): how thread 0 decrements the counter a task signals, after its release
# fence, when the block does not need the old value (ticket and blockIdx dispatch; the ready queue does).
# "atom" (until session 25): ``cuda.atomic.sub``, whose old value comes back, so thread 0 (and its block,
# and the slot) waits an L2 round trip for it. "red" (the default since session 25):
# ``red.relaxed.gpu.global.add.s32`` (no value comes back), the pattern of CUTLASS's barrier
# (``fence.acq_rel.gpu; red.relaxed.gpu.global.add``): the fence before it makes it the release. Predicted
# 2-3% on the few-channel layers (a loaded L2 round trip, ~0.4 us, per signalling task); measured on the
# H200 at the 13 best mappings: 0.5% faster (FP32 and 3xTF32, ticket and blockIdx; every layer with FP32),
# non-fused control +0.1% / -0.2% (experiments/results/nvidia-h200/probe_dispatch/signal/): the release
# fence before it, not the atomic's reply, is what a signal waits for. Under the CUDA simulator both are
# the atomic.
SIGNALS = ("atom", "red")
SIGNAL = env_choice("MEGASIM_SIGNAL", SIGNALS, "red")
SIGNAL_BY_RED = SIGNAL == "red"

if config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def red_add(arr, i, v):
        """The simulator's red.relaxed.gpu.global.add: an atomic add."""
        cuda.atomic.add(arr, i, v)
else:
    @_intrinsic
    def red_add(typingctx, arr, i, v):
        """``red.relaxed.gpu.global.add.s32`` of ``v`` to ``arr[i]`` (a C-contiguous int32 device array, flat
        index): an atomic add whose old value does not come back."""
        if not (_is_int32_array(arr) and isinstance(i, _types.Integer) and isinstance(v, _types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            val = context.cast(builder, args[2], sig.args[2], _types.int32)
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.VoidType(), [_ir.IntType(64), _ir.IntType(32)]),
                                "red.relaxed.gpu.global.add.s32 [$0], $1;", "l,r,~{memory}", side_effect=True)
            builder.call(asm, [_global_address(context, builder, sig, args), val])
            return context.get_dummy_value()
        return _types.void(arr, i, v), codegen
