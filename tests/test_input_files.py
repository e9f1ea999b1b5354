"""Input files are read only up to a size cap (megasim.input_files): a file above it is refused in one
line naming the file and the limit, before it is parsed (`--spec /dev/zero` grew to 24 GB before)."""

from __future__ import annotations

from pathlib import Path

import pytest

import megasim.input_files as input_files
from megasim.cli.main import main
from megasim.errors import InputError, SpecError
from megasim.input_files import read_text

REPO = Path(__file__).resolve().parents[1]
CALIBRATED = str(REPO / "megasim/hardware/calibrated/h200.json")


def test_read_text_refuses_a_file_above_the_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("x" * 101)
    assert read_text(path, "f", "spec file", limit=101) == "x" * 101
    with pytest.raises(InputError, match=r"^f is not allowed: it is larger than 100 bytes, the limit for a spec file"):
        read_text(path, "f", "spec file", limit=100)
    with pytest.raises(SpecError):
        read_text(path, "f", "spec file", error=SpecError, limit=100)


def test_a_gz_file_is_read_decompressed_and_its_cap_counts_the_decompressed_bytes(tmp_path, capsys):
    import gzip
    path = tmp_path / "m.json.gz"
    path.write_bytes(gzip.compress(b"y" * 1000))
    assert read_text(path, "f", "JSON file", limit=1000) == "y" * 1000
    with pytest.raises(InputError, match=r"^f is not allowed: it is larger than 999 bytes"):
        read_text(path, "f", "JSON file", limit=999)          # a small file that decompresses past the cap
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip at all")
    assert main(["calibrate", "--algo", "winograd", "--from-measurements", str(bad), "--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json.gz" in err[0] and "cannot be read" in err[0], err


def test_every_cap_is_far_above_the_files_of_the_repo():
    largest = max(p.stat().st_size for d in ("experiments/results", "megasim/hardware")
                  for p in (REPO / d).rglob("*") if p.is_file() and p.suffix in (".csv", ".json", ".toml"))
    assert all(cap >= 100 * largest for cap in input_files.MAX_INPUT_BYTES.values())


@pytest.mark.parametrize("args, kind", [
    (["simulate", "resnet-1", "--spec", "{big}"], "spec file"),
    (["sweep", "{big}"], "sweep file"),
    (["validate", "table2", "--spec", CALIBRATED, "--measured", "{big}", "--out", "{out}"], "CSV file"),
    (["transfer-spec", "--spec", CALIBRATED, "--measurements", "{big}", "--out", "{out}"], "JSON file"),
    (["optimize", "N=2,C=8,K=8,H=8,W=8", "--gpu", "H100", "--budget", "2", "--cache", "{big}"], "cache file"),
])
def test_the_cli_refuses_a_file_above_its_cap_in_one_line(capsys, monkeypatch, tmp_path, args, kind):
    monkeypatch.setitem(input_files.MAX_INPUT_BYTES, kind, 1000)
    big = tmp_path / "big"
    big.write_bytes(b"\0" * 1001)
    code = main([a.format(big=big, out=tmp_path / "o.json") for a in args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and kind in err and str(big) in err and "larger than 1,000 bytes" in err, err


PRESET = (REPO / "megasim/hardware/presets/h100.json").read_text()
HUGE_INT = "1" + "0" * 5000            # more digits than Python converts to an int (4,300)
DEEP = "[" * 100_000 + "]" * 100_000     # deeper than the JSON and TOML parsers recurse


@pytest.mark.parametrize("content, needle", [
    (PRESET.replace('"value": 132', f'"value": {HUGE_INT}', 1), "integer of more than 4,300 digits"),
    (DEEP, "nests too deeply"),
    (PRESET[:-2] + ', "name": "other"}', "names key 'name' twice"),
    (PRESET.replace('"sm_count": {', '"sm_count": {"value": 64, "source": "x"}, "sm_count": {', 1),
     "names key 'sm_count' twice"),
])
@pytest.mark.parametrize("args", [
    ["simulate", "N=2,C=8,K=8,H=8,W=8", "--spec", "{file}"],
    ["transfer-spec", "--spec", CALIBRATED, "--measurements", "{file}", "--out", "{out}"],
])
def test_json_inputs_that_json_loads_cannot_take_are_one_line(capsys, tmp_path, content, needle, args):
    """A JSON integer of 5,000 digits or nesting 100,000 deep raised ValueError / RecursionError out of
    json.loads (a traceback, spec files), and a key given twice was read as its last value without a word."""
    path = tmp_path / "in.json"
    path.write_text(content)
    code = main([a.format(file=path, out=tmp_path / "o.json") for a in args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and str(path) in err and needle in err, err


@pytest.mark.parametrize("content, needle", [
    ('problems = ["resnet-1"]\ngpus = ["H100"]\nbatch = ' + "9" * 5000 + '\n[[runs]]\nalgorithm = "winograd"\n',
     "integer of more than 4,300 digits"),
    ("a = " + DEEP.replace("][", "],[").replace("[]", "[1]") + "\n", "nests too deeply"),
])
def test_sweep_files_that_tomllib_cannot_take_are_one_line(capsys, tmp_path, content, needle):
    path = tmp_path / "s.toml"
    path.write_text(content)
    code = main(["sweep", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and str(path) in err and needle in err, err


@pytest.mark.parametrize("where", ["values", "kind_times"])
def test_measurements_integers_too_large_for_a_float_are_one_line(capsys, tmp_path, where):
    """10**400 in a measurements file raised OverflowError from math.isfinite (a traceback)."""
    import json
    data = json.loads((REPO / "megasim/hardware/calibrated/h200.measurements.json").read_text())
    if where == "values":
        data["values"]["sm_count"]["value"] = 10 ** 400
    else:
        data["kind_times"][0]["median_ms"] = 10 ** 400
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    code = main(["transfer-spec", "--spec", CALIBRATED, "--measurements", str(path), "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and str(path) in err and "finite number" in err, err
