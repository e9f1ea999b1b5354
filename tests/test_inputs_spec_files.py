"""Spec files keep every TaskCost field through a save and a load (launch_fixed_ns included), and
refuse values no GPU has (non-finite numbers, resource counts above the documented ceilings)."""

from __future__ import annotations

import dataclasses

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
