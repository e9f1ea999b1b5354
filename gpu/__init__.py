"""Numba CUDA executors of megasim's TaskGraphs (the real-GPU side of DESIGN.md's "one TaskGraph,
two executors").

Importing ``gpu`` does not import numba; ``gpu.conv2d`` and the kernel modules do (set
``NUMBA_ENABLE_CUDASIM=1`` before that import to run them on Numba's CUDA simulator). megasim itself
never imports this package.

- ``gpu.kernels.winograd.transforms``: straight-line Winograd transforms generated from megasim's matrices.
- ``gpu.kernels.winograd.device``: the four task device functions (ftrans, itrans, gemm, otrans).
- ``gpu.kernels.winograd.megakernel``: the megakernel (ticket / blockIdx / persistent dispatch) and the four
  non-fused kernels.
- ``gpu.runtime.executor``: packs a TaskGraph and a Schedule into arrays and launches them.
- ``gpu.winograd``: ``conv2d``, the user-facing entry point, and its NumPy ``reference``.
- ``gpu.sparse`` (kernels in ``gpu.kernels.sparse.kernels``): ECR and PECR sparse convolution (the
  sparse-convolution paper), their dense twins, ReLU and max-pool, float64 references, and
  ``prepare`` for timing; ``gpu.diagnostics.sparse_check`` checks them at full size on a GPU.
"""

from gpu.errors import KernelInputError, MegakernelError

__all__ = ["KernelInputError", "MegakernelError", "conv2d", "reference"]


def __getattr__(name):  # lazy, so that importing gpu does not import numba
    if name in ("conv2d", "reference"):
        from gpu import winograd
        return getattr(winograd, name)
    raise AttributeError(f"module 'gpu' has no attribute {name!r}")
