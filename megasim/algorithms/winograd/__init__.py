"""Winograd convolution: the lowering, Algorithm 1's task order, the search space, the plug-in."""

from megasim.algorithms.winograd.plugin import WINOGRAD, WinogradParams, winograd_naive, winograd_nonfused

__all__ = ["WINOGRAD", "WinogradParams", "winograd_naive", "winograd_nonfused"]
