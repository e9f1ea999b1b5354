"""Winograd minimal-filtering matrices (Lavin & Gray 2016) and a float64 NumPy reference.

F(m x m, 3 x 3) computes an m x m output tile from an alpha x alpha input tile (alpha = m + 2):
``Y = A^T [ (G g G^T) * (B^T d B) ] A`` (the megakernel paper's Eq. 5). The matrices here are used by
the lowering to count transform work and by ``gpu/`` to build its device functions; the reference
below checks them.
"""

from __future__ import annotations

import numpy as np

_F43 = dict(
    BT=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
    G=[[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
       [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
    AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
)
_F23 = dict(
    BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    G=[[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
    AT=[[1, 1, 1, 0], [0, 1, -1, -1]],
)
# F(6x6, 3x3) with the interpolation points 0, +-1, +-2, +-1/2 and infinity (Lavin and Gray's; NNPACK's): 1.78
# multiplies per output against F(4x4)'s 2.25, from an 8 x 8 input tile, with a larger FP32 error (coefficients
# up to 21/4 in B^T and 32 in A^T).
_F63 = dict(
    BT=[[1, 0, -21 / 4, 0, 21 / 4, 0, -1, 0], [0, 1, 1, -17 / 4, -17 / 4, 1, 1, 0],
        [0, -1, 1, 17 / 4, -17 / 4, -1, 1, 0], [0, 1 / 2, 1 / 4, -5 / 2, -5 / 4, 2, 1, 0],
        [0, -1 / 2, 1 / 4, 5 / 2, -5 / 4, -2, 1, 0], [0, 2, 4, -5 / 2, -5, 1 / 2, 1, 0],
        [0, -2, 4, 5 / 2, -5, -1 / 2, 1, 0], [0, -1, 0, 21 / 4, 0, -21 / 4, 0, 1]],
    G=[[1, 0, 0], [-2 / 9, -2 / 9, -2 / 9], [-2 / 9, 2 / 9, -2 / 9], [1 / 90, 1 / 45, 2 / 45],
       [1 / 90, -1 / 45, 2 / 45], [32 / 45, 16 / 45, 8 / 45], [32 / 45, -16 / 45, 8 / 45], [0, 0, 1]],
    AT=[[1, 1, 1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1 / 2, -1 / 2, 0], [0, 1, 1, 4, 4, 1 / 4, 1 / 4, 0],
        [0, 1, -1, 8, -8, 1 / 8, -1 / 8, 0], [0, 1, 1, 16, 16, 1 / 16, 1 / 16, 0],
        [0, 1, -1, 32, -32, 1 / 32, -1 / 32, 1]],
)
# F(5x5, 3x3): Cook-Toom at the points 0, +-1, +-1/2, 2 and infinity (B^T solved from A^T and G so that the 1-D
# identity holds; tests/test_winograd_big_tiles.py checks it exact): 1.96 multiplies per output. Of the 13 Table-2
# layers only the 14 x 14 one needs fewer GEMM multiplies with it than with F(4x4) or F(6x6) (``default_tile``).
# The point set 0, +-1, +-2, 1/2 gave a 10% larger FP32 error in a NumPy float32 emulation (C = 256).
_F53 = dict(
    BT=[[1 / 2, -1 / 4, -5 / 2, 5 / 4, 2, -1, 0], [0, 1 / 2, 1 / 4, -9 / 4, -1, 1, 0],
        [0, -1 / 2, 3 / 4, 7 / 4, -3, 1, 0], [0, 1, 3 / 2, -2, -3 / 2, 1, 0], [0, -1, 5 / 2, 0, -5 / 2, 1, 0],
        [0, 1 / 4, 0, -5 / 4, 0, 1, 0], [0, -1 / 2, 1 / 4, 5 / 2, -5 / 4, -2, 1]],
    G=[[2, 0, 0], [-2 / 3, -2 / 3, -2 / 3], [-2 / 9, 2 / 9, -2 / 9], [16 / 9, 8 / 9, 4 / 9],
       [16 / 15, -8 / 15, 4 / 15], [2 / 45, 4 / 45, 8 / 45], [0, 0, 1]],
    AT=[[1, 1, 1, 1, 1, 1, 0], [0, 1, -1, 1 / 2, -1 / 2, 2, 0], [0, 1, 1, 1 / 4, 1 / 4, 4, 0],
        [0, 1, -1, 1 / 8, -1 / 8, 8, 0], [0, 1, 1, 1 / 16, 1 / 16, 16, 1]],
)
# F(7x7, 3x3): Cook-Toom at the points 0, +-1, +-1/2, +-3/2, -4 and infinity (B^T solved from A^T and G as for
# F(5x5)): 1.65 multiplies per output, from a 9 x 9 input tile. Chosen for its FP32 error: a NumPy float32 emulation
# of the whole convolution (float32 transforms and GEMM, C = 256 and 512, standard-normal inputs) gives a normwise
# error of 2.75e-5, 4.3x F(6x6)'s 6.4e-6 (which the GPU measures at 6.1e-6), and below the 1e-4 the kernels are held
# to. Lavin and Gray's set extended by one point (0, +-1, +-2, +-1/2, -1/4) gave 6.1e-5, and of 1,540 sets
# 0, +-1, +-1/2 plus three of +-{2, 3, 1/3, 3/2, 2/3, 3/4, 4/3, 4, 1/4, 5/4, 4/5} this one had the smallest error
# (docs/findings.md, 5b1ea84). Not among ``default_tile``'s choices: a caller asks for it (``m=7``).
_F73 = dict(
    BT=[[-9 / 4, -9 / 16, 49 / 4, 49 / 16, -14, -7 / 2, 4, 1, 0],
        [0, 9 / 4, 45 / 16, -151 / 16, -25 / 2, 3 / 2, 5, 1, 0],
        [0, -9 / 4, 27 / 16, 169 / 16, -15 / 2, -13 / 2, 3, 1, 0],
        [0, 9 / 2, 81 / 8, -17 / 4, -117 / 8, -5 / 4, 9 / 2, 1, 0],
        [0, -9 / 2, 63 / 8, 35 / 4, -91 / 8, -21 / 4, 7 / 2, 1, 0],
        [0, 3 / 2, 11 / 8, -29 / 4, -55 / 8, 19 / 4, 11 / 2, 1, 0],
        [0, -3 / 2, 5 / 8, 31 / 4, -25 / 8, -29 / 4, 5 / 2, 1, 0],
        [0, -9 / 16, 0, 49 / 16, 0, -7 / 2, 0, 1, 0],
        [0, -9 / 4, -9 / 16, 49 / 4, 49 / 16, -14, -7 / 2, 4, 1]],
    G=[[-4 / 9, 0, 0], [-8 / 75, -8 / 75, -8 / 75], [-8 / 45, 8 / 45, -8 / 45], [8 / 27, 4 / 27, 2 / 27],
       [8 / 21, -4 / 21, 2 / 21], [8 / 495, 4 / 165, 2 / 55], [8 / 225, -4 / 75, 2 / 25],
       [-4 / 51975, 16 / 51975, -64 / 51975], [0, 0, 1]],
    AT=[[1, 1, 1, 1, 1, 1, 1, 1, 0], [0, 1, -1, 1 / 2, -1 / 2, 3 / 2, -3 / 2, -4, 0],
        [0, 1, 1, 1 / 4, 1 / 4, 9 / 4, 9 / 4, 16, 0], [0, 1, -1, 1 / 8, -1 / 8, 27 / 8, -27 / 8, -64, 0],
        [0, 1, 1, 1 / 16, 1 / 16, 81 / 16, 81 / 16, 256, 0], [0, 1, -1, 1 / 32, -1 / 32, 243 / 32, -243 / 32, -1024, 0],
        [0, 1, 1, 1 / 64, 1 / 64, 729 / 64, 729 / 64, 4096, 1]],
)
SUPPORTED_TILES = (2, 4, 5, 6, 7)


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m x m, 3 x 3) as float64 arrays."""
    table = {7: _F73, 6: _F63, 5: _F53, 4: _F43, 2: _F23}[m]
    return tuple(np.array(table[k], dtype=np.float64) for k in ("BT", "G", "AT"))  # type: ignore[return-value]


def transform_flops(m: int) -> dict[str, int]:
    """FLOPs per (tile, channel) of each transform, counting one FMA (2 FLOPs) per nonzero matrix
    coefficient applied, on both sides of the product (what a straightforward device function does)."""
    bt, g, at = matrices(m)
    alpha = m + 2
    return {
        "itrans": 2 * np.count_nonzero(bt) * alpha * 2,
        "ftrans": 2 * np.count_nonzero(g) * 3 + 2 * np.count_nonzero(g) * alpha,
        "otrans": 2 * np.count_nonzero(at) * alpha + 2 * np.count_nonzero(at) * m,
    }


def direct_conv2d_reference(x: np.ndarray, w: np.ndarray, padding: int = 1) -> np.ndarray:
    """Float64 direct convolution (cross-correlation, stride 1), NCHW x KCRS -> NKPQ."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    k, c2, r, s = w.shape
    if c != c2:
        raise ValueError(f"channels differ: input C={c}, filter C={c2}")
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    p, q = h + 2 * padding - r + 1, wd + 2 * padding - s + 1
    out = np.zeros((n, k, p, q))
    for i in range(r):
        for j in range(s):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + p, j:j + q], w[:, :, i, j])
    return out


def winograd_conv2d_reference(x: np.ndarray, w: np.ndarray, m: int = 4, padding: int = 1) -> np.ndarray:
    """Float64 Winograd F(m x m, 3 x 3) convolution, NCHW x KC33 -> NKPQ, tile by tile (slow)."""
    bt, g, at = matrices(m)
    alpha = m + 2
    x = np.asarray(x, np.float64)
    n, c, h, wd = x.shape
    k = w.shape[0]
    p, q = h + 2 * padding - 2, wd + 2 * padding - 2
    ty, tx = -(-p // m), -(-q // m)
    xp = np.zeros((n, c, ty * m + 2, tx * m + 2))
    xp[:, :, padding:padding + h, padding:padding + wd] = x
    u = np.einsum("ai,kcij,bj->abkc", g, np.asarray(w, np.float64), g)          # alpha, alpha, K, C
    out = np.zeros((n, k, ty * m, tx * m))
    for yi in range(ty):
        for xi in range(tx):
            d = xp[:, :, yi * m:yi * m + alpha, xi * m:xi * m + alpha]          # N, C, alpha, alpha
            v = np.einsum("ai,ncij,bj->abnc", bt, d, bt)
            mm = np.einsum("abnc,abkc->abnk", v, u)
            out[:, :, yi * m:(yi + 1) * m, xi * m:(xi + 1) * m] = np.einsum("ia,abnk,jb->nkij", at, mm, at)
    return out[:, :, :p, :q]
