"""The per-task megakernel's ticket cost (gpu.calibrate.occupancy.measure_megakernel_ticket) and its
use in the model: blockIdx dispatch takes ``megakernel_ticket_ns`` off each task's claim."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu.runtime.timing import summarize
from megasim.hardware import TaskCost, get_gpu
from megasim.schedule import Launch, Schedule
from megasim.sim import simulate
from tests.test_sim_scenarios import dep_graph, toy_spec


def test_ticket_probe_runs_both_dispatches_and_takes_the_median_saving(monkeypatch):
    # Under the simulator: the kernels really run (ticket and blockIdx, each checked), the timing is
    # faked: every ticket run 1.0 ms, every blockIdx run 0.9 ms, so each run saves 0.1 ms / waves.
    import gpu.calibrate.occupancy as co
    calls = []

    def fake_time_queued(fn, spin, *, warmup=2, repeats=10, rotate=1):
        fn(0)
        calls.append(1)
        return summarize([1.0 if len(calls) % 2 else 0.9]), 0.0

    monkeypatch.setattr(co, "time_queued", fake_time_queued)
    monkeypatch.setattr(co, "_active_blocks", lambda kernel, threads, smem: 1)
    # At pairs=4 (the fused schedule's transform size already) the 4 kinds run once each (at the
    # defaults the transforms would run again at pairs=4: fused_transform_params).
    value, rows = co.measure_megakernel_ticket(("N=1,C=3,K=2,H=5,W=6",), "pairs=4", spin=lambda: None, repeats=1,
                                               rounds=1, sm_count=1)
    assert [(r["kind"], r["plan_params"]) for r in rows] == [
        (k, "pairs=4") for k in ("ftrans", "itrans", "gemm", "otrans")]
    for r in rows:
        assert r["waves"] == r["tasks"]          # 1 SM x 1 block per SM
        assert r["saving_per_task_ns"] == pytest.approx(0.1e6 / r["tasks"])
        assert r["used"] == (r["tasks"] >= co.TICKET_MIN_WAVES)
    used = [r["saving_per_task_ns"] for r in rows if r["used"]]
    assert used and value["value"] == pytest.approx(float(np.median(used)))
    assert "median over the" in value["method"]


def test_blockidx_dispatch_takes_the_ticket_off_the_measured_claim():
    # dep_graph's t0 and t2 have no parents: per task, each is ready a dispatch (3) plus its kind's claim
    # (20) after its block starts; with blockIdx dispatch, the claim less the ticket.
    costs = {"default": TaskCost(1.0, 0.0, megakernel_fixed_ns=5.0, megakernel_claim_ns=20.0)}
    spec = toy_spec(atomic_latency_ns=2.0, block_dispatch_ns=3.0, task_costs=costs)

    def ready(s, dispatch):
        sched = Schedule("s", (Launch(np.array([0, 2]), kernel="megakernel", dispatch=dispatch),
                               Launch(np.array([1]), kernel="megakernel")))
        return simulate(dep_graph(), sched, s).ready_ns[[0, 2]].tolist()

    assert ready(spec, "ticket") == [23.0, 23.0]
    assert ready(spec, "blockidx") == [21.0, 21.0]            # default: one atomic_latency_ns
    measured = dataclasses.replace(spec, megakernel_ticket_ns=8.0)
    assert ready(measured, "ticket") == [23.0, 23.0]
    assert ready(measured, "blockidx") == [15.0, 15.0]
    # A ticket dearer than the whole claim leaves a claim of zero, not a negative one.
    assert ready(dataclasses.replace(spec, megakernel_ticket_ns=50.0), "blockidx") == [3.0, 3.0]


def test_megakernel_ticket_ns_is_optional_and_checked():
    assert get_gpu("H200").megakernel_ticket_ns is None
    with pytest.raises(Exception, match="megakernel_ticket_ns=-1.0 must be >= 0"):
        dataclasses.replace(get_gpu("H200"), megakernel_ticket_ns=-1.0)


def test_megakernel_ticket_ns_round_trips_through_a_spec_file(tmp_path):
    from megasim.hardware import load_spec
    from megasim.hardware.files import dump_spec
    spec = dataclasses.replace(get_gpu("H200"), megakernel_ticket_ns=370.0,
                               sources={**get_gpu("H200").sources, "megakernel_ticket_ns": "a test"})
    dump_spec(spec, tmp_path / "s.json")
    back = load_spec(tmp_path / "s.json")
    assert back.megakernel_ticket_ns == 370.0 and back.sources["megakernel_ticket_ns"] == "a test"
