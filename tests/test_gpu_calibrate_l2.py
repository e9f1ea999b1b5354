"""gpu.calibrate.measure's L2 capacity probe: the estimator recovers a known capacity from a synthetic
chase sweep and refuses sweeps it cannot read; the read kernel covers every element (simulator)."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
if not numba.config.ENABLE_CUDASIM:
    pytest.skip("runs on the CUDA simulator only (on a GPU, megasim calibrate)", allow_module_level=True)

from gpu.calibrate.measure import _read4, _read_vec4, l2_capacity_from_chase  # noqa: E402

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
    threads' starting points)."""
    a = np.random.default_rng(0).random(1000).astype(np.float32)          # not a multiple of 4 x grid
    out = np.zeros(2 * 64, np.float32)
    _read4[2, 64](a, 3, out, rotate)
    assert out.sum() == pytest.approx(3 * a.astype(np.float64).sum(), rel=1e-5)


@pytest.mark.parametrize("kernel, width", [(_read4, 1), (_read_vec4, 4)])
def test_rotation_moves_a_round_by_whole_blocks(kernel, width):
    """One element (or float4 unit) per thread, 3 blocks of 32 threads, rotation 1 block: in round r
    thread t reads unit (t + 32 r) mod 96, so over 2 rounds its sum is units t and t + 32 (a rotation
    counted in threads, t and t + 1, or none, t twice, gives other sums)."""
    a = np.random.default_rng(2).random(96 * width).astype(np.float32)
    units = a.reshape(96, width).astype(np.float64).sum(axis=1)
    out = np.zeros(96, np.float32)
    kernel[3, 32](a, 2, out, 1)
    t = np.arange(96)
    assert np.allclose(out, units[t] + units[(t + 32) % 96], rtol=1e-6)
    kernel[3, 32](a, 2, out, 0)
    assert np.allclose(out, 2 * units, rtol=1e-6)


@pytest.mark.parametrize("rotate", [0, 37])
def test_read_vec4_reads_every_element_once_per_round(rotate):
    """The L2 probe's kernel: 4 floats per load, a tail of units shorter than 4 x the grid."""
    a = np.random.default_rng(1).random(4 * 1000).astype(np.float32)      # 1000 units, grid of 128 threads:
    out = np.zeros(2 * 64, np.float32)                                      # the 4-load step and the tail
    _read_vec4[2, 64](a, 2, out, rotate)
    assert out.sum() == pytest.approx(2 * a.astype(np.float64).sum(), rel=1e-5)
