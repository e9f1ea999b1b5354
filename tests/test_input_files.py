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


def test_every_cap_is_far_above_the_files_of_the_repo():
    largest = max(p.stat().st_size for d in ("experiments/results", "megasim/hardware")
                  for p in (REPO / d).rglob("*") if p.is_file() and p.suffix in (".csv", ".json", ".toml"))
    assert all(cap >= 100 * largest for cap in input_files.MAX_INPUT_BYTES.values())


@pytest.mark.parametrize("args, kind", [
    (["simulate", "resnet-1", "--spec", "{big}"], "spec file"),
    (["sweep", "{big}"], "sweep file"),
    (["validate", "table2", "--spec", CALIBRATED, "--measured", "{big}"], "CSV file"),
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
