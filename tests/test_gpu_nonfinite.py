"""Non-finite inputs and oversized problems on the GPU ops (under Numba's CUDA simulator in CI).

A NaN in x spreads as the algorithm spreads it, and nothing hangs: a direct or ECR / PECR convolution
gives NaN exactly where a window holds the NaN (NaN is not zero, so ECR stores and multiplies it); a
Winograd convolution gives NaN in every output of each output tile whose input tile holds it (the input
transform mixes the whole (m+2) x (m+2) tile), in every filter, and the float64 result elsewhere.
A problem whose tensors exceed the kernels' 32-bit indices is refused before anything is allocated.
"""

import numpy as np
import pytest

from megasim.errors import MegasimError
from gpu import sparse as sp
from gpu.winograd import conv2d, reference

RNG = np.random.default_rng(7)


def _inputs(n=1, c=3, k=4, h=9, w=11):
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, 3, 3)).astype(np.float32)
    return x, wt


@pytest.mark.parametrize("m", [2, 4])
def test_a_nan_spreads_to_its_winograd_tiles_only(m):
    x, w = _inputs()
    y_clean = reference(x, w, padding=1)
    x[0, 1, 4, 6] = np.nan
    y = conv2d(x, w, padding=1, m=m)
    bad = np.isnan(y)
    # The direct convolution's NaNs: the outputs whose 3x3 window (padding 1) holds (4, 6).
    direct = np.zeros_like(bad)
    direct[0, :, 3:6, 5:8] = True
    assert bad[direct].all()
    # At most the output tiles (m x m) whose (m+2) x (m+2) input tile holds the NaN; every filter.
    tiles = np.zeros_like(bad)
    for ty in range(0, y.shape[2], m):
        for tx in range(0, y.shape[3], m):
            if ty - 1 <= 4 <= ty + m and tx - 1 <= 6 <= tx + m:     # its input rows ty-1 .. ty+m (padding 1)
                tiles[0, :, ty:ty + m, tx:tx + m] = True
    assert not bad[~tiles].any()
    assert np.allclose(y[~bad], y_clean[~bad], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["ecr", "direct"])
def test_a_nan_spreads_as_in_the_direct_convolution_on_the_sparse_kernels(op):
    x, w = _inputs()
    x[x < 0] = 0.0                          # a sparse map
    x[0, 2, 5, 3] = np.nan
    y = getattr(sp, f"{op}_conv2d")(x, w, padding=1)
    ref = sp.reference_conv2d(x, w, padding=1)
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    fin = ~np.isnan(ref)
    assert np.allclose(y[fin], ref[fin], rtol=1e-4, atol=1e-4)


def test_an_inf_gives_inf_or_nan_where_the_reference_does():
    x, w = _inputs()
    x[x < 0] = 0.0
    x[0, 0, 2, 2] = np.inf
    y = sp.pecr_conv2d_relu_maxpool(x, w, padding=1)
    ref = sp.reference_conv_relu_maxpool(x, w, padding=1)
    assert np.array_equal(np.isfinite(y), np.isfinite(ref))


@pytest.mark.parametrize("call", [
    lambda x, w: conv2d(x, w, padding=10 ** 6),
    lambda x, w: sp.ecr_conv2d(x, w, padding=10 ** 6),
    lambda x, w: sp.prepare("pecr", x, w, padding=10 ** 6),
], ids=["winograd", "ecr", "pecr"])
def test_a_problem_beyond_32_bit_indices_is_refused_before_allocating(call):
    x, w = _inputs()
    with pytest.raises(MegasimError, match="2\\*\\*31 - 1"):
        call(x, w)
