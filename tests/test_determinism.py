"""Determinism: the same inputs give a bit-identical prediction, whatever ran before (DESIGN.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pathlib import Path

from megasim.hardware import get_gpu, load_spec
from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.algorithms.winograd.algorithm1 import default_params
from megasim.orders import naive_fused, nonfused, random_order
from megasim.sim import SimOptions, SimResult, simulate
from megasim.sim.clock import ModelEnvironment
from megasim.sim.engine import Simulation
from megasim.workloads import parse_layer

ARRAYS = [f.name for f in dataclasses.fields(SimResult)
          if f.name not in ("launches", "params", "extra", "sim_wall_s")]


def _graph():
    return lower_winograd(parse_layer("resnet-1", batch=1), WinogradConfig(tiles_per_group=16))


def assert_identical(a: SimResult, b: SimResult) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
        else:
            assert x == y, name
    assert a.launches == b.launches
    assert a.params == b.params
    sa, sb = a.summary(), b.summary()
    sa.pop("sim_wall_s"), sb.pop("sim_wall_s")
    assert sa == sb
    ta, tb = a.chrome_trace(), b.chrome_trace()
    assert ta == tb


SCHEDULES = {
    "nonfused": nonfused,
    "naive_fused": naive_fused,
    "algorithm1": lambda g: algorithm1(g, default_params(g)),
    "random-7": lambda g: random_order(g, 7),
    "persistent": lambda g: algorithm1(g, default_params(g)).with_style("persistent"),
}


@pytest.mark.parametrize("sname", sorted(SCHEDULES))
@pytest.mark.parametrize("placement", ["round_robin", "fill"])
def test_same_input_same_result(sname, placement):
    spec = get_gpu("V100")
    # Everything rebuilt from scratch the second time: graph, schedule, spec.
    a = simulate(_graph(), SCHEDULES[sname](_graph()), spec, SimOptions(placement=placement))
    other = simulate(_graph(), random_order(_graph(), 99), get_gpu("A100"))  # unrelated run in between
    assert other.predicted_ns > 0
    b = simulate(_graph(), SCHEDULES[sname](_graph()), dataclasses.replace(spec),
                 SimOptions(placement=placement))
    assert_identical(a, b)


def test_random_order_fixed_seed():
    g = _graph()
    a, b = random_order(g, 7), random_order(_graph(), 7)
    assert np.array_equal(a.launches[0].order, b.launches[0].order)
    assert a.hash == b.hash
    c = random_order(g, 8)
    assert not np.array_equal(a.launches[0].order, c.launches[0].order)
    # Different valid orders of the same graph generally predict different times.
    spec = get_gpu("H100")
    assert simulate(g, a, spec).predicted_ns != simulate(g, c, spec).predicted_ns

CALIBRATED = Path(__file__).parent.parent / "megasim" / "hardware" / "calibrated" / "h200.json"


def test_graph_and_schedule_hashes_are_stable():
    g1, g2 = _graph(), _graph()
    assert g1.hash == g2.hash
    assert algorithm1(g1, default_params(g1)).hash == algorithm1(g2, default_params(g2)).hash


class UnbatchedEnvironment(ModelEnvironment):
    """One SimPy queue entry per model call: what ``ModelEnvironment``'s batches must reproduce exactly."""

    def after(self, delay, fn, value):
        self._batch = None
        super().after(delay, fn, value)


@pytest.mark.parametrize("sname", ["nonfused", "algorithm1", "persistent"])
@pytest.mark.parametrize("spec_name", ["H100", "calibrated"])
def test_batched_events_give_the_unbatched_result(sname, spec_name):
    """Calls joined into one SimPy event run in the order of one event per call: identical results,
    with fewer queue entries where blocks start together."""
    g = _graph()
    sched = SCHEDULES[sname](g)
    spec = get_gpu("H100") if spec_name == "H100" else load_spec(CALIBRATED)
    batched = Simulation(g, sched, spec, SimOptions(engine="simpy"))
    a = batched.run()
    unbatched = Simulation(g, sched, spec, env=UnbatchedEnvironment())
    b = unbatched.run()
    assert_identical(a, dataclasses.replace(b, events=a.events))   # (events: SimPy queue entries)
    assert batched.env.calls == unbatched.env.calls
    assert batched.env.events < unbatched.env.events
