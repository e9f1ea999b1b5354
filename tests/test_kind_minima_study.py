"""experiments.studies.calibration.kind_minima: every calibration run of a kind under each spec, and its spread."""
import dataclasses

import pytest

from experiments.studies.calibration.kind_minima import RUNS, kind_runs_us, main
from megasim.hardware import load_spec

LAYER = "N=2,C=8,K=8,H=6,W=6"


def test_same_costs_spread_nothing_and_other_costs_do():
    base = load_spec("megasim/hardware/calibrated/h200.json")
    gemm = base.task_costs["gemm"]
    slower = dataclasses.replace(base, task_costs={**base.task_costs,
                                                   "gemm": dataclasses.replace(gemm, fixed_ns=gemm.fixed_ns + 5000.0)})
    rows = kind_runs_us({"a": base, "b": base, "slow": slower}, "gemm", LAYER)
    assert len({r["run"] for r in rows}) == len(RUNS)
    assert len(rows) == len(RUNS) and all(r["layer"] == LAYER and r["tasks"] > 0 for r in rows)
    assert all(r["us"]["a"] == r["us"]["b"] for r in rows)
    assert all(r["us"]["slow"] > r["us"]["a"] and r["spread"] > 0 for r in rows)


def test_an_unknown_kind_is_one_line(tmp_path):
    with pytest.raises(SystemExit) as err:
        main(["--kind", "nope", "--spec", "x", "megasim/hardware/calibrated/h200.json", "--layers", LAYER,
              "--out", str(tmp_path / "o.json")])
    assert str(err.value).startswith("kind_minima: --kind 'nope' is not allowed") and "\n" not in str(err.value)
