"""A kind's cost in its own kernel (GPUSpec.kernel_task_costs): read from a spec file, priced only in launches of
that kind's own kernel (megasim.sim.run_setup.priced_kinds), the same in both engines, and fitted by a calibration
on its own kernel's runs (megasim.calibration.winograd.kernel_fits)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from megasim.errors import SpecError
from megasim.hardware import TaskCost, get_gpu
from megasim.hardware.files import load_spec, spec_from_dict, spec_to_dict
from megasim.plan import Plan, build
from megasim.sim import SimOptions, simulate
from megasim.workloads import parse_layer

LAYER = "N=4,C=32,K=48,H=20,W=20"


def graphs(schedule: str):
    graph, sched, _ = build(parse_layer(LAYER), Plan.parse(schedule, ""))
    return graph, sched


def with_kernel_costs(spec, **costs):
    return dataclasses.replace(spec, kernel_task_costs=costs)


def slower(cost: TaskCost, factor: float) -> TaskCost:
    return dataclasses.replace(cost, compute_efficiency=cost.compute_efficiency / factor, fixed_ns=cost.fixed_ns + 500.0)


def test_a_kernel_cost_prices_the_non_fused_launches_only():
    h = get_gpu("H200")
    spec = with_kernel_costs(h, itrans=slower(h.task_cost("itrans"), 2.0))
    graph, nonfused = graphs("nonfused")
    before, after = simulate(graph, nonfused, h), simulate(graph, nonfused, spec)
    launch = [l.name for l in nonfused.launches].index(next(l.name for l in nonfused.launches if "itrans" in l.name))
    assert after.launches[launch].end_ns - after.launches[launch].start_ns > \
        before.launches[launch].end_ns - before.launches[launch].start_ns
    assert after.launches[0].end_ns == before.launches[0].end_ns        # (ftrans, before it: unchanged)
    fgraph, fused = graphs("fused")
    assert simulate(fgraph, fused, spec).predicted_us == simulate(fgraph, fused, h).predicted_us


def test_both_engines_price_the_kernel_costs_alike():
    h = get_gpu("H200")
    spec = with_kernel_costs(h, gemm=dataclasses.replace(slower(h.task_cost("gemm"), 1.5), block_sm_ready=0.5),
                             otrans=dataclasses.replace(h.task_cost("otrans"), block_sm_ready=0.6, coresident_stretch=0.4))
    graph, nonfused = graphs("nonfused")
    compiled = simulate(graph, nonfused, spec, SimOptions(engine="compiled"))
    pure = simulate(graph, nonfused, spec, SimOptions(engine="simpy"))
    assert compiled.predicted_us == pytest.approx(pure.predicted_us, rel=1e-9)
    assert compiled.predicted_us != simulate(graph, nonfused, h, SimOptions(engine="compiled")).predicted_us


def test_a_variant_takes_its_kinds_kernel_cost_only_without_a_cost_of_its_own():
    h = get_gpu("H200")
    own = slower(h.task_cost("itrans"), 3.0)
    spec = with_kernel_costs(h, itrans=own)
    assert spec.kernel_task_cost("itrans@m6") is own                 # priced as its kind in both
    variant = dataclasses.replace(spec, task_costs={**spec.task_costs, "itrans@m6": TaskCost(0.5, 10.0)})
    assert variant.kernel_task_cost("itrans@m6") is variant.task_costs["itrans@m6"]
    assert spec.kernel_task_cost("gemm") is spec.task_cost("gemm")     # no kernel cost: the megakernel's


def test_kernel_costs_survive_a_round_trip_and_bad_ones_are_refused(tmp_path):
    h = get_gpu("H200")
    spec = dataclasses.replace(with_kernel_costs(h, otrans=TaskCost(0.7, 12.5, block_dram_bw_gbps=9.0)),
                               sources={**h.sources, "kernel_task_costs.otrans.fixed_ns": "a test"})
    data = spec_to_dict(spec)
    assert "kernel_task_costs" in data and "kernel_task_costs" not in spec_to_dict(h)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    back = load_spec(path)
    assert back.kernel_task_costs == spec.kernel_task_costs
    assert back.sources["kernel_task_costs.otrans.fixed_ns"] == "a test"
    bad = json.loads(json.dumps(data))
    bad["kernel_task_costs"]["otrans"]["compute_efficiency"]["value"] = -1.0
    with pytest.raises(SpecError, match=r"kernel_task_costs\.otrans"):
        spec_from_dict(bad, "x")
    bad = json.loads(json.dumps(data))
    bad["kernel_task_costs"] = [1]
    with pytest.raises(SpecError, match="'kernel_task_costs' must be an object"):
        spec_from_dict(bad, "x")
