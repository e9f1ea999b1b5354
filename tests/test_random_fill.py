"""Device-drawn standard-normal inputs (gpu.kernels.common.random_fill) under Numba's CUDA simulator:
the device's values are the host reference's, whatever the grid, fresh for each seed, and normal."""

import numpy as np
import pytest

from gpu.kernels.common.random_fill import MAX_ELEMENTS, device_normal, normal_values


@pytest.mark.parametrize("shape", [(1,), (3, 5, 7), (2, 3, 17, 13)])
def test_device_values_are_the_reference_values(shape):
    x = device_normal(shape, 7).copy_to_host()
    assert x.dtype == np.float32 and x.shape == shape
    np.testing.assert_allclose(x, normal_values(shape, 7), rtol=1e-6, atol=1e-6)


def test_an_element_depends_on_its_index_and_seed_alone():
    long = normal_values((5000,), 3)
    assert np.array_equal(normal_values((10, 17), 3).ravel(), long[:170])
    assert not np.allclose(normal_values((5000,), 4), long)


def test_values_are_standard_normal():
    x = normal_values((400_000,), 12)
    assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.01 and np.count_nonzero(x) == x.size
    assert abs(np.mean(np.abs(x) < 1.0) - 0.6827) < 0.005          # the mass within one sigma
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.01             # neighbours uncorrelated


@pytest.mark.parametrize("seed", [-1, 2 ** 32, 1.5, True])
def test_bad_seed_is_refused_in_one_line(seed):
    with pytest.raises(ValueError, match="seed="):
        device_normal((4,), seed)


def test_too_many_elements_are_refused():
    with pytest.raises(ValueError, match="at most 2\\*\\*31"):
        device_normal((MAX_ELEMENTS + 1,), 1)


@pytest.mark.parametrize("shape", [(3, -1), [4, 4], (2.0,), (True,), (2 ** 40, 2 ** 40), (2 ** 31, 2 ** 31, 4)])
def test_bad_shape_is_refused_in_one_line(shape):
    with pytest.raises(ValueError, match="shape="):
        device_normal(shape, 1)
