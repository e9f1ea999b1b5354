"""The sparse kernels of gpu.sparse (ECR, PECR, their dense twins, ReLU, max-pool) against the float64
NumPy oracles.

Runs on Numba's CUDA simulator (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1 unless it is set, e.g. to 0,
in which case the same tests run on the GPU). The simulator runs one 128-thread block at a time, one
OS thread per CUDA thread, so every problem here fits in one or two pixel tiles (N*P*Q <= 128 mostly)
and one to three filter tiles. Inputs are fresh random sparse maps (x = |randn| with uniform zeros),
plus dense maps and maps with all-zero windows; tolerances are relative to the largest output.
"""

from __future__ import annotations


import numpy as np
import pytest

from megasim.errors import MegasimError
from megasim.algorithms.sparse.tiling import CONV_K_TILES, FUSED_K_TILES, PoolSpec, choose_tiling, grid, pooled_hw
from megasim.workloads.catalogue import network_layers
from megasim.workloads.problem import ConvProblem

numba = pytest.importorskip("numba")
from numba import cuda

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) nor a CUDA GPU is available",
                allow_module_level=True)

from gpu import sparse as sp
from gpu.kernels.sparse import kernels as sk

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]
TOL = 1e-5


@pytest.fixture(autouse=True)
def _nan_filled_outputs(monkeypatch):
    """Output buffers gpu.sparse allocates start as NaN, not as uninitialised memory (often zeros), so
    an output element a kernel fails to write fails the comparison even where the answer is 0 (empty
    windows, ReLU-clipped outputs)."""
    original = sp.cuda.device_array

    def nan_filled(shape, dtype=np.float64, *args, **kwargs):
        if not np.issubdtype(np.dtype(dtype), np.floating):
            return original(shape, dtype, *args, **kwargs)
        return cuda.to_device(np.full(shape, np.nan, dtype))
    monkeypatch.setattr(sp.cuda, "device_array", nan_filled)


def sparse_inputs(n, c, k, h, w, r=3, s=3, sparsity=0.6, seed=0):
    """x = |randn| with a uniform fraction ``sparsity`` of zeros (post-ReLU-like), w = randn."""
    rng = np.random.default_rng(seed)
    x = np.abs(rng.standard_normal((n, c, h, w))).astype(np.float32)
    x[rng.random(x.shape) < sparsity] = 0.0
    wt = rng.standard_normal((k, c, r, s)).astype(np.float32)
    return x, wt


def rel_err(y, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(y, np.float64) - ref).max() / np.abs(ref).max())


CONV_FNS = {"ecr": sp.ecr_conv2d, "direct": sp.direct_conv2d}
FUSED_FNS = {"pecr": sp.pecr_conv2d_relu_maxpool, "direct_fused": sp.direct_conv2d_relu_maxpool}


# --- convolution: ECR and its dense twin ------------------------------------------------------------

# (n, c, k, h, w, r, s, stride, padding, sparsity, k_tile): C=5 is not a multiple of c_chunk 4 (3x3),
# K=6 not a multiple of k_tile 4; H, W odd; k_tile at both extremes.
CONV_CASES = {
    "sparse-s1-p1-kt4": (2, 5, 6, 7, 9, 3, 3, 1, 1, 0.6, 4),
    "sparse-s2-p0-kt32": (2, 5, 6, 9, 9, 3, 3, 2, 0, 0.6, 32),
    "dense-s2-p1-kt8": (1, 3, 5, 9, 7, 3, 3, 2, 1, 0.0, 8),
    "very-sparse-s1-p0-kt16": (1, 4, 6, 9, 9, 3, 3, 1, 0, 0.9, 16),
    "1x1-c5-kt4": (2, 5, 6, 5, 7, 1, 1, 1, 0, 0.5, 4),
    "5x5-p1-kt8": (1, 2, 3, 7, 9, 5, 5, 1, 1, 0.6, 8),
    "2x3-s2-p1-kt4": (2, 5, 6, 8, 9, 2, 3, 2, 1, 0.6, 4),
}


@pytest.mark.parametrize("op", ["ecr", "direct"])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_matches_float64_reference(op, case):
    n, c, k, h, w, r, s, stride, pad, sparsity, k_tile = CONV_CASES[case]
    x, wt = sparse_inputs(n, c, k, h, w, r, s, sparsity, seed=list(CONV_CASES).index(case))
    y = CONV_FNS[op](x, wt, stride, pad, k_tile=k_tile)
    ref = sp.reference_conv2d(x, wt, stride, pad)
    assert y.shape == ref.shape and y.dtype == np.float32
    assert rel_err(y, ref) <= TOL


@pytest.mark.parametrize("op", ["ecr", "direct"])
def test_conv_with_all_zero_windows(op):
    # Rows 2..6 zero: with a 3x3 window and padding 1, output rows 3..5 see only zeros (an empty
    # compressed row, cnt = 0), rows 2 and 6 see one nonzero row; channel 1 is zero everywhere.
    x, wt = sparse_inputs(1, 3, 5, 9, 9, sparsity=0.3, seed=21)
    x[:, :, 2:7, :] = 0.0
    x[:, 1] = 0.0
    y = CONV_FNS[op](x, wt, 1, 1, k_tile=4)
    ref = sp.reference_conv2d(x, wt, 1, 1)
    assert rel_err(y, ref) <= TOL
    assert not y[:, :, 3:6, :].any()


def test_ecr_and_direct_agree_on_a_dense_input():
    x, wt = sparse_inputs(1, 4, 6, 6, 7, sparsity=0.0, seed=22)
    np.testing.assert_allclose(sp.ecr_conv2d(x, wt, 1, 1), sp.direct_conv2d(x, wt, 1, 1), rtol=1e-6, atol=1e-6)


# --- fused: PECR and its dense twin -------------------------------------------------------------------

# (n, c, k, h, w, stride, padding, pool, pool_stride, sparsity, k_tile); 3x3 filters. K=5 is not a
# multiple of k_tile 2 or 4; C=5 not a multiple of c_chunk 2 (patch 4x4) or 1 (patch 5x5).
FUSED_CASES = {
    "sparse-s1-p1-pool2/2-kt2": (2, 5, 5, 7, 9, 1, 1, 2, 2, 0.6, 2),
    "sparse-s1-p0-pool2/1-kt8": (2, 3, 6, 9, 9, 1, 0, 2, 1, 0.6, 8),
    "dense-s2-p1-pool2/2-kt4": (2, 5, 5, 9, 9, 2, 1, 2, 2, 0.0, 4),
    "sparse-s2-p0-pool2/1-kt2": (1, 4, 3, 9, 8, 2, 0, 2, 1, 0.6, 2),
    "very-sparse-s1-p1-pool3/2-kt8": (1, 3, 6, 9, 7, 1, 1, 3, 2, 0.9, 8),
}


@pytest.mark.parametrize("op", ["pecr", "direct_fused"])
@pytest.mark.parametrize("case", list(FUSED_CASES))
def test_fused_matches_float64_reference(op, case):
    n, c, k, h, w, stride, pad, pool, ps, sparsity, k_tile = FUSED_CASES[case]
    x, wt = sparse_inputs(n, c, k, h, w, sparsity=sparsity, seed=10 + list(FUSED_CASES).index(case))
    z = FUSED_FNS[op](x, wt, stride, pad, pool, ps, k_tile=k_tile)
    ref = sp.reference_conv_relu_maxpool(x, wt, stride, pad, pool, ps)
    assert z.shape == ref.shape and z.dtype == np.float32
    assert rel_err(z, ref) <= TOL


@pytest.mark.parametrize("op", ["pecr", "direct_fused"])
def test_fused_with_all_zero_patches(op):
    # Rows 0..5 zero: the pooled rows 0 and 1 (conv rows 0..3, padding 1) read only zeros -> 0 after
    # ReLU; negative weights make many other convolution outputs negative (ReLU must clip them).
    x, wt = sparse_inputs(1, 3, 4, 9, 9, sparsity=0.5, seed=23)
    x[:, :, :5, :] = 0.0
    z = FUSED_FNS[op](x, wt, 1, 1, 2, 2, k_tile=2)
    ref = sp.reference_conv_relu_maxpool(x, wt, 1, 1, 2, 2)
    assert rel_err(z, ref) <= TOL
    assert not z[:, :, :2, :].any()
    assert (sp.reference_conv2d(x, wt, 1, 1) < 0).any()


@pytest.mark.parametrize("conv", ["ecr", "direct"])
def test_unfused_chain_equals_the_fused_kernels(conv):
    x, wt = sparse_inputs(2, 5, 5, 7, 9, sparsity=0.6, seed=24)
    chain = sp.conv_relu_maxpool_unfused(x, wt, 1, 1, 2, 2, conv=conv, k_tile=4)
    fused = (sp.pecr_conv2d_relu_maxpool if conv == "ecr" else sp.direct_conv2d_relu_maxpool)(x, wt, 1, 1, 2, 2)
    assert rel_err(chain, sp.reference_conv_relu_maxpool(x, wt, 1, 1, 2, 2)) <= TOL
    np.testing.assert_allclose(chain, fused, rtol=1e-6, atol=1e-6 * np.abs(fused).max())


# --- relu and maxpool2d on their own ------------------------------------------------------------------

def test_relu_and_maxpool_kernels():
    rng = np.random.default_rng(25)
    y = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)     # 378 elements: two 256-thread blocks
    r = sp.relu(y)
    np.testing.assert_array_equal(r, np.maximum(y, 0))
    assert (y < 0).any()                                           # the input is not changed
    for pool, ps in ((2, 2), (3, 1), (2, 1)):
        np.testing.assert_array_equal(sp.maxpool2d(y, pool, ps), sp.reference_maxpool2d(y, pool, ps).astype(np.float32))


def test_device_arrays_in_device_array_out():
    x, wt = sparse_inputs(1, 3, 4, 6, 7, sparsity=0.5, seed=26)
    d_x, d_w = cuda.to_device(x), cuda.to_device(wt)
    d_y = sp.ecr_conv2d(d_x, d_w, 1, 1)
    assert hasattr(d_y, "copy_to_host")
    assert rel_err(d_y.copy_to_host(), sp.reference_conv2d(x, wt, 1, 1)) <= TOL
    d_z = sp.maxpool2d(sp.relu(d_y))
    assert hasattr(d_z, "copy_to_host")
    assert rel_err(d_z.copy_to_host(), sp.reference_conv_relu_maxpool(x, wt, 1, 1)) <= TOL


# --- prepared launches ----------------------------------------------------------------------------------

def test_prepared_launch_runs_repeatedly_into_one_output():
    x, wt = sparse_inputs(1, 3, 5, 7, 7, sparsity=0.6, seed=27)
    launch = sp.prepare("pecr", cuda.to_device(x), cuda.to_device(wt), 1, 1, k_tile=4, sm_count=4)
    problem = ConvProblem(1, 3, 5, 7, 7, 3, 3, 1, 1)
    assert launch.tiling == choose_tiling(problem, "pecr", 4, pool=PoolSpec(2, 2), k_tile=4)
    assert launch.grid == grid(problem, launch.tiling) and launch.block == 128 and launch.launches == 1
    out = launch.output
    launch.run()
    first = out.copy_to_host()
    out.copy_to_device(np.full(out.shape, np.nan, np.float32))     # the second run must write it again
    launch.run()
    assert launch.output is out
    np.testing.assert_array_equal(out.copy_to_host(), first)
    assert rel_err(first, sp.reference_conv_relu_maxpool(x, wt, 1, 1)) <= TOL
    if numba.config.ENABLE_CUDASIM:
        assert launch.regs_per_thread is None
    else:
        assert launch.regs_per_thread > 0 and launch.shared_bytes == launch.tiling.shared_bytes(problem)


def test_prepared_unfused_chain_has_three_launches():
    x, wt = sparse_inputs(1, 2, 3, 6, 6, sparsity=0.5, seed=28)
    launch = sp.prepare("unfused_direct", x, wt, 1, 1, pool=2, pool_stride=1)
    assert launch.launches == 3 and launch.tiling.kind == "direct" and launch.tiling.pool is None
    launch.run()
    assert rel_err(launch.output.copy_to_host(), sp.reference_conv_relu_maxpool(x, wt, 1, 1, 2, 1)) <= TOL


def test_default_k_tile_follows_the_sm_count():
    # 2 x 14 x 14 = 392 output pixels: 4 pixel tiles; K = 64. 4 SMs want 8 blocks: k_tile 32 (4 x 2);
    # 132 SMs want 264, which no k_tile reaches: the smallest, 4 (4 x 16 blocks).
    x = np.zeros((2, 64, 14, 14), np.float32)
    wt = np.zeros((64, 64, 3, 3), np.float32)
    few = sp.prepare("ecr", x, wt, 1, 1, sm_count=4).tiling.k_tile
    many = sp.prepare("ecr", x, wt, 1, 1, sm_count=132).tiling.k_tile
    assert (few, many) == (32, 4)


# --- shared memory: the kernels' arrays are the contract's bytes ------------------------------------

def _problems():
    vgg = [p.with_batch(1) for p in network_layers("vgg19")]
    return vgg + [ConvProblem(1, 5, 6, 9, 9, 1, 1, 1, 0), ConvProblem(1, 2, 3, 9, 9, 5, 5, 1, 1),
                  ConvProblem(1, 5, 6, 8, 9, 2, 3, 2, 1)]


@pytest.mark.parametrize("kind", ["ecr", "direct", "pecr", "direct_fused"])
def test_kernel_shared_bytes_equal_the_tiling_contract(kind):
    fused = kind in ("pecr", "direct_fused")
    for problem in _problems():
        for k_tile in (FUSED_K_TILES if fused else CONV_K_TILES):
            for pool in ((PoolSpec(2, 2), PoolSpec(2, 1)) if fused else (None,)):
                t = choose_tiling(problem, kind, 132, pool=pool, k_tile=k_tile)
                if fused:
                    kern = sk.fused_kernel(kind == "pecr", k_tile, t.c_chunk, problem.r, problem.s, problem.stride,
                                           pool.size, pool.stride)
                else:
                    kern = sk.conv_kernel(kind == "ecr", k_tile, t.c_chunk, problem.r, problem.s, problem.stride)
                assert kern.shared_bytes == t.shared_bytes(problem), (problem, k_tile, pool)
                assert kern.config["weight_rows"] == t.weight_rows(problem)
                assert kern.config["compressed_rows"] == (t.chunk_elements if kind in ("ecr", "pecr") else 0)


@pytest.mark.skipif(not numba.config.ENABLE_CUDASIM, reason="counts the simulator's shared-array allocations")
@pytest.mark.parametrize("op", ["ecr", "direct", "pecr", "direct_fused"])
def test_declared_shared_arrays_total_the_contract_bytes(op, monkeypatch):
    from numba.cuda.simulator import kernelapi
    blocks = []
    original = kernelapi.FakeCUDAShared.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        blocks.append(self)

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "__init__", record)
    x, wt = sparse_inputs(1, 3, 2, 5, 5, sparsity=0.5, seed=29)
    launch = sp.prepare(op, x, wt, 1, 1, k_tile=2 if op in FUSED_FNS else 4)
    launch.run()
    declared = sum(a.nbytes for a in blocks[0]._allocations.values())
    assert declared == launch.tiling.shared_bytes(launch.problem) == launch.config_shared_bytes


# --- input validation (no kernels run) -------------------------------------------------------------

X = (1, 2, 6, 6)
W = (3, 2, 3, 3)


@pytest.mark.parametrize("fn,xshape,wshape,kwargs,match", [
    ("ecr", (1, 2, 6), W, {}, r"x must be 4-D \(N, C, H, W\), got shape \(1, 2, 6\)"),
    ("ecr", X, (3, 2, 3), {}, r"w must be 4-D \(K, C, R, S\)"),
    ("ecr", X, (3, 4, 3, 3), {}, "channels differ: x has C=2, w has C=4"),
    ("ecr", (0, 2, 6, 6), W, {}, r"x has shape \(0, 2, 6, 6\): every dimension must be >= 1"),
    ("direct", X, W, {"stride": 0}, "stride=0 is not allowed: it must be a positive integer"),
    ("direct", X, W, {"stride": 1.5}, "stride=1.5 is not allowed"),
    ("direct", X, W, {"stride": True}, "stride=True is not allowed"),
    ("ecr", X, W, {"padding": -1}, "padding=-1 is not allowed: it must be an integer >= 0"),
    ("ecr", (1, 2, 3, 3), (3, 2, 5, 5), {}, r"filter 5x5 is larger than the padded input 3x3 \(empty output\)"),
    ("ecr", (1, 2, 9, 9), (3, 2, 7, 7), {}, "a 49-element window per channel is not allowed"),
    ("ecr", X, W, {"k_tile": 5}, "k_tile=5 is not allowed for ecr"),
    ("ecr", X, W, {"sm_count": 0}, "sm_count=0 is not allowed"),
    ("pecr", X, W, {"k_tile": 16}, "k_tile=16 is not allowed for pecr"),
    ("pecr", X, W, {"pool": 0}, "pool=0 is not allowed: it must be a positive integer"),
    ("pecr", X, W, {"pool_stride": -2}, "pool_stride=-2 is not allowed"),
    ("pecr", (1, 2, 4, 4), W, {"pool": 3}, "pool size 3 is not allowed for a 2x2 convolution output: it must be <= 2"),
    ("direct_fused", (1, 2, 9, 9), (3, 2, 5, 5), {"stride": 2}, "a 49-element window per channel is not allowed"),
    ("unfused", X, W, {"conv": "winograd"}, "conv='winograd' is not allowed"),
    ("unfused", (1, 2, 4, 4), W, {"pool": 3}, "pool size 3 is not allowed"),
])
def test_bad_inputs_raise_one_line_errors(fn, xshape, wshape, kwargs, match):
    fns = {**CONV_FNS, **FUSED_FNS, "unfused": sp.conv_relu_maxpool_unfused}
    with pytest.raises(sp.SparseError, match=match) as info:
        fns[fn](np.ones(xshape, np.float32), np.ones(wshape, np.float32), **kwargs)
    assert "\n" not in str(info.value) and isinstance(info.value, MegasimError)


def test_non_float32_inputs_are_rejected_not_converted():
    with pytest.raises(sp.SparseError, match="x must be float32, got float64"):
        sp.ecr_conv2d(np.ones(X), np.ones(W, np.float32))
    with pytest.raises(sp.SparseError, match="w must be float32, got float16"):
        sp.pecr_conv2d_relu_maxpool(np.ones(X, np.float32), np.ones(W, np.float16))
    with pytest.raises(sp.SparseError, match="y must be float32, got int64"):
        sp.relu(np.ones(X, np.int64))


def test_other_bad_calls():
    x, w = np.ones(X, np.float32), np.ones(W, np.float32)
    with pytest.raises(sp.SparseError, match="must both be NumPy arrays or both device arrays; w is not"):
        sp.ecr_conv2d(cuda.to_device(x), w)
    with pytest.raises(sp.SparseError, match="op='winograd' is not allowed"):
        sp.prepare("winograd", x, w)
    with pytest.raises(sp.SparseError, match="op='ecr' takes no pool"):
        sp.prepare("ecr", x, w, pool=2)
    with pytest.raises(sp.SparseError, match="pool=7 is not allowed for a 6x6 map"):
        sp.maxpool2d(x, 7)
    with pytest.raises(sp.SparseError, match="y must be 4-D"):
        sp.relu(np.ones((4, 4), np.float32))


def test_references_agree_with_a_loop():
    x, wt = sparse_inputs(1, 2, 2, 5, 6, r=2, s=3, seed=30)
    ref = sp.reference_conv2d(x, wt, 2, 1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    p, q = ref.shape[2:]
    loop = np.zeros_like(ref)
    for k in range(2):
        for i in range(p):
            for j in range(q):
                loop[0, k, i, j] = (xp[0, :, 2 * i:2 * i + 2, 2 * j:2 * j + 3] * wt[k]).sum()
    np.testing.assert_allclose(ref, loop, rtol=1e-12, atol=1e-12)
    assert pooled_hw(ConvProblem(1, 2, 2, 5, 6, 2, 3, 2, 1), PoolSpec(2, 1)) == \
        sp.reference_conv_relu_maxpool(x, wt, 2, 1, 2, 1).shape[2:]


def test_same_row_probe_runs_the_ecr_loop_with_row_zero():
    """gpu.probes.sparse_rows' probe build: every stored nonzero times weight row 0 of its chunk
    (w[k, c0, 0, 0]); the same loop as ECR otherwise (checked against that float64 sum)."""
    p = ConvProblem(n=1, c=6, k=5, h=7, w=6, stride=1, padding=1)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 6, 7, 6)).astype(np.float32)
    x[rng.random(x.shape) < 0.5] = 0
    w = rng.standard_normal((5, 6, 3, 3)).astype(np.float32)
    t = choose_tiling(p, "ecr", 4)
    y = cuda.device_array((1, 5, p.out_h, p.out_w), np.float32)
    kern = sk.conv_kernel(True, t.k_tile, t.c_chunk, 3, 3, 1, probe_same_row=True)
    kern[grid(p, t), t.threads](cuda.to_device(x), cuda.to_device(w), y, 1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 5, p.out_h, p.out_w))
    for c0 in range(0, 6, t.c_chunk):
        nz_sum = sum(xp[0, c, r:r + p.out_h, s:s + p.out_w] for c in range(c0, min(6, c0 + t.c_chunk))
                     for r in range(3) for s in range(3))
        ref[0] += w[:, c0, 0, 0].astype(np.float64)[:, None, None] * nz_sum
    assert np.abs(y.copy_to_host() - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("loads", ["chunk", "inline"])
@pytest.mark.parametrize("k_tile", [4, 8])
def test_dense_twin_load_placements_compute_the_convolution(k_tile, loads):
    """The dense twin's other load placements (the whole chunk's window first; one load per element
    inside the multiply loop, the twin's first placement; gpu.probes.conv_map_shape times them) compute
    the same convolution: odd sizes, C not a multiple of the chunk, K not a multiple of the filter
    tile, padding 1. The default placement ("channel") is the twin every other test runs."""
    p = ConvProblem(n=2, c=7, k=5, h=7, w=6, stride=1, padding=1)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 7, 7, 6)).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = 0
    w = rng.standard_normal((5, 7, 3, 3)).astype(np.float32)
    t = choose_tiling(p, "direct", 4, k_tile=k_tile)
    y = cuda.device_array((2, 5, p.out_h, p.out_w), np.float32)
    kern = sk.conv_kernel(False, t.k_tile, t.c_chunk, 3, 3, 1, dense_loads=loads)
    kern[grid(p, t), t.threads](cuda.to_device(x), cuda.to_device(w), y, 1)
    ref = sp.reference_conv2d(x, w, 1, 1)
    assert np.abs(y.copy_to_host() - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("pool,pool_stride", [(2, 2), (3, 1)])
def test_fused_dense_twin_inline_loads_compute_the_fused_chain(pool, pool_stride):
    """The fused dense twin's inline loads (one load per patch element inside the scatter loop, its first
    placement; the default loads each channel's patch first) compute the same result: odd sizes,
    C not a multiple of the chunk, K not a multiple of the filter tile, padding 1."""
    p = ConvProblem(n=2, c=5, k=5, h=9, w=7, stride=1, padding=1)
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 5, 9, 7)).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = 0
    w = rng.standard_normal((5, 5, 3, 3)).astype(np.float32)
    t = choose_tiling(p, "direct_fused", 4, k_tile=4, pool=PoolSpec(pool, pool_stride))
    ref = sp.reference_conv_relu_maxpool(x, w, 1, 1, pool, pool_stride)
    z = cuda.device_array((2, 5) + ref.shape[2:], np.float32)
    kern = sk.fused_kernel(False, t.k_tile, t.c_chunk, 3, 3, 1, pool, pool_stride, dense_loads="inline")
    kern[grid(p, t), t.threads](cuda.to_device(x), cuda.to_device(w), z, 1)
    assert np.abs(z.copy_to_host() - ref).max() <= 1e-5 * np.abs(ref).max()


def test_dense_loads_refuses_the_sparse_kernel_and_unknown_values():
    with pytest.raises(ValueError, match="is for the dense twin"):
        sk.conv_kernel(True, 8, 4, 3, 3, 1, dense_loads="chunk")
    with pytest.raises(ValueError, match="dense_loads='row' is not allowed"):
        sk.conv_kernel(False, 8, 4, 3, 3, 1, dense_loads="row")
    with pytest.raises(ValueError, match="is for the dense twin"):
        sk.fused_kernel(True, 4, 2, 3, 3, 1, 2, 2, dense_loads="inline")
    with pytest.raises(ValueError, match="dense_loads='chunk' is not allowed for the fused kernel"):
        sk.fused_kernel(False, 4, 2, 3, 3, 1, 2, 2, dense_loads="chunk")
