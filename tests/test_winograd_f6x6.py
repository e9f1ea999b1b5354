"""F(6x6, 3x3) (session 29): the tile's matrices, its own kernel builds (gpu.megakernel.OWN_BUILD_TILES) and
its results under the CUDA simulator for both schedules, every megakernel style and dispatch, and the two GEMM
maths, on awkward shapes (H, W not multiples of 6; C, K not multiples of the k-step or the k-tile; N = 1)."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator nor a CUDA GPU is available", allow_module_level=True)

from gpu import megakernel as mk
from gpu.winograd import conv2d
from megasim.lowering.winograd import WinogradConfig
from megasim.lowering.winograd_math import direct_conv2d_reference, matrices, transform_flops
from tests.gemm_harness import fast_simulator_barriers  # noqa: F401  (autouse: the simulator's barriers wait less)

pytestmark = pytest.mark.cudasim
TOL = 1e-4


def cfg(**kw):
    base = dict(m=6, tiles_per_group=3, transform_threads=32, gemm_k_tile=8, gemm_threads=32, gemm_k_step=4)
    base.update(kw)
    return WinogradConfig(**base)


def inputs(n, c, k, h, w, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, c, h, w)).astype(np.float32),
            rng.standard_normal((k, c, 3, 3)).astype(np.float32))


def rel_err(y, ref):
    return float(np.linalg.norm(np.asarray(y, np.float64) - ref) / np.linalg.norm(ref))


def test_matrices_compute_a_1d_correlation_exactly():
    bt, g, at = matrices(6)
    rng = np.random.default_rng(6)
    d, w = rng.standard_normal(8), rng.standard_normal(3)
    y = at @ ((g @ w) * (bt @ d))
    np.testing.assert_allclose(y, [d[i:i + 3] @ w for i in range(6)], rtol=0, atol=1e-12)
    assert transform_flops(6)["itrans"] > transform_flops(4)["itrans"]


@pytest.mark.parametrize("math", ["fp32", "3xtf32"])
def test_f6x6_runs_on_its_own_builds(math):
    general, own = mk.kernels_for(math), mk.kernels_for(math, m=6)
    assert own.megakernel is not general.megakernel
    assert own.gemm_kernel is general.gemm_kernel                  # one non-fused GEMM kernel per math
    for m, build in ((6, own), (4, general), (2, general)):
        c = WinogradConfig(m=m, gemm_math=math)
        assert mk.megakernel_for(np.zeros(mk.CTL_SIZE, np.int32), math, c) is build.megakernel
    assert mk.transform_kernels_for(6).itrans_kernel is not mk.transform_kernels_for(4).itrans_kernel
    assert mk.transform_kernels_for(2) is mk.transform_kernels_for(4)
    assert mk.transform_kernels_for(4).itrans_kernel is mk.itrans_kernel


@pytest.mark.parametrize("schedule", ["nonfused", "fused"])
def test_f6x6_matches_the_reference(schedule):
    # 13 x 8 outputs: three tile rows (the last with one row), two tile columns (the last with two);
    # C = 5 (two k-steps of 4, the second partial), K = 11 (k-tiles of 8 and 3), N = 2 in one group.
    x, w = inputs(2, 5, 11, 13, 8, seed=61)
    y = conv2d(x, w, schedule=schedule, config=cfg())
    assert y.shape == (2, 11, 13, 8)
    assert rel_err(y, direct_conv2d_reference(x, w)) <= TOL


@pytest.mark.parametrize("style, dispatch", [("per_task", "blockidx"), ("persistent", "ticket"),
                                             ("per_task", "ready")])
def test_f6x6_every_megakernel_style(style, dispatch):
    x, w = inputs(1, 3, 9, 7, 5, seed=62)
    y = conv2d(x, w, config=cfg(transform_pairs_per_thread=2), style=style, dispatch=dispatch)
    assert rel_err(y, direct_conv2d_reference(x, w)) <= TOL


def test_f6x6_with_the_tensor_core_gemm_and_padding_0():
    # the 3xTF32 math's F(6x6) megakernel build (at these tile sizes its GEMM tasks take the generic path)
    x, w = inputs(1, 4, 6, 9, 10, seed=63)
    y = conv2d(x, w, config=cfg(gemm_math="3xtf32"), padding=0)
    assert rel_err(y, direct_conv2d_reference(x, w, 0)) <= TOL


# --- the default tile per layer -------------------------------------------------------------------------------

def test_default_tile_is_6_where_its_gemm_has_fewer_multiplies():
    from megasim.lowering.winograd import default_tile, gemm_multiplies
    from megasim.workloads import CATALOGUE, TABLE2_NAMES
    picks = {name: default_tile(CATALOGUE[name]) for name in TABLE2_NAMES}
    assert [n for n, m in picks.items() if m == 4] == ["resnet-3", "resnet-4", "yolov3-3", "yolov3-4", "yolov3-5"]
    for name in TABLE2_NAMES:
        p = CATALOGUE[name]
        assert (gemm_multiplies(p, 6) < gemm_multiplies(p, 4)) == (picks[name] == 6)
    assert gemm_multiplies(CATALOGUE["resnet-3"], 6) == gemm_multiplies(CATALOGUE["resnet-3"], 4)   # 14 x 14: a tie
    from megasim.workloads.problem import ConvProblem
    assert gemm_multiplies(ConvProblem(2, 1, 1, 5, 7), 4) == 36 * 2 * 2 * 2 and default_tile(ConvProblem(1, 1, 1, 12, 12)) == 6


def test_conv2d_runs_the_layers_default_tile():
    from gpu import winograd as gw
    from megasim.workloads.problem import ConvProblem
    assert gw._config(None, None, "fused", None, ConvProblem(1, 3, 4, 12, 12)).m == 6
    assert gw._config(None, None, "nonfused", None, ConvProblem(1, 3, 4, 8, 8)).m == 4
    assert gw._config(2, None, "fused", None, ConvProblem(1, 3, 4, 12, 12)).m == 2     # m given
    x, w = inputs(1, 3, 4, 12, 11, seed=64)                                           # default: F(6x6)
    assert rel_err(conv2d(x, w, schedule="nonfused"), direct_conv2d_reference(x, w)) <= TOL


def test_bench_takes_the_tile_from_config_or_the_layer():
    from experiments.winograd_bench import parse_args
    assert not parse_args(["--config", "pairs=4"]).tile_given
    assert parse_args(["--config", "pairs=4, tile=6"]).tile_given
    assert parse_args(["--config", "tile=6"]).fused_config.m == 6
