"""Straight-line Winograd transforms, generated from the matrices in megasim.algorithms.winograd.winograd_math.

One CUDA thread transforms one (filter, channel), (tile, channel) or (tile, k) pair (the paper's
Sec. 2.3: "one GPU thread performs the transformation of one tile in one channel"). The three 2-D
transforms are two-sided products with small constant matrices,

    U = G g G^T,   V = B^T d B,   Y = A^T M A   (the paper's Eq. 5, whose I and F swap these roles;
                                                 this is Lavin and Gray's form),

so each is generated here as straight-line code from the matrices: every coefficient is a
compile-time constant, zero coefficients are skipped, +-1 coefficients become additions and
subtractions, and every other coefficient is a float32 constant (a Python or int64 constant would
promote the arithmetic to float64 in Numba). All values live in scalars, i.e. registers on the GPU.
Tensor elements are addressed by flat index from one base per thread (``gpu.kernels.common.vector_access.load1`` /
``store1``: no per-dimension wrap-around and stride multiplies, which cost ~20 integer instructions
per element with Numba's 4-D indexing); the tensors must be C-contiguous.

For each supported tile size m (2, 4, 5, 6 and 7) this module defines three device functions:

- ``ftrans_pair_m{m}(w, U, k, c)``: reads w[k, c, 0:3, 0:3] (KCRS), writes U[e, c, k], e = i*alpha + j.
- ``itrans_pair_m{m}(x, V, n, y0, x0, c, tile, H, W)``: reads the alpha x alpha window of x (NHWC)
  whose top-left pixel is (y0, x0), zero outside [0, H) x [0, W); writes V[e, tile, c].
- ``otrans_pair_m{m}(M, Y, n, oy, ox, tile, k, P, Q)``: reads M[e, tile, k]; writes the m x m outputs
  Y[n, oy + i, ox + j, k] (NHWK) that fall inside [0, P) x [0, Q).

F(5x5), F(6x6) and F(7x7) are generated streamed, with opaque strides (``_two_sided``, ``_stride``); F(2x2) and F(4x4)
also have ``*_opaque`` forms (opaque strides, the plain forms' order), which the non-fused transform kernels
use (``gpu.kernels.winograd.device.make_transform_tasks``).

``PY_FUNCS[name]`` keeps plain Python versions (with ``py_load1`` / ``py_store1``), so tests can check
the generated code against the matrices with NumPy arrays.
"""

from __future__ import annotations

import linecache

import numpy as np
from numba import cuda

from gpu.kernels.common.vector_access import load1, opaque_index, py_load1, py_opaque_index, py_store1, store1
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES, matrices

PY_FUNCS: dict = {}
# Tiles of alpha = m + 2 at least this are generated streamed (``_two_sided``'s load_column / store_row), with
# their strides opaque (``_stride``). The smaller tiles' functions come in two forms, plain and ``*_opaque``
# (opaque strides, the same order).
STREAMED_ALPHA = 7


class _Consts:
    """Names the distinct float32 coefficients of the generated code (module globals of it)."""

    def __init__(self) -> None:
        self.names: dict[float, str] = {}

    def name(self, value: float) -> str:
        value = float(np.float32(value))
        if value not in self.names:
            self.names[value] = f"_k{len(self.names)}"
        return self.names[value]

    def namespace(self) -> dict:
        ns = {name: np.float32(v) for v, name in self.names.items()}
        ns["_zero"] = np.float32(0.0)
        return ns


def _combo(coefs, names, consts: _Consts) -> str:
    """The expression sum(coef * name) with zero terms dropped and +-1 as plain adds/subtracts."""
    terms = []
    for coef, nm in zip(coefs, names):
        coef = float(coef)
        if coef == 0.0:
            continue
        if coef == 1.0:
            terms.append(("+", nm))
        elif coef == -1.0:
            terms.append(("-", nm))
        else:
            terms.append(("+", f"{consts.name(coef)} * {nm}"))
    if not terms:
        return "_zero"
    first_sign, first = terms[0]
    out = first if first_sign == "+" else f"-{first}"
    for sign, t in terms[1:]:
        out += f" {sign} {t}"
    return out


def _two_sided(left: np.ndarray, right: np.ndarray, src: str, dst: str, consts: _Consts,
               load_column=None, store_row=None) -> list[str]:
    """Lines computing dst = left @ src @ right^T on scalars named {src}{i}_{j} -> {dst}{i}_{j}.

    With ``load_column(j)`` / ``store_row(i)`` (lists of lines), the code is streamed: column j of src is
    loaded just before the products that use it, and row i of dst stored just after it is computed, so
    that at most the product tmp = left @ src is live at once (F(6x6): 64 floats. Its first build loaded all
    64 values, then computed, then stored: 255 registers in the non-fused input-transform kernel, 632 bytes
    spilled in the 128-register megakernel; streamed and with opaque strides (``_stride``), 96 and 0; ptxas
    sm_90). Without them, every tmp then every dst, in row order: the order of the F(2x2) and F(4x4) code,
    kept so that their PTX (and its measured speed) is unchanged."""
    p, q = left.shape
    r, s = right.shape
    lines = []
    if load_column is None:
        for i in range(p):          # tmp = left @ src   (p x s)
            for j in range(s):
                expr = _combo(left[i], [f"{src}{kk}_{j}" for kk in range(q)], consts)
                lines.append(f"    {dst}t{i}_{j} = {expr}")
    else:
        for j in range(s):          # the same, a column of src at a time
            lines += load_column(j)
            for i in range(p):
                expr = _combo(left[i], [f"{src}{kk}_{j}" for kk in range(q)], consts)
                lines.append(f"    {dst}t{i}_{j} = {expr}")
    for i in range(p):          # dst = tmp @ right^T (p x r)
        for j in range(r):
            expr = _combo(right[j], [f"{dst}t{i}_{kk}" for kk in range(s)], consts)
            lines.append(f"    {dst}{i}_{j} = {expr}")
        if store_row is not None:
            lines += store_row(i)
    return lines


def _stride(expr: str, opaque: bool) -> str:
    """A stride's expression; with ``opaque`` passed through ``opaque_index``, so that the offsets made from it
    (one per element of the tile) are computed per pair, not hoisted out of the task's loop over its pairs
    into registers as loop invariants (``gpu.kernels.common.vector_access``)."""
    return f"opaque_index({expr})" if opaque else expr


def product_lines(mat: np.ndarray, a: int, rows_out: int, load, store_row, src: str, dst: str,
                  consts: _Consts) -> list[str]:
    """The lines of dst = mat @ src @ mat^T for one alpha x alpha tile (``a`` = alpha): ``load(i, j)`` is the
    line that loads src[i][j], ``store_row(i)`` the lines that store row i of dst (rows ``0 .. rows_out-1``).
    Small tiles load everything, compute, then store by rows; tiles of alpha >= STREAMED_ALPHA are streamed
    (``_two_sided``'s load_column / store_row). Shared by the global-memory transforms here and the
    shared-memory ones of ``gpu.kernels.winograd.nchw``."""
    if a < STREAMED_ALPHA:
        lines = [load(i, j) for i in range(a) for j in range(a)]
        lines += _two_sided(mat, mat, src, dst, consts)
        for i in range(rows_out):
            lines += store_row(i)
        return lines
    return _two_sided(mat, mat, src, dst, consts, load_column=lambda j: [load(i, j) for i in range(a)],
                      store_row=store_row)


def compile_generated(src: str, consts: _Consts, module: str, py_names: dict, dev_names: dict):
    """(plain-Python function, CUDA device function) of one generated function's source ``src``: its lines
    registered under ``<module:name>`` so that tracebacks and Numba's messages show them; ``py_names`` and
    ``dev_names`` are the helpers each form calls (e.g. load1 / py_load1)."""
    name = src.split("(", 1)[0][4:]
    filename = f"<{module}:{name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    code = compile(src, filename, "exec")
    py_ns = dict(consts.namespace(), **py_names)
    exec(code, py_ns)
    dev_ns = dict(consts.namespace(), **dev_names)
    exec(code, dev_ns)
    return name, py_ns[name], cuda.jit(device=True)(dev_ns[name])


def _name(kind: str, m: int, opaque: bool) -> str:
    """The generated function's name: ``{kind}_pair_m{m}``, with ``_opaque`` for a small tile's opaque form."""
    return f"{kind}_pair_m{m}" + ("_opaque" if opaque and m + 2 < STREAMED_ALPHA else "")


def _gen_ftrans(m: int, consts: _Consts, opaque: bool) -> str:
    _, g, _ = matrices(m)
    a = m + 2
    lines = [f"def {_name('ftrans', m, opaque)}(w, U, k, c):",
             "    src = (k * w.shape[1] + c) * 9              # flat index of w[k, c, 0, 0]",
             "    dst = c * U.shape[2] + k                     # U[0, c, k]",
             f"    plane = {_stride('U.shape[1] * U.shape[2]', opaque)}"]
    lines += [f"    g{i}_{j} = load1(w, src + {3 * i + j})" for i in range(3) for j in range(3)]
    if a < STREAMED_ALPHA:
        lines += _two_sided(g, g, "g", "u", consts)
        lines += [f"    store1(U, dst + {i * a + j} * plane, u{i}_{j})" for i in range(a) for j in range(a)]
    else:
        lines += _two_sided(g, g, "g", "u", consts, load_column=lambda j: [],
                            store_row=lambda i: [f"    store1(U, dst + {i * a + j} * plane, u{i}_{j})"
                                                 for j in range(a)])
    return "\n".join(lines) + "\n"


def _gen_itrans(m: int, consts: _Consts, opaque: bool) -> str:
    bt, _, _ = matrices(m)
    a = m + 2
    lines = [f"def {_name('itrans', m, opaque)}(x, V, n, y0, x0, c, tile, H, W):",
             f"    C = {_stride('x.shape[3]', opaque)}",
             f"    row = {_stride('x.shape[2] * C', opaque)}",
             "    src = (n * x.shape[1] + y0) * row + x0 * C + c  # flat index of x[n, y0, x0, c] (may be outside)",
             "    dst = tile * C + c                             # V[0, tile, c]",
             f"    plane = {_stride('V.shape[1] * C', opaque)}"]
    for i in range(a):
        lines.append(f"    r{i} = 0 <= y0 + {i} < H")
    for j in range(a):
        lines.append(f"    c{j} = 0 <= x0 + {j} < W")

    def load(i, j):
        return f"    d{i}_{j} = load1(x, src + {i} * row + {j} * C) if r{i} and c{j} else _zero"

    def store(i, j):
        return f"    store1(V, dst + {i * a + j} * plane, v{i}_{j})"

    lines += product_lines(bt, a, a, load, lambda i: [store(i, j) for j in range(a)], "d", "v", consts)
    return "\n".join(lines) + "\n"


def _gen_otrans(m: int, consts: _Consts, opaque: bool) -> str:
    _, _, at = matrices(m)
    a = m + 2
    lines = [f"def {_name('otrans', m, opaque)}(M, Y, n, oy, ox, tile, k, P, Q):",
             f"    K = {_stride('M.shape[2]', opaque)}",
             "    src = tile * K + k                             # flat index of M[0, tile, k]",
             f"    plane = {_stride('M.shape[1] * K', opaque)}",
             f"    row = {_stride('Y.shape[2] * K', opaque)}",
             "    dst = (n * Y.shape[1] + oy) * row + ox * K + k  # Y[n, oy, ox, k]"]

    def load(i, j):
        return f"    s{i}_{j} = load1(M, src + {i * a + j} * plane)"

    def store_row(i):
        out = [f"    if oy + {i} < P:"]
        for j in range(m):
            out.append(f"        if ox + {j} < Q:")
            out.append(f"            store1(Y, dst + {i} * row + {j} * K, y{i}_{j})")
        return out

    lines += product_lines(at, a, m, load, store_row, "s", "y", consts)
    return "\n".join(lines) + "\n"


def _build() -> dict:
    out = {}
    for m in SUPPORTED_TILES:
        forms = (True,) if m + 2 >= STREAMED_ALPHA else (False, True)
        for gen, opaque in ((g, o) for g in (_gen_ftrans, _gen_itrans, _gen_otrans) for o in forms):
            consts = _Consts()
            name, py_fn, dev_fn = compile_generated(
                gen(m, consts, opaque), consts, "gpu.kernels.winograd.transforms",
                dict(load1=py_load1, store1=py_store1, opaque_index=py_opaque_index),
                dict(load1=load1, store1=store1, opaque_index=opaque_index))
            PY_FUNCS[name], out[name] = py_fn, dev_fn
    return out


globals().update(_build())


def pair_functions(m: int, opaque: bool = False) -> tuple:
    """(ftrans, itrans, otrans) pair device functions of tile m (its ``*_opaque`` forms with ``opaque``, for
    the small tiles; the streamed big tiles have one form)."""
    return tuple(globals()[_name(kind, m, opaque)] for kind in ("ftrans", "itrans", "otrans"))
