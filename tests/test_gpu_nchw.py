"""The NCHW Winograd transforms (gpu.kernels.winograd.nchw): the non-fused pipeline run on NCHW tensors
with layout="NCHW" matches the float64 reference and the NHWC pipeline on the same data (bit for bit
under the simulator: the same arithmetic in the same order; on a GPU within 1e-6, as ptxas contracts
multiply-adds per kernel), for every tile, awkward shapes (sizes not multiples of the tile,
of the strip or of the channel chunk) and paddings 0-2; launches the NCHW kernels cannot run are refused.

Runs on Numba's CUDA simulator (tests/conftest.py) or, with NUMBA_ENABLE_CUDASIM=0, on the GPU.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from megasim.algorithms.winograd.plugin import WinogradParams
from megasim.plan import Plan, build
from megasim.schedule import Schedule
from megasim.workloads.problem import ConvProblem

numba = pytest.importorskip("numba")
from numba import cuda  # noqa: E402

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator nor a CUDA GPU is available", allow_module_level=True)

from gpu.errors import KernelInputError  # noqa: E402
from gpu.kernels.winograd import nchw  # noqa: E402
from gpu.runtime.execute import PreparedRun  # noqa: E402
from gpu.winograd import reference  # noqa: E402

pytestmark = pytest.mark.cudasim


def _params(m: int) -> WinogradParams:
    return WinogradParams(tile=m, tiles_per_group=2, gemm_k_tile=8, transform_threads=32, gemm_threads=32)


def _run(problem: ConvProblem, m: int, layout: str, x_nchw: np.ndarray, w: np.ndarray) -> np.ndarray:
    graph, schedule, plan = build(problem, Plan("nonfused", algorithm="winograd", params=_params(m)))
    run = PreparedRun(problem, plan, graph, schedule, options={"layout": layout})
    x = x_nchw if layout == "NCHW" else np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1))
    ws = run.workspace(cuda.to_device(x), cuda.to_device(w))
    run.run(ws)
    run.check()
    y = run.output(ws).copy_to_host()
    return y if layout == "NCHW" else y.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("m,problem", [
    (2, ConvProblem(2, 3, 5, 7, 9, padding=1)),
    (4, ConvProblem(1, 5, 33, 9, 11, padding=0)),
    (5, ConvProblem(1, 1, 3, 12, 8, padding=2)),
    (6, ConvProblem(1, 34, 2, 8, 9, padding=1)),
    (7, ConvProblem(2, 2, 4, 10, 13, padding=1)),
])
def test_nchw_pipeline_matches_reference_and_nhwc(m, problem):
    rng = np.random.default_rng([m, problem.c, problem.k])
    x = rng.standard_normal((problem.n, problem.c, problem.h, problem.w), dtype=np.float32)
    w = rng.standard_normal((problem.k, problem.c, 3, 3), dtype=np.float32)
    y = _run(problem, m, "NCHW", x, w)
    ref = reference(x, w, padding=problem.padding)
    assert y.shape == ref.shape
    err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    assert err < 1e-4, err
    y_nhwc = _run(problem, m, "NHWC", x, w)
    if numba.config.ENABLE_CUDASIM:      # the same operations in the same order: equal bit for bit
        np.testing.assert_array_equal(y, y_nhwc)
    else:                                # the compiler contracts multiply-adds differently per kernel
        assert np.linalg.norm(y - y_nhwc) / np.linalg.norm(ref) < 1e-6


def test_geometry_fits_the_block_and_pads_planes_odd():
    for c in (1, 3, 17, 32, 513):
        for tiles_x in (1, 2, 5, 22, 40, 300):
            for m in (2, 4, 5, 6, 7):
                chunk, tx, cols, plane = nchw.nchw_geometry(c, m, tiles_x)
                assert chunk * tx <= nchw.NCHW_THREADS and plane % 2 == 1 and cols == tx * m + 2
                assert chunk >= min(c, nchw.MAX_CHUNK) or tx >= tiles_x
                p = ConvProblem(1, c, c, tiles_x * m, tiles_x * m)
                assert nchw.itrans_launch(p, m)[2] <= 48 * 1024 and nchw.otrans_launch(p, m)[2] <= 48 * 1024


def test_nchw_refuses_the_megakernel_and_a_split_kind():
    problem = ConvProblem(1, 3, 4, 6, 6, padding=1)
    graph, schedule, plan = build(problem, Plan("fused", algorithm="winograd", params=_params(2)))
    with pytest.raises(KernelInputError, match="non-fused kernels only"):
        PreparedRun(problem, plan, graph, schedule, options={"layout": "NCHW"})
    graph, schedule, plan = build(problem, Plan("nonfused", algorithm="winograd", params=_params(2)))
    itrans = next(i for i, l in enumerate(schedule.launches) if graph.kind_names[graph.kind[l.order[0]]] == "itrans")
    launch = schedule.launches[itrans]
    half = len(launch.order) // 2
    halves = (replace(launch, order=launch.order[:half]), replace(launch, name="itrans_2", order=launch.order[half:]))
    split = Schedule(schedule.name, schedule.launches[:itrans] + halves + schedule.launches[itrans + 1:], schedule.params)
    with pytest.raises(KernelInputError, match="all of a kind in one launch"):
        PreparedRun(problem, plan, graph, split, check=False, options={"layout": "NCHW"})
    with pytest.raises(KernelInputError, match="layout='NHCW' is not allowed"):
        PreparedRun(problem, plan, graph, schedule, options={"layout": "NHCW"})
