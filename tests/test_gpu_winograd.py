"""The Winograd executors of gpu/ against the float64 direct-convolution oracle.

Runs on Numba's CUDA simulator (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1 unless it is
set, e.g. to 0, in which case the same tests run on the GPU). The simulator runs one block at a
time with one OS thread per CUDA thread, so every shape here is tiny and the configs use 32-thread
blocks, 2-4 tiles per group and 8-wide k-tiles to keep the block counts low.
"""

from __future__ import annotations


import numpy as np
import pytest

from megasim.errors import MappingError, MegasimError
from megasim.algorithms.winograd.lowering import GEMM_MATHS, WinogradConfig, lower_winograd
from megasim.algorithms.winograd.winograd_math import matrices
from megasim.algorithms.winograd.algorithm1 import Algorithm1Params, default_params
from megasim.schedule import Launch, Schedule
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.orders import naive_fused, nonfused, random_order
from megasim.workloads.problem import ConvProblem

numba = pytest.importorskip("numba")
from numba import cuda  # noqa: E402  (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) nor a CUDA GPU is available",
                allow_module_level=True)

from gpu import KernelInputError, MegakernelError  # noqa: E402
from gpu.runtime import executor as ex  # noqa: E402
from gpu.kernels.winograd.transforms import PY_FUNCS, STREAMED_ALPHA  # noqa: E402
from gpu.winograd import conv2d, reference  # noqa: E402

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]
TOL = 1e-4


def cfg(m=4, t=2, gk=8, ks=2, thr=32, pairs=1):
    return WinogradConfig(m=m, tiles_per_group=t, transform_threads=thr, gemm_k_tile=gk, gemm_threads=thr,
                          gemm_k_step=ks, transform_pairs_per_thread=pairs)


def inputs(n, c, k, h, w, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    return x, wt


def rel_err(y, ref):
    return float(np.linalg.norm(np.asarray(y, np.float64) - ref) / np.linalg.norm(ref))


def graph_of(shape, config, padding=1):
    return lower_winograd(ConvProblem(*shape, padding=padding), config)


# N, C, K, H, W: H, W not multiples of m; C, K not multiples of the k-step or the 8-wide k-tile.
AWKWARD = (1, 3, 5, 5, 7)


# --- generated transforms (pure Python, no kernel) ------------------------------------------------

@pytest.mark.parametrize("m", [2, 4, 5, 6])
def test_generated_transforms_match_the_matrices(m):
    bt, g, at = matrices(m)
    a = m + 2
    rng = np.random.default_rng(100 + m)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    U = np.zeros((a * a, 3, 2), np.float32)
    PY_FUNCS[f"ftrans_pair_m{m}"](w, U, 1, 2)
    np.testing.assert_allclose(U[:, 2, 1].reshape(a, a), g @ w[1, 2] @ g.T, rtol=1e-5, atol=1e-5)

    x = rng.standard_normal((1, a - 1, a, 2)).astype(np.float32)
    V = np.zeros((a * a, 1, 2), np.float32)
    PY_FUNCS[f"itrans_pair_m{m}"](x, V, 0, -1, -1, 1, 0, a - 1, a)  # window starts in the padding
    d = np.zeros((a, a))
    d[1:, 1:] = x[0, :a - 1, :a - 1, 1]
    np.testing.assert_allclose(V[:, 0, 1].reshape(a, a), bt @ d @ bt.T, rtol=1e-5, atol=1e-4)

    M = rng.standard_normal((a * a, 1, 3)).astype(np.float32)
    Y = np.zeros((1, m + 1, m + 1, 3), np.float32)
    PY_FUNCS[f"otrans_pair_m{m}"](M, Y, 0, 1, 0, 0, 2, m + 1, m - 1)  # clipped at the bottom and right
    full = at @ M[:, 0, 2].reshape(a, a).astype(np.float64) @ at.T
    np.testing.assert_allclose(Y[0, 1:, :m - 1, 2], full[:m, :m - 1], rtol=1e-5, atol=1e-4)
    assert not Y[0, 0].any() and not Y[0, :, m - 1:].any()
    if m + 2 < STREAMED_ALPHA:      # the opaque-stride form computes the same values
        U2, V2, Y2 = np.zeros_like(U), np.zeros_like(V), np.zeros_like(Y)
        PY_FUNCS[f"ftrans_pair_m{m}_opaque"](w, U2, 1, 2)
        PY_FUNCS[f"itrans_pair_m{m}_opaque"](x, V2, 0, -1, -1, 1, 0, a - 1, a)
        PY_FUNCS[f"otrans_pair_m{m}_opaque"](M, Y2, 0, 1, 0, 0, 2, m + 1, m - 1)
        assert np.array_equal(U2, U) and np.array_equal(V2, V) and np.array_equal(Y2, Y)


# --- both schedules, both tile sizes ----------------------------------------------------------------

@pytest.mark.parametrize("m", [4, 2, 6])
@pytest.mark.parametrize("schedule", ["nonfused", "fused"])
def test_conv2d_matches_reference(schedule, m):
    # K=10: two k-tiles of 8 and 2 columns; 5 x 3 outputs: partial tiles in both directions (m = 6: one
    # tile, clipped in both; 7 x 8 outputs: two tiles each way, the second clipped).
    x, w = inputs(1, 3, 10, 5, 3, seed=m)
    y = conv2d(x, w, schedule=schedule, config=cfg(m=m, t=2 if m == 4 else 4))
    assert y.shape == (1, 10, 5, 3) and y.dtype == np.float32
    assert rel_err(y, reference(x, w)) <= TOL
    if m == 6:
        x, w = inputs(2, 5, 9, 7, 8, seed=16)
        y = conv2d(x, w, schedule=schedule, config=cfg(m=6, t=3, ks=4))
        assert rel_err(y, reference(x, w)) <= TOL


def test_multistage_gemm_and_multitask_transforms():
    # C=9 with k_step 4: three GEMM stages (the last partial); t=4 tiles x 9 channels = 36 pairs: two
    # input transforms per group; 9 x 8 filter pairs: three filter transforms; 4 x 9 (tile, k) pairs:
    # two output transforms; N=2 images in one group.
    x, w = inputs(2, 9, 9, 3, 4, seed=3)
    y = conv2d(x, w, config=cfg(m=4, t=4, ks=4))
    assert rel_err(y, reference(x, w)) <= TOL


@pytest.mark.parametrize("schedule", ["nonfused", "fused"])
@pytest.mark.parametrize("pairs", [2, 3])
def test_several_pairs_per_transform_thread(schedule, pairs):
    # t=4 tiles x 19 channels = 76 pairs per group: with 32 threads x 3 pairs one input transform of
    # 96 slots per group, the last round partial; with 2 pairs two tasks (64 + 12). 19 x 8 filter
    # pairs and 4 x 11 (tile, k) pairs likewise; 7 x 5 outputs: partial tiles, two groups.
    x, w = inputs(1, 19, 11, 7, 5, seed=11 + pairs)
    config = cfg(m=4, t=4, ks=4, pairs=pairs)
    graph = graph_of((1, 19, 11, 7, 5), config)
    assert graph.num_tasks < graph_of((1, 19, 11, 7, 5), cfg(m=4, t=4, ks=4)).num_tasks
    y = conv2d(x, w, schedule=schedule, config=config)
    assert rel_err(y, reference(x, w)) <= TOL


def test_gemm_with_more_register_tiles_than_threads():
    # t=16 rows x 40 columns = 4 x 10 register tiles > 32 threads: two passes over C.
    x, w = inputs(1, 3, 41, 8, 8, seed=4)
    y = conv2d(x, w, config=cfg(m=2, t=16, gk=40, ks=8))
    assert rel_err(y, reference(x, w)) <= TOL


def test_padding_zero_and_two():
    x, w = inputs(1, 2, 3, 6, 5, seed=5)
    for pad in (0, 2):
        y = conv2d(x, w, padding=pad, config=cfg(m=4, t=4))
        assert y.shape == (1, 3, 6 + 2 * pad - 2, 5 + 2 * pad - 2)
        assert rel_err(y, reference(x, w, padding=pad)) <= TOL


# --- mappings and dispatch --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def awkward_case():
    x, w = inputs(*AWKWARD, seed=7)
    config = cfg(m=4)
    baseline = conv2d(x, w, schedule="nonfused", config=config)
    assert rel_err(baseline, reference(x, w)) <= TOL
    return x, w, config, baseline, graph_of(AWKWARD, config)


def _mapping(name, graph):
    if name == "a1-default":
        return None
    if name == "a1-m1":
        return default_params(graph, m=1)
    if name == "a1-m2-loose":
        p = default_params(graph, m=2)
        return Algorithm1Params(p.d_ig + 1, p.d_go + 40, 2)
    if name == "naive":
        return naive_fused(graph)
    if name.startswith("random"):
        return random_order(graph, seed=int(name[-1]))
    if name == "nonfused-via-megakernel":      # four launches; counters carry over between them
        return nonfused(graph)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["a1-default", "a1-m1", "a1-m2-loose", "naive", "random0", "random1",
                                  "nonfused-via-megakernel"])
def test_mappings_give_the_nonfused_result_bit_for_bit(awkward_case, name):
    x, w, config, baseline, graph = awkward_case
    y = conv2d(x, w, mapping=_mapping(name, graph), config=config)
    # Every task does the same arithmetic whatever the order, so the result is identical.
    np.testing.assert_array_equal(y, baseline)


@pytest.mark.parametrize("style,dispatch,bps", [("per_task", "ticket", None), ("per_task", "blockidx", None),
                                                 ("persistent", "ticket", 2), ("persistent", "ticket", 1),
                                                 ("per_task", "ready", None), ("persistent", "ready", 2),
                                                 ("persistent", "ready", 1)])
def test_dispatch_modes(awkward_case, style, dispatch, bps):
    x, w, config, baseline, _ = awkward_case
    y = conv2d(x, w, config=config, style=style, dispatch=dispatch, blocks_per_sm=bps)
    np.testing.assert_array_equal(y, baseline)


@pytest.mark.parametrize("name", ["a1-m1", "naive", "random0", "nonfused-via-megakernel"])
def test_ready_queue_dispatch_runs_any_mapping(awkward_case, name):
    """Ready-queue dispatch on several maps (the non-fused order in four launches: each launch's lists
    leave out the counters earlier launches signalled) gives the same result bit for bit."""
    x, w, config, baseline, graph = awkward_case
    mapping = _mapping(name, graph)
    sched = mapping if isinstance(mapping, Schedule) else algorithm1(graph, mapping)
    y = conv2d(x, w, mapping=sched.with_style("per_task", "ready"), config=config)
    np.testing.assert_array_equal(y, baseline)


def test_ready_queue_dispatch_runs_a_map_that_ticket_dispatch_cannot_run():
    """Ready-queue blocks never wait on a parent, so a map with children first still runs (the map only
    orders the roots and each group's tasks); ticket dispatch would time out on it."""
    shape = (1, 2, 3, 3, 3)
    config = cfg(m=2, t=4)
    graph = graph_of(shape, config)
    plan = ex.make_plan(ConvProblem(*shape), config, graph)
    order = np.argsort(-graph.kind.astype(np.int64), kind="stable")      # output transforms first
    x, w = inputs(*shape, seed=10)
    ws = ex.workspace(plan, cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), cuda.to_device(w))
    ex.run_schedule(plan, Schedule("reversed", (Launch(order, dispatch="ready"),)), ws, check=False)
    y = ws.Y.copy_to_host().transpose(0, 3, 1, 2)
    assert rel_err(y, reference(x, w)) <= TOL


def test_ready_queue_dispatch_reports_a_task_that_never_becomes_ready():
    """A launch holding a task whose parent is in no launch: it ends in a MegakernelError after the poll
    limit instead of hanging. (The CUDA simulator runs blocks one by one, so the first GEMM's wait on
    counter 0 reports; on a GPU a block polling an empty queue slot may report first.)"""
    shape = (1, 2, 3, 3, 3)
    config = cfg(m=2, t=4)
    graph = graph_of(shape, config)
    plan = ex.make_plan(ConvProblem(*shape), config, graph)
    without_ftrans = np.flatnonzero(graph.kind != 0)
    # counter 0 (the filter transforms) is never signalled in this launch, so the GEMMs are its roots
    # and wait on it at their claim: the ordinary bounded wait reports them
    x, w = inputs(*shape, seed=10)
    ws = ex.workspace(plan, cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), cuda.to_device(w))
    with pytest.raises(MegakernelError, match=r"gave up after 3 polls of counter 0|ready-queue slot \d+ was still "
                                              r"empty after 3 polls"):
        ex.run_schedule(plan, Schedule("no-ftrans", (Launch(without_ftrans, dispatch="ready"),)), ws,
                        poll_limit=3, check=False)


# --- layouts and device arrays --------------------------------------------------------------------

def test_nhwc_layout():
    x, w = inputs(1, 3, 4, 5, 6, seed=8)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = conv2d(xh, w, layout="NHWC", config=cfg(m=2, t=4))
    assert y.shape == (1, 5, 6, 4)
    assert rel_err(y, reference(xh, w, layout="NHWC")) <= TOL


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_device_arrays_in_device_array_out(layout):
    x, w = inputs(1, 2, 3, 4, 3, seed=9)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    d_y = conv2d(cuda.to_device(x), cuda.to_device(w), layout=layout, config=cfg(m=4))
    assert hasattr(d_y, "copy_to_host")
    assert rel_err(d_y.copy_to_host(), reference(x, w, layout=layout)) <= TOL


# --- bounded waits ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dispatch", ["blockidx", "ticket"])
def test_invalid_map_reports_an_error_instead_of_hanging(dispatch):
    shape = (1, 2, 3, 3, 3)
    config = cfg(m=2, t=4)
    graph = graph_of(shape, config)
    plan = ex.make_plan(ConvProblem(*shape), config, graph)
    order = np.argsort(-graph.kind.astype(np.int64), kind="stable")      # output transforms first
    bad = Schedule("reversed", (Launch(order, dispatch=dispatch),))
    x, w = inputs(*shape, seed=10)
    ws = ex.workspace(plan, cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), cuda.to_device(w))
    # On a GPU the waiting GEMMs run concurrently and any of them may give up first; the simulator
    # runs block 0 (the first output transform) alone, so it is the one that reports.
    with pytest.raises(MegakernelError, match=r"task \d+ \((otrans|gemm), group 0, index \d+\) at map position "
                                              r"\d+ gave up after 3 polls of counter \d+") as info:
        ex.run_schedule(plan, bad, ws, poll_limit=3, check=False)
    if numba.config.ENABLE_CUDASIM:
        assert "(otrans, group 0, index 0) at map position 0" in str(info.value)


def test_invalid_map_is_rejected_before_launch():
    x, w = inputs(1, 2, 3, 3, 3, seed=11)
    config = cfg(m=2, t=4)
    graph = graph_of((1, 2, 3, 3, 3), config)
    bad = Schedule("reversed", (Launch(np.arange(graph.num_tasks)[::-1].copy()),))
    with pytest.raises(MappingError, match="invalid schedule 'reversed'"):
        conv2d(x, w, mapping=bad, config=config)


# --- input validation (no kernels run) ---------------------------------------------------------------

@pytest.mark.parametrize("kwargs,xshape,wshape,dtype,match", [
    ({}, (1, 2, 4, 4), (3, 2, 3, 3), np.float64, "x must be float32"),
    ({}, (1, 2, 4, 4), (3, 2, 5, 5), np.float32, "only 3x3 filters"),
    ({}, (1, 2, 4, 4), (3, 4, 3, 3), np.float32, "channels differ: x has C=2"),
    ({}, (2, 4, 4), (3, 2, 3, 3), np.float32, "x must be 4-D"),
    ({"layout": "CHWN"}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "layout='CHWN' is not allowed"),
    ({"schedule": "magic"}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "schedule='magic' is not allowed"),
    ({"m": 3}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "m=3 is not allowed"),
    ({"padding": -1}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "padding=-1 is not allowed"),
    ({"schedule": "nonfused", "dispatch": "blockidx"}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32,
     "apply to schedule='fused' only"),
    ({"mapping": "fast"}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "mapping must be None"),
    ({"dispatch": "random"}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "dispatch='random' is not allowed"),
    # empty dimensions: named as the array's shape (before: 'layer: N=0 ...' from the problem behind it)
    ({}, (0, 2, 4, 4), (3, 2, 3, 3), np.float32, r"x has shape \(0, 2, 4, 4\): every dimension must be >= 1"),
    ({}, (1, 2, 4, 4), (0, 2, 3, 3), np.float32, r"w has shape \(0, 2, 3, 3\)"),
    ({}, (1, 2, 4, 0), (3, 2, 3, 3), np.float32, r"x has shape \(1, 2, 4, 0\)"),
    # a float tile (before: m=4.0 ran as if 4) and blocks_per_sm without the persistent style (before: dropped)
    ({"m": 4.0}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "m=4.0 is not allowed"),
    ({"blocks_per_sm": 2}, (1, 2, 4, 4), (3, 2, 3, 3), np.float32, "blocks_per_sm=2 is not allowed with style='per_task'"),
])
def test_bad_inputs_raise_one_line_errors(kwargs, xshape, wshape, dtype, match):
    x = np.ones(xshape, dtype)
    w = np.ones(wshape, np.float32)
    with pytest.raises(KernelInputError, match=match) as info:
        conv2d(x, w, **kwargs)
    assert "\n" not in str(info.value) and isinstance(info.value, MegasimError)


def test_mixed_host_and_device_inputs_are_rejected():
    with pytest.raises(KernelInputError, match="must both be NumPy arrays or both device arrays"):
        conv2d(np.ones((1, 2, 4, 4), np.float32), cuda.to_device(np.ones((3, 2, 3, 3), np.float32)))


def test_persistent_blockidx_is_rejected():
    x, w = inputs(1, 2, 3, 3, 3, seed=12)
    with pytest.raises(KernelInputError, match="dispatch='blockidx' is not allowed with style='persistent'"):
        conv2d(x, w, config=cfg(m=2, t=4), style="persistent", dispatch="blockidx")


@pytest.mark.parametrize("schedule", ["fused", "nonfused"])
def test_both_gemm_maths_run_in_one_process(schedule):
    """A config's gemm_math picks its kernels per call: the FP32-pipe and the 3xTF32 tensor-core GEMM
    (the specialised t = 32 path) side by side, each correct."""
    from gpu.kernels.winograd import megakernel as mk
    x, w = inputs(1, 3, 6, 5, 3, seed=21)
    ref = reference(x, w)
    for math in ("fp32", "3xtf32"):
        config = WinogradConfig(m=2, tiles_per_group=32, gemm_math=math)
        y = conv2d(x, w, schedule=schedule, config=config, gemm_math=math)
        assert rel_err(y, ref) < TOL, math
    assert mk.kernels_for("fp32").megakernel is not mk.kernels_for("3xtf32").megakernel
    with pytest.raises(ValueError, match="gemm_math='bf16' is not allowed"):
        mk.kernels_for("bf16")


def test_gemm_math_argument_is_checked():
    x, w = inputs(1, 2, 3, 3, 3, seed=12)
    with pytest.raises(KernelInputError, match="gemm_math='bf16' is not allowed") as info:
        conv2d(x, w, gemm_math="bf16")
    assert "\n" not in str(info.value)
    with pytest.raises(KernelInputError, match="gemm_math='3xtf32' differs from config.gemm_math='fp32'"):
        conv2d(x, w, config=WinogradConfig(m=2, gemm_math="fp32"), gemm_math="3xtf32")


def test_mapping_error_passes_through():
    x, w = inputs(*AWKWARD, seed=13)
    with pytest.raises(MappingError):
        conv2d(x, w, mapping=Algorithm1Params(0, 0, 99), config=cfg(m=4))


# --- the compile-time specialised GEMM (gpu.kernels.winograd.gemm_vec.make_gemm_vec) -------------------------------

@pytest.mark.parametrize("layout, block, shape", [
    ((16, 16, 8, 8, 2), 8, (1, 11, 13, 9, 9)),       # rows, width and C all short of the tile
    ((16, 16, 8, 16, 4), 18, AWKWARD),               # 4-way k-split, 2 idle threads
    ((8, 16, 4, 4, 2), 4, (1, 6, 21, 7, 9)),
    ((8, 8, 2, 2, 2), 2, (2, 5, 7, 5, 3)),           # C = 5: a stage of one real channel
    ((16, 16, 8, 8, 2), 8, (1, 9, 20, 9, 9)),        # K = 20: full k-tile (128-bit stores), then 4 columns
    ((8, 16, 4, 4, 2), 4, (2, 6, 32, 7, 5)),         # every k-tile full
])
def test_vector_gemm_matches_float64(layout, block, shape):
    from gpu.kernels.winograd.gemm_vec import make_gemm_vec
    from megasim.algorithms.winograd.lowering import winograd_shape
    fn = make_gemm_vec(*layout)

    @cuda.jit
    def kern(table, prm, V, U, M):
        b = cuda.blockIdx.x
        fn(table[b, 1], table[b, 2], prm, V, U, M)

    T, GK, KS = layout[:3]
    p = ConvProblem(*shape)
    config = WinogradConfig(tiles_per_group=T, gemm_k_tile=GK, gemm_k_step=KS, gemm_threads=32)
    sh = winograd_shape(p, config)
    prm = ex.pack_params(p, config, sh)
    rng = np.random.default_rng(6)
    V = rng.standard_normal((36, sh.tiles, p.c)).astype(np.float32)
    U = rng.standard_normal((36, p.c, p.k)).astype(np.float32)
    M = np.full((36, sh.tiles, p.k), np.nan, np.float32)
    tasks = [(g, e * sh.k_tiles + kt) for e in range(36) for g in range(sh.groups) for kt in range(sh.k_tiles)]
    table = np.zeros((len(tasks), 8), np.int32)
    table[:, 1:3] = tasks
    kern[len(tasks), block, 0, fn.shared_bytes](table, prm, V, U, M)
    ref = np.einsum("etc,eck->etk", V.astype(np.float64), U.astype(np.float64))
    assert rel_err(M, ref) <= TOL


def test_vector_gemm_rejects_a_layout_it_cannot_tile():
    from gpu.kernels.winograd.gemm_vec import make_gemm_vec
    with pytest.raises(ValueError, match="no vector GEMM layout for T=12"):
        make_gemm_vec(12, 16, 8, 8, 2)


def test_vector_gemm_param_indices_match_the_executor():
    from gpu.kernels.winograd import gemm_vec, device as dev
    assert (gemm_vec._P_C, gemm_vec._P_K, gemm_vec._P_TILES, gemm_vec._P_KTILES) == (dev.P_C, dev.P_K, dev.P_TILES, dev.P_KTILES)


def test_gemm_shared_bytes_covers_the_specialised_paths():
    from gpu.kernels.winograd import device as dev
    for math, fast in dev._FAST_BY_MATH.items():
        for key, fn in fast.items():
            assert dev.fast_gemm_for(*key, gemm_math=math) is fn
            assert dev.gemm_shared_bytes(*key, gemm_math=math) == fn.shared_bytes
            assert dev.gemm_shared_bytes(*key[:3], gemm_math=math) >= fn.shared_bytes
    assert tuple(dev._FAST_BY_MATH) == GEMM_MATHS
    assert dev.gemm_shared_bytes(2, 8, 2, 32) == 2 * 2 * (4 + 8) * 4


def test_model_knows_the_kernels_gemm_footprint():
    """megasim's occupancy uses the GEMM kernel's shared memory and registers: they must agree with
    gpu/'s own sizing for the specialised paths and the generic path."""
    from gpu.kernels.winograd import device as dev
    from megasim.algorithms.winograd.lowering import GEMM_FAST_PATHS_BY_MATH
    for math, paths in GEMM_FAST_PATHS_BY_MATH.items():
        for (t, gk, ks, thr), (_, smem) in paths.items():
            assert dev.gemm_shared_bytes(t, gk, ks, thr, math) == smem
            assert WinogradConfig(tiles_per_group=t, gemm_k_tile=gk, gemm_k_step=ks, gemm_threads=thr,
                                  gemm_math=math).gemm_shared_bytes == smem
    for t, gk, ks, thr in [(4, 8, 4, 32), (6, 10, 3, 64), (32, 64, 8, 256), (16, 48, 8, 128)]:
        cfg = WinogradConfig(tiles_per_group=t, gemm_k_tile=gk, gemm_k_step=ks, gemm_threads=thr)
        assert cfg.gemm_shared_bytes == dev.gemm_shared_bytes(t, gk, ks, thr), (t, gk, ks, thr)


# --- the timing path: PreparedSchedule with arguments packed once (gpu.runtime.fast_launch) ---------------

@pytest.mark.parametrize("kernels", ["megakernel", "per_kind", "megakernel-ready"])
def test_prepared_schedule_runs_repeatedly_on_rotated_workspaces(kernels):
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.algorithms.winograd import winograd_nonfused
    config = cfg(m=4, t=2)
    problem = ConvProblem(*AWKWARD, padding=1)
    plan = ex.make_plan(problem, config)
    graph = plan.graph
    schedule = winograd_nonfused(graph) if kernels == "per_kind" else algorithm1(graph, default_params(graph))
    if kernels == "megakernel-ready":     # the queue and pending counts are reset with the counters every run
        schedule, kernels = schedule.with_style("per_task", "ready"), "megakernel"
    prep = PreparedSchedule(plan, schedule, kernels=kernels)
    wss = {}
    for seed in (21, 22, 21):          # the third run reuses the first workspace's packed launches
        x, w = inputs(*AWKWARD, seed=seed)
        ws = wss.setdefault(seed, ex.workspace(plan, cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1))),
                                               cuda.to_device(w)))
        ws.Y.copy_to_device(np.full(ws.Y.shape, np.nan, np.float32))
        prep.run(ws)
        prep.check()
        y = ws.Y.copy_to_host().transpose(0, 3, 1, 2)
        assert rel_err(y, reference(x, w)) <= TOL



@pytest.mark.parametrize("problem", [ConvProblem(64, 512, 64, 512, 512),      # V: 36 x 1M tiles x 512
                                     ConvProblem(1, 8192, 8192, 4, 4)])      # U: 36 x 8192 x 8192
def test_tensors_of_2_31_elements_are_refused(problem):
    """Flat indices stay below 2^31 (the GEMM's 32-bit index arithmetic relies on it)."""
    with pytest.raises(KernelInputError, match="2\\^31 or more elements") as info:
        ex.make_plan(problem, WinogradConfig())
    assert "\n" not in str(info.value)
