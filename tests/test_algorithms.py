"""The algorithm registry and the plug-in interface every algorithm implements."""

import pytest

from megasim.algorithms import ALGORITHMS, get_algorithm, register
from megasim.errors import MegasimError
from megasim.hardware import get_gpu
from megasim.plan import Plan, build
from megasim.workloads import parse_layer


def test_registering_a_name_twice_raises():
    with pytest.raises(ValueError, match="already registered"):
        register(ALGORITHMS["winograd"])


def test_an_unknown_name_is_a_one_line_error_listing_the_allowed():
    with pytest.raises(MegasimError) as info:
        get_algorithm("im2col")
    assert "'im2col' is not allowed" in str(info.value) and "winograd" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_schedule_builds_and_its_param_string_reproduces_the_plan(name):
    """Each algorithm's named schedules give valid schedules; the resolved --param string of a built plan
    parses back to the same plan (the contract the CLI's output relies on)."""
    alg = ALGORITHMS[name]
    problem = parse_layer("N=2,C=16,K=24,H=14,W=14")
    for schedule in alg.schedules:
        graph, sched, plan = build(problem, Plan(schedule, algorithm=name), get_gpu("A100"))
        assert set(graph.kind_names) <= set(alg.kinds) and sched.launches
        again = Plan.parse(schedule, plan.param_string(), algorithm=name)
        assert again == plan
        assert build(problem, again, get_gpu("A100"))[0].hash == graph.hash
