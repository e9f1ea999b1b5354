"""im2win convolution (Lu et al., Euro-Par 2023) and its im2col + GEMM baseline: tiling, lowering, plug-ins."""

from megasim.algorithms.im2win.plugin import IM2COL_GEMM, IM2WIN, Im2colParams, Im2winParams

__all__ = ["IM2COL_GEMM", "IM2WIN", "Im2colParams", "Im2winParams"]
