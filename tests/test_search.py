"""The optimiser: every strategy against a replayed synthetic cache (no simulation), options,
constraints, the Kernel Tuner cache format, the landscape, and `megasim optimize` on a tiny layer."""

from __future__ import annotations

import json
import math

import pytest

from megasim.cli.main import main
from megasim.errors import MegasimError
from megasim.search import (STRATEGIES, Cache, CacheEvaluator, GPUEvaluator, Parameter, Record, SearchSpace,
                            get_strategy, run_search)
from megasim.algorithms.winograd.space import algorithm1_space, default_space, full_space
from megasim.search.budget import Tracker, check_options
from megasim.search.cache import INVALID
from megasim.search.landscape import plot_landscape, read_landscape, write_landscape
from megasim.workloads import parse_layer

DEVICE = "H100-synthetic"
PROBLEM = "N=64,C=64,K=64,H=56,W=56,R=3,S=3,stride=1,padding=1"
OPTIMUM = {"M": 4, "d_ig_x": 2, "d_go_x": 2, "t": 32}


def _time(p, low=False):
    """A smooth synthetic landscape with one optimum (OPTIMUM); low fidelity: scaled, perturbed."""
    t = (100 + 3 * (math.log2(p["M"]) - 2) ** 2 + 2 * abs(math.log2(p["d_ig_x"]) - 1)
         + 1.5 * abs(math.log2(p["d_go_x"]) - 1) + (4 if p["t"] == 64 else 0))
    if low:
        t = 0.1 * t + 0.05 * math.sin(7 * p["M"] + 3 * p["d_ig_x"] + p["d_go_x"])
    return t


def _cache(space, low=False):
    cache = Cache.for_space(space, DEVICE, PROBLEM)
    for p in space.points():
        if p["M"] == 16 and p["t"] == 64:      # a point that cannot run, stored as Kernel Tuner does
            cache.put(space, Record(p, None, "M=16 is not allowed: it must be at most N_G=8"))
        else:
            cache.put(space, Record(p, _time(p, low) , None, {"D_IG": 1, "param": "x"}))
    return cache


@pytest.fixture(scope="module")
def space():
    return algorithm1_space()


@pytest.fixture(scope="module")
def caches(space):
    return _cache(space), _cache(space, low=True)


def _evaluator(space, caches):
    return CacheEvaluator(space, caches[0], caches[1])


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_finds_optimum_deterministically(name, space, caches):
    a = run_search(space, _evaluator(space, caches), name, budget=200, seed=3)
    b = run_search(space, _evaluator(space, caches), name, budget=200, seed=3)
    assert [r.params for r in a.records] == [r.params for r in b.records]
    assert a.best is not None and a.best.params == OPTIMUM
    assert a.evaluations <= 200


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize("budget", [1, 7, 30])
def test_strategy_respects_budget(name, budget, space, caches):
    res = run_search(space, _evaluator(space, caches), name, budget=budget, seed=0)
    assert 1 <= res.evaluations <= budget
    keys = [(r.extras.get("fidelity"), space.key(r.params)) for r in res.records]
    assert len(keys) == len(set(keys)), "a point was evaluated twice"


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_unknown_option_lists_allowed(name, space, caches):
    with pytest.raises(MegasimError, match=r"unknown option\(s\) nope .*allowed") as err:
        run_search(space, _evaluator(space, caches), name, budget=5, options={"nope": 1})
    assert "\n" not in str(err.value)
    for key in get_strategy(name).OPTIONS:
        assert key in str(err.value)


def test_unknown_strategy_and_bad_budget(space, caches):
    with pytest.raises(MegasimError, match="unknown strategy 'x' .allowed: exhaustive"):
        get_strategy("x")
    with pytest.raises(MegasimError, match="budget=0"):
        Tracker(space, _evaluator(space, caches), 0)
    assert check_options("random", {"batch": 4}, {"batch": 16}) == {"batch": 4}


def test_constraints_give_reasons():
    sp = full_space()
    p = {"M": 4, "d_ig_x": 1, "d_go_x": 1, "t": 32, "threads": 128, "gemm_k_tile": 64, "gemm_threads": 128,
         "style": "per_task", "blocks_per_sm": 2, "dispatch": "ticket"}
    assert sp.constraint(p) == "blocks_per_sm applies to style=persistent only"
    assert sp.constraint({**p, "style": "persistent"}) is None
    bound = algorithm1_space().bind(parse_layer("resnet-4"))      # 7x7: N_G = 8 (t=32), 4 (t=64)
    assert dict(bound.bound) == {32: 8, 64: 4}
    reason = bound.constraint({"M": 8, "d_ig_x": 1, "d_go_x": 1, "t": 64})
    assert reason.startswith("M=8 is not allowed") and "N_G=4" in reason
    assert bound.constraint({"M": 8, "d_ig_x": 1, "d_go_x": 1, "t": 32}) is None
    with pytest.raises(MegasimError, match="duplicate"):
        SearchSpace((Parameter("M", (1,)), Parameter("M", (2,))))
    with pytest.raises(MegasimError, match="unknown parameter"):
        SearchSpace((Parameter("colour", (1,)),))


def test_constraint_rejected_points_cost_nothing(caches):
    sp = algorithm1_space().bind(parse_layer("resnet-4"))
    tracker = Tracker(sp, CacheEvaluator(sp, caches[0]), 3)
    recs = tracker.evaluate([{"M": 16, "d_ig_x": 1, "d_go_x": 1, "t": 64}, {"M": 1, "d_ig_x": 1, "d_go_x": 1, "t": 32}])
    assert recs[0].reason.startswith("M=16 is not allowed") and recs[1].valid
    assert tracker.remaining == 2


def test_cache_round_trip_kernel_tuner_format(tmp_path, space, caches):
    path = tmp_path / "c.json"
    caches[0].save(path)
    data = json.loads(path.read_text())
    for key in ("version", "device_name", "kernel_name", "problem_size", "tune_params_keys", "tune_params",
                "objective", "cache"):
        assert key in data
    assert data["kernel_name"] == "winograd_megakernel" and data["tune_params_keys"] == list(space.names)
    entry = data["cache"]["4,2,2,32"]
    assert entry["time"] == pytest.approx(_time(OPTIMUM) / 1e3)        # milliseconds, as Kernel Tuner
    assert entry["times"] == [entry["time"]] and entry["M"] == 4
    for key in ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time", "timestamp"):
        assert key in entry
    bad = data["cache"]["16,1,1,64"]
    assert bad["time"] == INVALID and "N_G" in bad["megasim_reason"]
    back = Cache.load(path, space, DEVICE, PROBLEM)
    rec = back.get(space, OPTIMUM)
    assert rec.time_us == pytest.approx(_time(OPTIMUM)) and rec.extras["D_IG"] == 1
    assert back.get(space, {"M": 16, "d_ig_x": 1, "d_go_x": 1, "t": 64}).reason.startswith("M=16")
    with pytest.raises(MegasimError, match="belongs to device"):
        Cache.load(path, space, "V100-x", PROBLEM)
    with pytest.raises(MegasimError, match="belongs to problem"):
        Cache.load(path, space, DEVICE, "N=1")
    with pytest.raises(MegasimError, match="differ from the space"):
        Cache.load(path, full_space())


def test_missing_point_and_gpu_evaluator(space):
    ev = CacheEvaluator(space, Cache.for_space(space, DEVICE, PROBLEM))
    assert ev.evaluate([OPTIMUM])[0].reason == "not in cache"
    assert ev.coarse() is None
    import numba
    if numba.config.ENABLE_CUDASIM:        # no real GPU here (on one, the evaluator measures: tested on the device)
        with pytest.raises(MegasimError, match="needs a CUDA GPU"):
            GPUEvaluator(parse_layer(TINY), default_space())


def test_gpu_evaluator_with_a_stand_in_harness(tmp_path):
    """The GPU evaluator measures each new point once through the harness (here a stand-in that
    'measures' the model), caches it under the measured device, and a strategy uses it like the
    simulator's evaluator."""
    problem = parse_layer(TINY)
    calls = []

    def fake_measure(prob, plans, **kw):
        from megasim.hardware import get_gpu
        from megasim.plan import predict
        rows = []
        for _, plan in plans:
            calls.append(plan.param_string())
            result, _ = predict(prob, get_gpu("H100"), plan)
            rows.append({"status": "ok", "measured_us": 2.0 * result.predicted_us, "spread_us": 0.1})
        return rows

    space = algorithm1_space()
    cache = tmp_path / "measured.json"
    ev = GPUEvaluator(problem, space, measure=fake_measure, device="fake-GPU", cache_path=cache)
    res = run_search(ev.space, ev, "exhaustive", budget=500, seed=0)
    assert res.best is not None and ev.simulated == len(calls) > 0
    assert "measured-fake-GPU" in json.loads(cache.read_text())["device_name"]
    again = GPUEvaluator(problem, space, measure=fake_measure, device="fake-GPU", cache_path=cache)
    before = len(calls)
    res2 = run_search(again.space, again, "exhaustive", budget=500, seed=0)
    assert len(calls) == before and res2.best.time_us == res.best.time_us   # all from the cache


@pytest.mark.parametrize("time", [float("nan"), -5.0, 0.0, 1e308, None, 10 ** 400])
def test_a_cache_entry_whose_time_is_not_a_time_is_refused(tmp_path, space, caches, time):
    """A NaN, negative, zero or overflowing time in a --cache file was replayed as the search's best point
    (`megasim optimize` printed 'predicted nan us', '-5,000.0 us', 'inf us'); None raised TypeError."""
    path = tmp_path / "c.json"
    caches[0].save(path)
    data = json.loads(path.read_text())
    data["cache"]["4,2,2,32"]["time"] = time
    path.write_text(json.dumps(data))
    with pytest.raises(MegasimError, match=r"entry '4,2,2,32' time=.* is not allowed: its time must be a finite"):
        Cache.load(path, space, DEVICE, PROBLEM)


def test_a_cache_file_nested_too_deeply_is_refused(tmp_path, space):
    path = tmp_path / "c.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MegasimError, match="nests too deeply"):      # RecursionError before
        Cache.load(path, space, DEVICE, PROBLEM)


def test_landscape_csv_and_plot(tmp_path, space, caches):
    res = run_search(space, _evaluator(space, caches), "random", budget=40, seed=1)
    path = write_landscape(res.records, space.names, tmp_path / "l.csv")
    names, rows = read_landscape(path)
    assert names == list(space.names) and len(rows) == 40
    png = plot_landscape(path, tmp_path / "l.png", title="synthetic")
    assert png.stat().st_size > 1000


TINY = "N=2,C=16,K=16,H=8,W=8"


def test_cli_optimize_tiny_json(tmp_path, capsys):
    cache = tmp_path / "c.json"
    argv = ["optimize", TINY, "--gpu", "H100", "--budget", "12", "--strategy", "random", "--workers", "1",
            "--json", "--cache", str(cache), "--landscape", str(tmp_path / "l.csv")]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("params", "predicted_us", "evaluations", "wall_s", "best_point"):
        assert key in out
    assert out["evaluations"] <= 12 and out["predicted_us"] > 0 and out["params"].startswith("D_IG=")
    assert main(argv) == 0                     # the second run replays the cache
    again = json.loads(capsys.readouterr().out)
    assert again["simulated"] == 0 and again["predicted_us"] == out["predicted_us"]
    data = json.loads(cache.read_text())
    assert data["problem_size"].startswith(TINY) and data["device_name"].startswith("H100-")


@pytest.mark.parametrize("extra, message", [
    (["--strategy", "bogus"], "invalid choice: 'bogus'"),
    (["--option", "nope=1"], "--option nope is not allowed for strategy 'multifidelity' (allowed:"),
    (["--option", "broken"], "malformed --option item"),
    (["--budget", "0"], "argument --budget: '0' is not allowed"),
    (["--evaluator", "gpu"], "needs a CUDA GPU"),
])
def test_cli_optimize_errors(extra, message, capsys):
    import numba
    if "gpu" in extra and not numba.config.ENABLE_CUDASIM:
        pytest.skip("a real GPU is here: the GPU evaluator measures")
    rc = main(["optimize", TINY, "--gpu", "H100", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1



def test_coarse_batch_only_for_large_layers():
    from megasim.algorithms.winograd.space import coarse_batch
    assert coarse_batch(parse_layer("vgg-1")) == 8          # 213k tasks: N/8, >= 128 groups of 32 tiles
    assert coarse_batch(parse_layer("resnet-4")) == 64      # small: simulated as it is
    assert coarse_batch(parse_layer(TINY)) == 2


def test_simulator_evaluator_order_and_workers(tmp_path):
    from megasim.hardware import get_gpu
    from megasim.search import SimulatorEvaluator
    sp = algorithm1_space()
    pts = sp.valid_points()[:6] + [{"M": 16, "d_ig_x": 1, "d_go_x": 1, "t": 32}]
    with SimulatorEvaluator(parse_layer(TINY), get_gpu("H100"), sp, workers=1) as one, \
            SimulatorEvaluator(parse_layer(TINY), get_gpu("H100"), sp, workers=2) as two:
        a, b = one.evaluate(pts), two.evaluate(pts)
    assert [r.time_us for r in a] == [r.time_us for r in b]
    assert [r.params for r in a] == pts
    assert a[-1].time_us is None and a[-1].reason.startswith("M=16 is not allowed")
    assert a[0].extras["D_IG"] >= 0 and a[0].extras["param"].startswith("D_IG=")


def test_full_space_searches_the_ready_queue():
    """The full space's dispatch includes the ready queue, and a ready point simulates the plan that
    `megasim simulate --param` builds from its param string (the same prediction)."""
    from megasim.hardware import get_gpu
    from megasim.plan import Plan, predict
    from megasim.search.evaluators import simulate_point

    space = full_space()
    assert space.parameters[space.names.index("dispatch")].values == ("ticket", "ready")
    problem = parse_layer("N=2,C=16,K=24,H=10,W=9")
    spec = get_gpu("H100")
    point = space.full({"M": 1, "t": 32, "dispatch": "ready"})
    time_us, reason, extras = simulate_point(problem, spec, point)
    assert reason is None and "dispatch=ready" in extras["param"]
    result, _ = predict(problem, spec, Plan.parse("fused", extras["param"]))
    assert result.predicted_us == pytest.approx(time_us)
    ticket_us, _, _ = simulate_point(problem, spec, {**point, "dispatch": "ticket"})
    assert ticket_us != time_us


@pytest.mark.parametrize("budget", [60, 150])
def test_multifidelity_spends_the_whole_budget(budget, space, caches):
    """With a coarse evaluator the descent may stop early; the rest of the budget is still spent
    (more screening, then the best unconfirmed points at full fidelity), and the optimum is found."""
    res = run_search(space, _evaluator(space, caches), "multifidelity", budget=budget, seed=0)
    assert res.evaluations == budget
    assert res.best.params == OPTIMUM



def test_a_search_reports_what_simulate_predicts_for_every_algorithm():
    """A search's time is the whole run, as `megasim simulate` prints it, also for the sparse family, whose
    GPU measurements are compared with its kernels' span alone: a sweep compares searches across algorithms."""
    from megasim.hardware import get_gpu
    from megasim.plan import predict
    from megasim.search.evaluators import point_plan, simulate_point
    spec = get_gpu("H100")
    problem = parse_layer("N=1,C=32,K=32,H=14,W=14", batch=1)
    for algorithm, point in (("ecr", {"k_tile": 8}), ("direct", {"k_tile": 16})):
        result, plan = predict(problem, spec, point_plan(problem, point, algorithm))
        time_us, reason, _ = simulate_point(problem, spec, point, algorithm=algorithm)
        assert reason is None and time_us == result.predicted_us, algorithm
        if algorithm == "ecr":     # the two differ there
            assert plan.algo.time_us(result) < result.predicted_us
