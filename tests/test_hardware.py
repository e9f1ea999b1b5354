"""GPU specs: the presets, spec files (round trip and one-line errors) and GPUSpec's own checks."""

from __future__ import annotations

import dataclasses
import json

import pytest

from megasim.errors import SpecError
from megasim.hardware import (GPUSpec, TaskCost, dump_spec, get_gpu, load_spec, preset_names, spec_from_dict,
                              spec_to_dict)
from megasim.hardware.spec import spec_field_names

# Datasheet SM counts and L2 sizes (NVIDIA whitepapers); the presets must agree.
EXPECTED = {"V100": (80, 6 * 2**20), "A100": (108, 40 * 2**20), "RTX3090": (82, 6 * 2**20),
            "H100": (132, 50 * 2**20), "H200": (132, 60 * 2**20)}


def test_preset_names_are_the_five_gpus():
    assert set(preset_names()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_loads_with_datasheet_values_and_sources(name):
    spec = get_gpu(name)
    assert (spec.sm_count, spec.l2_bytes) == EXPECTED[name]
    assert spec.name == name
    # Every value carries a real source, not the writer's fallback.
    for field in spec_field_names():
        assert spec.sources.get(field, "unknown") not in ("", "unknown"), field
    assert "default" in spec.task_costs
    assert spec.sm_gflops == pytest.approx(spec.fp32_peak_gflops / spec.sm_count)
    assert spec.tb_max_dram_bw_gbps <= spec.dram_bw_gbps * 10


@pytest.mark.parametrize("alias,name", [("h100", "H100"), ("H100", "H100"), ("h100-sxm", "H100"),
                                        ("3090", "RTX3090"), ("rtx-3090", "RTX3090"), ("v100-sxm2", "V100"),
                                        ("a100-40gb", "A100"), ("H200-SXM", "H200")])
def test_get_gpu_aliases_and_case(alias, name):
    assert get_gpu(alias) is get_gpu(name)


def test_unknown_gpu_lists_allowed_names():
    with pytest.raises(SpecError) as err:
        get_gpu("B200")
    msg = str(err.value)
    assert "'B200'" in msg and "H100" in msg and "V100" in msg and "\n" not in msg


def test_gpu_names_ignore_surrounding_blanks_as_layer_names_do():
    """--gpu 'H100 ' was refused while a layer 'resnet-1 ' was taken."""
    assert get_gpu(" h100 ") is get_gpu("H100")
    with pytest.raises(SpecError, match="unknown GPU 'H 100'"):
        get_gpu("H 100")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_spec_file_round_trip(tmp_path, name):
    spec = get_gpu(name)
    path = tmp_path / f"{name}.json"
    dump_spec(spec, path)
    back = load_spec(path)
    assert back == spec
    # task_costs and sources are compare=False on the dataclass: check them explicitly.
    assert dict(back.task_costs) == dict(spec.task_costs)
    assert dict(back.sources) == dict(spec.sources)
    assert back.description == spec.description
    assert spec_to_dict(back) == spec_to_dict(spec)


def test_round_trip_of_a_derived_spec_keeps_changes(tmp_path):
    spec = dataclasses.replace(get_gpu("H100"), sm_count=2, kernel_launch_ns=0.0,
                               task_costs={"default": TaskCost(1.0, 0.0), "gemm": TaskCost(0.75, 12.5)})
    dump_spec(spec, tmp_path / "x.json")
    back = load_spec(tmp_path / "x.json")
    assert back.sm_count == 2 and back.kernel_launch_ns == 0.0
    assert back.task_cost("gemm") == TaskCost(0.75, 12.5)
    assert back.task_cost("itrans") == TaskCost(1.0, 0.0)   # falls back to 'default'


def _write(tmp_path, data) -> str:
    path = tmp_path / "spec.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _good() -> dict:
    return spec_to_dict(get_gpu("V100"))


def _bad_files():
    missing = _good()
    del missing["values"]["dram_bw_gbps"]
    unknown = _good()
    unknown["values"]["dram_bandwidth"] = {"value": 1.0, "source": "typo"}
    string_value = _good()
    string_value["values"]["sm_count"]["value"] = "80"
    negative = _good()
    negative["values"]["dram_bw_gbps"]["value"] = -900.0
    fractional = _good()
    fractional["values"]["sm_count"]["value"] = 80.5
    no_source = _good()
    no_source["values"]["l2_bytes"] = {"value": 6291456}
    bad_eff = _good()
    bad_eff["task_costs"]["default"]["compute_efficiency"]["value"] = 1.5
    bad_cost_field = _good()
    bad_cost_field["task_costs"]["default"]["efficiency"] = {"value": 0.5, "source": "x"}
    version = _good()
    version["schema_version"] = 2
    top = _good()
    top["valeus"] = {}
    return [
        ("missing field", missing, "dram_bw_gbps"),
        ("unknown field", unknown, "dram_bandwidth"),
        ("string value", string_value, "'80'"),
        ("negative value", negative, "-900.0"),
        ("fractional int", fractional, "80.5"),
        ("no source", no_source, "l2_bytes"),
        ("efficiency > 1", bad_eff, "1.5"),
        ("unknown cost field", bad_cost_field, "efficiency"),
        ("schema version", version, "schema_version=2"),
        ("unknown top key", top, "valeus"),
        ("bad JSON", '{"schema_version": 1, "name": ', "not valid JSON"),
        ("top level list", "[1, 2]", "JSON object"),
    ]


@pytest.mark.parametrize("label,data,needle", _bad_files(), ids=[b[0] for b in _bad_files()])
def test_bad_spec_file_gives_one_line_spec_error(tmp_path, label, data, needle):
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert needle in msg
    assert "spec.json" in msg          # names the file


def test_missing_spec_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(SpecError) as err:
        load_spec(path)
    msg = str(err.value)
    assert "nope.json" in msg and "cannot be read" in msg and "\n" not in msg


def test_spec_from_dict_rejects_non_dict():
    with pytest.raises(SpecError, match="top level"):
        spec_from_dict("H100")


def _kwargs(**over):
    spec = get_gpu("H100")
    kw = {n: getattr(spec, n) for n in spec_field_names()}
    kw.update(over)
    return kw


@pytest.mark.parametrize("field,value", [("sm_count", 0), ("sm_count", 2.5), ("dram_bw_gbps", 0.0),
                                         ("l2_bytes", -1), ("atomic_latency_ns", -1.0), ("sm_count", True),
                                         ("fp32_peak_gflops", "fast")])
def test_gpuspec_rejects_bad_values(field, value):
    with pytest.raises(SpecError) as err:
        GPUSpec(name="x", **_kwargs(**{field: value}))
    assert field in str(err.value)


def test_gpuspec_allows_zero_latencies():
    spec = GPUSpec(name="x", **_kwargs(dram_latency_ns=0.0, l2_latency_ns=0.0, atomic_latency_ns=0.0,
                                       kernel_launch_ns=0.0, kernel_boundary_ns=0.0, block_dispatch_ns=0.0))
    assert spec.kernel_launch_ns == 0.0


@pytest.mark.parametrize("eff,fixed", [(0.0, 0.0), (1.01, 0.0), (-0.5, 0.0), (0.5, -1.0)])
def test_task_cost_rejects_bad_values(eff, fixed):
    with pytest.raises(SpecError):
        TaskCost(eff, fixed)


def test_task_cost_fallbacks():
    spec = dataclasses.replace(get_gpu("H100"), task_costs={})
    assert spec.task_cost("gemm") == TaskCost()
    spec = dataclasses.replace(spec, task_costs={"default": TaskCost(0.25, 3.0)})
    assert spec.task_cost("gemm") == TaskCost(0.25, 3.0)


def test_an_implementation_variant_is_priced_by_its_own_entry_or_its_kinds():
    # The Winograd lowering names the t = 32 GEMM's cost gemm@t32 (TaskGraph.cost_names, in meta: the
    # graph's hash is the tasks', not their price). A spec without a gemm@t32 entry prices it as the
    # GEMM; one with an entry uses it, and only for the t = 32 graph.
    from megasim.plan import Plan, build
    from megasim.sim import simulate
    from megasim.workloads import parse_layer

    problem = parse_layer("resnet-4")
    g32, s32, _ = build(problem, Plan.parse("fused", "t=32"))
    g64, s64, _ = build(problem, Plan.parse("fused", ""))
    assert g32.cost_names == ("ftrans", "itrans", "gemm@t32", "otrans")
    assert g64.cost_names == g64.kind_names
    spec = get_gpu("H200")
    assert spec.task_cost("gemm@t32") is spec.task_cost("gemm")
    assert spec.task_cost("nothing@t32") is spec.task_cost("nothing")      # the default entry
    slow = dataclasses.replace(spec.task_cost("gemm"), compute_efficiency=spec.task_cost("gemm").compute_efficiency / 2)
    spec2 = dataclasses.replace(spec, task_costs={**spec.task_costs, "gemm@t32": slow})
    assert spec2.task_cost("gemm@t32") is slow
    assert simulate(g32, s32, spec2).predicted_ns > simulate(g32, s32, spec).predicted_ns
    assert simulate(g64, s64, spec2).predicted_ns == simulate(g64, s64, spec).predicted_ns


def test_numpy_scalars_are_numbers_and_become_plain_ones():
    """From Python a value often is a NumPy scalar: np.int64 was refused as 'not a finite number'. Such
    values are taken and stored as plain ints and floats (a spec is written as JSON); a NumPy bool is not
    a number."""
    import numpy as np

    spec = get_gpu("H100")
    spec2 = dataclasses.replace(spec, sm_count=np.int64(100), dram_bw_gbps=np.float32(3000.0))
    assert (type(spec2.sm_count), spec2.sm_count) == (int, 100)
    assert (type(spec2.dram_bw_gbps), spec2.dram_bw_gbps) == (float, 3000.0)
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec2)))) == spec2
    cost = TaskCost(compute_efficiency=np.float32(0.5), fixed_ns=np.int32(3))
    assert (type(cost.compute_efficiency), type(cost.fixed_ns), cost.fixed_ns) == (float, float, 3.0)
    with pytest.raises(SpecError, match="sm_count=np.True_ must be a finite number"):
        dataclasses.replace(spec, sm_count=np.bool_(True))
    with pytest.raises(SpecError, match="must be a finite number"):
        TaskCost(compute_efficiency=np.float64("nan"))
