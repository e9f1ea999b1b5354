"""Lowerings: problem + implementation parameters -> TaskGraph."""

from megasim.lowering.winograd import WinogradConfig, WinogradShape, lower_winograd, winograd_shape

__all__ = ["WinogradConfig", "WinogradShape", "lower_winograd", "winograd_shape"]
