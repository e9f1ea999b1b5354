"""Sparse direct convolution (ECR, PECR) and its dense twins: lowering, tiling, plug-ins."""

from megasim.algorithms.sparse.plugin import (DIRECT, DIRECT_FUSED, ECR, PECR, PooledSparseParams, SparseConv,
                                              SparseParams, kernel_us)

__all__ = ["DIRECT", "DIRECT_FUSED", "ECR", "PECR", "PooledSparseParams", "SparseConv", "SparseParams", "kernel_us"]
