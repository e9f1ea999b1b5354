"""F(5x5, 3x3), F(6x6, 3x3) and F(7x7, 3x3): the tiles' matrices, their own kernel builds
(gpu.kernels.winograd.megakernel.OWN_BUILD_TILES), their results under the CUDA simulator for both schedules, every megakernel
style and dispatch, and the two GEMM maths, on awkward shapes (H, W not multiples of the tile; C, K not multiples
of the k-step or the k-tile; N = 1), and the default tile per layer."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator nor a CUDA GPU is available", allow_module_level=True)

from gpu.kernels.winograd import megakernel as mk
from gpu.winograd import conv2d
from megasim.algorithms.winograd.lowering import WinogradConfig
from megasim.algorithms.winograd.winograd_math import direct_conv2d_reference, matrices, transform_flops

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]
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


@pytest.mark.parametrize("m", [5, 6, 7])
def test_matrices_compute_a_1d_correlation_exactly(m):
    bt, g, at = matrices(m)
    assert bt.shape == (m + 2, m + 2) and g.shape == (m + 2, 3) and at.shape == (m, m + 2)
    rng = np.random.default_rng(m)
    for _ in range(3):
        d, w = rng.standard_normal(m + 2), rng.standard_normal(3)
        y = at @ ((g @ w) * (bt @ d))
        np.testing.assert_allclose(y, [d[i:i + 3] @ w for i in range(m)], rtol=0, atol=1e-12)
    assert transform_flops(m)["itrans"] > transform_flops(4)["itrans"]


@pytest.mark.parametrize("math", ["fp32", "3xtf32"])
def test_big_tiles_run_on_their_own_builds(math):
    general = mk.kernels_for(math)
    own = {m: mk.kernels_for(math, m=m) for m in (5, 6, 7)}
    assert len({id(b.megakernel) for b in (*own.values(), general)}) == 4
    assert own[5].gemm_kernel is own[6].gemm_kernel is own[7].gemm_kernel is general.gemm_kernel   # one per math
    for m, build in ((7, own[7]), (6, own[6]), (5, own[5]), (4, general), (2, general)):
        c = WinogradConfig(m=m, gemm_math=math)
        assert mk.megakernel_for(np.zeros(mk.CTL_SIZE, np.int32), math, c) is build.megakernel
    assert mk.transform_kernels_for(7).itrans_kernel is not mk.transform_kernels_for(6).itrans_kernel
    assert mk.transform_kernels_for(6).itrans_kernel is not mk.transform_kernels_for(5).itrans_kernel
    assert mk.transform_kernels_for(5).itrans_kernel is not mk.transform_kernels_for(4).itrans_kernel
    assert mk.transform_kernels_for(2) is mk.transform_kernels_for(4)
    assert mk.transform_kernels_for(4).itrans_kernel is mk.itrans_kernel


@pytest.mark.parametrize("m", [5, 6, 7])
@pytest.mark.parametrize("schedule", ["nonfused", "fused"])
def test_big_tiles_match_the_reference(schedule, m):
    # 13 x 8 outputs: three tile rows at m = 5, 6 and two at m = 7 (the last partial), two tile columns (the last
    # partial); C = 5 (two k-steps of 4, the second partial), K = 11 (k-tiles of 8 and 3), N = 2.
    x, w = inputs(2, 5, 11, 13, 8, seed=60 + m)
    y = conv2d(x, w, schedule=schedule, config=cfg(m=m))
    assert y.shape == (2, 11, 13, 8)
    assert rel_err(y, direct_conv2d_reference(x, w)) <= TOL


@pytest.mark.parametrize("m, style, dispatch", [(6, "per_task", "blockidx"), (5, "persistent", "ticket"),
                                                (6, "persistent", "ready"), (5, "per_task", "ready"),
                                                (7, "per_task", "blockidx"), (7, "persistent", "ticket")])
def test_big_tiles_every_megakernel_style(m, style, dispatch):
    x, w = inputs(1, 3, 9, 7, 5, seed=62)
    y = conv2d(x, w, config=cfg(m=m, transform_pairs_per_thread=2), style=style, dispatch=dispatch)
    assert rel_err(y, direct_conv2d_reference(x, w)) <= TOL


@pytest.mark.parametrize("m", [5, 6, 7])
def test_big_tiles_with_the_tensor_core_gemm_and_padding_0(m):
    # the 3xTF32 math's own megakernel builds (at these tile sizes their GEMM tasks take the generic path)
    x, w = inputs(1, 4, 6, 9, 10, seed=63)
    y = conv2d(x, w, config=cfg(m=m, gemm_math="3xtf32"), padding=0)
    assert rel_err(y, direct_conv2d_reference(x, w, 0)) <= TOL


# --- the default tile per layer -------------------------------------------------------------------------------

def test_default_tile_has_the_fewest_gemm_multiplies():
    from megasim.algorithms.winograd.lowering import default_tile, gemm_multiplies
    from megasim.workloads import CATALOGUE, TABLE2_NAMES
    from megasim.workloads.problem import ConvProblem
    picks = {name: default_tile(CATALOGUE[name]) for name in TABLE2_NAMES}
    assert [n for n, m in picks.items() if m == 4] == ["resnet-4", "yolov3-3", "yolov3-4", "yolov3-5"]
    assert [n for n, m in picks.items() if m == 5] == ["resnet-3"]
    for name in TABLE2_NAMES:
        counts = {m: gemm_multiplies(CATALOGUE[name], m) for m in (4, 5, 6)}
        assert counts[picks[name]] == min(counts.values())
    r3 = CATALOGUE["resnet-3"]                                       # 14 x 14: F(6x6) ties F(4x4), F(5x5) wins
    assert gemm_multiplies(r3, 6) == gemm_multiplies(r3, 4) > gemm_multiplies(r3, 5)
    assert default_tile(ConvProblem(1, 1, 1, 16, 16)) == 4              # a tie of 4 and 6: the smaller tile
    assert gemm_multiplies(ConvProblem(2, 1, 1, 5, 7), 4) == 36 * 2 * 2 * 2
    assert default_tile(ConvProblem(1, 1, 1, 12, 12)) == 6 and default_tile(ConvProblem(1, 1, 1, 10, 10)) == 5


def test_conv2d_runs_the_layers_default_tile():
    from gpu import winograd as gw
    from megasim.workloads.problem import ConvProblem
    assert gw._config(None, None, "fused", None, ConvProblem(1, 3, 4, 12, 12)).m == 6
    assert gw._config(None, None, "fused", None, ConvProblem(1, 3, 4, 10, 9)).m == 5
    assert gw._config(None, None, "nonfused", None, ConvProblem(1, 3, 4, 8, 8)).m == 4
    assert gw._config(2, None, "fused", None, ConvProblem(1, 3, 4, 12, 12)).m == 2     # m given
    x, w = inputs(1, 3, 4, 12, 11, seed=64)                                           # default: F(6x6)
    assert rel_err(conv2d(x, w, schedule="nonfused"), direct_conv2d_reference(x, w)) <= TOL


def test_bench_takes_the_tile_from_config_or_the_layer():
    from experiments.benchmarks.winograd_bench import parse_args
    assert not parse_args(["--config", "pairs=4"]).tile_given
    assert parse_args(["--config", "pairs=4, tile=6"]).tile_given
    assert parse_args(["--config", "tile=6"]).fused_config.m == 6
