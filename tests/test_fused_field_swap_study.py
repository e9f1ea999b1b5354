"""experiments.studies.calibration.fused_field_swap: the fields two specs part on, ranked by how far each alone moves
a layer's default fused prediction (predictions only)."""

from __future__ import annotations

import copy
import json

import pytest

from experiments.studies.calibration.fused_field_swap import main

SPEC = "megasim/hardware/calibrated/h200.json"


def test_the_field_that_moves_the_fused_prediction_comes_first(tmp_path, capsys):
    with open(SPEC) as fh:
        spec = json.load(fh)
    other = copy.deepcopy(spec)
    other["task_costs"]["itrans"]["block_dram_bw_gbps"]["value"] *= 0.5        # moves a fused run
    other["task_costs"]["ftrans"]["fixed_ns"]["value"] += 1.0                  # hardly does
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(spec))
    b.write_text(json.dumps(other))
    out = tmp_path / "swap.json"
    assert main(["--spec", str(a), "--reference", str(b), "--layers", "N=4,C=16,K=16,H=24,W=24", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    fields = [r["field"] for r in data["swaps"]]
    assert fields == ["task_costs.itrans.block_dram_bw_gbps", "task_costs.ftrans.fixed_ns"]
    (move,) = data["swaps"][0]["moves"].values()
    assert move > 0.0            # a slower per-block rate: a longer fused run
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("spec, layers, says", [("/nonexistent.json", "resnet-1", "cannot be read"),
                                                (SPEC, "no-such-layer", "unknown layer")])
def test_bad_input_is_one_line(tmp_path, spec, layers, says):
    with pytest.raises(SystemExit, match=f"fused_field_swap: .*{says}"):
        main(["--spec", spec, "--reference", SPEC, "--layers", layers, "--out", str(tmp_path / "x.json")])
