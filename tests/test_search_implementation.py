"""megasim.algorithms.winograd.implementation: the fused transform tasks' size chosen in the model."""

from __future__ import annotations

import pytest

from megasim.errors import MegasimError
from megasim.hardware import get_gpu, load_spec
from megasim.algorithms.winograd.lowering import lower_winograd
from megasim.algorithms.winograd.algorithm1 import recommended_params
from megasim.algorithms.winograd import WinogradParams
from megasim.plan import Plan, predict
from megasim.algorithms.winograd.implementation import PAIRS_CANDIDATES, model_pairs
from megasim.workloads import parse_layer

LAYER = "N=4,C=48,K=40,H=22,W=19"


@pytest.mark.parametrize("tile", [4, 6])
def test_model_pairs_picks_the_fastest_predicted_candidate(tile):
    spec = load_spec("megasim/hardware/calibrated/h200.json")
    problem = parse_layer(LAYER)
    best, times = model_pairs(problem, spec, Plan("fused", WinogradParams(tile=tile)))
    assert set(times) == set(PAIRS_CANDIDATES) and best == min(times, key=times.get)
    for pairs, us in times.items():    # each candidate at its own recommended mapping (conv2d's default)
        plan = Plan("fused", WinogradParams(tile=tile, transform_pairs_per_thread=pairs))
        rec = recommended_params(lower_winograd(problem, plan.params.config))
        plan = Plan("fused", WinogradParams(tile=tile, transform_pairs_per_thread=pairs, d_ig=rec.d_ig, d_go=rec.d_go, m=rec.m))
        assert us == pytest.approx(predict(problem, spec, plan)[0].predicted_us)
    assert times[2] != times[4]        # the task size changes the prediction


def test_a_given_mapping_is_kept():
    problem = parse_layer(LAYER)
    spec = get_gpu("H200")
    plan = Plan("fused", WinogradParams(d_ig=24, d_go=72, m=1))
    _, times = model_pairs(problem, spec, plan)
    for pairs, us in times.items():
        assert us == pytest.approx(predict(problem, spec, Plan("fused", WinogradParams(d_ig=24, d_go=72, m=1,
                                                               transform_pairs_per_thread=pairs)))[0].predicted_us)


def test_a_predicted_tie_keeps_the_first_candidate():
    problem = parse_layer(LAYER)
    best, times = model_pairs(problem, get_gpu("H200"), Plan(schedule="fused"), candidates=(4, 4))
    assert best == 4 and list(times) == [4]


@pytest.mark.parametrize("plan, candidates, match", [
    (Plan(schedule="nonfused"), (4, 2), "schedule 'nonfused' is not allowed"),
    (Plan(schedule="fused"), (), "no candidates"),
])
def test_bad_requests_are_one_line_errors(plan, candidates, match):
    with pytest.raises(MegasimError, match=match) as info:
        model_pairs(parse_layer(LAYER), get_gpu("H200"), plan, candidates)
    assert "\n" not in str(info.value)


def test_model_implementation_picks_tile_and_pairs_together():
    from megasim.algorithms.winograd.implementation import model_implementation
    problem = parse_layer(LAYER)
    spec = load_spec("megasim/hardware/calibrated/h200.json")
    tile, pairs, times = model_implementation(problem, spec, Plan(schedule="fused"), (4, 6, 7), (4, 2))
    assert list(times) == [(4, 4), (4, 2), (6, 4), (6, 2), (7, 4), (7, 2)]
    assert times[(tile, pairs)] == min(times.values())
    for m in (4, 7):    # each tile's entries are model_pairs at that tile
        assert model_pairs(problem, spec, Plan("fused", WinogradParams(tile=m)))[1] == {p: times[(m, p)] for p in (4, 2)}
    with pytest.raises(MegasimError, match="tile 8 is not allowed") as info:
        model_implementation(problem, spec, Plan(schedule="fused"), (4, 8))
    assert "\n" not in str(info.value)
