"""Lowerings: problem + implementation parameters -> TaskGraph."""

from megasim.lowering.winograd import (WinogradConfig, WinogradShape, gemm_kernel_order, lower_winograd,
                                       winograd_shape)

__all__ = ["WinogradConfig", "WinogradShape", "gemm_kernel_order", "lower_winograd", "winograd_shape"]
