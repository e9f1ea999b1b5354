"""Unchecked 4-wide float32 loads and stores for the GEMM's shared-memory staging.

Why: Numba indexes an array with a signed index through a negative-index wrap-around (compare, select,
64-bit multiply-add): about six integer instructions per shared load in the GEMM's inner loop, where
one FMA pipe cycle is all a load should cost. ``load4(a, i)`` / ``store4(a, i, v0, v1, v2, v3)``
address ``a[i:i + 4]`` directly and move the four floats with one 128-bit instruction
(``ld.shared.v4.f32``: a thread's 4 x 4 register fragment in one LDS.128, as cuBLAS reads it).

Contract (not checked, as in CUDA C): ``a`` is a 1-D C-contiguous float32 array whose data is 16-byte
aligned (declare shared arrays with ``alignment=SHARED_ALIGNMENT``), ``i`` is a multiple of 4 with
``0 <= i <= a.size - 4``. Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) both are plain Python
with the same contract asserted, so CI checks every index the kernels compute.
"""

from __future__ import annotations

from numba import config, types

__all__ = ["SHARED_ALIGNMENT", "load4", "store4"]

# ``alignment=`` for a shared array read with load4 (the CUDA simulator rejects the argument).
SHARED_ALIGNMENT = None if config.ENABLE_CUDASIM else 16


if config.ENABLE_CUDASIM:

    def _check(a, i) -> None:
        assert a.ndim == 1 and 0 <= i <= a.size - 4 and i % 4 == 0, f"vector access at {i} of {a.size}"

    def load4(a, i):
        """a[i], a[i + 1], a[i + 2], a[i + 3] (simulator: checked plain Python)."""
        _check(a, i)
        return a[i], a[i + 1], a[i + 2], a[i + 3]

    def store4(a, i, v0, v1, v2, v3):
        """a[i:i + 4] = v0, v1, v2, v3 (simulator: checked plain Python)."""
        _check(a, i)
        a[i] = v0
        a[i + 1] = v1
        a[i + 2] = v2
        a[i + 3] = v3

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    _VEC4 = ir.VectorType(ir.FloatType(), 4)

    def _is_f32_vector(a, i) -> bool:
        return (isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.float32
                and isinstance(i, types.Integer))

    def _vec_ptr(context, builder, arytype, ary, itype, i):
        """Pointer to a[i] as <4 x float>*, no wrap-around."""
        data = context.make_array(arytype)(context, builder, value=ary).data
        idx = context.cast(builder, i, itype, types.intp)
        return builder.bitcast(builder.gep(data, [idx], inbounds=True), _VEC4.as_pointer())

    @intrinsic
    def load4(typingctx, a, i):
        """a[i], a[i + 1], a[i + 2], a[i + 3] in one 128-bit load (see the module contract)."""
        if not _is_f32_vector(a, i):
            return None
        sig = types.UniTuple(types.float32, 4)(a, i)

        def codegen(context, builder, signature, args):
            ptr = _vec_ptr(context, builder, signature.args[0], args[0], signature.args[1], args[1])
            vec = builder.load(ptr, align=16)
            parts = [builder.extract_element(vec, ir.Constant(ir.IntType(32), k)) for k in range(4)]
            return context.make_tuple(builder, signature.return_type, parts)

        return sig, codegen

    @intrinsic
    def store4(typingctx, a, i, v0, v1, v2, v3):
        """a[i:i + 4] = v0, v1, v2, v3 in one 128-bit store (see the module contract)."""
        if not _is_f32_vector(a, i):
            return None
        sig = types.void(a, i, v0, v1, v2, v3)

        def codegen(context, builder, signature, args):
            ptr = _vec_ptr(context, builder, signature.args[0], args[0], signature.args[1], args[1])
            vec = ir.Constant(_VEC4, ir.Undefined)
            for k in range(4):
                val = context.cast(builder, args[2 + k], signature.args[2 + k], types.float32)
                vec = builder.insert_element(vec, val, ir.Constant(ir.IntType(32), k))
            builder.store(vec, ptr, align=16)
            return context.get_dummy_value()

        return sig, codegen
