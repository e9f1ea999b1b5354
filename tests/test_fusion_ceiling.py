"""The fusion ceiling's reading of ncu logs and bench runs, and the profiled schedules under the simulator."""

import json
import math

import pytest

from experiments.studies.fusion import fusion_ceiling as fc
from gpu.diagnostics import profile_schedules as ps

HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
         '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'


def _rows(kid: int, name: str, metrics: dict) -> list[str]:
    return [f'"{kid}","1","python3","host","{name}","1","7","(128, 1, 1)","(10, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{m}","{u}","{v}"' for m, (u, v) in metrics.items()]


def _metrics(inst: float, cycles: float, ns: float, ffma_threads: float = 0.0) -> dict:
    return {"smsp__inst_executed.sum": ("inst", f"{inst:,.0f}"), "sm__cycles_elapsed.max": ("cycle", f"{cycles:,.0f}"),
            "gpu__time_duration.sum": ("nsecond", f"{ns:,.0f}"), "dram__bytes_read.sum": ("byte", "1,000"),
            "dram__bytes_write.sum": ("byte", "500"),
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": ("inst", f"{ffma_threads:,.0f}")}


def _log(tmp_path, kernels) -> object:
    lines = ["==PROF== Connected to process 1", "resnet-1: something the program printed", HEADER]
    for kid, (name, metrics) in enumerate(kernels):
        lines += _rows(kid, name, metrics)
    path = tmp_path / "ncu.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


ENTRY = {"layer": "L", "tile": 4, "pairs_fused": 2, "fused_launches": ["fused"],
         "mapping": {"D_IG": 8, "D_GO": 16, "M": 2, "dispatch": "ticket"},
         "nonfused_launches": ["ftrans", "itrans", "gemm", "otrans"], "bench_fused_ms": 0.1, "bench_nonfused_ms": 0.12}


def test_ceiling_from_a_log(tmp_path):
    # 8 SMs x 4 sub-partitions, 2 GHz: 1.6e6 warp instructions take at least 1.6e6 / 32 / 2e9 s = 25 us.
    fused = _metrics(inst=1.6e6, cycles=100_000, ns=50_000, ffma_threads=32 * 0.8e6)
    path = _log(tmp_path, [("restore_kernel", _metrics(10, 100, 50)), ("megakernel_m4", fused),
                           *[(f"{k}_kernel", _metrics(0.5e6, 40_000, 20_000)) for k in ("ftrans", "itrans", "gemm", "otrans")]])
    records = fc.read_ncu_csv(path)
    assert [r.role for r in records] == ["restore", "fused"] + ["nonfused"] * 4
    (entry, f, nf), = fc.split_by_layer(records, {"layers": [ENTRY]})
    row = fc.layer_row(entry, f, nf, sms=8, dram_bw_gbps=1.0)
    assert row["clock_ghz"] == pytest.approx(2.0)
    assert row["issue_floor_fused_us"] == pytest.approx(25.0)
    assert row["ceiling"] == pytest.approx(120.0 / 25.0)
    assert row["ceiling_at_cublas_issue"] == pytest.approx(120.0 / 25.0 * fc.CUBLAS_ISSUE_ACTIVE)
    assert row["measured_speedup"] == pytest.approx(1.2)
    assert row["issue_active_fused"] == pytest.approx(1.6e6 / (32 * 100_000))
    assert row["issue_active_nonfused"] == pytest.approx(2.0e6 / (32 * 160_000))
    assert row["inst_fused_over_nonfused"] == pytest.approx(0.8)
    assert row["ffma_share_fused"] == pytest.approx(0.5)
    assert row["dram_floor_fused_us"] == pytest.approx(1.5)    # 1,500 bytes at 1 GB/s
    assert (row["dram_read_fused_MB"], row["dram_write_nonfused_MB"]) == (pytest.approx(1e-3), pytest.approx(2e-3))
    assert row["mapping"] == "D_IG=8,D_GO=16,M=2,dispatch=ticket"


def test_a_log_that_does_not_match_the_manifest_is_refused(tmp_path):
    path = _log(tmp_path, [("megakernel_m4", _metrics(1, 1, 1)), ("gemm_kernel", _metrics(1, 1, 1))])
    with pytest.raises(ValueError, match="layer L: expected 1 megakernel and 4 non-fused"):
        fc.split_by_layer(fc.read_ncu_csv(path), {"layers": [ENTRY]})
    extra = _log(tmp_path, [("megakernel_m4", _metrics(1, 1, 1))] + [("k", _metrics(1, 1, 1))] * 5)
    with pytest.raises(ValueError, match="1 kernel records after"):
        fc.split_by_layer(fc.read_ncu_csv(extra), {"layers": [ENTRY]})


def test_unknown_units_and_missing_header_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unit 'furlong'"):
        fc._number("3", "furlong")
    assert fc._number("1,234", "usecond") == pytest.approx(1.234e6)
    path = tmp_path / "x.csv"
    path.write_text("no csv here\n")
    with pytest.raises(ValueError, match="no ncu CSV header"):
        fc.read_ncu_csv(path)


def test_geomean_skips_what_is_not_a_positive_number():
    assert fc.geomean([2.0, 8.0, math.nan]) == pytest.approx(4.0)
    assert math.isnan(fc.geomean([]))


TINY = "N=1,C=3,K=2,H=5,W=6,R=3,S=3,stride=1,padding=1"


def _bench(ticket_ms: float, blockidx_ms: float) -> dict:
    cfg = {"m": 4, "tiles_per_group": 32, "transform_pairs_per_thread": 2}
    return {"meta": {"layers": ["tiny"], "per_layer": {"tiny": {
        "problem": TINY, "fused_sweep_best": {"D_IG": 4, "D_GO": 4, "M": 1}, "winograd_config": cfg,
        "winograd_config_nonfused": {**cfg, "transform_pairs_per_thread": 1}}}},
        "rows": [{"layer": "tiny", "impl": "fused_sweep_best", "median_ms": ticket_ms, "status": "ok"},
                 {"layer": "tiny", "impl": "fused_blockidx_best", "median_ms": blockidx_ms, "status": "ok"},
                 {"layer": "tiny", "impl": "nonfused", "median_ms": 0.5, "status": "ok"}]}


def test_layer_runs_take_the_faster_dispatch_and_name_missing_layers():
    (run,) = ps.layer_runs(_bench(0.3, 0.2))
    assert (run.dispatch, run.fused_ms, run.nonfused_ms, run.m) == ("blockidx", 0.2, 0.5, 1)
    assert ps.layer_runs(_bench(0.2, 0.3))[0].dispatch == "ticket"
    with pytest.raises(ValueError, match="layer 'vgg-1' is not allowed.*layers it has: tiny"):
        ps.layer_runs(_bench(0.2, 0.3), ["vgg-1"])


def test_other_mappings_replace_the_bench_best_and_bad_ones_are_named():
    (run,) = ps.layer_runs(_bench(0.3, 0.2))
    other = ps.with_mapping(run, "D_IG=16,D_GO=97,M=1")
    assert (other.d_ig, other.d_go, other.m, other.dispatch) == (16, 97, 1, "ticket") and math.isnan(other.fused_ms)
    assert ps.with_mapping(run, "D_IG=1,D_GO=2,M=1,dispatch=blockidx").dispatch == "blockidx"
    for bad, why in (("D_IG=1,D_GO=2", "write D_IG"), ("D_IG=1,D_GO=2,M=1,X=3", "write D_IG"),
                     ("D_IG=a,D_GO=2,M=1", "must be integers"), ("D_IG=1,D_GO=2,M=1,dispatch=ready", "dispatch='ready'")):
        with pytest.raises(ValueError, match=why):
            ps.with_mapping(run, bad)


def test_profiled_schedules_run_and_agree_under_the_simulator(tmp_path):
    from megasim.algorithms.winograd.algorithm1 import default_params
    from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd
    from megasim.workloads.catalogue import parse_layer
    bench = _bench(0.3, 0.2)
    cfg = WinogradConfig(**bench["meta"]["per_layer"]["tiny"]["winograd_config"])
    d = default_params(lower_winograd(parse_layer(TINY), cfg), 1)     # a valid mapping for this graph
    bench["meta"]["per_layer"]["tiny"]["fused_sweep_best"] = {"D_IG": d.d_ig, "D_GO": d.d_go, "M": d.m}
    path = tmp_path / "winograd_bench.json"
    path.write_text(json.dumps(bench))
    ps.main(["--bench", str(path), "--sets", "2", "--warmup", "0", "--out", str(tmp_path)])
    entry, = json.loads((tmp_path / "profile_manifest.json").read_text())["layers"]
    assert entry["mapping"]["dispatch"] == "blockidx" and entry["pairs_fused"] == 2
    assert entry["fused_vs_nonfused_rel"] < 1e-5
    assert entry["nonfused_launches"] == ["ftrans", "itrans", "gemm", "otrans"]


def test_model_columns_predict_the_profiled_runs():
    from megasim.hardware import load_spec
    entry = {"problem": TINY, "tile": 4, "pairs_fused": 2, "pairs_nonfused": 1,
             "mapping": {"D_IG": 1, "D_GO": 37, "M": 1, "dispatch": "blockidx"}}
    cols = fc.model_columns(entry, load_spec("megasim/hardware/calibrated/h200.json"))
    assert cols["model_fused_us"] > 0 and cols["model_nonfused_us"] > 0
    # every input byte is read from DRAM at least once, and every output byte written
    x_mb, y_mb = 1 * 3 * 5 * 6 * 4 / 1e6, 1 * 2 * 5 * 6 * 4 / 1e6
    for schedule in ("fused", "nonfused"):
        assert cols[f"model_dram_read_{schedule}_MB"] >= x_mb * 0.99
        assert cols[f"model_dram_write_{schedule}_MB"] >= y_mb * 0.99


@pytest.mark.parametrize("make", ["nothing", "folder", "manifest only"])
def test_a_folder_without_the_profile_run_is_one_line_saying_what_it_must_hold(tmp_path, capsys, make):
    """A results folder without profile_manifest.json gave '[Errno 2] ...'."""
    d = tmp_path / "run"
    if make != "nothing":
        d.mkdir()
    if make == "manifest only":
        (d / "profile_manifest.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        fc.main([str(d)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and str(d) in err
    assert "profile_manifest.json and the ncu --csv log" in err and "Errno" not in err
