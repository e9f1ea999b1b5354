"""The GEMM staging experiments of issue #3 (gpu.kernels.winograd.gemm_vec.make_gemm_staged) against a float64 bmm.

Runs on Numba's CUDA simulator (tests/conftest.py), or on the GPU with NUMBA_ENABLE_CUDASIM=0. Variant "v"
(128-bit global loads, scalar fallback) is fully checked here. Variants "a" (cp.async ring for B) and "c"
(cp.async ring for A and B, A untransposed) run here with gpu.kernels.common.async_copy's synchronous stand-in:
their indices, zero fill, 4-byte fallbacks and ring rotation are checked, not their asynchronous
ordering (that needs the GPU). Shapes are tiny and awkward:
C and K not multiples of 4 or of the tile, fewer rows than T, more k-steps than ring slots and fewer.
"""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) nor a CUDA GPU is available",
                allow_module_level=True)

from gpu.kernels.winograd import gemm_vec
from gpu.kernels.winograd.gemm_vec import make_gemm_staged
from tests.gemm_harness import rel_err, run_gemm

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]


# (layout T, GK, KS, NT, SK), (batch, tiles, C, K)
CASES = [
    ((16, 16, 8, 8, 2), (2, 11, 13, 9)),      # rows < T, C and K odd: both scalar fallbacks
    ((16, 16, 8, 8, 2), (1, 9, 20, 20)),      # C, K % 4 == 0: vector paths; k-tile 2 is 4 columns wide
    ((16, 16, 8, 8, 2), (1, 7, 12, 7)),       # vector A, scalar B
    ((16, 16, 8, 8, 2), (1, 17, 7, 24)),      # scalar A, vector B; 2 row groups, one stage only
    ((16, 16, 8, 16, 4), (1, 5, 29, 18)),     # 4-way k-split
    ((8, 16, 4, 4, 2), (1, 6, 21, 7)),        # KS = 4: one quad per A row
    ((8, 64, 4, 16, 2), (1, 5, 10, 52)),      # fewer A quads (8) than threads (16): guarded
    ((16, 16, 16, 8, 2), (1, 10, 36, 12)),    # KS = 16
]


@pytest.mark.parametrize("layout, shape", CASES)
def test_v_variant_matches_float64(layout, shape):
    fn = make_gemm_staged(*layout, staging="v")
    M, ref, _, _ = run_gemm(fn, layout, *shape)
    assert not np.isnan(M).any()
    assert rel_err(M, ref) <= 1e-5


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("layout, shape", [CASES[0], CASES[1], CASES[4], CASES[7],
                                           ((16, 16, 8, 8, 2), (1, 6, 44, 16))])   # 6 k-steps
def test_a_variant_indices_match_float64(layout, shape, stages):
    fn = make_gemm_staged(*layout, staging="a", stages=stages)
    M, ref, _, _ = run_gemm(fn, layout, *shape)
    assert not np.isnan(M).any()
    assert rel_err(M, ref) <= 1e-5


@pytest.mark.parametrize("staging, stages, unroll", [("v", 2, 2), ("a", 4, 4), ("a", 3, 2)])
@pytest.mark.parametrize("layout, shape", [
    ((16, 16, 8, 8, 2), (2, 11, 13, 9)),      # both scalar fallbacks; 4 k-steps per set: 2 or 1 unrolled passes
    ((16, 16, 8, 8, 2), (1, 6, 44, 16)),      # 6 stages, the last partial (zero-filled k rows)
    ((16, 16, 16, 8, 2), (1, 10, 36, 12)),    # KS = 16: 8 k-steps per set
])
def test_unrolled_k_steps_match_float64(layout, shape, staging, stages, unroll):
    fn = make_gemm_staged(*layout, staging=staging, stages=stages, unroll=unroll)
    M, ref, _, _ = run_gemm(fn, layout, *shape)
    assert not np.isnan(M).any()
    assert rel_err(M, ref) <= 1e-5


def test_unroll_8_writes_out_a_whole_stage():
    layout = (16, 16, 16, 8, 2)                # KS / SK = 8 k-steps per set
    M, ref, _, _ = run_gemm(make_gemm_staged(*layout, staging="a", stages=4, unroll=8), layout, 1, 10, 36, 12)
    assert rel_err(M, ref) <= 1e-5


@pytest.mark.parametrize("unroll, staging", [(3, "a"), (8, "a"), (2, "c")])
def test_unroll_that_cannot_tile_is_refused(unroll, staging):
    # (8 does not divide KS / SK = 4; "c" writes its stage out already)
    with pytest.raises(ValueError, match=f"unroll={unroll}"):
        make_gemm_staged(16, 16, 8, 8, 2, staging=staging, stages=2, unroll=unroll)


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("layout, shape", [
    ((16, 16, 8, 8, 2), (2, 11, 13, 9)),      # both scalar fallbacks (4-byte copies)
    ((16, 16, 8, 8, 2), (1, 9, 20, 20)),      # 16-byte copies, zero-filled rows and k rows
    ((16, 16, 8, 8, 2), (1, 17, 7, 24)),      # scalar A, vector B, one stage only
    ((16, 16, 8, 8, 2), (1, 6, 44, 16)),      # 6 k-steps through the ring
    ((16, 16, 16, 16, 4), (1, 5, 29, 18)),    # 4-way k-split: set q takes k quad q
    ((16, 16, 16, 8, 2), (1, 10, 36, 12)),    # KS = 16: 2 k quads per set
    ((8, 128, 8, 32, 2), (1, 5, 12, 132)),    # fewer A quads (16) than threads (32): guarded
])
def test_c_variant_indices_match_float64(layout, shape, stages):
    fn = make_gemm_staged(*layout, staging="c", stages=stages)
    M, ref, _, _ = run_gemm(fn, layout, *shape)
    assert not np.isnan(M).any()
    assert rel_err(M, ref) <= 1e-5


def test_staged_shared_bytes():
    prod = gemm_vec.make_gemm_vec(64, 64, 8, 128, 2)
    assert make_gemm_staged(64, 64, 8, 128, 2, "v").shared_bytes == prod.shared_bytes
    assert make_gemm_staged(64, 64, 16, 128, 2, "a", 3).shared_bytes == 4 * (2 * 16 * 68 + 3 * 16 * 64)
    assert make_gemm_staged(64, 64, 16, 128, 2, "c", 3).shared_bytes == 4 * 3 * (64 * 20 + 16 * 64)


def test_staged_rejects_bad_layouts():
    with pytest.raises(ValueError, match="KS a multiple of SK and 4"):
        make_gemm_staged(8, 8, 2, 2, 2, "v")
    with pytest.raises(ValueError, match="and of 4 \\* SK"):
        make_gemm_staged(16, 16, 8, 16, 4, "c")
    with pytest.raises(ValueError, match="staging"):
        make_gemm_staged(64, 64, 8, 128, 2, "x")
    with pytest.raises(ValueError, match="stages"):
        make_gemm_staged(64, 64, 8, 128, 2, "a", 5)


@pytest.mark.parametrize("layout, shape, staging, stages, unroll", [
    (layout, shape, staging, stages, unroll)
    for layout, shape in (CASES[0], CASES[1], CASES[3], CASES[4], CASES[7])
    for staging, stages, unroll in (("v", 2, 1), ("a", 4, 1), ("a", 3, 2), ("c", 3, 1))
    if staging != "c" or layout[2] % (4 * layout[4]) == 0])     # ("c" needs KS a multiple of 4 * SK)
def test_32_bit_index_arithmetic_matches_float64(layout, shape, staging, stages, unroll):
    """index_bits=32 (the index arithmetic in 32 bits) computes the same indices: every edge case of the 64-bit build."""
    fn = make_gemm_staged(*layout, staging=staging, stages=stages, unroll=unroll, index_bits=32)
    M, ref, _, _ = run_gemm(fn, layout, *shape)
    assert not np.isnan(M).any()
    assert rel_err(M, ref) <= 1e-5


def test_index_bits_other_than_32_or_64_are_refused():
    with pytest.raises(ValueError, match="index_bits=16: want 32 or 64"):
        make_gemm_staged(16, 16, 8, 8, 2, staging="a", stages=2, index_bits=16)


@pytest.mark.parametrize("staging, stages, unroll", [("v", 2, 1), ("a", 4, 2), ("a", 3, 1)])
@pytest.mark.parametrize("layout, shape", [
    ((16, 32, 8, 8, 2), (2, 11, 13, 9)),      # 8 x 16 per thread; both scalar fallbacks, rows < T, width < GK
    ((8, 32, 8, 4, 2), (1, 6, 44, 36)),       # 6 stages, the last partial; a second k-tile 4 columns wide
    ((16, 32, 16, 4, 1), (1, 21, 36, 40)),    # no k-split; 2 row groups
])
def test_16_thread_columns_match_float64(layout, shape, staging, stages, unroll):
    fn = make_gemm_staged(*layout, staging=staging, stages=stages, unroll=unroll, thread_cols=16)
    M, ref, _, _ = run_gemm(fn, layout, *shape)
    assert not np.isnan(M).any()
    assert rel_err(M, ref) <= 1e-5


@pytest.mark.parametrize("kwargs, match", [
    (dict(thread_cols=12), "thread_cols=12"),
    (dict(thread_cols=16, staging="c"), "thread_cols=16"),
])
def test_thread_cols_rejects_what_it_cannot_build(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_gemm_staged(16, 32, 8, 8, 2, **kwargs)
