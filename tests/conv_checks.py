"""What the im2win kernel tests share: fresh random inputs of a problem, the normwise error against a float64
reference, and NaN-filled device buffers (so an output a kernel never writes cannot pass as a zero)."""

from __future__ import annotations

import numpy as np

from megasim.workloads.problem import ConvProblem


def random_conv_inputs(p: ConvProblem, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal float32 x (N, C, H, W) and w (K, C, R, S)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((p.n, p.c, p.h, p.w)).astype(np.float32),
            rng.standard_normal((p.k, p.c, p.r, p.s)).astype(np.float32))


def normwise_rel_err(y, ref) -> float:
    """||y - ref|| / ||ref|| in float64."""
    return float(np.linalg.norm(np.asarray(y, np.float64) - ref) / np.linalg.norm(ref))


def nan_device(shape):
    """A float32 device array of ``shape`` filled with NaN."""
    from numba import cuda
    return cuda.to_device(np.full(shape, np.nan, np.float32))
