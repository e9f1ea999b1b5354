"""The megasim command: outputs, JSON fields, traces, and one-line errors with exit status 2."""

import json
from pathlib import Path
import subprocess
import sys

import pytest

from megasim.cli.main import main

SMALL = "N=2,C=16,K=24,H=10,W=9"


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_layers_and_gpus(capsys):
    code, out, _ = run(capsys, "layers")
    assert code == 0 and "resnet-1" in out and "vgg16/conv3_2" in out and "im2win/conv12" in out
    code, out, _ = run(capsys, "layers", "--json")
    assert code == 0 and len(json.loads(out)) > 100
    code, out, _ = run(capsys, "gpus", "--json")
    names = [g["name"] for g in json.loads(out)]
    assert code == 0 and names == ["V100", "A100", "RTX3090", "H100", "H200"]


@pytest.mark.parametrize("schedule", ["fused", "nonfused", "naive"])
def test_simulate_json_fields(capsys, schedule):
    code, out, _ = run(capsys, "simulate", SMALL, "--gpu", "H100", "--schedule", schedule, "--json")
    assert code == 0
    d = json.loads(out)
    for key in ("layer", "gpu", "schedule", "params", "predicted_us", "tasks", "l2_hit_rate", "dram_bytes",
                "sim_wall_s", "taskgraph_hash"):
        assert key in d, key
    assert d["schedule"] == schedule and d["gpu"] == "H100" and d["predicted_us"] > 0
    assert 0.0 <= d["l2_hit_rate"] <= 1.0 and d["tasks"] > 0


def test_param_string_reproduces_prediction(capsys):
    _, out, _ = run(capsys, "simulate", SMALL, "--gpu", "V100", "--json")
    first = json.loads(out)
    _, out, _ = run(capsys, "simulate", SMALL, "--gpu", "V100", "--json", "--param", first["params"])
    again = json.loads(out)
    assert again["predicted_us"] == first["predicted_us"]
    assert again["taskgraph_hash"] == first["taskgraph_hash"]


def test_batch_and_spec_file(capsys, tmp_path):
    from megasim.hardware import dump_spec, get_gpu
    path = tmp_path / "gpu.json"
    dump_spec(get_gpu("A100"), path)
    _, out, _ = run(capsys, "simulate", "resnet-4", "--batch", "2", "--spec", str(path), "--json")
    by_file = json.loads(out)
    _, out, _ = run(capsys, "simulate", "resnet-4", "--batch", "2", "--gpu", "A100", "--json")
    assert by_file["predicted_us"] == json.loads(out)["predicted_us"]
    assert by_file["problem"].startswith("N=2,")


def test_trace_file(capsys, tmp_path):
    trace = tmp_path / "t.json"
    code, out, _ = run(capsys, "simulate", SMALL, "--gpu", "H100", "--trace", str(trace))
    assert code == 0 and "predicted" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "gemm" and e["ph"] == "X" for e in events)


@pytest.mark.parametrize("args, needle", [
    (["simulate", "nosuchlayer", "--gpu", "H100"], "unknown layer 'nosuchlayer'"),
    (["simulate", "resnet-1", "--gpu", "B200"], "unknown GPU 'B200'"),
    (["simulate", "N=1,C=4,K=-4,H=5,W=5", "--gpu", "H100"], "K=-4"),
    (["simulate", "N=1,C=4,K=4,H=0,W=5", "--gpu", "H100"], "H=0"),
    (["simulate", "N=1,C=4,K=4,H=2,W=2,padding=0", "--gpu", "H100"], "larger than the padded input"),
    (["simulate", "N=1,C=4,K=4,H=5", "--gpu", "H100"], "lacks W"),
    (["simulate", "N=1;C=4", "--gpu", "H100"], "malformed"),
    (["simulate", "resnet-1", "--gpu", "H100", "--param", "D_IG=1,M=4"], "D_IG=1 is too small"),
    (["simulate", "resnet-1", "--gpu", "H100", "--param", "D_GO=0"], "D_GO=0 is too small"),
    (["simulate", "resnet-1", "--gpu", "H100", "--param", "M=0"], "M=0"),
    (["simulate", "resnet-1", "--gpu", "H100", "--param", "M=100000"], "M=100000"),
    (["simulate", "resnet-1", "--gpu", "H100", "--param", "style=fast"], "style='fast'"),
    (["simulate", "resnet-1", "--gpu", "H100", "--param", "bogus=1"], "unknown --param key 'bogus'"),
    (["simulate", "resnet-1", "--gpu", "H100", "--batch", "0"], "--batch: '0' is not allowed"),
    (["simulate", "resnet-1", "--spec", "/no/such/file.json"], "cannot be read"),
    (["simulate", "im2win/conv1", "--gpu", "H100"], "3x3 filter"),
    (["simulate", "resnet-1", "--gpu", "H100", "--param", "M=4,M=8"], "M is given twice"),
    (["simulate", SMALL, "--gpu", "H100", "--trace", "/no/such/dir/t.json"], "--trace '/no/such/dir/t.json' is not allowed"),
])
def test_bad_input_one_line_exit_2(capsys, args, needle):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_invalid_spec_file(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "name": "x", "values": {}}')
    code, _, err = run(capsys, "simulate", SMALL, "--spec", str(bad))
    assert code == 2 and "missing field" in err and err.count("\n") == 1
    bad.write_text("{not json")
    code, _, err = run(capsys, "simulate", SMALL, "--spec", str(bad))
    assert code == 2 and "not valid JSON" in err


def test_installed_command_exit_status():
    """The console script, as a user runs it: argparse errors and domain errors both exit 2."""
    for args in (["simulate"], ["simulate", "resnet-1", "--gpu", "nope"]):
        proc = subprocess.run([sys.executable, "-m", "megasim.cli.main", *args], capture_output=True, text=True)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_sparse_k_tile_forced_and_refused(capsys):
    args = ["simulate", "N=1,C=8,K=32,H=12,W=12", "--gpu", "H100", "--algo", "direct", "--json"]
    code, out, _ = run(capsys, *args, "--param", "sparsity=0.5,k_tile=8")
    row = json.loads(out)
    assert code == 0 and row["algorithm"] == "direct" and "k_tile=8" in row["params"]
    assert row["tasks"] == 2 * 4      # 144 px: 2 pixel tiles x 32 / 8
    code, _, err = run(capsys, *args, "--param", "sparsity=0.5,k_tile=7")
    assert code == 2 and "k_tile=7 is not allowed for direct (allowed: 32, 16, 8, 4)" in err
    assert err.count("\n") == 1


def test_every_algorithm_simulates_and_optimizes_by_name(capsys):
    """simulate and optimize reach every registered algorithm through --algo."""
    from megasim.algorithms import ALGORITHMS
    for name, alg in ALGORITHMS.items():
        layer = "N=2,C=16,K=16,H=16,W=16"
        code, out, err = run(capsys, "simulate", layer, "--gpu", "H100", "--algo", name, "--json")
        assert code == 0, err
        row = json.loads(out)
        assert row["algorithm"] == name and row["schedule"] == alg.schedules[0] and row["time_us"] > 0
        code, out, err = run(capsys, "optimize", layer, "--gpu", "H100", "--algo", name, "--budget", "4",
                             "--workers", "1", "--json")
        if not alg.spaces:          # nothing to search (naive_direct): one line saying so
            assert code == 2 and "has no mapping parameters to search" in err and err.count("\n") == 1
            continue
        assert code == 0, err
        assert json.loads(out)["algorithm"] == name


def test_a_parameter_of_another_algorithm_is_refused_in_one_line(capsys):
    code, _, err = run(capsys, "simulate", "resnet-1", "--gpu", "H100", "--algo", "ecr", "--param", "D_IG=3")
    assert code == 2 and "unknown --param key 'D_IG' for ecr" in err and err.count("\n") == 1
    code, _, err = run(capsys, "simulate", "resnet-1", "--gpu", "H100", "--algo", "nope")
    assert code == 2 and "nope" in err


def test_a_requested_persistent_grid_is_labelled_as_requested(capsys):
    """`blocks_per_sm=1` set the grid; the launch line said 'limited by registers' (the engine's limited_by
    names what limits the most that fit)."""
    args = ("simulate", SMALL, "--gpu", "H100", "--param", "style=persistent,blocks_per_sm=1")
    code, out, _ = run(capsys, *args)
    assert code == 0 and "1 blocks/SM (requested: blocks_per_sm=1)" in out and "limited by" not in out, out
    code, out, _ = run(capsys, *args, "--json")
    assert json.loads(out)["launches"][0]["blocks_per_sm_set_by"] == "requested: blocks_per_sm=1"
    code, out, _ = run(capsys, "simulate", SMALL, "--gpu", "H100", "--param", "style=persistent")
    assert "(limited by " in out and "requested" not in out, out


@pytest.mark.parametrize("command", ["simulate", "optimize"])
def test_a_spec_file_is_named_beside_the_gpu(capsys, command):
    """--gpu H200 and --spec calibrated/h200.json both printed 'on H200' for different predictions."""
    from pathlib import Path
    spec = str(Path(__file__).resolve().parents[1] / "megasim/hardware/calibrated/h200.json")
    extra = ["--budget", "2", "--workers", "1"] if command == "optimize" else []
    code, out, _ = run(capsys, command, SMALL, "--spec", spec, *extra)
    assert code == 0 and f"on H200 (spec file {spec})" in out.splitlines()[0], out
    code, out, _ = run(capsys, command, SMALL, "--spec", spec, "--json", *extra)
    d = json.loads(out)
    assert d["gpu"] == "H200" and d["spec_file"] == spec
    code, out, _ = run(capsys, command, SMALL, "--gpu", "H200", "--json", *extra)
    assert json.loads(out)["spec_file"] is None


def test_calibrate_without_a_gpu_names_itself_not_a_missing_subcommand(capsys, tmp_path, monkeypatch):
    """It suggested `megasim measure`, which does not exist (the GPU module is gpu.calibrate.measure)."""
    numba = pytest.importorskip("numba", reason="numba is not installed: the GPU check fails before naming")
    from numba import cuda
    monkeypatch.setattr(numba.config, "ENABLE_CUDASIM", False, raising=False)
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    code, _, err = run(capsys, "calibrate", "--out", str(tmp_path / "x.json"))
    assert code == 2 and "megasim calibrate needs a CUDA GPU" in err and "megasim measure" not in err, err


@pytest.mark.parametrize("flag", ["--fit-mixed-factor", "--fit-gemm-epilogue", "--no-fit-gemm-epilogue"])
def test_calibrate_refuses_the_megakernel_options_for_another_algorithm(capsys, tmp_path, flag):
    code, _, err = run(capsys, "calibrate", "--algo", "im2win", flag, "--out", str(tmp_path / "x.json"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{flag} is not allowed with --algo 'im2win'" in err, err


def test_simulate_says_when_a_kind_has_no_calibrated_cost(capsys):
    """A preset prices every kind with its one 'default' cost: the output says so (im2win's variants then
    differ only by their tasks' work), and names nothing on a spec calibrated for the kinds that run."""
    assert main(["simulate", "Conv5", "--algo", "im2win", "--gpu", "H100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["default_cost"] == ["im2win_transform", "im2win_conv@m64"]
    assert main(["simulate", "Conv5", "--algo", "im2win", "--gpu", "H100"]) == 0
    assert "uncalibrated: every kind takes the spec's 'default' cost" in capsys.readouterr().out
    spec = str(Path(__file__).resolve().parent.parent / "megasim/hardware/calibrated/h200.json")
    assert main(["simulate", "resnet-1", "--spec", spec, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["default_cost"] == []


def test_calibrate_fits_the_gemm_epilogue_unless_told_not_to():
    """--fit-gemm-epilogue is the default (None: the algorithm's default, fitted for winograd);
    --no-fit-gemm-epilogue turns it off."""
    import argparse
    from megasim.cli.calibrate import add_calibrate
    p = argparse.ArgumentParser()
    add_calibrate(p)
    assert p.parse_args(["--out", "x.json"]).fit_gemm_epilogue is None
    assert p.parse_args(["--out", "x.json", "--fit-gemm-epilogue"]).fit_gemm_epilogue is True
    assert p.parse_args(["--out", "x.json", "--no-fit-gemm-epilogue"]).fit_gemm_epilogue is False
    import inspect
    from megasim.calibration.winograd import calibrated_spec
    assert inspect.signature(calibrated_spec).parameters["fit_epilogue"].default is True
