"""Shared by the GEMM-task tests (test_gemm_staging_variants, test_gemm_tc): run a GEMM task device function
one block per task over a small batched problem and compare with float64."""

from __future__ import annotations

import numpy as np
from numba import cuda

# gpu.kernels.winograd.device's P_* indices of the four the GEMM tasks read (gpu.kernels.winograd.gemm_vec / gpu.kernels.winograd.gemm_tc repeat them;
# test_gemm_tc checks all three agree).
P_C, P_K, P_TILES, P_KTILES = 3, 4, 10, 13


def run_gemm(fn, layout, batch, tiles, C, K, extra_threads=0, seed=0):
    """M = V @ U through ``fn`` (layout = (T, GK, KS, NT, ...): one block of NT + extra_threads threads per
    task), with fresh normal V (batch, tiles, C) and U (batch, C, K); returns (M, float64 reference, V, U)."""
    T, GK, NT = layout[0], layout[1], layout[3]
    groups = -(-tiles // T)
    kts = -(-K // GK)
    prm = np.zeros(16, np.int32)
    prm[P_C], prm[P_K], prm[P_TILES], prm[P_KTILES] = C, K, tiles, kts
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((batch, tiles, C)).astype(np.float32)
    U = rng.standard_normal((batch, C, K)).astype(np.float32)
    M = np.full((batch, tiles, K), np.nan, np.float32)
    table = np.array([(0, g, e * kts + kt) for e in range(batch) for g in range(groups) for kt in range(kts)],
                     np.int32)

    @cuda.jit
    def kern(table, prm, V, U, M):
        b = cuda.blockIdx.x
        fn(table[b, 1], table[b, 2], prm, V, U, M)

    kern[len(table), NT + extra_threads, 0, fn.shared_bytes](table, prm, V, U, M)
    ref = np.einsum("etc,eck->etk", V.astype(np.float64), U.astype(np.float64))
    return M, ref, V, U


def rel_err(m, ref) -> float:
    return float(np.linalg.norm(m.astype(np.float64) - ref) / np.linalg.norm(ref))
