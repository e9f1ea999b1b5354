"""experiments.studies.calibration.field_swap: which fields two specs disagree on, each put back alone, and a
run on one layer's saved measurements."""

from __future__ import annotations

import copy
import csv
import json

import pytest

from experiments.studies.calibration.field_swap import differing_fields, main, swapped

REFIT = "experiments/results/nvidia-h200/calibration_refit/h200_refit.json"
MEASURED = "experiments/results/nvidia-h200/validation.csv"


def _spec():
    with open(REFIT) as fh:
        return json.load(fh)


def test_differing_fields_and_swap_touch_one_field():
    spec = _spec()
    other = copy.deepcopy(spec)
    other["task_costs"]["itrans"]["coresident_stretch"]["value"] = 0.07
    other["values"]["mixed_kinds_sm_factor"]["value"] *= 1.0005       # within the 0.1% tolerance: not a difference
    assert differing_fields(spec, other) == [("itrans", "coresident_stretch")]
    out = swapped(spec, other, "itrans", "coresident_stretch")
    assert out["task_costs"]["itrans"]["coresident_stretch"]["value"] == 0.07
    assert spec["task_costs"]["itrans"]["coresident_stretch"]["value"] != 0.07      # the input is not changed
    out["task_costs"]["itrans"]["coresident_stretch"]["value"] = spec["task_costs"]["itrans"]["coresident_stretch"]["value"]
    assert out == spec


def test_one_layer_end_to_end(tmp_path):
    spec = _spec()
    other = copy.deepcopy(spec)
    other["task_costs"]["itrans"]["coresident_stretch"]["value"] = 0.07
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps(other))
    rows = main(["--spec", REFIT, "--reference", str(ref), "--measured", MEASURED, "--layers", "resnet-4",
                 "--out", str(tmp_path), "--workers", "1"])
    assert [r["field"] for r in rows] == ["none", "itrans.coresident_stretch"]
    assert rows[0]["speedup_error"] != rows[1]["speedup_error"]        # the stretch moves the fused runs
    with open(tmp_path / "field_swap.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 2


def test_no_rows_of_the_layers_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--spec", REFIT, "--reference", REFIT, "--measured", MEASURED, "--layers", "vgg16/conv1_1",
              "--out", str(tmp_path)])
    assert "has no rows of the layers" in capsys.readouterr().err
