"""gpu.runtime.launch_graph.LaunchGraphs on a fake driver (no GPU): a graph made at a key's second sight and
replayed after, the LRU bound and its destroys, the stop after repeated evictions, the fallback to direct
launches when a capture fails, a failed replay raising; and under Numba's CUDA simulator, that no graph is
made and a prepared convolution runs as before."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config

from gpu.runtime.launch_graph import DEFAULT_CAPACITY, LaunchGraphs


class FakeDriver:
    def __init__(self, fail_capture: bool = False, launch_err: int = 0) -> None:
        self.fail_capture, self.launch_err = fail_capture, launch_err
        self.streams, self.recorded, self.launched, self.destroyed = 0, [], [], []
        self.next_exec = 100

    def new_stream(self) -> int:
        self.streams += 1
        return 7

    def capture(self, stream, record):
        record(stream)
        if self.fail_capture:
            raise RuntimeError("cuStreamBeginCapture failed: CUresult 900")
        self.next_exec += 1
        self.recorded.append(self.next_exec)
        return self.next_exec

    def graph_launch(self, exe, stream) -> int:
        self.launched.append((exe, stream))
        return self.launch_err

    def destroy(self, exe) -> None:
        self.destroyed.append(exe)


def _graphs(capacity=DEFAULT_CAPACITY, **fake):
    calls = []
    driver = FakeDriver(**fake)
    return LaunchGraphs(lambda stream: calls.append(stream), capacity=capacity, driver=driver), driver, calls


def test_a_key_gets_its_graph_at_the_second_sight_and_replays_it():
    g, driver, recorded = _graphs()
    assert g.launch((1, 2, 3), 5) is False                 # first sight: the caller launches directly
    assert recorded == [] and driver.launched == []
    assert g.launch((1, 2, 3), 5) is True                  # second: captured on the private stream, replayed
    assert recorded == [7] and driver.launched == [(101, 5)]
    assert g.launch((1, 2, 3), 9) is True                  # after: replayed on the caller's stream, no capture
    assert recorded == [7] and driver.launched[-1] == (101, 9) and g.captures == 1 and driver.streams == 1


def test_graphs_are_bounded_least_recently_used_first():
    g, driver, _ = _graphs(capacity=2)
    for key in ("a", "a", "b", "b"):
        g.launch(key, 0)
    g.launch("a", 0)                                       # a is now the most recently used
    g.launch("c", 0)
    g.launch("c", 0)                                       # a third graph: b (least recently used) goes
    assert list(g.graphs) == ["a", "c"] and driver.destroyed == [102]
    assert g.launch("b", 0) is False                       # b is seen anew, not replayed
    g.clear()
    assert g.graphs == {} and sorted(driver.destroyed) == [101, 102, 103]


def test_keys_seen_once_are_bounded_too():
    g, _, _ = _graphs(capacity=2)
    for k in range(100):
        assert g.launch(k, 0) is False
    assert len(g.seen) == 8 and g.captures == 0


def test_captures_stop_when_more_keys_recur_than_graphs_are_kept():
    g, driver, _ = _graphs(capacity=2)
    for _ in range(10):                                    # 3 keys in turn: each capture would evict another
        for key in "abc":
            g.launch(key, 0)
    assert not g.enabled and g.captures == 2 + 2 * 2 and len(g.graphs) == 2
    kept = list(g.graphs)
    assert all(g.launch(k, 0) for k in kept)               # the graphs made still replay


def test_a_failed_capture_turns_graphs_off_and_the_caller_launches():
    g, driver, _ = _graphs(fail_capture=True)
    assert g.launch("a", 0) is False and g.launch("a", 0) is False
    assert not g.enabled and g.graphs == {} and driver.launched == []
    assert g.launch("a", 0) is False


def test_a_failed_replay_raises():
    g, _, _ = _graphs(launch_err=700)
    g.launch("a", 0)
    with pytest.raises(RuntimeError, match="cuGraphLaunch failed: CUresult 700"):
        g.launch("a", 0)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_capacity_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        LaunchGraphs(lambda s: None, capacity=bad, driver=FakeDriver())


@pytest.mark.cudasim
@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator's path")
def test_under_the_simulator_no_graph_is_made_and_calls_run_as_before():
    from gpu.prepared_conv import PreparedConv2d
    from megasim.algorithms.winograd.plugin import WinogradParams
    from megasim.plan import Plan
    from megasim.workloads.problem import ConvProblem

    assert not LaunchGraphs.available()
    plan = Plan("nonfused", algorithm="winograd",
                params=WinogradParams(tile=2, tiles_per_group=2, gemm_k_tile=8, transform_threads=32, gemm_threads=32))
    conv = PreparedConv2d(ConvProblem(1, 2, 3, 5, 5), plan)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    y1, y2 = conv(x, w), conv(x, w)
    assert conv.launcher is None and conv._graphs is None
    np.testing.assert_array_equal(y1, y2)
