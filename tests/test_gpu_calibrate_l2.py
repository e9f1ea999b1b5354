"""gpu.calibrate's L2 capacity probe: the estimator recovers a known capacity from a synthetic
chase sweep and refuses sweeps it cannot read; the read kernel covers every element (simulator)."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
if not numba.config.ENABLE_CUDASIM:
    pytest.skip("runs on the CUDA simulator only (on a GPU, megasim calibrate)", allow_module_level=True)

from gpu.calibrate import _read4, _read_vec4, l2_capacity_from_chase  # noqa: E402

pytestmark = [pytest.mark.cudasim]
MIB = 2 ** 20


def sweep(capacity_mib: float, l2_ns: float, dram_ns: float, sizes=(8, 16, 24, 32, 48, 64, 96, 128, 256)):
    """ns per load of a random chase through S MiB of which the L2 keeps capacity_mib."""
    return [{"mib": float(s), "ns_per_load": l2_ns + (dram_ns - l2_ns) * max(0.0, 1.0 - capacity_mib / s)}
            for s in sizes]


def test_capacity_of_a_synthetic_sweep():
    assert l2_capacity_from_chase(sweep(33.0, 155.0, 345.0), 345.0) == pytest.approx(33.0 * MIB)
    assert l2_capacity_from_chase(sweep(20.0, 150.0, 600.0), 600.0) == pytest.approx(20.0 * MIB)


def test_refuses_a_sweep_without_a_step_or_a_dram_latency_below_l2():
    with pytest.raises(ValueError, match="no size that partly fits"):
        l2_capacity_from_chase(sweep(1000.0, 155.0, 345.0), 345.0)        # every size fits
    with pytest.raises(ValueError, match="must exceed"):
        l2_capacity_from_chase(sweep(33.0, 155.0, 345.0), 150.0)


@pytest.mark.parametrize("rotate", [0, 1, 37])
def test_read4_reads_every_element_including_the_tail(rotate):
    """Each of the 3 rounds reads every element once, whatever the rotation (a permutation of the
    threads' starting points); with a rotation, a thread's rounds read different elements."""
    a = np.random.default_rng(0).random(1000).astype(np.float32)          # not a multiple of 4 x grid
    out = np.zeros(2 * 64, np.float32)
    _read4[2, 64](a, 3, out, rotate)
    assert out.sum() == pytest.approx(3 * a.astype(np.float64).sum(), rel=1e-5)
    one = np.zeros(2 * 64, np.float32)
    _read4[2, 64](a, 1, one, rotate)
    if rotate % 2:      # rounds alternate between the two blocks' halves of the grid
        assert not np.allclose(out, 3 * one)
    else:
        assert np.allclose(out, 3 * one)


@pytest.mark.parametrize("rotate", [0, 37])
def test_read_vec4_reads_every_element_once_per_round(rotate):
    """The L2 probe's kernel: 4 floats per load, a tail of units shorter than 4 x the grid."""
    a = np.random.default_rng(1).random(4 * 300).astype(np.float32)       # 300 units, grid of 128 threads
    out = np.zeros(2 * 64, np.float32)
    _read_vec4[2, 64](a, 2, out, rotate)
    assert out.sum() == pytest.approx(2 * a.astype(np.float64).sum(), rel=1e-5)
