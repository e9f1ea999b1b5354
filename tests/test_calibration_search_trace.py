"""experiments.studies.calibration.search_trace: where two traced fits part, and the Jacobian that let them."""

from __future__ import annotations

import json

from experiments.studies.calibration.prior_spread import mean_rms
from experiments.studies.calibration.search_trace import compare, main


def _search(x0, points):
    hexed = lambda v: [float(a).hex() for a in v]       # noqa: E731
    return {"x0": hexed(x0), "points": [[hexed(x), hexed(r)] for x, r in points]}


def _trace(step):
    """A 2-field search: its start, the two forward-difference points (the second field moves no residual: a
    zero column), then a step that differs between the traces."""
    pts = [([0.0, 0.0], [1.0, 2.0]), ([0.02, 0.0], [1.1, 2.2]), ([0.0, 0.02], [1.0, 2.0]), ([0.5, step], [0.3, 0.4])]
    return {"searches": [_search([9.0], [([9.0], [0.5])]), _search([0.0, 0.0], pts)]}


def test_identical_traces_are_identical_even_when_their_searches_began_in_another_order():
    a, b = _trace(0.1), _trace(0.1)
    b["searches"].reverse()
    assert compare(a, b) == {"search": None, "what": "identical", "searches": 2, "points": 5}


def test_the_first_point_where_traces_part_and_the_zero_singular_value_behind_it():
    out = compare(_trace(0.1), _trace(-2.0))
    assert (out["search"], out["point"], out["what"]) == (1, 3, "point")
    assert out["a"] == [0.5, 0.1] and out["b"] == [0.5, -2.0]
    assert out["first_jacobian_singular_values"][-1] == 0.0 and out["first_jacobian_singular_values"][0] > 1.0


def test_mean_rms_reads_each_cost_names_fit_from_its_sources(tmp_path):
    spec = {"task_costs": {"gemm": {"compute_efficiency": {"value": 0.8, "source": "... rms log error 0.030"}},
                           "itrans": {"fixed_ns": {"value": 5.0, "source": "... rms log error 0.050"}},
                           "default": {"fixed_ns": 0.0}}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    assert abs(mean_rms(str(path)) - 0.040) < 1e-12


def test_compare_refuses_a_file_that_is_not_a_trace_in_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    assert main(["compare", str(bad), str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "x.json" in err and "no 'searches' list" in err
