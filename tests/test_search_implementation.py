"""megasim.search.implementation: the fused transform tasks' size chosen in the model."""

from __future__ import annotations

import pytest

from megasim.errors import MegasimError
from megasim.hardware import get_gpu, load_spec
from megasim.plan import Plan, predict
from megasim.search.implementation import PAIRS_CANDIDATES, model_pairs
from megasim.workloads import parse_layer

LAYER = "N=4,C=48,K=40,H=22,W=19"


@pytest.mark.parametrize("tile", [4, 6])
def test_model_pairs_picks_the_fastest_predicted_candidate(tile):
    spec = load_spec("megasim/hardware/calibrated/h200.json")
    problem = parse_layer(LAYER)
    best, times = model_pairs(problem, spec, Plan(schedule="fused", tile=tile))
    assert set(times) == set(PAIRS_CANDIDATES) and best == min(times, key=times.get)
    for pairs, us in times.items():    # each candidate at its own recommended mapping, as predict gives it
        assert us == pytest.approx(predict(problem, spec, Plan(schedule="fused", tile=tile,
                                                              transform_pairs_per_thread=pairs))[0].predicted_us)
    assert times[2] != times[4]        # the task size changes the prediction


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
