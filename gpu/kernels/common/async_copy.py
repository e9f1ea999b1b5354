"""Asynchronous global -> shared copies (``cp.async``, sm_80+) for the GEMM's staging experiments.

Numba has no binding for ``cp.async``; these are inline-PTX intrinsics (like ``gpu.kernels.common.trace``'s clocks):

- ``cp_async16(dst, di, src, si, src_bytes)``: ``cp.async.cg.shared.global [dst], [src], 16, src_bytes``:
  copies ``src_bytes`` (0 or 16; the hardware accepts 0..16) bytes from ``src.flat[si:]`` to
  ``dst.flat[di:di + 4]`` and zero-fills the rest of the 16 bytes, bypassing registers and L1;
- ``cp_async4(dst, di, src, si, src_bytes)``: ``cp.async.ca.shared.global [dst], [src], 4, src_bytes``
  (src_bytes 0 or 4): one float, for sources that are not 16-byte aligned;
- ``cp_async_commit()``: ``cp.async.commit_group``: the thread's copies issued since the last commit
  form one group;
- ``cp_async_wait_group(n)``: returns the device function ``wait()`` = ``cp.async.wait_group n``
  (``n`` is an immediate, so one intrinsic per ``n``): waits until at most ``n`` of the thread's
  groups are pending. Other threads' copies become visible only after a ``cuda.syncthreads()``
  that follows every thread's wait.

Contract (not checked on the GPU): ``dst`` is a shared float32 array declared with
``alignment=SHARED_ALIGNMENT``, ``src`` a C-contiguous float32 device array; ``di`` and ``si`` flat
element indices, multiples of 4 for ``cp_async16``; ``si`` must address a valid element even when
``src_bytes`` is 0 (pass a clamped index, e.g. 0).

The shared destination goes to the PTX as a 32-bit shared-window address (the array's data pointer
``addrspacecast`` to addrspace(3), ``ptrtoint`` i32: LLVM folds the cast back to the shared symbol,
so no ``cvta``), the source as a 64-bit global address (addrspace(1): one ``cvta.to.global`` per
array, hoisted by LLVM).

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, no PTX) the copies are done at once in Python
(contract asserted, zero fill included) and commit / wait do nothing: a synchronous copy is a legal
schedule of an asynchronous one, so the simulator checks a kernel's indices, edges and buffer
rotation, but NOT that it waits before it reads (a missing wait or barrier only shows on the GPU).
"""

from __future__ import annotations

from numba import config, types

__all__ = ["cp_async4", "cp_async16", "cp_async_commit", "cp_async_wait_group", "py_cp_async4", "py_cp_async16"]


def _copy(dst, di, src, si, width, src_bytes):
    d = dst.reshape(-1)
    s = src.reshape(-1)
    n = int(src_bytes) // 4
    assert 0 <= di <= d.size - width and (width == 1 or di % 4 == 0), f"cp.async dst {di} of {d.size}"
    assert 0 <= si < s.size and (width == 1 or si % 4 == 0), f"cp.async src {si} of {s.size}"
    assert 0 <= n <= width and si + n <= s.size, f"cp.async {src_bytes} bytes at {si} of {s.size}"
    for k in range(width):
        d[di + k] = s[si + k] if k < n else 0.0


def py_cp_async16(dst, di, src, si, src_bytes):
    """The simulator's form of cp_async16: a synchronous copy with zero fill, contract asserted."""
    _copy(dst, di, src, si, 4, src_bytes)


def py_cp_async4(dst, di, src, si, src_bytes):
    """The simulator's form of cp_async4."""
    _copy(dst, di, src, si, 1, src_bytes)


_WAITS: dict = {}

if config.ENABLE_CUDASIM:
    cp_async16, cp_async4 = py_cp_async16, py_cp_async4

    def cp_async_commit():
        pass

    def _py_wait():
        pass

    def cp_async_wait_group(n: int):
        """The simulator's wait: nothing to wait for."""
        return _py_wait

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    _F32 = ir.FloatType()
    _I32 = ir.IntType(32)
    _I64 = ir.IntType(64)

    def _accepts(dst, di, src, si, nb) -> bool:
        return all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float32
                   for a in (dst, src)) and all(isinstance(x, types.Integer) for x in (di, si, nb))

    def element_address(context, builder, arytype, ary, itype, i, addrspace, int_type):
        """Integer address of element i in ``addrspace`` (3: shared, i32; 1: global, i64), for inline PTX
        (also ``gpu.kernels.common.memory_fence.load_acquire``'s)."""
        data = context.make_array(arytype)(context, builder, value=ary).data
        base = builder.addrspacecast(data, ir.PointerType(data.type.pointee, addrspace))
        idx = context.cast(builder, i, itype, types.intp)
        return builder.ptrtoint(builder.gep(base, [idx], inbounds=True), int_type)

    def _copy_intrinsic(ptx: str, doc: str):
        @intrinsic
        def copy(typingctx, dst, di, src, si, src_bytes):
            if not _accepts(dst, di, src, si, src_bytes):
                return None

            def codegen(context, builder, sig, args):
                d = element_address(context, builder, sig.args[0], args[0], sig.args[1], args[1], 3, _I32)
                s = element_address(context, builder, sig.args[2], args[2], sig.args[3], args[3], 1, _I64)
                n = context.cast(builder, args[4], sig.args[4], types.int32)
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I32, _I64, _I32]), ptx,
                                   "r,l,r,~{memory}", side_effect=True)
                builder.call(asm, [d, s, n])
                return context.get_dummy_value()

            return types.void(dst, di, src, si, src_bytes), codegen
        copy.__doc__ = doc
        return copy

    cp_async16 = _copy_intrinsic("cp.async.cg.shared.global [$0], [$1], 16, $2;",
                                 "16 bytes global -> shared, zero-filled past src_bytes (module contract).")
    cp_async4 = _copy_intrinsic("cp.async.ca.shared.global [$0], [$1], 4, $2;",
                                "4 bytes global -> shared, zero-filled past src_bytes (module contract).")

    def _asm_stmt(text: str):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()
        return codegen

    @intrinsic
    def cp_async_commit(typingctx):
        """cp.async.commit_group: this thread's copies since the last commit form one group."""
        return types.void(), _asm_stmt("cp.async.commit_group;")

    def cp_async_wait_group(n: int):
        """The device function ``wait()`` = ``cp.async.wait_group n`` (at most n groups left pending)."""
        n = int(n)
        if n < 0 or n > 7:
            raise ValueError(f"cp.async.wait_group {n}: want 0..7")
        if n not in _WAITS:
            @intrinsic
            def wait(typingctx):
                return types.void(), _asm_stmt(f"cp.async.wait_group {n};")
            _WAITS[n] = wait
        return _WAITS[n]
