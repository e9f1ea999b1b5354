"""The CPU-testable parts of the GPU benchmark: timing statistics, cuDNN enum tables and struct layout,
GEMM-phase shapes, CSV rows and table, the fused sweep's candidates; and the prepared-schedule runner
on Numba's CUDA simulator (tiny shapes) against the float64 oracle."""

from __future__ import annotations

import ctypes
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu.baselines import BaselineError, gemm_phase_shape
from gpu.cudnn_legacy import (FWD_ALGOS, MATH_MODES, MATH_TYPES, AlgoResult, ConvFwdAlgoPerf, CudnnConv, CudnnError,
                              algo_name, algo_value, best_ok, loaded_cudnn_dirs)
from gpu.runtime.timing import TimingError, TimingStats, rotation_sets, summarize, time_cuda
from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd, winograd_shape
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.workloads import TABLE2_NAMES, parse_layer
from megasim.workloads.problem import ConvProblem

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from experiments.benchmarks import winograd_bench as wb  # noqa: E402
from experiments.provenance import read_rows, write_results  # noqa: E402


# --- timing ------------------------------------------------------------------------------------------

def test_summarize_median_min_max():
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert (s.median_ms, s.min_ms, s.max_ms, s.repeats) == (2.5, 1.0, 10.0, 4)
    assert s.samples == (3.0, 1.0, 2.0, 10.0)
    assert s.spread == pytest.approx(9.0 / 2.5)
    assert s.as_row() == {"median_ms": 2.5, "min_ms": 1.0, "max_ms": 10.0}


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [-0.1], [math.inf]])
def test_summarize_rejects_bad_samples(bad):
    with pytest.raises(TimingError):
        summarize(bad)


def test_rotation_sets():
    gib = 1 << 30
    assert rotation_sets(1 * gib, 80 * gib) == 3
    assert rotation_sets(10 * gib, 80 * gib) == 2          # 20 GiB budget holds two 10 GiB sets
    assert rotation_sets(100 * gib, 80 * gib) == 1         # never fewer than one
    assert rotation_sets(1, 80 * gib, wanted=5) == 5
    with pytest.raises(TimingError):
        rotation_sets(1, 1, wanted=0)
    with pytest.raises(TimingError):
        rotation_sets(1, 1, budget_fraction=0)


@pytest.mark.parametrize("kwargs", [{"warmup": -1}, {"repeats": 0}, {"rotate": 0}, {"repeats": True}])
def test_time_cuda_checks_arguments_first(kwargs):
    with pytest.raises(TimingError):
        time_cuda(lambda i: None, **kwargs)


def test_time_cuda_without_a_device_says_why():
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present: tests/test_gpu_baselines.py covers time_cuda")
    except ImportError:
        pass
    with pytest.raises(TimingError, match="torch|CUDA"):
        time_cuda(lambda i: None)


# --- cuDNN tables ------------------------------------------------------------------------------------------

def test_fwd_algo_values_follow_cudnn_headers():
    assert FWD_ALGOS == {"IMPLICIT_GEMM": 0, "IMPLICIT_PRECOMP_GEMM": 1, "GEMM": 2, "DIRECT": 3, "FFT": 4,
                         "FFT_TILING": 5, "WINOGRAD": 6, "WINOGRAD_NONFUSED": 7}
    assert algo_value("WINOGRAD_NONFUSED") == 7
    assert algo_value("CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING") == 5
    assert algo_value("winograd_nonfused") == 7
    assert algo_name(1) == "IMPLICIT_PRECOMP_GEMM" and algo_name(42) == "ALGO_42"
    with pytest.raises(CudnnError, match="allowed"):
        algo_value("WINOGRAD_FUSED_PLEASE")


def test_math_types():
    assert MATH_TYPES == {"DEFAULT_MATH": 0, "TENSOR_OP_MATH": 1, "TENSOR_OP_MATH_ALLOW_CONVERSION": 2, "FMA_MATH": 3}
    assert MATH_MODES == {"fp32": 3, "tf32": 0}


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_size_t) != 8, reason="layout checked for 64-bit targets")
def test_perf_struct_layout():
    assert ctypes.sizeof(ConvFwdAlgoPerf) == 48
    assert ConvFwdAlgoPerf.time.offset == 8
    assert ConvFwdAlgoPerf.memory.offset == 16
    assert ConvFwdAlgoPerf.determinism.offset == 24
    assert ConvFwdAlgoPerf.mathType.offset == 28
    assert ConvFwdAlgoPerf.reserved.offset == 32


def test_loaded_cudnn_dirs_from_maps():
    maps = "\n".join([
        "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6",
        "7f02-7f03 r-xp 00000000 08:01 2 /venv/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
        "7f04-7f05 r--p 00000000 08:01 2 /venv/site-packages/nvidia/cudnn/lib/libcudnn_cnn.so.9",
        "7f06-7f07 rw-p 00000000 00:00 0 ",
        "7f08-7f09 r-xp 00000000 08:01 3 /opt/other/libcudnn_ops.so.9.1.0",
    ])
    assert loaded_cudnn_dirs(maps) == [Path("/venv/site-packages/nvidia/cudnn/lib"), Path("/opt/other")]


def test_best_ok_picks_fastest_successful():
    rs = [AlgoResult("FFT", "CUDNN_STATUS_SUCCESS", 0.5, 10, "FMA_MATH", True),
          AlgoResult("WINOGRAD", "CUDNN_STATUS_NOT_SUPPORTED", math.nan, 0, "FMA_MATH", False),
          AlgoResult("WINOGRAD_NONFUSED", "CUDNN_STATUS_SUCCESS", 0.3, 10, "FMA_MATH", True)]
    assert best_ok(rs).algo == "WINOGRAD_NONFUSED"
    assert best_ok(rs[1:2]) is None


def test_cudnn_conv_without_gpu_raises_cudnn_error():
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present: tests/test_gpu_baselines.py covers CudnnConv")
    except ImportError:
        pass
    with pytest.raises(CudnnError, match="PyTorch|CUDA"):
        CudnnConv(1, 4, 4, 8, 8)
    with pytest.raises(CudnnError, match="allowed"):
        CudnnConv(1, 4, 4, 8, 8, math="bf16")


# --- GEMM phase ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TABLE2_NAMES)
def test_gemm_phase_shape_matches_lowering(name):
    p = parse_layer(name)
    sh = gemm_phase_shape(p)
    tiles = p.n * -(-p.out_h // 4) * -(-p.out_w // 4)
    assert (sh.batch, sh.rows, sh.inner, sh.cols) == (36, tiles, p.c, p.k)
    assert sh.rows == winograd_shape(p, WinogradConfig(m=4)).tiles
    assert sh.flops == 2 * 36 * tiles * p.c * p.k


def test_gemm_phase_shape_examples():
    assert gemm_phase_shape(parse_layer("resnet-1")).rows == 64 * 14 * 14
    assert gemm_phase_shape(parse_layer("resnet-4")).rows == 64 * 2 * 2          # 7x7: ceil(7/4) = 2
    sh = gemm_phase_shape(ConvProblem(2, 3, 5, 6, 10), m=2)
    assert (sh.batch, sh.rows) == (16, 2 * 3 * 5)
    assert sh.bytes == 4 * 16 * (30 * 3 + 3 * 5 + 30 * 5)
    with pytest.raises(BaselineError):
        gemm_phase_shape(ConvProblem(1, 3, 3, 9, 9, stride=2))


# --- rows, table, sweep, arguments ------------------------------------------------------------------------

def test_make_row_columns_and_status():
    stats = TimingStats(2.0, 1.5, 3.0, (2.0, 1.5, 3.0))
    row = wb.make_row("resnet-1", "fused", stats, 2e-6, sets=3, flops=4_000_000_000)
    assert tuple(row)[:6] == ("layer", "impl", "median_ms", "min_ms", "max_ms", "rel_err")
    assert tuple(row) == wb.COLUMNS
    assert row["status"] == "ok" and row["repeats"] == 3 and row["tflops"] == pytest.approx(2.0)
    assert wb.make_row("l", "fused", stats, 5e-3)["status"].startswith("FAIL")
    assert wb.make_row("l", "fused", stats, math.nan)["status"].startswith("FAIL")     # unwritten output
    assert wb.make_row("l", "cudnn_best_tf32", stats, 5e-4)["status"] == "ok"          # TF32 tolerance
    with pytest.raises(ValueError, match="allowed"):
        wb.make_row("l", "fused_but_faster", stats, 0.0)


def test_worst_propagates_nan():
    assert wb.worst(1e-6, 2e-6) == 2e-6
    assert math.isnan(wb.worst(math.nan, 1e-6)) and math.isnan(wb.worst(1e-6, math.nan))


def test_error_row_has_nan_timings():
    row = wb.error_row("vgg-1", "cudnn_winograd_nonfused", RuntimeError("CUDNN_STATUS_NOT_SUPPORTED"))
    assert math.isnan(row["median_ms"]) and math.isnan(row["rel_err"]) and row["repeats"] == 0
    assert row["status"].startswith("error RuntimeError: CUDNN_STATUS_NOT_SUPPORTED")
    assert wb.failed([row]) == [row]


def test_rows_round_trip_through_csv(tmp_path):
    stats = TimingStats(2.0, 1.5, 3.0, (2.0,))
    rows = [wb.make_row("resnet-1", "fused", stats, 1e-6), wb.error_row("resnet-1", "nonfused", KeyError("x"))]
    csv_path, _ = write_results(rows, tmp_path, wb.NAME, {"device": "test"})
    back = read_rows(csv_path)
    assert list(back[0])[:6] == ["layer", "impl", "median_ms", "min_ms", "max_ms", "rel_err"]
    assert back[1]["median_ms"] == "nan" and back[0]["impl"] == "fused"


def test_format_table_and_slug():
    stats = TimingStats(0.25, 0.2, 0.3, (0.25,))
    rows = [wb.make_row("resnet-1", "fused", stats, 1e-6), wb.make_row("resnet-1", "cudnn_best_fp32", stats, 1e-2),
            wb.make_row("vgg-1", "fused", None, math.nan, status="error boom")]
    text = wb.format_table(rows)
    assert "resnet-1" in text and "vgg-1" in text and "0.250!" in text and "nan!" in text
    assert wb.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert wb.device_slug("  ") == "unknown-device"


def test_sweep_candidates_are_valid_and_include_default():
    from megasim.algorithms.winograd.algorithm1 import counts, default_params
    graph = lower_winograd(ConvProblem(2, 16, 16, 12, 12), WinogradConfig(tiles_per_group=4, gemm_k_tile=8))
    cands = wb.sweep_candidates(graph)
    assert default_params(graph) in cands
    assert len(cands) == len(set(cands))
    wide = wb.sweep_candidates(graph, "wide")
    assert set(cands) <= set(wide) and len(wide) == len(set(wide))
    for p in wide:
        algorithm1(graph, p)        # raises MappingError if invalid
    space = wb.sweep_candidates(graph, "space")
    assert default_params(graph, 1) in space and len(space) == len(set(space))
    assert {p.m for p in space} == {m for m in (1, 2, 4, 8, 16) if m <= counts(graph)["N_G"]}
    assert len({p.d_go for p in space if p.m == 1}) == 3
    for p in space:
        algorithm1(graph, p)
    deep = wb.sweep_candidates(graph, "deep")
    assert set(space) < set(deep) and len({p.d_go for p in deep if p.m == 1}) == 5


def test_parse_args_defaults():
    a = wb.parse_args([])
    assert a.layers == list(TABLE2_NAMES) and a.repeats == 30 and a.warmup == 5 and a.fused_sweep == "space" and a.ready_sweep == "small"
    q = wb.parse_args(["--quick"])
    assert q.layers == list(wb.QUICK_LAYERS) and q.repeats == 10
    c = wb.parse_args(["--layers", "vgg-1", "--repeats", "25", "--fused-sweep", "none"])
    assert c.layers == ["vgg-1"] and c.repeats == 25 and c.fused_sweep == "none"


def test_parse_args_model_pairs(tmp_path):
    a = wb.parse_args(["--model-pairs", "megasim/hardware/calibrated/h200.json"])
    assert a.model_spec.name.startswith("H200")
    for argv, match in ((["--model-pairs", str(tmp_path / "none.json")], "--model-pairs"),
                        (["--model-pairs", "megasim/hardware/calibrated/h200.json", "--config", "pairs=2"],
                         "give one")):
        with pytest.raises(SystemExit):
            wb.parse_args(argv)


def test_parse_args_model_tiles(capsys):
    spec = "megasim/hardware/calibrated/h200.json"
    assert wb.parse_args(["--model-pairs", spec, "--model-tiles", "4,6,7"]).model_tile_choices == (4, 6, 7)
    assert wb.parse_args(["--model-pairs", spec]).model_tile_choices is None
    for argv, match in ((["--model-tiles", "4,7"], "needs --model-pairs"),
                        (["--model-pairs", spec, "--model-tiles", "4,7", "--config", "tile=6"], "needs --model-pairs"),
                        (["--model-pairs", spec, "--model-tiles", "4,9"], "each tile must be one of"),
                        (["--model-pairs", spec, "--model-tiles", "4,x"], "comma-separated")):
        with pytest.raises(SystemExit):
            wb.parse_args(argv)
        assert match in capsys.readouterr().err


def test_main_without_gpu_exits_with_a_reason(capsys):
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present")
    except ImportError:
        pass
    assert wb.main(["--quick"]) == 2
    assert "torch" in capsys.readouterr().err


# --- the prepared runner on the CUDA simulator ---------------------------------------------------------------

@pytest.mark.cudasim
def test_prepared_schedule_on_simulator():
    numba = pytest.importorskip("numba")
    if not numba.config.ENABLE_CUDASIM:
        pytest.skip("runs on Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set by tests/conftest.py)")
    from numba import cuda
    from gpu.runtime import executor as ex
    from gpu.runtime.prepared import PreparedSchedule, gemm_only
    from gpu.winograd import reference
    from megasim.algorithms.winograd.algorithm1 import default_params
    from megasim.orders import nonfused

    old = sys.getswitchinterval()
    sys.setswitchinterval(2e-4)     # the simulator's barriers, as in test_gpu_winograd.py
    try:
        problem = ConvProblem(1, 3, 5, 5, 7)
        cfg = WinogradConfig(m=4, tiles_per_group=2, transform_threads=32, gemm_k_tile=8, gemm_threads=32,
                             gemm_k_step=2)
        plan = ex.make_plan(problem, cfg)
        rng = np.random.default_rng(7)
        x = rng.standard_normal((1, 3, 5, 7)).astype(np.float32)
        w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
        ref = reference(x, w)
        ws = ex.workspace(plan, cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), cuda.to_device(w))

        def err():
            y = ws.Y.copy_to_host().transpose(0, 3, 1, 2)
            return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))

        fused = PreparedSchedule(plan, algorithm1(plan.graph, default_params(plan.graph)))
        for _ in range(2):          # the second run checks that counters and tickets are restored
            ws.Y.copy_to_device(np.full(ws.Y.shape, np.nan, np.float32))
            fused.run(ws)
            fused.check()
            assert err() < 1e-5
        per_kind = PreparedSchedule(plan, nonfused(plan.graph), kernels="per_kind")
        ws.Y.copy_to_device(np.full(ws.Y.shape, np.nan, np.float32))
        per_kind.run(ws)
        assert err() < 1e-5
        gemm = PreparedSchedule(plan, gemm_only(plan.graph), kernels="per_kind", check=False)
        ws.M.copy_to_device(np.full(ws.M.shape, np.nan, np.float32))
        gemm.run(ws)
        V, U, M = (a.copy_to_host().astype(np.float64) for a in (ws.V, ws.U, ws.M))
        assert np.linalg.norm(M - V @ U) / np.linalg.norm(V @ U) < 1e-5
    finally:
        sys.setswitchinterval(old)
