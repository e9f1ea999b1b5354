"""Convolution algorithms as plug-ins (``base.Algorithm``), registered by name (``registry``).

Built in: ``winograd`` (the Winograd MegaKernel: fused, non-fused and naive schedules) and the sparse
family ``ecr``, ``direct``, ``pecr``, ``direct_fused`` (ECR and PECR with their dense twins); ``im2win`` and
``im2col_gemm``.
"""

from megasim.algorithms.registry import ALGORITHMS, get_algorithm, register
from megasim.algorithms import winograd as _winograd  # noqa: F401  (registers "winograd")
from megasim.algorithms import sparse as _sparse  # noqa: F401  (registers the sparse family)
from megasim.algorithms import im2win as _im2win  # noqa: F401  (registers "im2win", "im2col_gemm")

__all__ = ["ALGORITHMS", "get_algorithm", "register"]
