"""Property-based tests of every parser of user input (hypothesis): layer specs, --param strings,
--option strings, spec files, measurements files and the sparse options.

The property: any input either parses to a valid object or raises the domain error (a MegasimError
with a one-line message), never anything else (TypeError, KeyError, OverflowError, ...), and never
hangs (each example is bounded by hypothesis' deadline). What parses is checked to be usable: a
problem reads back from its spec string, a spec survives a save and a load.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megasim.errors import MegasimError

REPO = Path(__file__).resolve().parents[1]
PRESET = json.loads((REPO / "megasim/hardware/presets/h100.json").read_text())
MEASURED = json.loads((REPO / "megasim/hardware/calibrated/h200.measurements.json").read_text())
FAST = settings(max_examples=120, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

# Values a user or a file can give: numbers of every size and kind, text, nothing, containers.
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-10, max_value=10 ** 40),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                      st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
NUMBER_TEXT = st.one_of(st.integers(min_value=-10 ** 30, max_value=10 ** 30).map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(str),
                        st.sampled_from(["", "abc", "1e999", "-0", "0x10", "4.0", " 7 ", "nan", "٣"]))


def _one_line(err: Exception) -> None:
    assert isinstance(err, MegasimError)
    assert "\n" not in str(err) and str(err).strip()


def _parses_or_refuses(call):
    try:
        return call()
    except MegasimError as err:
        _one_line(err)
        return None


# -- layer specs ------------------------------------------------------------------------------------

LAYER_KEYS = st.sampled_from(["N", "C", "K", "H", "W", "R", "S", "stride", "padding", "pad", "X", "n", ""])
LAYER_ITEMS = st.lists(st.tuples(LAYER_KEYS, NUMBER_TEXT), max_size=10).map(
    lambda items: ",".join(f"{k}={v}" for k, v in items))


@FAST
@given(st.one_of(st.text(max_size=60), LAYER_ITEMS), st.one_of(st.none(), st.integers(-5, 10 ** 12), ANY_VALUE))
def test_parse_layer_gives_a_problem_or_a_workload_error(text, batch):
    from megasim.workloads import parse_layer
    problem = _parses_or_refuses(lambda: parse_layer(text, batch=batch))
    if problem is not None:
        again = parse_layer(problem.spec_string())
        assert (again.n, again.c, again.k, again.h, again.w, again.r, again.s, again.stride, again.padding) == \
            (problem.n, problem.c, problem.k, problem.h, problem.w, problem.r, problem.s, problem.stride, problem.padding)


# -- --param strings ---------------------------------------------------------------------------------

def _param_strategy(algorithm: str):
    from megasim.algorithms import get_algorithm
    from megasim.plan import EXECUTION_KEYS
    params = get_algorithm(algorithm).params_type
    keys = st.sampled_from([*params.KEYS, *getattr(params, "PARSERS", {}), *EXECUTION_KEYS, "bogus", ""])
    values = st.one_of(NUMBER_TEXT, st.sampled_from(["persistent", "per_task", "ready", "ticket", "blockidx", "fp32",
                                                     "3xtf32", "uniform", "clustered", "2x2", "3x2", "0x0", "1"]))
    return st.lists(st.tuples(keys, values), max_size=6).map(lambda items: ",".join(f"{k}={v}" for k, v in items))


@pytest.mark.parametrize("algorithm", ["winograd", "ecr", "pecr"])
def test_plan_parse_gives_a_plan_or_a_mapping_error(algorithm):
    from megasim.algorithms import get_algorithm
    from megasim.plan import Plan
    schedules = st.one_of(st.none(), st.sampled_from([*get_algorithm(algorithm).schedules, "bogus"]))

    @FAST
    @given(schedules, st.one_of(_param_strategy(algorithm), st.text(max_size=40)))
    def check(schedule, text):
        plan = _parses_or_refuses(lambda: Plan.parse(schedule, text, algorithm=algorithm))
        if plan is not None:     # what parses writes a string that parses back to the same plan
            assert Plan.parse(plan.schedule, plan.param_string(), algorithm=algorithm) == plan

    check()


# -- --option strings ---------------------------------------------------------------------------------

@FAST
@given(st.lists(st.tuples(st.sampled_from(["top", "explore", "batch", "screen", "bogus", ""]), NUMBER_TEXT),
                max_size=5).map(lambda items: ",".join(f"{k}={v}" for k, v in items)))
def test_option_strings_give_typed_options_or_an_input_error(text):
    from megasim.cli.optimize import options_of
    declared = {"explore": 0.4, "screen": 0.85, "top": 12, "batch": 16}
    options = _parses_or_refuses(lambda: options_of(text, "multifidelity", declared))
    if options is not None:
        for key, value in options.items():
            assert type(value) is type(declared[key])


# -- spec files ---------------------------------------------------------------------------------------

SPEC_FIELDS = st.sampled_from(list(PRESET["values"]) + ["megakernel_launch_ns", "younger_block_weight", "bogus"])
COST_FIELDS = st.sampled_from(["compute_efficiency", "fixed_ns", "block_sm_share", "block_sm_ready", "launch_fixed_ns",
                               "memory_overlap", "coresident_stretch", "further_block_sm_ready", "bogus"])


@FAST
@given(st.lists(st.tuples(SPEC_FIELDS, ANY_VALUE), max_size=3), st.lists(st.tuples(COST_FIELDS, ANY_VALUE), max_size=3),
       st.sampled_from(["value", "entry", "source"]))
def test_spec_files_give_a_spec_or_a_spec_error(values, costs, where):
    from megasim.hardware import spec_from_dict, spec_to_dict
    data = copy.deepcopy(PRESET)
    for field, value in values:
        if where == "value":
            data["values"][field] = {"value": value, "source": "test"}
        elif where == "entry":
            data["values"][field] = value
        else:
            data["values"].setdefault(field, {"value": 1})["source"] = value
    for field, value in costs:
        data["task_costs"]["default"][field] = {"value": value, "source": "test"}
    spec = _parses_or_refuses(lambda: spec_from_dict(data, "test.json"))
    if spec is not None:
        assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec


@FAST
@given(st.recursive(ANY_VALUE, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=8))
def test_any_json_is_a_spec_or_a_spec_error(data):
    from megasim.hardware import spec_from_dict
    _parses_or_refuses(lambda: spec_from_dict(data, "test.json"))


# -- measurements files ----------------------------------------------------------------------------------

@FAST
@given(st.sampled_from(["device", "date", "preset", "values", "kind_times", "plan_params", "extra", "value_entry",
                        "row_field"]), ANY_VALUE, st.sampled_from(["layer", "kind", "median_ms", "min_ms", "max_ms"]))
def test_measurements_give_measurements_or_a_spec_error(key, value, row_field):
    from megasim.calibration.measurements import Measurements
    data = copy.deepcopy(MEASURED)
    if key == "value_entry":
        data["values"]["dram_bw_gbps"] = {"value": value, "method": "test"}
    elif key == "row_field":
        data["kind_times"][0][row_field] = value
    else:
        data[key] = value
    _parses_or_refuses(lambda: Measurements.from_dict(data, "test.measurements.json"))


# -- sparse options ------------------------------------------------------------------------------------

@FAST
@given(ANY_VALUE, st.one_of(st.sampled_from(["uniform", "clustered"]), ANY_VALUE), ANY_VALUE)
def test_sparsity_specs_are_valid_or_a_workload_error(sparsity, pattern, cluster_px):
    from megasim.workloads.sparse import SparsitySpec
    spec = _parses_or_refuses(lambda: SparsitySpec(sparsity, pattern, cluster_px))
    if spec is not None:
        assert 0.0 <= spec.sparsity <= 1.0 and spec.cluster_px >= 1


@FAST
@given(st.lists(st.tuples(st.sampled_from(["op", "kind", "problem", "pattern", "sparsity", "seed", "median_ms"]),
                          ANY_VALUE), max_size=3))
def test_sparse_calibration_rows_are_checked(changes):
    from megasim.calibration.sparse import check_rows
    row = {"op": "ecr", "kind": "ecr", "problem": "N=1,C=4,K=4,H=8,W=8", "sparsity": 0.5, "pattern": "uniform",
           "seed": 0, "median_ms": 0.1}
    for key, value in changes:
        row[key] = value
    _parses_or_refuses(lambda: check_rows([row], "rows.json"))


def test_a_measurements_key_with_a_newline_is_named_on_one_line():
    """Hypothesis found it: a value's name is the file's, so the error quotes it rather than print it raw."""
    from megasim.calibration.measurements import Measurements
    data = copy.deepcopy(MEASURED)
    data["values"]["\n"] = 0
    with pytest.raises(MegasimError) as err:
        Measurements.from_dict(data, "test.measurements.json")
    assert "\n" not in str(err.value) and "values['\\n']" in str(err.value)
