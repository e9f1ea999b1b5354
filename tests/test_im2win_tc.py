"""The im2win kernel's tensor-core build (``make_conv_kernel(math="3xtf32")``, ``gpu.im2win.conv2d(math=...)``)
against float64 NumPy oracles, on Numba's CUDA simulator (tests/conftest.py; with NUMBA_ENABLE_CUDASIM=0 the
same tests run on the GPU).

The simulated ``mma.sync`` is a warp collective of Python threads (``gpu.kernels.common.tensor_core``), so the
layouts are the smallest the build allows: one warp of one 16 x 8 MMA tile per K slice of 8, and two warps of
2 x 2 tiles stepping 16 k. The shapes are test_im2win_gpu's: filters and pixels not multiples of any tile,
C_in 1 and 3, strides 1-4, filters 1x1 to 11x11, padding 0-3, batch 1 and 2. Outputs start as NaN. The
3xTF32 split keeps FP32 accuracy: the bar is 1e-4 as for the FP32 kernel, and the error is also held
below 1e-5 (FP32 level; TF32 alone would be ~3e-4 on these sums).
"""

from __future__ import annotations


import numpy as np
import pytest

from megasim.workloads.problem import ConvProblem

numba = pytest.importorskip("numba")
from numba import cuda

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) nor a CUDA GPU is available",
                allow_module_level=True)

from gpu import im2win
from gpu.errors import KernelInputError
from gpu.kernels.im2win.conv import TcOptions, conv_blocks, conv_offsets, conv_params, make_conv_kernel
from gpu.kernels.im2win.transform import transform_kernel, transform_magic, transform_params
from gpu.runtime import im2win_kernels
from gpu.sparse import reference_conv2d
from megasim.algorithms.im2win.tiling import TRANSFORM_THREADS, im2win_shape, transform_blocks
from tests.conv_checks import nan_device as _nan  # noqa: E402
from tests.conv_checks import normwise_rel_err as _rel_err  # noqa: E402
from tests.conv_checks import random_conv_inputs as _inputs  # noqa: E402

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]
TOL = 1e-4
FP32_LEVEL = 1e-5

SHAPES = [ConvProblem(1, 1, 5, 7, 6, 1, 1, 1, 0),       # 1x1, C_in = 1
          ConvProblem(1, 3, 7, 9, 8, 3, 3, 2, 1),       # C_in = 3, stride 2
          ConvProblem(1, 3, 5, 9, 9, 11, 11, 4, 3),     # 11x11, stride 4, padding 3
          ConvProblem(1, 2, 9, 8, 7, 5, 2, 3, 2),       # rectangular filter, stride 3
          ConvProblem(1, 1, 3, 10, 9, 5, 5, 1, 0),      # 5x5, C_in = 1
          ConvProblem(2, 3, 17, 9, 9, 3, 3, 1, 1)]      # two filter tiles, interior tiles, C*R*S = 27, 2 images
# (m_b, n_b, k_b, m_t, n_t, staging): one warp of one MMA tile; two warps of 2 x 2 tiles, two K slices a step
LAYOUTS = {"warp1": (16, 8, 8, 4, 1, "registers"), "warp1_async": (16, 8, 8, 4, 1, "async"),
           "warps2": (32, 32, 16, 4, 4, "registers")}


def _conv(p: ConvProblem, layout: str, x, w, **kw):
    m_b, n_b, k_b, m_t, n_t, staging = LAYOUTS[layout]
    extra = dict(staging="async", stages=3) if staging == "async" else {}
    kernel = make_conv_kernel(m_b, n_b, k_b, m_t, n_t, math="3xtf32", **extra, **kw)
    J = _nan(im2win_shape(p))
    transform_kernel[transform_blocks(p), TRANSFORM_THREADS](cuda.to_device(x), J, cuda.to_device(transform_params(p)),
                                                             cuda.to_device(transform_magic(p)))
    y = _nan((p.n, p.k, p.out_h, p.out_w))
    kernel[conv_blocks(p, m_b, n_b), kernel.threads](J, cuda.to_device(w), y, cuda.to_device(conv_params(p, m_b)),
                                                     cuda.to_device(conv_offsets(p, k_b)))
    return kernel, y.copy_to_host()


@pytest.mark.parametrize("p", SHAPES, ids=lambda p: p.spec_string())
def test_one_warp_build_matches_float64(p):
    x, w = _inputs(p, 100 + SHAPES.index(p))
    kernel, y = _conv(p, "warp1", x, w)
    assert kernel.layout["math"] == "3xtf32" and kernel.layout["warps"] == (1, 1)
    assert _rel_err(y, reference_conv2d(x, w, p.stride, p.padding)) <= FP32_LEVEL


@pytest.mark.parametrize("p", [SHAPES[2], SHAPES[5]], ids=lambda p: p.spec_string())
def test_two_warp_build_matches_float64(p):
    """Two warps (a 1 x 2 warp grid) of 2 x 2 MMA tiles, K steps of two 8-k slices."""
    x, w = _inputs(p, 110 + SHAPES.index(p))
    kernel, y = _conv(p, "warps2", x, w)
    assert kernel.layout["warps"] == (1, 2)
    assert _rel_err(y, reference_conv2d(x, w, p.stride, p.padding)) <= FP32_LEVEL


@pytest.mark.parametrize("tc", [TcOptions(fragments="rows"), TcOptions(chain_k=None)], ids=["rows", "chain_stage"])
def test_other_tensor_core_options_match_float64(tc):
    """The FP32 kernel's staged rows instead of packed fragments; MMAs chained over the stage (two 8-k slices)
    instead of one slice."""
    p = SHAPES[5]
    x, w = _inputs(p, 160)
    kernel, y = _conv(p, "warps2", x, w, tc=tc)
    assert kernel.layout["tc"] == tc
    assert _rel_err(y, reference_conv2d(x, w, p.stride, p.padding)) <= FP32_LEVEL


@pytest.mark.parametrize("p", [SHAPES[1], SHAPES[3]], ids=lambda p: p.spec_string())
def test_async_staging_build_matches_float64(p):
    x, w = _inputs(p, 120 + SHAPES.index(p))
    _, y = _conv(p, "warp1_async", x, w)
    assert _rel_err(y, reference_conv2d(x, w, p.stride, p.padding)) <= FP32_LEVEL


def test_prologue_and_epilogue_hooks_are_kept():
    """prologue(value, k) on every staged window value, epilogue(value, m) on every stored output."""
    p = SHAPES[1]

    @cuda.jit(device=True)
    def doubled(value, k):
        return value * 2

    @cuda.jit(device=True)
    def shifted(value, m):
        return value + m

    x, w = _inputs(p, 130)
    _, y = _conv(p, "warp1", x, w, prologue=doubled, epilogue=shifted)
    ref = 2 * reference_conv2d(x, w, p.stride, p.padding) + np.arange(p.k)[None, :, None, None]
    assert _rel_err(y, ref) <= FP32_LEVEL


def test_op_runs_the_tensor_core_build_through_the_kernel_table(monkeypatch):
    monkeypatch.setattr(im2win_kernels.cuda, "device_array", lambda shape, dtype=np.float32: _nan(shape))
    p = ConvProblem(1, 3, 33, 7, 8, 3, 2, 2, 1)       # 33 filters: two filter tiles of 32, the second of 1
    x, w = _inputs(p, 140)
    launch = im2win.prepare(x, w, p.stride, p.padding, math="3xtf32", m_b=32, n_b=32, k_b=8, m_t=4, n_t=4)
    assert launch.kernel.layout["math"] == "3xtf32" and launch.kernel.threads == 64
    launch.run()
    assert _rel_err(launch.output.copy_to_host(), reference_conv2d(x, w, p.stride, p.padding)) <= FP32_LEVEL


def test_op_default_tensor_core_tile():
    """No tile given: MATH_DEFAULT_TILES["3xtf32"] (checked without running: 128 simulated threads are slow)."""
    p = ConvProblem(1, 2, 5, 6, 7, 3, 3, 1, 1)
    x, w = _inputs(p, 150)
    launch = im2win.prepare(x, w, p.stride, p.padding, math="3xtf32")
    want = im2win.MATH_DEFAULT_TILES["3xtf32"]
    assert {k: getattr(launch.params, k) for k in want} == want
    assert launch.kernel.layout["math"] == "3xtf32"


@pytest.mark.parametrize("kwargs,needle", [
    (dict(math="tf32"), "math='tf32' is not allowed (allowed: fp32, 3xtf32)"),
    (dict(math="3xtf32", variant="no_vector"), "variant='no_vector' is not allowed"),
    (dict(math="3xtf32", m_b=32, n_b=32, m_t=1, n_t=1), "warps must tile 32 x 32 outputs as whole 16 x 8 MMA tiles")])
def test_bad_math_arguments_give_one_line_errors(kwargs, needle):
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(im2win.Im2winError) as err:
        im2win.prepare(x, w, **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_kernel_factory_refuses_a_tensor_core_layout_it_cannot_tile():
    with pytest.raises(KernelInputError, match="k_b must be a multiple of 8"):
        make_conv_kernel(16, 8, 4, 4, 1, math="3xtf32")
    with pytest.raises(KernelInputError, match="no tensor-core GEMM layout"):
        make_conv_kernel(8, 16, 8, 1, 4, math="3xtf32")      # 32 threads, but 8 filters: no 16-row MMA tile
    with pytest.raises(KernelInputError, match="math='fp64' is not allowed"):
        make_conv_kernel(8, 8, 4, 4, 4, math="fp64")
    # 3 warps stepping 8 k: 12 rows between a thread's staged loads, no packed layout (rows still build)
    with pytest.raises(KernelInputError, match="needs threads / k_b a power of two"):
        make_conv_kernel(48, 16, 8, 4, 2, math="3xtf32")
    assert make_conv_kernel(48, 16, 8, 4, 2, math="3xtf32", tc=TcOptions(fragments="rows")).threads == 96
    with pytest.raises(KernelInputError, match="chain_k=12 is not allowed"):
        make_conv_kernel(32, 32, 16, 4, 4, math="3xtf32", tc=TcOptions(chain_k=12))
    with pytest.raises(KernelInputError, match="fragments='cols' is not allowed"):
        make_conv_kernel(32, 32, 16, 4, 4, math="3xtf32", tc=TcOptions(fragments="cols"))
