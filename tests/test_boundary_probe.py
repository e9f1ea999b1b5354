"""gpu.calibrate.boundary: the gaps it reads off queued times, and its kernels' stores (under the CUDA simulator)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.calibrate.boundary import alternating_gap_ns, busy_kernel, busy_kernel_b, gap_ns


def test_the_gap_is_what_a_pipeline_of_alike_kernels_adds_per_kernel():
    q, body, boundary = 3600.0, 10_000.0, 1400.0
    one = q + body
    for n in (2, 4, 7):
        many = q + n * body + (n - 1) * boundary
        assert gap_ns(one, many, n, q) == pytest.approx(boundary)


def test_the_alternating_gap_separates_two_bodies():
    q, a, b, boundary = 3500.0, 11_000.0, 25_000.0, 1500.0
    abab = q + 2 * a + 2 * b + 3 * boundary
    assert alternating_gap_ns(q + a, q + b, abab, q) == pytest.approx(boundary)


@pytest.mark.cudasim
@pytest.mark.parametrize("kernel", [busy_kernel, busy_kernel_b])
def test_each_thread_stores_its_fma_chain_at_its_places(kernel):
    from numba import cuda
    grid, iters, writes = 3, 7, 2
    out = cuda.to_device(np.full(grid * 128 * writes, np.nan, np.float32))
    kernel[grid, 128](out, iters, writes)
    got = out.copy_to_host()
    want = np.empty(grid * 128 * writes)
    for block in range(grid):
        for t in range(128):
            x = float(t)
            for _ in range(iters):
                x = x * 0.9999999 + 1e-7
            for j in range(writes):
                want[block * 128 * writes + t + j * 128] = x
    np.testing.assert_allclose(got, want, rtol=1e-6)
