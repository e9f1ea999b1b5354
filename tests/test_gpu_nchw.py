"""The NCHW Winograd transforms (gpu.kernels.winograd.nchw): the non-fused pipeline run on NCHW tensors
with layout="NCHW" matches the float64 reference, as the NHWC pipeline on the same data does (and equals it
bit for bit under the simulator: the same arithmetic in the same order; not on a GPU, where ptxas contracts
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
from gpu.runtime.fast_launch import FrozenLaunch  # noqa: E402
from gpu.runtime.winograd_kernels import _allow_dynamic_shared  # noqa: E402
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
    (2, ConvProblem(1, 20, 18, 5, 13, padding=1)),      # wide blocks (32 channels x 7 tiles), K below the chunk
    (4, ConvProblem(1, 3, 17, 7, 35, padding=0)),       # 5 x 33 out: whole-row otrans strips (16 x 9), K past 16
    (7, ConvProblem(1, 2, 20, 12, 56, padding=0)),      # 10 x 54 out: whole-row otrans strips (32 x 8, 50 KiB), K below the chunk
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
    err_nhwc = np.linalg.norm(y_nhwc - ref) / np.linalg.norm(ref)
    assert err_nhwc < 1e-4, err_nhwc
    if numba.config.ENABLE_CUDASIM:      # the same operations in the same order: equal bit for bit
        np.testing.assert_array_equal(y, y_nhwc)
    # On a GPU the compiler contracts multiply-adds differently per kernel, so the layouts differ by about the
    # transform's own rounding (F(7x7): 5e-6 of the output's norm); each is checked against float64 above.


def test_geometry_fits_the_block_and_pads_planes_odd():
    for c in (1, 3, 17, 32, 513):
        for tiles_x in (1, 2, 5, 22, 40, 300):
            for m in (2, 4, 5, 6, 7):
                chunk, tx, cols, plane = nchw.nchw_geometry(c, m, tiles_x)
                assert chunk * tx <= nchw.NCHW_THREADS and plane % 2 == 1 and cols == tx * m + 2
                assert chunk >= min(c, nchw.MAX_CHUNK) or tx >= tiles_x
                p = ConvProblem(1, c, c, tiles_x * m, tiles_x * m)
                for launch in (nchw.itrans_launch(p, m), nchw.otrans_launch(p, m)):
                    blocks, threads, shared, chunk, tx = launch
                    assert chunk * tx == threads <= nchw.WIDE_THREADS
                    assert shared <= nchw.MAX_SHARED_BYTES or (launch[3:] == nchw._whole_rows(p, m)
                                                               and launch == nchw.otrans_launch(p, m))


def test_wide_blocks_where_the_rule_takes_them():
    """256-thread blocks where a strip gets more tiles at the same chunk (the otrans kernel: only when the
    strip then covers the tile row); 128 where the wide block would need a narrower chunk or more shared memory."""
    p = ConvProblem(1, 20, 18, 5, 13, padding=1)          # m = 2: 7 tiles a row
    assert nchw.itrans_launch(p, 2)[3:] == (32, 7) and nchw.otrans_launch(p, 2)[3:] == (32, 7)
    p = ConvProblem(64, 32, 64, 128, 128)                  # yolov3-1 at m = 7: 32 x 7 needs 58 KiB (itrans)
    assert nchw.itrans_launch(p, 7)[3:] == (32, 4) and nchw.otrans_launch(p, 7)[3:] == (32, 4)
    p = ConvProblem(64, 64, 128, 64, 64)                   # yolov3-2 at m = 6: 11 tiles, in 2 strips of 6
    assert nchw.itrans_launch(p, 6)[3:] == (32, 6) and nchw.otrans_launch(p, 6)[3:] == (32, 4)
    p = ConvProblem(64, 128, 256, 32, 32)                  # yolov3-3 at m = 7: the row's 5 tiles in one strip
    assert nchw.itrans_launch(p, 7)[3:] == (32, 5) and nchw.otrans_launch(p, 7)[3:] == (32, 5)


def test_otrans_takes_sector_aligned_strips_where_the_row_splits_into_8_tiles():
    """F(7x7) rows of 16, 24, ... tiles: strips of 8 tiles x 16 channels (224-byte rows); elsewhere the rule above."""
    p = ConvProblem(64, 128, 128, 112, 112)                # vgg-1: 16 tiles a row
    assert nchw.otrans_launch(p, 7)[1:] == (128, 4 * 16 * nchw.otrans_plane(7, 8), 16, 8)
    assert nchw.otrans_launch(p, 7, threads=128)[3:] == (32, 4)
    assert nchw.itrans_launch(p, 7)[3:] == (32, 4)
    # 8 tiles a row (resnet-1), 19 (yolov3-1), K below 16
    for p in (ConvProblem(64, 64, 64, 56, 56), ConvProblem(64, 32, 64, 128, 128), ConvProblem(1, 3, 8, 112, 112)):
        assert nchw.otrans_launch(p, 7)[3:] != (16, nchw.ALIGNED_TILES)


def test_otrans_takes_whole_rows_where_rows_start_off_sector_boundaries():
    """Rows of Q floats, Q not a multiple of 8, that the rule's strips would split: one strip a whole tile row,
    the widest power-of-two chunk of at least 16 channels in 256 threads (shared memory past 48 KiB at F(7x7));
    aligned rows, rows already whole in a strip, and rows too long for 16 channels keep the rules above."""
    p = ConvProblem(64, 64, 128, 112, 112, padding=0)      # im2win/conv8: 110-float rows, 16 tiles
    assert nchw.otrans_launch(p, 7)[1:] == (256, 4 * 16 * nchw.otrans_plane(7, 16), 16, 16)
    assert nchw.otrans_launch(p, 7)[2] > nchw.MAX_SHARED_BYTES
    assert nchw.otrans_launch(p, 7, threads=128)[3:] == (32, 4)
    p = ConvProblem(64, 128, 64, 56, 56, padding=0)        # im2win/conv9: 54-float rows, 8 tiles
    assert nchw.otrans_launch(p, 7)[1:] == (256, 4 * 32 * nchw.otrans_plane(7, 8), 32, 8)
    p = ConvProblem(64, 128, 128, 112, 112)                # vgg-1: 112-float rows, the aligned strips
    assert nchw.otrans_launch(p, 7)[3:] == (16, nchw.ALIGNED_TILES)
    p = ConvProblem(64, 256, 128, 28, 28, padding=0)       # im2win/conv10: 26 floats, the row in one strip already
    assert nchw.otrans_launch(p, 7)[3:] == (32, 4)
    p = ConvProblem(64, 32, 64, 200, 200, padding=0)       # 198 floats, 29 tiles: 8 channels a row, below 16
    assert nchw.otrans_launch(p, 7)[3:] == (32, 4)
    p = ConvProblem(1, 8, 8, 110, 110, padding=0)          # K = 8 rounds up to a chunk of 8, below 16
    assert nchw._whole_rows(p, 7) is None


def test_otrans_builds_agree():
    """The otrans kernel's builds (register cap, opaque strides) write the same outputs."""
    problem, m = ConvProblem(1, 3, 40, 9, 11, padding=1), 7
    graph, schedule, plan = build(problem, Plan("nonfused", algorithm="winograd", params=_params(m)))
    run = PreparedRun(problem, plan, graph, schedule, options={"layout": "NCHW"})
    rng = np.random.default_rng(5)
    M = rng.standard_normal(((m + 2) ** 2, run.state.plan.shape.tiles, problem.k), dtype=np.float32)
    blocks, threads, shared, chunk, tx = nchw.otrans_launch(problem, m)
    outs = []
    for build_args in ((True, 80), (False, None)):
        _, otrans = nchw.nchw_kernels_for(m, *build_args)
        y = np.full((problem.n, problem.k, problem.out_h, problem.out_w), np.nan, np.float32)
        d_y = cuda.to_device(y)
        otrans[blocks, threads, 0, shared](run.state.d_prm, cuda.to_device(M), d_y, chunk, tx)
        outs.append(d_y.copy_to_host())
    assert np.isfinite(outs[0]).all()
    if numba.config.ENABLE_CUDASIM:
        np.testing.assert_array_equal(outs[0], outs[1])
    else:
        assert np.linalg.norm(outs[0] - outs[1]) / np.linalg.norm(outs[1]) < 1e-6


def _otrans_reference(M: np.ndarray, problem: ConvProblem, m: int) -> np.ndarray:
    """Y (N, K, P, Q) in float64 from M (alpha^2, tiles, K): A^T M A per tile, cropped to P x Q."""
    from megasim.algorithms.winograd.winograd_math import matrices
    a = m + 2
    ty, tx = -(-problem.out_h // m), -(-problem.out_w // m)
    at = np.asarray(matrices(m)[2], np.float64)
    mt = M.astype(np.float64).reshape(a, a, problem.n, ty, tx, problem.k)
    y = np.einsum("ia,jb,abnyxk->nkyixj", at, at, mt).reshape(problem.n, problem.k, ty * m, tx * m)
    return y[:, :, :problem.out_h, :problem.out_w]


# (m, problem): output widths 1 to 13, not multiples of the tile (the last tile column and row partly
# outside), K not a multiple of the chunk, batch 1 and 2, whole planes in one tile row
OTRANS_SHAPES = [
    (2, ConvProblem(1, 1, 5, 3, 1, padding=1)),          # W = 1
    (2, ConvProblem(2, 1, 5, 7, 9, padding=0)),          # 5 x 7 out: 4 tiles a row, 3 tile rows
    (2, ConvProblem(1, 1, 2, 3, 3, padding=0)),          # 1 x 1 out, K = 2
    (4, ConvProblem(1, 1, 3, 11, 6, padding=1)),         # W = 6
    (5, ConvProblem(1, 1, 33, 6, 8, padding=1)),         # K = 33: a chunk of 1 past 32
    (6, ConvProblem(1, 1, 9, 5, 9, padding=0)),          # 3 x 7 out: one tile row, the whole plane
    (7, ConvProblem(1, 1, 17, 10, 12, padding=0)),       # 8 x 10 out: the last tile 3 columns, 1 row
    (7, ConvProblem(2, 1, 40, 5, 11, padding=2)),        # 5 x 13 out, W = 13
    (4, ConvProblem(1, 1, 40, 4, 3, padding=1)),         # W = 3, 4 x 3 planes
    (2, ConvProblem(1, 1, 3, 5, 13, padding=0)),         # 3 x 11 out: 6 tiles a row
    (5, ConvProblem(1, 1, 70, 16, 35, padding=0)),       # 14 x 33 out: 7 tiles a row, 3 tile rows
    (7, ConvProblem(1, 1, 33, 12, 56, padding=0)),       # 10 x 54 out: the rule's whole rows, 32 x 8 (50 KiB)
]


def _otrans_geometries(problem: ConvProblem, m: int) -> dict:
    """name -> (kernel, launch): the runtime kernel at its rule, at 128 threads and at strips of 1, 2 and
    half the row's tiles (8 channels); the study's whole-row kernels (``otrans_kernels.rows_kernel`` and
    ``linear_kernel``, also its ``full_branch`` build) at ``rows_geometry`` in 256, 128 and 64 threads where a
    row fits."""
    from experiments.studies.nchw_transforms import otrans_kernels as ok
    tiles_x = -(-problem.out_w // m)
    runtime = nchw.nchw_kernels_for(m)[1]
    out = {"rule": (runtime, nchw.otrans_launch(problem, m)), "t128": (runtime, nchw.otrans_launch(problem, m, 128))}

    def launch(chunk, tx):
        return (nchw._blocks(problem, m, problem.k, chunk, tx), chunk * tx, 4 * chunk * nchw.otrans_plane(m, tx),
                chunk, tx)
    chunk = min(nchw._pow2_at_least(problem.k), 8)
    for tx in {1, 2, (tiles_x + 1) // 2}:              # strips narrower than the row, the last one short
        if tx < tiles_x:
            out[f"strips{chunk}x{tx}"] = (runtime, launch(chunk, tx))
    for threads in (256, 128, 64):
        g = ok.rows_geometry(problem.k, m, tiles_x, threads)
        if g is not None:
            out[f"rows{threads}"] = (ok.rows_kernel(m), launch(*g))
            chunk, tx = g
            lin = (nchw._blocks(problem, m, problem.k, chunk, tx), chunk * tx,
                   4 * chunk * ok.linear_plane(m, problem.out_w), chunk, tx)
            out[f"linear{threads}"] = (ok.linear_kernel(m), lin)
            out[f"linearF{threads}"] = (ok.linear_kernel(m, full_branch=True), lin)
    return out


@pytest.mark.parametrize("m,problem", OTRANS_SHAPES)
def test_otrans_strips_and_rows_match_float64(m, problem):
    """The otrans kernel at its geometries, and the study's whole-row kernels with their flat sector-aligned
    stores, write every output once, within 1e-5 of the float64 transform of the same M (fresh random data);
    all of them agree bit for bit under the simulator."""
    graph, schedule, plan = build(problem, Plan("nonfused", algorithm="winograd", params=_params(m)))
    run = PreparedRun(problem, plan, graph, schedule, options={"layout": "NCHW"})
    rng = np.random.default_rng([m, problem.n, problem.k, problem.out_h, problem.out_w])
    M = rng.standard_normal(((m + 2) ** 2, run.state.plan.shape.tiles, problem.k), dtype=np.float32)
    ref = _otrans_reference(M, problem, m)
    d_M = cuda.to_device(M)
    outs = {}
    for name, (kernel, (blocks, threads, shared, chunk, tx)) in _otrans_geometries(problem, m).items():
        assert chunk * tx == threads and (shared <= nchw.MAX_SHARED_BYTES or name == "rule")
        d_y = cuda.to_device(np.full((problem.n, problem.k, problem.out_h, problem.out_w), np.nan, np.float32))
        if shared > nchw.MAX_SHARED_BYTES and not numba.config.ENABLE_CUDASIM:   # compile, then opt in
            FrozenLaunch(kernel, blocks, threads, shared, (run.state.d_prm, d_M, d_y, chunk, tx))
            _allow_dynamic_shared(kernel, shared)
        kernel[blocks, threads, 0, shared](run.state.d_prm, d_M, d_y, chunk, tx)
        y = d_y.copy_to_host()
        assert np.isfinite(y).all(), name
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        assert err < 1e-5, (name, err)
        outs[name] = y
    if numba.config.ENABLE_CUDASIM:
        for name, y in outs.items():
            np.testing.assert_array_equal(y, outs["rule"], err_msg=name)


def test_rows_geometry_covers_one_tile_row_in_the_block():
    from experiments.studies.nchw_transforms import otrans_kernels as ok
    for k in (1, 3, 17, 32, 513):
        for tiles_x in (1, 2, 5, 16, 19, 33):
            for m in (2, 4, 5, 6, 7):
                for threads in (64, 128, 256):
                    g = ok.rows_geometry(k, m, tiles_x, threads)
                    if g is not None:
                        chunk, tx = g
                        assert tx == tiles_x and 32 <= chunk * tx <= threads
                        assert 4 * chunk * nchw.otrans_plane(m, tx) <= nchw.MAX_SHARED_BYTES
                        assert chunk >= min(nchw._pow2_at_least(k), 8)


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
