"""SimPy processes beside the model: they share its event loop and, through ``dram_transfer``, its
memory system; without them the result is ``simulate``'s, bit for bit."""

from __future__ import annotations

import dataclasses

import pytest

from megasim.errors import SimulationError
from megasim.hardware import get_gpu
from megasim.plan import Plan, build
from megasim.sim import Simulation, simulate
from megasim.workloads import parse_layer


def _setup(schedule="nonfused"):
    spec = get_gpu("H100")
    graph, sched, _ = build(parse_layer("N=2,C=32,K=48,H=20,W=22"), Plan(schedule), spec)
    return graph, sched, spec


def _same(a, b):
    assert a.predicted_ns == b.predicted_ns
    assert (a.end_ns == b.end_ns).all() and (a.sm == b.sm).all()


@pytest.mark.parametrize("schedule", ["nonfused", "fused"])
def test_a_process_that_only_waits_changes_nothing(schedule):
    graph, sched, spec = _setup(schedule)
    ticks = []

    def clock_watcher(sim):
        while True:
            yield sim.env.timeout(250.0)
            ticks.append(sim.now)

    sim = Simulation(graph, sched, spec)
    sim.env.process(clock_watcher(sim))
    result = sim.run()
    _same(result, simulate(graph, sched, spec))
    assert ticks and ticks[-1] <= result.predicted_ns      # it ran in the same loop, up to the model's end


def test_a_dram_co_runner_slows_the_model():
    graph, sched, spec = _setup()
    alone = simulate(graph, sched, spec)
    chunk = 16 << 10
    done_at = []

    def co_runner(sim):
        while True:
            start = sim.now
            yield sim.dram_transfer(chunk)
            done_at.append(sim.now - start)

    sim = Simulation(graph, sched, spec)
    sim.env.process(co_runner(sim))
    shared = sim.run()
    assert shared.predicted_ns > alone.predicted_ns
    # A transfer moves at most one block's DRAM bandwidth (bytes/ns = GB/s).
    floor_ns = chunk / min(spec.dram_bw_gbps, spec.tb_max_dram_bw_gbps)
    assert len(done_at) > 3 and min(done_at) >= floor_ns * (1 - 1e-12)


def test_a_transfer_alone_takes_bytes_over_the_block_bandwidth():
    graph, sched, spec = _setup()
    spec = dataclasses.replace(spec, kernel_launch_ns=1e7)      # the model idles for 10 ms first (the most a spec may give)
    took = []

    def one(sim):
        yield sim.dram_transfer(3e5)
        took.append(sim.now)

    sim = Simulation(graph, sched, spec)
    sim.env.process(one(sim))
    sim.run()
    assert took == [pytest.approx(3e5 / min(spec.dram_bw_gbps, spec.tb_max_dram_bw_gbps), rel=1e-12)]


@pytest.mark.parametrize("nbytes", [0, -5, float("nan"), float("inf"), "lots", None])
def test_a_bad_transfer_is_refused(nbytes):
    graph, sched, spec = _setup()
    sim = Simulation(graph, sched, spec)
    errors = []

    def bad(sim):
        try:
            yield sim.dram_transfer(nbytes)
        except SimulationError as exc:
            errors.append(str(exc))

    sim.env.process(bad(sim))
    sim.run()
    assert errors and (repr(nbytes) if isinstance(nbytes, (str, type(None))) else repr(float(nbytes))) in errors[0]


def test_transfers_outside_a_run_and_second_runs_are_refused():
    graph, sched, spec = _setup()
    sim = Simulation(graph, sched, spec)
    with pytest.raises(SimulationError, match="from a process"):
        sim.dram_transfer(100)
    sim.run()
    with pytest.raises(SimulationError, match="runs once"):
        sim.run()


def test_progress_hears_the_tasks_end_in_order(monkeypatch):
    from megasim.sim import launches
    monkeypatch.setattr(launches, "PROGRESS_EVERY", 100)
    PROGRESS_EVERY = 100
    spec = get_gpu("H100")
    graph, sched, _ = build(parse_layer("N=8,C=32,K=32,H=56,W=56"), Plan("nonfused"), spec)
    heard = []
    result = simulate(graph, sched, spec, progress=lambda done, total: heard.append((done, total)))
    assert graph.num_tasks > 2 * PROGRESS_EVERY
    assert heard and all(total == graph.num_tasks for _, total in heard)
    assert [d for d, _ in heard] == sorted(d for d, _ in heard) and heard[-1][0] <= graph.num_tasks
    assert len(heard) >= graph.num_tasks // PROGRESS_EVERY - len(sched.launches)
    _same(result, simulate(graph, sched, spec))
    with pytest.raises(SimulationError, match="progress"):
        simulate(graph, sched, spec, progress="yes")
