"""Byte counts far beyond a real layer's, and compute-only tasks, run to an end on both engines.

A task moving ~1e11 bytes or more ends ~1e10 ns after the start, where a float64 time in ns resolves only
~1e-6 ns: a completion that fell short of its job's work by less than that would re-fire at the same time
for ever (the engine hung, even for Ctrl-C, in the compiled loop). ``ProcessorSharingServer._snap`` ends
such a job instead; the cost of a run does not depend on the byte counts. Also: a task without accesses
(compute-only) anywhere in the graph (an IndexError in ``run_setup.tracked_accesses`` when it was the
last), and the runaway guard (``megasim.sim.clock.event_limit``).
"""

from __future__ import annotations

import dataclasses

import pytest

from megasim.hardware import TaskCost, get_gpu
from megasim.orders import naive_fused, nonfused
from megasim.sim import SimOptions, simulate
from megasim.taskgraph import TaskGraphBuilder

ENGINES = ["compiled", "simpy"]


def one_task(nbytes: float):
    """One task reading `nbytes` from a one-part region."""
    b = TaskGraphBuilder()
    b.add_kind("k", threads=128, registers=32)
    r = b.add_region("r", parts=1, part_bytes=4096)
    b.add_task("k", flops=1000, accesses=[(r, 0, 1, nbytes, False)])
    return b.build()


def mixed(nbytes: float, tasks: int = 40):
    """Two kinds (of different per-kind costs in the specs below), each task reading `nbytes`."""
    b = TaskGraphBuilder()
    b.add_kind("a", threads=128, registers=32)
    b.add_kind("b", threads=256, registers=32)
    r = b.add_region("r", parts=tasks, part_bytes=4096)
    for i in range(tasks):
        b.add_task("a" if i % 2 else "b", index=i, flops=1000.0 * (i + 1), accesses=[(r, i, i + 1, nbytes * (i + 1), False)])
    return b.build()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("nbytes", [1e11, 1e15, 1e300])
def test_a_task_of_huge_byte_count_ends(engine, nbytes):
    r = simulate(one_task(nbytes), naive_fused(one_task(nbytes)), get_gpu("H100"), SimOptions(engine=engine))
    assert r.predicted_us > nbytes / get_gpu("H100").dram_bw_gbps / 1e3 / 100   # bytes / bandwidth, roughly
    assert r.predicted_us < float("inf")


SPECS = {
    "shares": dict(task_costs={"a": TaskCost(1.0, 0.0, block_sm_share=0.3), "b": TaskCost(1.0, 0.0, block_sm_share=0.7),
                               "default": TaskCost(1.0, 0.0)}),
    "caps": dict(task_costs={"a": TaskCost(1.0, 0.0, block_dram_bw_gbps=50.0), "default": TaskCost(1.0, 0.0)}),
    "ready_age": dict(younger_block_weight=0.5,
                      task_costs={"a": TaskCost(1.0, 0.0, block_sm_ready=0.4), "default": TaskCost(1.0, 0.0)}),
}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("nbytes", [3e10, 1e13])
def test_huge_byte_counts_end_alike_on_both_engines(name, nbytes):
    spec = dataclasses.replace(get_gpu("H100"), **SPECS[name])
    g = mixed(nbytes)
    for schedule in (naive_fused(g), nonfused(g)):
        a, b = (simulate(g, schedule, spec, SimOptions(engine=e)).predicted_us for e in ENGINES)
        assert a == b


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("where", ["first", "last", "all"])
def test_a_task_without_accesses_is_compute_only(engine, where):
    b = TaskGraphBuilder()
    b.add_kind("k", threads=128, registers=32)
    r = b.add_region("r", parts=2, part_bytes=4096)
    reads = [(r, 0, 1, 4096, False)]
    b.add_task("k", index=0, flops=1000, accesses=[] if where in ("first", "all") else reads)
    b.add_task("k", index=1, flops=1000, accesses=[] if where in ("last", "all") else reads)
    g = b.build()
    r = simulate(g, naive_fused(g), get_gpu("H100"), SimOptions(engine=engine))
    assert 0.0 < r.predicted_us < 100.0


@pytest.mark.parametrize("engine", ENGINES)
def test_a_run_past_its_event_limit_stops_in_one_line(engine, monkeypatch):
    """The runaway guard (megasim.sim.clock.event_limit): a run that posts more events than its limit stops
    with a SimulationError instead of running for ever; here the limit is made tiny to trip it."""
    from megasim.errors import SimulationError
    from megasim.sim import compiled_run, engine as engine_module
    monkeypatch.setattr(compiled_run, "event_limit", lambda tasks: 5)
    monkeypatch.setattr(engine_module, "event_limit", lambda tasks: 5)
    g = mixed(1e6)
    with pytest.raises(SimulationError, match="more than 5 events for 40 tasks") as info:
        simulate(g, naive_fused(g), get_gpu("H100"), SimOptions(engine=engine))
    assert "\n" not in str(info.value)


def test_the_event_limit_is_far_above_real_runs():
    from megasim.sim.clock import EVENTS_PER_TASK, event_limit
    g = mixed(1e6)
    r = simulate(g, naive_fused(g), get_gpu("H100"))
    assert r.events < event_limit(g.num_tasks) and r.events < 20 * g.num_tasks < EVENTS_PER_TASK * g.num_tasks
