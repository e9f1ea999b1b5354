"""The compiled event loop predicts what the SimPy handlers predict, record for record, bit for bit.

Both engines run the same programs: random points of every algorithm's spaces on awkward small layers,
every preset, both placements, and a spec that exercises what presets leave out (cap classes on the
memory system and the SMs, megakernel claims and fixed costs, launch-fixed costs, queued launches).
Then: when ``engine="auto"`` picks which, the progress reports, and the one-line refusals.
"""

from __future__ import annotations

import dataclasses
import random
import re

import numpy as np
import pytest
import simpy

from megasim.errors import MegasimError, SimulationError
from megasim.hardware import TaskCost, get_gpu, load_spec
from megasim.plan import Plan, build
from megasim.search.evaluators import point_plan
from megasim.search.space import spaces_of
from megasim.sim import ModelEnvironment, SimOptions, Simulation, simulate
from megasim.workloads import parse_layer

RECORDS = ("claim_ns", "ready_ns", "mem_start_ns", "compute_start_ns", "end_ns", "sm", "slot", "task_dram_bytes",
           "dram_read_bytes", "dram_write_bytes", "wait_ns")
PRESETS = ("H100", "V100", "A100", "RTX3090", "H200")
CALIBRATED = ("megasim/hardware/calibrated/h200.json", "megasim/hardware/calibrated/h100_from_h200.json",
              "megasim/hardware/calibrated/h200_sparse.json")


def assert_same(a, b) -> None:
    assert a.predicted_ns == b.predicted_ns
    assert [(l.start_ns, l.end_ns, l.blocks_per_sm) for l in a.launches] == \
           [(l.start_ns, l.end_ns, l.blocks_per_sm) for l in b.launches]
    for name in RECORDS:
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name


def both(graph, schedule, spec, placement="round_robin"):
    """Both engines' results; or, where the SimPy handlers refuse, None after checking that the compiled
    loop refuses alike."""
    try:
        a = simulate(graph, schedule, spec, SimOptions(placement=placement, engine="simpy"))
    except SimulationError as err:
        with pytest.raises(SimulationError, match=f"^{re.escape(str(err))}$"):
            simulate(graph, schedule, spec, SimOptions(placement=placement, engine="compiled"))
        return None
    b = simulate(graph, schedule, spec, SimOptions(placement=placement, engine="compiled"))
    return a, b


def _points(algorithm: str, layer: str, count: int, seed: int):
    problem = parse_layer(layer)
    rng = random.Random(seed)
    out = []
    for name, make in spaces_of(algorithm).items():
        space = make().bind(problem)
        points = space.valid_points()
        rng.shuffle(points)
        out += [(problem, space.full(p)) for p in points[:count]]
    return out


CASES = [(algorithm, layer, seed) for seed, (algorithm, layer) in enumerate([
    ("winograd", "N=2,C=17,K=29,H=13,W=11"),
    ("winograd", "N=1,C=64,K=64,H=28,W=28"),
    ("ecr", "N=2,C=19,K=24,H=9,W=14"),
    ("pecr", "N=1,C=16,K=21,H=12,W=12"),
    ("direct", "N=1,C=8,K=13,H=11,W=7"),
    ("direct_fused", "N=2,C=8,K=16,H=10,W=10"),
])]


@pytest.mark.parametrize("algorithm,layer,seed", CASES, ids=[f"{a}-{l}" for a, l, _ in CASES])
def test_random_points_on_every_spec_are_identical(algorithm, layer, seed):
    """Presets (shared servers) and calibrated specs (readiness and age-weighted SMs, stretch classes,
    overlapped memory phases, mixed-kind factor)."""
    rng = random.Random(seed)
    ran = 0
    for problem, point in _points(algorithm, layer, 6, seed):
        name = rng.choice(PRESETS + CALIBRATED)
        spec = load_spec(name) if name.endswith(".json") else get_gpu(name)
        try:
            graph, schedule, _ = build(problem, point_plan(problem, point, algorithm), spec)
        except MegasimError:
            continue                    # a point this GPU cannot run: nothing to compare
        results = both(graph, schedule, spec, rng.choice(("round_robin", "fill")))
        if results is not None:
            assert_same(*results)
            ran += 1
    assert ran >= 3


@pytest.mark.parametrize("schedule", ["fused", "nonfused"])
@pytest.mark.parametrize("dram_x", [0.5, 2.0])
def test_caps_by_hit_fraction_with_stretch_are_identical(schedule, dram_x):
    """A calibrated spec (stretch classes, readiness SMs) at another DRAM bandwidth keeps its
    block_l2_bw_ratio, so each memory job's cap follows its hit fraction."""
    base = load_spec("megasim/hardware/calibrated/h200.json")
    spec = dataclasses.replace(base, dram_bw_gbps=base.dram_bw_gbps * dram_x)
    assert not spec.l2_ratio_implied
    problem = parse_layer("N=2,C=40,K=48,H=14,W=15")
    graph, sched, _ = build(problem, Plan(schedule), spec)
    assert_same(*both(graph, sched, spec))


@pytest.mark.parametrize("params", ["", "style=persistent,dispatch=ready"])
@pytest.mark.parametrize("schedule", ["fused", "nonfused"])
def test_caps_by_hit_fraction_across_kinds_are_identical(schedule, params):
    """Kinds of different per-block rates (capped classes, no stretch) at a stated block_l2_bw_ratio."""
    spec = dataclasses.replace(_mixed_spec(), block_l2_bw_ratio=3.0)
    assert not spec.l2_ratio_implied
    problem = parse_layer("N=2,C=24,K=40,H=14,W=15")
    graph, sched, _ = build(problem, Plan.parse(schedule, params) if params else Plan(schedule), spec)
    assert_same(*both(graph, sched, spec))


def _mixed_spec():
    """Every kind its own memory cap and SM share (capped servers), claims and fixed costs measured."""
    base = get_gpu("H100")
    costs = {
        "default": TaskCost(compute_efficiency=0.5),
        "ftrans": TaskCost(compute_efficiency=0.3, block_sm_share=0.5, block_dram_bw_gbps=9.0, launch_fixed_ns=700.0),
        "itrans": TaskCost(compute_efficiency=0.4, block_sm_share=0.25, fixed_ns=90.0, megakernel_claim_ns=650.0),
        "gemm": TaskCost(compute_efficiency=0.7, block_sm_share=1.0, block_dram_bw_gbps=30.0, megakernel_fixed_ns=120.0),
        "otrans": TaskCost(compute_efficiency=0.45, block_sm_share=0.5, block_dram_bw_gbps=12.0, ns_per_step=3.0),
    }
    return dataclasses.replace(base, name="mixed", task_costs=costs, megakernel_ticket_ns=250.0,
                               megakernel_launch_ns=5200.0, megakernel_reset_ns=1800.0)


@pytest.mark.parametrize("params", ["", "style=persistent", "dispatch=ready", "dispatch=blockidx",
                                    "style=persistent,dispatch=ready"])
@pytest.mark.parametrize("schedule", ["fused", "nonfused"])
@pytest.mark.parametrize("queued", [None, 2500.0])
def test_cap_classes_claims_and_queued_launches_are_identical(schedule, params, queued):
    spec = dataclasses.replace(_mixed_spec(), queued_launch_ns=queued)
    problem = parse_layer("N=2,C=24,K=40,H=14,W=15")
    try:
        graph, sched, _ = build(problem, Plan.parse(schedule, params) if params else Plan(schedule), spec)
    except MegasimError as err:
        pytest.skip(f"not a plan of this schedule: {err}")
    results = both(graph, sched, spec)
    if results is None:
        pytest.skip("no block of this plan fits")
    assert_same(*results)


@pytest.mark.parametrize("spec_file", CALIBRATED[:2])
@pytest.mark.parametrize("params", ["", "style=persistent", "dispatch=ready", "t=32", "style=persistent,dispatch=ready"])
@pytest.mark.parametrize("schedule", ["fused", "nonfused"])
def test_calibrated_winograd_specs_are_identical(schedule, params, spec_file):
    spec = load_spec(spec_file)
    problem = parse_layer("N=3,C=32,K=48,H=17,W=19")
    try:
        graph, sched, _ = build(problem, Plan.parse(schedule, params) if params else Plan(schedule), spec)
    except MegasimError as err:
        pytest.skip(f"not a plan of this schedule: {err}")
    results = both(graph, sched, spec)
    if results is None:
        pytest.skip("no block of this plan fits")
    assert_same(*results)


def test_the_sparse_calibrated_spec_is_identical():
    spec = load_spec("megasim/hardware/calibrated/h200_sparse.json")
    problem = parse_layer("N=2,C=16,K=24,H=12,W=12")
    for algorithm, schedule in (("ecr", None), ("pecr", None), ("pecr", "unfused"), ("direct_fused", None)):
        graph, sched, _ = build(problem, Plan.parse(schedule, "sparsity=0.6", algorithm=algorithm), spec)
        assert_same(*both(graph, sched, spec))


def test_progress_is_reported_alike(monkeypatch):
    import megasim.sim.launches as launches_module
    monkeypatch.setattr(launches_module, "PROGRESS_EVERY", 97)
    problem = parse_layer("N=8,C=64,K=64,H=56,W=56")        # launches of 32, 784, 900 and 784 tasks
    spec = get_gpu("H100")
    graph, sched, _ = build(problem, Plan("nonfused"), spec)
    seen = {"simpy": [], "compiled": []}
    for engine in seen:
        simulate(graph, sched, spec, SimOptions(engine=engine), progress=lambda d, t, e=engine: seen[e].append((d, t)))
    assert len(seen["simpy"]) >= 20
    assert seen["simpy"] == seen["compiled"]


def test_auto_runs_compiled_where_it_can_and_simpy_otherwise():
    spec = get_gpu("H100")
    graph, sched, _ = build(parse_layer("N=1,C=16,K=16,H=10,W=10"), Plan("fused"), spec)
    compiled = simulate(graph, sched, spec, SimOptions(engine="compiled"))
    assert simulate(graph, sched, spec).events == compiled.events          # auto: the compiled loop

    sim = Simulation(graph, sched, spec)
    sim.env.process(_idle(sim.env))                                          # a user process: SimPy
    assert sim.run().events == simulate(graph, sched, spec, SimOptions(engine="simpy")).events

    with pytest.raises(SimulationError, match=r"engine='compiled' is not allowed here: the simulation was given"):
        Simulation(graph, sched, spec, SimOptions(engine="compiled"), env=ModelEnvironment()).run()


def test_an_unknown_engine_is_refused_in_one_line():
    with pytest.raises(SimulationError, match=r"engine 'fast' is not allowed \(allowed: auto, simpy, compiled\)"):
        SimOptions(engine="fast")


def _idle(env: simpy.Environment):
    yield env.timeout(1.0)


def test_a_single_cli_run_compiles_the_loop_only_where_that_pays(monkeypatch):
    """`megasim simulate --engine auto`: SimPy's loop for small runs; the compiled loop from 50,000 tasks when Numba
    has it on disk, and from 750,000 when it would first compile it (about 8 s on 2 cores)."""
    from megasim.cli import simulate as cli_simulate
    from megasim.cli.simulate import COLD_COMPILED_TASKS, SINGLE_RUN_COMPILED_TASKS, auto_engine
    for on_disk in (True, False):
        monkeypatch.setattr(cli_simulate, "compiled_on_disk", lambda on_disk=on_disk: on_disk)
        assert auto_engine(SINGLE_RUN_COMPILED_TASKS - 1) == "simpy"
        assert auto_engine(SINGLE_RUN_COMPILED_TASKS) == ("compiled" if on_disk else "simpy")
        assert auto_engine(COLD_COMPILED_TASKS) == "compiled"
        assert auto_engine(None) == "compiled"
    monkeypatch.undo()
    assert isinstance(cli_simulate.compiled_on_disk(), bool)
