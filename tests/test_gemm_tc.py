"""The tensor-core GEMM task (gpu.kernels.winograd.gemm_tc, 3xTF32) and its intrinsics (gpu.kernels.common.tensor_core) against float64.

Runs on Numba's CUDA simulator (tests/conftest.py), or on the GPU with NUMBA_ENABLE_CUDASIM=0. Under the
simulator the MMA is gpu.kernels.common.tensor_core's warp collective (the fragment layouts of the PTX ISA, the TF32
inputs, a float64 product) and the cp.async copies are synchronous: the fragment indexing, the split,
the edges and the ring rotation are checked here; the asynchronous ordering only on the GPU.

The error bound 1e-5 is the point: a single TF32 product (no split) gives ~3e-4 on these inputs
(checked below), so a kernel that lost the small halves fails.
"""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) nor a CUDA GPU is available",
                allow_module_level=True)

from gpu.kernels.winograd import gemm_tc, gemm_vec, device as winograd_device  # noqa: E402
from gpu.kernels.winograd.gemm_tc import make_gemm_tc, warp_grid  # noqa: E402
from gpu.kernels.common.tensor_core import py_split_tf32, py_split_tf32_trunc, tf32_round_bits  # noqa: E402
from tests.gemm_harness import P_C, P_K, P_KTILES, P_TILES, rel_err, run_gemm  # noqa: E402

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]


def _f32(bits: int) -> float:
    return float(np.uint32(bits).view(np.float32))


def test_tf32_rounding_is_round_to_nearest_ties_away():
    one = 0x3F800000
    assert tf32_round_bits(np.float32(1.0)) == one
    assert tf32_round_bits(np.uint32(one + 0x0FFF).view(np.float32)) == one            # below half: down
    assert tf32_round_bits(np.uint32(one + 0x1000).view(np.float32)) == one + 0x2000   # tie: away
    assert tf32_round_bits(np.uint32(one + 0x3000).view(np.float32)) == one + 0x4000   # tie, odd: away
    neg = 0xBF800000 + 0x1000                                                           # -(1 + half ulp)
    assert tf32_round_bits(np.uint32(neg).view(np.float32)) == 0xBF800000 + 0x2000      # away from zero


def test_split_is_exact_to_fp32_precision():
    x = np.random.default_rng(7).standard_normal(1000).astype(np.float32) * np.float32(1e3)
    for v in x:
        big, small = py_split_tf32(v)
        assert int(big) & 0x1FFF == 0 and int(small) & 0x1FFF == 0
        assert abs(float(v) - _f32(big) - _f32(small)) <= 2.0 ** -21 * abs(float(v))
        assert abs(float(v) - _f32(big)) > 0 or float(v) == _f32(big)


def test_truncating_split_is_exact_to_fp32_precision():
    x = np.random.default_rng(8).standard_normal(1000).astype(np.float32)
    for v in x:
        big, small = py_split_tf32_trunc(v)
        assert int(big) & 0x1FFF == 0
        # what the MMA reads of small: its 19 high bits
        assert abs(float(v) - _f32(big) - _f32(int(small) & 0xFFFFE000)) <= 2.0 ** -20 * abs(float(v))


# (T, GK, KS, NT, stages), (batch, tiles, C, K), extra (idle) threads in the block
CASES = [
    ((32, 16, 8, 64, 2), (1, 37, 13, 21), 32),   # C, K odd: 4-byte copies; 2 row groups, the 2nd partial
    ((32, 16, 8, 64, 3), (2, 20, 20, 36), 0),    # 16-byte copies; 3 k-steps through a 3-slot ring; K tail
    ((16, 16, 8, 32, 2), (1, 9, 12, 7), 0),      # one warp; vector A, scalar B; 7 of 16 columns
]


@pytest.mark.parametrize("layout, shape, extra, split", [c + ("rna",) for c in CASES] + [c + ("trunc",) for c in CASES])
def test_tc_gemm_matches_float64(layout, shape, extra, split):
    fn = make_gemm_tc(*layout, split=split)
    M, ref, V, U = run_gemm(fn, layout, *shape, extra_threads=extra)
    assert not np.isnan(M).any()
    assert rel_err(M, ref) <= 1e-5
    # the bound bites: TF32 inputs without the small halves miss it
    tf = np.vectorize(lambda v: _f32(tf32_round_bits(v)))
    one_pass = np.einsum("etc,eck->etk", tf(V), tf(U))
    assert rel_err(one_pass, ref) > 1e-4


def test_tc_layouts():
    assert warp_grid(64, 64, 128) == (2, 2)
    assert warp_grid(32, 64, 128) == (1, 4)     # 32 x 16 warp tiles (ties go to fewer warp rows)
    assert warp_grid(128, 64, 256) == (4, 2)
    assert make_gemm_tc(64, 64, 16, 128, 3).shared_bytes == 4 * 3 * (64 * 20 + 16 * 72)
    assert make_gemm_tc(64, 64, 16, 128, 3).layout["math"] == "3xtf32"
    with pytest.raises(ValueError, match="no tensor-core GEMM layout for T=8"):
        make_gemm_tc(8, 64, 16, 128)
    with pytest.raises(ValueError, match="KS=12"):
        make_gemm_tc(64, 64, 12, 128)
    with pytest.raises(ValueError, match="split='rz'"):
        make_gemm_tc(64, 64, 16, 128, 3, "rz")
    with pytest.raises(ValueError, match="stages=5"):
        make_gemm_tc(64, 64, 16, 128, 5)


def test_parameter_indices_match_the_executor():
    wd = (winograd_device.P_C, winograd_device.P_K, winograd_device.P_TILES, winograd_device.P_KTILES)
    assert (gemm_tc._P_C, gemm_tc._P_K, gemm_tc._P_TILES, gemm_tc._P_KTILES) == wd
    assert (gemm_vec._P_C, gemm_vec._P_K, gemm_vec._P_TILES, gemm_vec._P_KTILES) == wd
    assert (P_C, P_K, P_TILES, P_KTILES) == wd
