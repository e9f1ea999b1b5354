"""experiments.studies.calibration.fit_at_weight: megasim calibrate at another prior weight; bad weights refused."""

from __future__ import annotations

import pytest

import megasim.calibration.winograd as winograd
from experiments.studies.calibration.fit_at_weight import main


@pytest.mark.parametrize("argv, says", [([], "give the prior weight first"), (["x"], "give the prior weight first"),
                                        (["-1"], "must be > 0"), (["nan"], "must be > 0")])
def test_a_bad_weight_is_one_line(argv, says):
    with pytest.raises(SystemExit, match=says):
        main(argv)


def test_the_weight_reaches_the_fit_and_calibrate_reads_the_rest(monkeypatch, capsys):
    monkeypatch.setattr(winograd, "PRIOR_WEIGHT", winograd.PRIOR_WEIGHT)      # restored after the test
    # megasim calibrate refuses a missing measurements file in one line, after the weight is set
    assert main(["0.3", "--algo", "winograd", "--from-measurements", "/nonexistent.json", "--out", "x.json"]) != 0
    assert winograd.PRIOR_WEIGHT == 0.3
    assert "/nonexistent.json" in capsys.readouterr().err
