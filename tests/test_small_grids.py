"""intended_small_grids silences Numba's low-occupancy warning and no other, as a block or a decorator."""
import warnings

import pytest

from gpu.runtime.small_grids import PERFORMANCE_WARNINGS, intended_small_grids


@pytest.mark.parametrize("category", PERFORMANCE_WARNINGS)
def test_performance_warning_silenced_inside_only(category):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with intended_small_grids():
            warnings.warn("Grid size 1 will likely result in GPU under-utilization", category)
            warnings.warn("something else", UserWarning)
        warnings.warn("Grid size 1 will likely result in GPU under-utilization", category)
    assert [w.category for w in seen] == [UserWarning, category]


def test_as_decorator():
    @intended_small_grids()
    def launch():
        warnings.warn("Grid size 2", PERFORMANCE_WARNINGS[-1])
        return 3

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert launch() == 3
    assert seen == []
