"""Unchecked flat-index float32 loads and stores, scalar and 4-wide, for the GEMM's inner loops.

Why: Numba indexes an array through a negative-index wrap-around per dimension (shift, and, add) and a
64-bit multiply-add per stride: about six integer instructions per element in the GEMM's inner loop
(docs/notes.md), where one FMA pipe cycle is all a load should cost. These address element ``i`` of the
array's C-order data directly:

- ``load1(a, i)`` / ``store1(a, i, v)``: one element;
- ``load4(a, i)`` / ``store4(a, i, v0, v1, v2, v3)``: elements ``i .. i + 3`` moved by one 128-bit
  instruction (``ld.shared.v4.f32``: a thread's 4-float register fragment in one LDS.128, as cuBLAS
  reads it; ``st.global.v4.f32`` for four consecutive outputs);
- ``opaque_index(i)``: ``i`` as an int64 the compiler cannot see through (one volatile ``mov``), so that
  offsets computed from it are not hoisted out of an enclosing loop as loop invariants. F(6x6)'s input
  transform addresses 64 elements at ``src + i * row + j * C``; inside a transform task's loop over its
  pairs, LLVM hoisted the 64 invariant offsets into registers (ptxas sm_90: 168 registers against 96
  without the loop); with ``row`` and ``C`` passed through this, 96 again.

Contract (not checked, as in CUDA C): ``a`` is a C-contiguous float32 array of any rank, ``i`` a flat
element index with ``0 <= i`` and ``i (+ 3) < a.size``; for the 4-wide forms ``i`` is a multiple of 4
and the data is 16-byte aligned (device allocations are; declare shared arrays with
``alignment=SHARED_ALIGNMENT``). Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) all four are
their plain-Python forms ``py_*`` (also usable on NumPy arrays anywhere), with the contract asserted,
so CI checks every index the kernels compute.
"""

from __future__ import annotations

from numba import config, types

__all__ = ["SHARED_ALIGNMENT", "load1", "load4", "opaque_index", "store1", "store4", "py_load1", "py_load4",
           "py_opaque_index", "py_store1", "py_store4"]

# ``alignment=`` for a shared array read with load4 (the CUDA simulator rejects the argument).
SHARED_ALIGNMENT = None if config.ENABLE_CUDASIM else 16


def _flat(a, i, width):
    flat = a.reshape(-1)
    assert 0 <= i <= flat.size - width and (width == 1 or i % 4 == 0), \
        f"flat access of {width} at {i} of {flat.size}"
    return flat


def py_load1(a, i):
    """a.flat[i]: the plain-Python form (the simulator's, and for NumPy arrays), contract asserted."""
    return _flat(a, i, 1)[i]


def py_store1(a, i, v):
    """a.flat[i] = v: the plain-Python form, contract asserted."""
    _flat(a, i, 1)[i] = v


def py_load4(a, i):
    """a.flat[i], ..., a.flat[i + 3]: the plain-Python form, contract asserted."""
    flat = _flat(a, i, 4)
    return flat[i], flat[i + 1], flat[i + 2], flat[i + 3]


def py_store4(a, i, v0, v1, v2, v3):
    """a.flat[i:i + 4] = v0, v1, v2, v3: the plain-Python form, contract asserted."""
    flat = _flat(a, i, 4)
    flat[i] = v0
    flat[i + 1] = v1
    flat[i + 2] = v2
    flat[i + 3] = v3


def py_opaque_index(i):
    """i: the plain-Python form."""
    return i


if config.ENABLE_CUDASIM:
    load1, store1, load4, store4, opaque_index = py_load1, py_store1, py_load4, py_store4, py_opaque_index

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    _F32 = ir.FloatType()
    _VEC4 = ir.VectorType(_F32, 4)

    def _accepts(a, i) -> bool:
        return (isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float32
                and isinstance(i, types.Integer))

    def _element_ptr(context, builder, arytype, ary, itype, i, as_type):
        """Pointer to element i of the C-order data, as ``as_type``*, no wrap-around."""
        data = context.make_array(arytype)(context, builder, value=ary).data
        idx = context.cast(builder, i, itype, types.intp)
        return builder.bitcast(builder.gep(data, [idx], inbounds=True), as_type.as_pointer())

    def _f32(context, builder, value, vtype):
        return context.cast(builder, value, vtype, types.float32)

    @intrinsic
    def load1(typingctx, a, i):
        """a.flat[i] (see the module contract)."""
        if not _accepts(a, i):
            return None

        def codegen(context, builder, sig, args):
            ptr = _element_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], _F32)
            return builder.load(ptr, align=4)

        return types.float32(a, i), codegen

    @intrinsic
    def store1(typingctx, a, i, v):
        """a.flat[i] = v (see the module contract)."""
        if not _accepts(a, i):
            return None

        def codegen(context, builder, sig, args):
            ptr = _element_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], _F32)
            builder.store(_f32(context, builder, args[2], sig.args[2]), ptr, align=4)
            return context.get_dummy_value()

        return types.void(a, i, v), codegen

    @intrinsic
    def load4(typingctx, a, i):
        """a.flat[i], ..., a.flat[i + 3] in one 128-bit load (see the module contract)."""
        if not _accepts(a, i):
            return None

        def codegen(context, builder, sig, args):
            ptr = _element_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], _VEC4)
            vec = builder.load(ptr, align=16)
            parts = [builder.extract_element(vec, ir.Constant(ir.IntType(32), k)) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, parts)

        return types.UniTuple(types.float32, 4)(a, i), codegen

    @intrinsic
    def store4(typingctx, a, i, v0, v1, v2, v3):
        """a.flat[i:i + 4] = v0, v1, v2, v3 in one 128-bit store (see the module contract)."""
        if not _accepts(a, i):
            return None

        def codegen(context, builder, sig, args):
            ptr = _element_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], _VEC4)
            vec = ir.Constant(_VEC4, ir.Undefined)
            for k in range(4):
                vec = builder.insert_element(vec, _f32(context, builder, args[2 + k], sig.args[2 + k]),
                                             ir.Constant(ir.IntType(32), k))
            builder.store(vec, ptr, align=16)
            return context.get_dummy_value()

        return types.void(a, i, v0, v1, v2, v3), codegen

    @intrinsic
    def opaque_index(typingctx, i):
        """i as an int64 that the compiler must take as computed here (see the module docstring)."""
        if not isinstance(i, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            value = context.cast(builder, args[0], sig.args[0], types.int64)
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), [ir.IntType(64)]), "mov.b64 $0, $1;", "=l,l",
                               side_effect=True)
            return builder.call(asm, [value])

        return types.int64(i), codegen
