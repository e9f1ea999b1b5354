"""Spec files keep every TaskCost field through a save and a load (launch_fixed_ns included), and
refuse values no GPU has (non-finite numbers, resource counts above the documented ceilings)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from megasim.errors import SpecError
from megasim.hardware import dump_spec, get_gpu, load_spec
from megasim.hardware.files import _COST_FIELDS
from megasim.hardware.spec import SPEC_CEILINGS, TaskCost


def test_every_task_cost_field_is_a_spec_file_field():
    assert set(_COST_FIELDS) == {f.name for f in dataclasses.fields(TaskCost)}


def test_launch_fixed_ns_survives_a_round_trip(tmp_path):
    base = get_gpu("H100")
    cost = TaskCost(compute_efficiency=0.4, fixed_ns=10.0, launch_fixed_ns=3221.5)
    spec = dataclasses.replace(base, task_costs={**base.task_costs, "ecr": cost},
                               sources={**base.sources, "task_costs.ecr.launch_fixed_ns": "test"})
    dump_spec(spec, tmp_path / "s.json")
    back = load_spec(tmp_path / "s.json")
    assert back.task_costs["ecr"] == cost
    assert back.task_costs["ecr"].launch_fixed_ns == 3221.5
    assert back.sources["task_costs.ecr.launch_fixed_ns"] == "test"


@pytest.mark.parametrize("field", sorted(SPEC_CEILINGS))
def test_resource_fields_above_their_ceiling_are_refused(field):
    with pytest.raises(SpecError, match=f"{field}=.*at most"):
        dataclasses.replace(get_gpu("H100"), **{field: SPEC_CEILINGS[field] * 2})


def test_the_presets_are_below_the_ceilings():
    from megasim.hardware import preset_names
    for name in preset_names():
        spec = get_gpu(name)
        assert all(getattr(spec, f) <= c for f, c in SPEC_CEILINGS.items())


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_spec_values_are_refused(value):
    with pytest.raises(SpecError, match="dram_bw_gbps"):
        dataclasses.replace(get_gpu("H100"), dram_bw_gbps=value)


def _preset_with(**values):
    import json
    from pathlib import Path
    data = json.loads((Path(__file__).resolve().parents[1] / "megasim/hardware/presets/h100.json").read_text())
    for field, value in values.items():
        data["values"][field]["value"] = value
    return data


@pytest.mark.parametrize("field", ["dram_bw_gbps", "sm_count", "l2_bytes"])
def test_integers_too_large_for_a_float_are_refused(field):
    """JSON reads 10**400 as an int, on which math.isfinite raised OverflowError (a traceback)."""
    from megasim.hardware import spec_from_dict
    with pytest.raises(SpecError, match=f"values.{field}.value=1000.* it must be a finite number"):
        spec_from_dict(_preset_with(**{field: 10 ** 400}), origin="'s.json'")
    with pytest.raises(SpecError, match=f"{field}=1000.* must be a finite number"):
        dataclasses.replace(get_gpu("H100"), **{field: 10 ** 400})
    with pytest.raises(SpecError, match="fixed_ns=1000.* must be a finite number"):
        TaskCost(fixed_ns=10 ** 400)


def test_integer_fields_written_as_whole_floats_are_integers():
    """sm_count=132.0 (a JSON writer's integer) passed the integer check and reached the engine as a float:
    TypeError from range() and np.zeros (a traceback) in simulate, validate and optimize."""
    from megasim.hardware import spec_from_dict
    from megasim.plan import predict
    from megasim.workloads import parse_layer
    spec = spec_from_dict(_preset_with(sm_count=132.0, registers_per_sm=65536.0, l2_partitions=2.0))
    assert type(spec.sm_count) is int and type(spec.registers_per_sm) is int and type(spec.l2_partitions) is int
    assert spec == get_gpu("H100")
    result, _ = predict(parse_layer("N=2,C=8,K=8,H=8,W=8"), spec)
    assert result.predicted_us == predict(parse_layer("N=2,C=8,K=8,H=8,W=8"), get_gpu("H100"))[0].predicted_us
    assert type(dataclasses.replace(get_gpu("H100"), sm_count=64.0).sm_count) is int


@pytest.mark.parametrize("name", ["x\ny", "tab\there", "   ", ""])
def test_a_spec_name_with_control_characters_or_blank_is_refused(name):
    """A newline in a spec file's name was printed inside `megasim simulate`'s one-line header."""
    from megasim.hardware import spec_from_dict
    data = _preset_with()
    data["name"] = name
    with pytest.raises(SpecError, match="'name' must be a non-empty string without control characters"):
        spec_from_dict(data, origin="'s.json'")


def test_the_cli_cuts_a_huge_echoed_number(tmp_path, capsys):
    """The refusal of 10**400 printed all 401 digits: the CLI's line keeps the first 12 and the count."""
    from megasim.cli.main import main
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_preset_with(dram_bw_gbps=10 ** 400)))
    assert main(["simulate", "resnet-1", "--spec", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dram_bw_gbps.value=100000000000...(401 digits) is not allowed" in err, err
