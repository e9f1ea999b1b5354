"""Straight-line Winograd transforms, generated from the matrices in megasim.lowering.winograd_math.

One CUDA thread transforms one (filter, channel), (tile, channel) or (tile, k) pair (the paper's
Sec. 2.3: "one GPU thread performs the transformation of one tile in one channel"). The three 2-D
transforms are two-sided products with small constant matrices,

    U = G g G^T,   V = B^T d B,   Y = A^T M A   (the paper's Eq. 5, whose I and F swap these roles;
                                                 this is Lavin and Gray's form),

so each is generated here as straight-line code from the matrices: every coefficient is a
compile-time constant, zero coefficients are skipped, +-1 coefficients become additions and
subtractions, and every other coefficient is a float32 constant (a Python or int64 constant would
promote the arithmetic to float64 in Numba). All values live in scalars, i.e. registers on the GPU.
Tensor elements are addressed by flat index from one base per thread (``gpu.vector_access.load1`` /
``store1``: no per-dimension wrap-around and stride multiplies, which cost ~20 integer instructions
per element with Numba's 4-D indexing); the tensors must be C-contiguous.

For each supported tile size m (2 and 4) this module defines three device functions:

- ``ftrans_pair_m{m}(w, U, k, c)``: reads w[k, c, 0:3, 0:3] (KCRS), writes U[e, c, k], e = i*alpha + j.
- ``itrans_pair_m{m}(x, V, n, y0, x0, c, tile, H, W)``: reads the alpha x alpha window of x (NHWC)
  whose top-left pixel is (y0, x0), zero outside [0, H) x [0, W); writes V[e, tile, c].
- ``otrans_pair_m{m}(M, Y, n, oy, ox, tile, k, P, Q)``: reads M[e, tile, k]; writes the m x m outputs
  Y[n, oy + i, ox + j, k] (NHWK) that fall inside [0, P) x [0, Q).

``PY_FUNCS[name]`` keeps plain Python versions (with ``py_load1`` / ``py_store1``), so tests can check
the generated code against the matrices with NumPy arrays.
"""

from __future__ import annotations

import linecache

import numpy as np
from numba import cuda

from gpu.vector_access import load1, py_load1, py_store1, store1
from megasim.lowering.winograd_math import SUPPORTED_TILES, matrices

PY_FUNCS: dict = {}


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


def _two_sided(left: np.ndarray, right: np.ndarray, src: str, dst: str, consts: _Consts) -> list[str]:
    """Lines computing dst = left @ src @ right^T on scalars named {src}{i}_{j} -> {dst}{i}_{j}."""
    p, q = left.shape
    r, s = right.shape
    lines = []
    for i in range(p):          # tmp = left @ src   (p x s)
        for j in range(s):
            expr = _combo(left[i], [f"{src}{kk}_{j}" for kk in range(q)], consts)
            lines.append(f"    {dst}t{i}_{j} = {expr}")
    for i in range(p):          # dst = tmp @ right^T (p x r)
        for j in range(r):
            expr = _combo(right[j], [f"{dst}t{i}_{kk}" for kk in range(s)], consts)
            lines.append(f"    {dst}{i}_{j} = {expr}")
    return lines


def _gen_ftrans(m: int, consts: _Consts) -> str:
    _, g, _ = matrices(m)
    a = m + 2
    lines = [f"def ftrans_pair_m{m}(w, U, k, c):",
             "    src = (k * w.shape[1] + c) * 9              # flat index of w[k, c, 0, 0]",
             "    dst = c * U.shape[2] + k                     # U[0, c, k]",
             "    plane = U.shape[1] * U.shape[2]"]
    lines += [f"    g{i}_{j} = load1(w, src + {3 * i + j})" for i in range(3) for j in range(3)]
    lines += _two_sided(g, g, "g", "u", consts)
    lines += [f"    store1(U, dst + {i * a + j} * plane, u{i}_{j})" for i in range(a) for j in range(a)]
    return "\n".join(lines) + "\n"


def _gen_itrans(m: int, consts: _Consts) -> str:
    bt, _, _ = matrices(m)
    a = m + 2
    lines = [f"def itrans_pair_m{m}(x, V, n, y0, x0, c, tile, H, W):",
             "    C = x.shape[3]",
             "    row = x.shape[2] * C",
             "    src = (n * x.shape[1] + y0) * row + x0 * C + c  # flat index of x[n, y0, x0, c] (may be outside)",
             "    dst = tile * C + c                             # V[0, tile, c]",
             "    plane = V.shape[1] * C"]
    for i in range(a):
        lines.append(f"    r{i} = 0 <= y0 + {i} < H")
    for j in range(a):
        lines.append(f"    c{j} = 0 <= x0 + {j} < W")
    for i in range(a):
        for j in range(a):
            lines.append(f"    d{i}_{j} = load1(x, src + {i} * row + {j} * C) if r{i} and c{j} else _zero")
    lines += _two_sided(bt, bt, "d", "v", consts)
    lines += [f"    store1(V, dst + {i * a + j} * plane, v{i}_{j})" for i in range(a) for j in range(a)]
    return "\n".join(lines) + "\n"


def _gen_otrans(m: int, consts: _Consts) -> str:
    _, _, at = matrices(m)
    a = m + 2
    lines = [f"def otrans_pair_m{m}(M, Y, n, oy, ox, tile, k, P, Q):",
             "    K = M.shape[2]",
             "    src = tile * K + k                             # flat index of M[0, tile, k]",
             "    plane = M.shape[1] * K",
             "    row = Y.shape[2] * K",
             "    dst = (n * Y.shape[1] + oy) * row + ox * K + k  # Y[n, oy, ox, k]"]
    lines += [f"    s{i}_{j} = load1(M, src + {i * a + j} * plane)" for i in range(a) for j in range(a)]
    lines += _two_sided(at, at, "s", "y", consts)
    for i in range(m):
        lines.append(f"    if oy + {i} < P:")
        for j in range(m):
            lines.append(f"        if ox + {j} < Q:")
            lines.append(f"            store1(Y, dst + {i} * row + {j} * K, y{i}_{j})")
    return "\n".join(lines) + "\n"


def _build() -> dict:
    out = {}
    for m in SUPPORTED_TILES:
        for gen in (_gen_ftrans, _gen_itrans, _gen_otrans):
            consts = _Consts()
            src = gen(m, consts)
            name = src.split("(", 1)[0][4:]
            filename = f"<gpu.transforms:{name}>"
            # Registered so that tracebacks (and Numba's error messages) can show the generated lines.
            linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
            code = compile(src, filename, "exec")
            py_ns = dict(consts.namespace(), load1=py_load1, store1=py_store1)
            exec(code, py_ns)
            PY_FUNCS[name] = py_ns[name]
            dev_ns = dict(consts.namespace(), load1=load1, store1=store1)
            exec(code, dev_ns)
            out[name] = cuda.jit(device=True)(dev_ns[name])
    return out


globals().update(_build())
