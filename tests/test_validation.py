"""Validation metrics on synthetic data, the calibration fit's pieces, and a committed validation CSV
(tests/data/h200_validation.csv) re-simulated through `megasim simulate` (CPU only)."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from megasim.calibration.cases import kind_subgraph
from megasim.calibration.winograd import sanity_rules
from megasim.cli.main import main
from megasim.hardware import dump_spec, get_gpu, load_spec
from megasim.algorithms.winograd import WinogradParams
from megasim.plan import Plan, build
from megasim.calibration.validation import (kendall_tau, mape, max_error, pairwise_accuracy, program_key, regret, resolved_pairwise_accuracy, split_half_agreement, summarize, validation_plans)
from megasim.workloads import parse_layer

REPO = Path(__file__).resolve().parent.parent
# a validation run (208 points on the H200) predicted by the committed H200 spec; tests/data/README.md
# names the results file it was copied from
CSV = REPO / "tests/data/h200_validation.csv"


def test_mape_and_max_error():
    assert mape([110, 90], [100, 100]) == pytest.approx(0.10)
    assert max_error([130, 90], [100, 100]) == pytest.approx(0.30)
    with pytest.raises(ValueError):
        mape([1.0], [0.0])


def test_ranking_metrics():
    meas = [1.0, 2.0, 3.0, 4.0]
    assert kendall_tau([10, 20, 30, 40], meas) == pytest.approx(1.0)
    assert kendall_tau([40, 30, 20, 10], meas) == pytest.approx(-1.0)
    assert pairwise_accuracy([10, 20, 30, 40], meas) == 1.0
    assert pairwise_accuracy([40, 30, 20, 10], meas) == 0.0
    assert pairwise_accuracy([1, 1, 1, 1], meas) == 0.5          # predicted ties count a half
    assert math.isnan(pairwise_accuracy([1, 2], [3, 3]))          # no measured difference
    assert pairwise_accuracy([1, 3, 2], [1, 2, 3]) == pytest.approx(2 / 3)


def test_regret():
    assert regret([1, 2, 3], [5, 6, 7]) == 0.0
    assert regret([3, 2, 1], [5, 6, 7]) == pytest.approx(7 / 5 - 1)


def test_summarize_speedup_and_targets():
    rows = [{"layer": "L", "label": "nonfused", "params": "a", "predicted_us": 100, "measured_us": 100},
            {"layer": "L", "label": "a1_default", "params": "b", "predicted_us": 80, "measured_us": 90},
            {"layer": "L", "label": "a1_random", "params": "c", "predicted_us": 120, "measured_us": 130}]
    s = summarize(rows)
    v = s["per_layer"]["L"]
    assert v["speedup_predicted"] == pytest.approx(1.25) and v["speedup_measured"] == pytest.approx(100 / 90)
    assert v["regret"] == 0.0 and v["pairwise_accuracy"] == 1.0
    assert s["overall"]["points"] == 3 and not s["targets_met"]["points>=200"]


def test_summarize_with_error_metrics_not_finite_meets_no_target():
    """Times out of range (measured_us = 1e300, refused by --measured since) gave NaN metrics and 'met
    regret<=5%': such a summary has an outcome (exit 1) and meets nothing."""
    rows = [{"layer": "L", "label": f"m{i}", "params": str(i), "predicted_us": 100 + i, "measured_us": 1e308}
            for i in range(3)]
    rows[0]["measured_us"] = 1e-320          # relative errors overflow: inf
    s = summarize(rows)
    assert "not finite" in s["overall"]["outcome"] and not any(s["targets_met"].values())


def test_summarize_one_mapping_per_layer_is_quiet_and_not_applicable():
    """Every layer measured at one mapping: nothing to rank, so the pairwise target does not apply (before:
    NumPy's 'Mean of empty slice' and 'All-NaN' warnings, and the target counted as missed)."""
    import warnings
    rows = [{"layer": layer, "label": "nonfused", "params": "a", "predicted_us": 100, "measured_us": 110}
            for layer in ("L1", "L2")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = summarize(rows)
    assert math.isnan(s["per_layer"]["L1"]["pairwise_accuracy"])
    assert "pairwise_accuracy_mean" not in s["overall"] and "pairwise_accuracy_min" not in s["overall"]
    assert "pairwise_accuracy>=0.85 in every layer" in s["targets_not_applicable"]
    assert "pairwise_accuracy>=0.85 in every layer" not in s["targets_met"]
    # a layer with two mappings makes it apply again, over the layers that rank
    rows.append({"layer": "L2", "label": "naive", "params": "b", "predicted_us": 120, "measured_us": 130})
    s = summarize(rows)
    assert s["overall"]["pairwise_accuracy_min"] == 1.0 and "pairwise_accuracy>=0.85 in every layer" in s["targets_met"]


def test_validation_plans_distinct_and_valid():
    problem = parse_layer("N=2,C=16,K=24,H=20,W=18")
    plans = validation_plans(problem, 12)
    keys = [(p.schedule, p.param_string()) for _, p in plans]
    assert len(set(keys)) == len(keys) and keys[0][0] == "nonfused" and keys[1][0] == "naive"
    for _, p in plans:
        build(problem, Plan.parse(p.schedule, p.param_string()))   # the param string rebuilds it


def test_validation_plans_are_distinct_programs():
    # resnet-4 has few tiles and k-tiles: widened D_IG / D_GO saturate, and before plans were keyed by
    # their program, 7 of its 16 parameter sets ran the same task map (measured 7 times, scored as pairs)
    problem = parse_layer("resnet-4")
    plans = validation_plans(problem, 16)
    programs = [program_key(problem, p) for _, p in plans]
    assert len(plans) == 16 and len(set(programs)) == 16
    same = [Plan("fused", WinogradParams(d_ig=p.params.d_ig * 4, d_go=p.params.d_go * 4, m=p.params.m))
            for label, p in plans if label == "a1_default"]
    assert program_key(problem, same[0]) == program_key(problem, plans[2][1])   # saturated: one program


def test_split_half_agreement_and_resolved_pairs():
    # three points: a and b 1% apart with rounds that overlap, c far away
    rounds = [[100.0, 101.5, 100.2, 101.4], [101.0, 100.1, 101.2, 100.3], [120.0, 120.5, 119.8, 120.1]]
    med = [float(np.median(r)) for r in rounds]
    assert split_half_agreement(rounds) == pytest.approx(2 / 3)   # even rounds: a < b; odd: b < a
    acc, n = resolved_pairwise_accuracy([1.0, 2.0, 3.0], med, rounds)
    assert n == 2 and acc == 1.0                                   # only (a, c) and (b, c) are resolved
    acc, n = resolved_pairwise_accuracy([3.0, 2.0, 1.0], med, rounds)
    assert n == 2 and acc == 0.0
    assert math.isnan(split_half_agreement([[1.0], [2.0]]))
    assert resolved_pairwise_accuracy([1.0, 2.0], [1.0, 2.0], [[1.0], [2.0]])[1] == 0


def test_summarize_reports_repeatability_with_rounds():
    rows = [{"layer": "L", "schedule": "fused", "label": f"m{i}", "params": str(i), "predicted_us": 100 + i,
             "measured_us": 100 + 10 * i, "round_us": ";".join(str(100 + 10 * i + d) for d in (0, 1, 0, 1))}
            for i in range(4)]
    v = summarize(rows)["per_layer"]["L"]
    assert v["pairwise_repeatability"] == 1.0 and v["pairwise_accuracy_resolved"] == 1.0
    assert v["pairs_resolved"] == v["pairs"] == 6


def test_kind_subgraph_keeps_tasks_and_bytes():
    graph, schedule, _ = build(parse_layer("N=2,C=16,K=24,H=20,W=18"), Plan("nonfused"))
    for launch in schedule.launches:
        kind = graph.kind_names[int(graph.kind[int(launch.order[0])])]
        sub, sched = kind_subgraph(graph, kind, launch.order)
        ids = np.flatnonzero(graph.kind == graph.kind_id(kind))
        assert sub.num_tasks == ids.size == len(sched.launches[0].order)
        full_bytes = sum(graph.access_bytes[graph.access_ptr[i]:graph.access_ptr[i + 1]].sum() for i in ids)
        assert sub.access_bytes.sum() == pytest.approx(full_bytes)


def test_atomic_floor_rule():
    v = sanity_rules({"atomic_latency_ns": {"value": 9.7, "method": "x"}, "l2_latency_ns": {"value": 150, "method": "y"}})
    assert v["atomic_latency_ns"]["value"] == 150 and "artefact" in v["atomic_latency_ns"]["method"]


def test_megakernel_launch_ns_round_trip(tmp_path):
    import dataclasses
    spec = dataclasses.replace(get_gpu("H200"), megakernel_launch_ns=250_000.0,
                               sources={**get_gpu("H200").sources, "megakernel_launch_ns": "test"})
    dump_spec(spec, tmp_path / "s.json")
    back = load_spec(tmp_path / "s.json")
    assert back.megakernel_launch_ns == 250_000.0 and back.launch_ns(True) == 250_000.0
    assert back.launch_ns(False) == spec.kernel_launch_ns
    assert get_gpu("H200").megakernel_launch_ns is None


def test_calibrate_and_validate_without_gpu_exit_2(capsys):
    assert main(["calibrate", "--out", "/tmp/never.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a real CUDA GPU" in err
    assert main(["validate", "resnet-1", "--spec", str(REPO / "megasim/hardware/calibrated/h200.json")]) == 2


def test_committed_csv_reproduced_by_simulate(capsys):
    rows = list(csv.DictReader(CSV.open()))
    assert len(rows) >= 200
    picked = [r for r in rows if r["layer"] == "resnet-4"][:3]
    for r in picked:
        assert main(["simulate", r["layer"], "--spec", str(REPO / r["spec"]), "--schedule", r["schedule"],
                     "--param", r["params"], "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["predicted_us"] == pytest.approx(float(r["predicted_us"]), rel=1e-9)
        assert d["taskgraph_hash"] == r["taskgraph_hash"]


def test_a_row_that_does_not_fit_its_layer_is_named_without_a_worker_traceback(caplog, tmp_path):
    """On a Dask cluster the row's error was raised in the worker, which logged 'Compute Failed' and its
    traceback on the command's stderr before the one line."""
    import logging
    pytest.importorskip("distributed", reason="dask[distributed] is not installed")
    from distributed import Client, LocalCluster
    from megasim.calibration.validation import predict_rows
    from megasim.errors import InputError
    spec_path = tmp_path / "h100.json"
    dump_spec(get_gpu("H100"), spec_path)
    layer = "N=2,C=8,K=8,H=8,W=8"
    rows = [{"layer": layer, "schedule": "nonfused", "params": "", "measured_us": "10"},
            {"layer": layer, "schedule": "fused", "params": "D_IG=0,M=1", "measured_us": "10"}]
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client, caplog.at_level(logging.ERROR, logger="distributed"):
        with pytest.raises(InputError, match=r"^m\.csv row 3: D_IG=0 is too small"):
            predict_rows(rows, str(spec_path), "h100", client=client, origins=["m.csv row 2", "m.csv row 3"])
    assert not [r for r in caplog.records if "Compute Failed" in r.getMessage()]


def test_measured_flag_empty_or_with_no_predict_is_refused(capsys, tmp_path):
    """`--measured ''` was taken as no --measured (the error said a CUDA GPU is needed), and `--measured F
    --no-predict` copied F's rows into experiments/results/<device>/validation_measured.csv."""
    spec = str(REPO / "megasim/hardware/calibrated/h200.json")
    assert main(["validate", "resnet-1", "--spec", spec, "--measured", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--measured '' is not allowed" in err, err
    out = tmp_path / "out"
    assert main(["validate", "resnet-1", "--spec", spec, "--measured", str(CSV), "--no-predict", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--no-predict is not allowed with --measured" in err, err
    assert not out.exists()


def test_measured_without_out_is_refused(capsys, tmp_path, monkeypatch):
    """`--measured F` without --out wrote validation.csv into experiments/results/<device>/ of the working
    folder: in a checkout, over the committed results."""
    monkeypatch.chdir(tmp_path)
    spec = str(REPO / "megasim/hardware/calibrated/h200.json")
    assert main(["validate", "resnet-1", "--spec", spec, "--measured", str(CSV)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs --out DIR" in err, err
    assert not (tmp_path / "experiments").exists()


def test_a_summary_of_one_point_prints_no_nan(capsys, tmp_path):
    """Kendall tau of one point is undefined: the summary line printed 'Kendall tau nan'."""
    rows = list(csv.DictReader(CSV.open()))
    one = tmp_path / "one.csv"
    with one.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerow(rows[0])
    spec = str(REPO / "megasim/hardware/calibrated/h200.json")
    assert main(["validate", rows[0]["layer"], "--spec", spec, "--measured", str(one), "--out", str(tmp_path / "o")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("1 points on 1 layers") and "Kendall tau n/a" in first and "nan" not in first, first
