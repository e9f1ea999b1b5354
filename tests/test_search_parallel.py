"""The optimiser's budget and pool: distinct programs counted once, the same search for any worker
count, the worker count validated, the default space large enough, only scalars kept per point."""

from __future__ import annotations

import pytest

from megasim.algorithms.winograd.algorithm1 import scaled_params
from megasim.algorithms.winograd.plugin import WINOGRAD, WinogradParams
from megasim.algorithms.winograd.space import algorithm1_space, default_space, point_plan
from megasim.errors import MegasimError
from megasim.hardware import get_gpu
from megasim.search import SimulatorEvaluator, run_search
from megasim.search.evaluators import _chunks, check_workers, default_workers
from megasim.workloads import parse_layer

TINY = "N=2,C=16,K=16,H=8,W=8"          # one group per t: every (M, d_ig_x, d_go_x) builds the same map
SMALL = "N=4,C=16,K=16,H=24,W=24"       # enough groups for distinct maps


def test_point_plan_matches_scaled_params():
    """point_plan remembers the tightest D_IG, D_GO per M; its absolute values are scaled_params'."""
    problem = parse_layer("resnet-4")
    space = default_space()
    for t in (32, 64):
        params = WinogradParams(tiles_per_group=t, transform_pairs_per_thread=4)
        graph = WINOGRAD.lower(problem, params)
        for m in (1, 2, 4):
            for d_ig_x in dict(zip(space.names, (p.values for p in space.parameters)))["d_ig_x"]:
                for d_go_x in (1, 3, 8):
                    plan = point_plan(problem, space.full({"M": m, "d_ig_x": d_ig_x, "d_go_x": d_go_x, "t": t}), None)
                    want = scaled_params(graph, m, d_ig_x, d_go_x)
                    assert (plan.params.d_ig, plan.params.d_go, plan.params.m) == (want.d_ig, want.d_go, want.m)


def test_default_space_contains_the_algorithm1_space():
    big, small = default_space(), algorithm1_space()
    assert big.size >= 1000 and small.size == 120
    for p in small.points():
        big.check_point(big.full(p))     # the execution at its defaults is in the big space


def test_points_that_build_the_same_program_are_simulated_once_and_not_counted():
    problem = parse_layer(TINY)
    space = default_space().bind(problem)
    with SimulatorEvaluator(problem, get_gpu("H100"), space, workers=1) as ev:
        records = ev.evaluate(space.valid_points())
        programs = {r.extras["program"] for r in records}
        assert ev.simulated == len(programs) < len(records) // 10    # t x style x dispatch
        first = {}
        for r in records:
            first.setdefault(r.extras["program"], r)
            assert r.time_us == first[r.extras["program"]].time_us
            assert r.extras.get("duplicate", False) == (r is not first[r.extras["program"]])
    with SimulatorEvaluator(problem, get_gpu("H100"), space, workers=1) as ev:
        result = run_search(ev.space, ev, "random", budget=50, seed=1)
    assert result.evaluations == len(programs)                     # every distinct program, each once
    assert len({r.extras["program"] for r in result.records}) == result.evaluations


def test_the_budget_is_spent_on_distinct_programs():
    problem = parse_layer(SMALL)
    with SimulatorEvaluator(problem, get_gpu("H100"), default_space(), workers=1) as ev:
        result = run_search(ev.space, ev, "multifidelity", budget=40, seed=0)
    assert result.evaluations == 40
    assert len({r.extras["program"] for r in result.records}) == 40
    for r in result.records:     # scalars only: no SimResult, no arrays kept per point
        assert all(isinstance(v, (int, float, str, bool, type(None))) for v in r.extras.values())


@pytest.mark.parametrize("strategy", ["multifidelity", "annealing"])
def test_search_is_the_same_for_any_worker_count(strategy):
    problem, spec = parse_layer(SMALL), get_gpu("H100")
    runs = []
    for workers in (1, 2, 3):
        with SimulatorEvaluator(problem, spec, default_space(), workers=workers) as ev:
            res = run_search(ev.space, ev, strategy, budget=24, seed=2)
        runs.append([(r.params, r.time_us, r.extras.get("program")) for r in res.records])
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 24


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", 10_000])
def test_workers_is_validated(bad):
    with pytest.raises(MegasimError, match=r"workers=.* is not allowed: it must be an integer from 1 to"):
        check_workers(bad)
    with pytest.raises(MegasimError, match="workers="):
        SimulatorEvaluator(parse_layer(TINY), get_gpu("H100"), default_space(), workers=bad)


def test_default_workers_and_chunks():
    assert 1 <= default_workers() <= 8 and check_workers(None) == default_workers() and check_workers(3) == 3
    items = list(range(11))
    parts = _chunks(items, 2)
    assert [x for p in parts for x in p] == items and len(parts) == 4 and max(map(len, parts)) - min(map(len, parts)) <= 1
    assert _chunks([], 4) == [] and _chunks([1], 4) == [[1]]


def test_a_replayed_cache_counts_the_same_distinct_programs(tmp_path):
    problem, cache = parse_layer(TINY), tmp_path / "c.json"
    runs = []
    for _ in range(2):
        with SimulatorEvaluator(problem, get_gpu("H100"), default_space(), workers=1, cache_path=cache) as ev:
            res = run_search(ev.space, ev, "random", budget=50, seed=4)
        runs.append((res.evaluations, [r.params for r in res.records], ev.simulated))
    assert runs[0][:2] == runs[1][:2] and runs[0][2] == runs[0][0] and runs[1][2] == 0


def test_the_cli_allows_the_workers_the_library_allows():
    from megasim.cli import optimize as cli_optimize
    from megasim.search import evaluators
    assert cli_optimize.MAX_WORKERS == evaluators.MAX_WORKERS


def test_max_tasks_reaches_every_evaluation():
    from megasim.hardware import get_gpu
    from megasim.search import optimize
    from megasim.workloads import parse_layer
    problem, spec = parse_layer("N=1,C=8,K=8,H=12,W=12"), get_gpu("H100")
    with pytest.raises(MegasimError, match="more than max_tasks=3 is not allowed"):
        optimize(problem, spec, budget=4, workers=1, max_tasks=3)
    assert optimize(problem, spec, budget=4, workers=1, max_tasks=39).best is not None


@pytest.mark.parametrize("strategy, option", [("multifidelity", {"screen": 1.5}), ("multifidelity", {"top": 0}),
                                              ("multifidelity", {"top": 2.5}), ("annealing", {"alpha": 0.0}),
                                              ("diff_evo", {"mutation": 2.0}), ("random", {"batch": True}),
                                              ("exhaustive", {"batch": -1})])
def test_strategy_options_out_of_range_are_refused_with_their_value(strategy, option):
    from megasim.search import optimize
    (name, value), = option.items()
    with pytest.raises(MegasimError, match=f"option {name}={value!r} of strategy"):
        optimize(parse_layer("N=1,C=8,K=8,H=12,W=12"), get_gpu("H100"), strategy=strategy, budget=4, workers=1,
                 options=option)
