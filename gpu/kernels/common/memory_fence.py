"""The megakernel's release and acquire fence, ``dependency_fence()``: ``fence.acq_rel.gpu`` or ``fence.sc.gpu``.

The dependency-counter protocol (``gpu.kernels.winograd.megakernel``'s docstring) needs a release pattern in the parent
(block barrier; thread 0: fence, then the relaxed atomic decrement) and an acquire pattern in the child
(thread 0: the atomic read that sees 0, then a fence; block barrier). In the PTX memory model
(PTX ISA, "Memory Consistency Model": release and acquire patterns) a ``fence.acq_rel`` is enough for both:
the barrier puts the other threads' writes before thread 0's fence in causality order, and release is
cumulative. ``fence.sc`` (what ``cuda.threadfence()``, ``membar.gl``, compiles to) adds a single total
order over all sc fences that this protocol does not use.

The fence is ``fence.sc.gpu`` (``cuda.threadfence()``): ``fence.acq_rel.gpu`` was timed against it and made no
difference (within 0.5% on six layers, two interleaved runs each, 3xTF32 GEMM, H200;
``experiments/results/nvidia-h200/gemm_3xtf32/fence/``, docs/findings.md): what
a signal waits for is the block's writes reaching L2, which any release must wait for.

The child's first look at its counters is ``load_acquire`` (``ld.acquire.gpu``), the parent's decrement
``red_add`` (``red.relaxed.gpu``); both are below. Under the CUDA simulator the fence is ``cuda.threadfence()``
and both others are atomics (the simulator's threads share one memory).
"""

from __future__ import annotations

from numba import config, cuda


@cuda.jit(device=True)
def dependency_fence():
    """The megakernel's release / acquire fence: fence.sc.gpu (``cuda.threadfence()``)."""
    cuda.threadfence()


# -- the child's first look at its counters -------------------------------------------------------------
# Thread 0 takes its first look at a task's counters with one ``ld.acquire.gpu`` per counter, which is an
# acquire by itself (PTX ISA, memory consistency model: an acquire operation synchronizes with the parent's
# release pattern when it reads the value the parent's decrement wrote), so a task whose parents are done
# needs no fence; the fence stays after a wait (the megakernel's ``_wait_zero`` polls with relaxed atomics).
# It replaced a relaxed ``atomic.add(counters, c, 0)`` per counter always followed by ``dependency_fence()``:
# H200, the 13 layers at their best mappings, 0.9% (FP32 GEMM) / 1.4% (3xTF32) faster, the non-fused control
# 0.1% (nvidia-h200/probe_dispatch/acquire/ (in git at 871d7d7)). Under the CUDA simulator it is an atomic read.
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
# Thread 0 decrements the counter a task signals, after its release fence, with
# ``red.relaxed.gpu.global.add.s32`` (no value comes back) when the block does not need the old value (ticket and
# blockIdx dispatch; the ready queue does and keeps ``cuda.atomic.sub``): the pattern of CUTLASS's barrier
# (``fence.acq_rel.gpu; red.relaxed.gpu.global.add``), the fence before it making it the release. Against
# ``cuda.atomic.sub`` (whose old value thread 0, its block and the slot waited an L2 round trip for), H200, the
# 13 best mappings: 0.5% faster (FP32 and 3xTF32, ticket and blockIdx; every layer with FP32), non-fused control
# +0.1% / -0.2% (nvidia-h200/probe_dispatch/signal/ (in git at 871d7d7)): the release fence before it, not the
# atomic's reply, is what a signal waits for. Under the CUDA simulator it is the atomic.
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
