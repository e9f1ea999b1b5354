"""Invariants and bounds of simulations of real Winograd graphs, for every schedule kind and style:
no SM over its occupancy, dependencies respected, makespan above every lower bound, bytes conserved."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import pytest

from megasim.hardware import TaskCost, get_gpu
from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.algorithms.winograd.algorithm1 import default_params
from megasim.orders import naive_fused, nonfused, random_order
from megasim.sim import SimOptions, launch_footprint, occupancy, simulate
from megasim.workloads import parse_layer

LAYERS = {
    "small": ("N=2,C=32,K=48,H=14,W=14", None, WinogradConfig()),
    "small-t8": ("N=2,C=32,K=48,H=14,W=14", None, WinogradConfig(tiles_per_group=8)),
    "awkward-m2": ("N=1,C=33,K=65,H=11,W=13", None, WinogradConfig(m=2, tiles_per_group=16, gemm_k_tile=32)),
    "resnet-1/b1": ("resnet-1", 1, WinogradConfig()),
    "resnet-3/b4": ("resnet-3", 4, WinogradConfig()),
    "densenet-1/b1": ("densenet-1", 1, WinogradConfig()),
}


@lru_cache(maxsize=None)
def graph(name):
    spec, batch, cfg = LAYERS[name]
    return lower_winograd(parse_layer(spec, batch), cfg)


@lru_cache(maxsize=None)
def parents(name):
    return graph(name).parents_of()


SCHEDULES = {
    "nonfused": nonfused,
    "naive_fused": naive_fused,
    "algorithm1": lambda g: algorithm1(g, default_params(g)),
    "algorithm1-m1": lambda g: algorithm1(g, default_params(g, m=1)),
    "random": lambda g: random_order(g, 12345),
    "persistent": lambda g: algorithm1(g, default_params(g)).with_style("persistent"),
    "persistent-2": lambda g: naive_fused(g).with_style("persistent", blocks_per_sm=2),
    "nonfused-persistent": lambda g: nonfused(g).with_style("persistent"),
}


def tight_spec():
    """H100 with costs that make every mechanism matter: a small L2 (evictions), a binding per-block
    bandwidth cap, nonzero latencies and per-kind task costs."""
    base = get_gpu("H100")
    return dataclasses.replace(
        base, sm_count=8, fp32_peak_gflops=base.sm_gflops * 8, l2_bytes=256 * 1024, tb_max_dram_bw_gbps=60.0,
        dram_latency_ns=500.0, l2_latency_ns=200.0, atomic_latency_ns=300.0, block_dispatch_ns=40.0,
        kernel_launch_ns=3000.0, kernel_boundary_ns=1500.0,
        task_costs={"default": TaskCost(0.6, 50.0), "gemm": TaskCost(0.8, 20.0), "itrans": TaskCost(0.3, 0.0)})


SPECS = {"H100": lambda: get_gpu("H100"), "tight": tight_spec}


def check_invariants(g, par, sched, spec, r, placement):
    t = g.num_tasks
    tol = 1e-9 * max(1.0, r.predicted_ns)
    for arr in (r.claim_ns, r.ready_ns, r.mem_start_ns, r.compute_start_ns, r.end_ns):
        assert np.all(np.isfinite(arr))
    assert np.all(r.claim_ns <= r.ready_ns + tol)
    assert np.all(r.ready_ns <= r.mem_start_ns + tol)
    assert np.all(r.mem_start_ns <= r.compute_start_ns + tol)
    assert np.all(r.compute_start_ns <= r.end_ns + tol)
    assert r.predicted_ns == pytest.approx(r.end_ns.max())
    assert np.all(r.sm >= 0) and np.all(r.sm < spec.sm_count)

    # --- launches and occupancy ----------------------------------------------------------------
    assert len(r.launches) == len(sched.launches)
    prev_end = None
    for launch, rec in zip(sched.launches, r.launches):
        occ = occupancy(spec, launch_footprint(g, launch))
        bps = occ.blocks_per_sm
        if launch.style == "persistent" and launch.blocks_per_sm is not None:
            bps = launch.blocks_per_sm
        assert rec.blocks_per_sm == bps and rec.tasks == launch.order.size and rec.style == launch.style
        start = spec.kernel_launch_ns if prev_end is None else prev_end + spec.kernel_boundary_ns
        assert rec.start_ns == pytest.approx(start)
        order = launch.order
        assert r.claim_ns[order].min() == pytest.approx(start)
        assert rec.end_ns == pytest.approx(r.end_ns[order].max())
        prev_end = rec.end_ns
        # Tickets are handed out in map order.
        assert np.all(np.diff(r.claim_ns[order]) >= -tol)
        # Slots within the launch's occupancy, and one task at a time per slot.
        assert np.all(r.slot[order] >= 0) and np.all(r.slot[order] < bps)
        key = r.sm[order].astype(np.int64) * bps + r.slot[order]
        idx = order[np.lexsort((r.claim_ns[order], key))]         # by slot, then by claim time
        same = np.diff(r.sm[idx].astype(np.int64) * bps + r.slot[idx]) == 0
        assert np.all(r.claim_ns[idx[1:]][same] >= r.end_ns[idx[:-1]][same] - tol)
        # Independently: a sweep over claim/end events never sees more than bps blocks on an SM.
        for sm in range(spec.sm_count):
            on = order[r.sm[order] == sm]
            ev = np.concatenate([np.stack([r.claim_ns[on], np.ones(on.size)], 1),
                                 np.stack([r.end_ns[on], -np.ones(on.size)], 1)])
            ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]           # ends before claims at equal times
            assert np.cumsum(ev[:, 1]).max(initial=0) <= bps
        # The first wave fills the slots in the placement's pattern.
        first = order[:min(order.size, spec.sm_count * bps)]
        b = np.arange(first.size)
        if placement == "round_robin":
            assert np.array_equal(r.sm[first], b % spec.sm_count) and np.array_equal(r.slot[first], b // spec.sm_count)
        else:
            assert np.array_equal(r.sm[first], b // bps) and np.array_equal(r.slot[first], b % bps)

    # --- dependencies ----------------------------------------------------------------------------
    for i in range(t):
        p = par[i]
        if p.size:
            assert r.ready_ns[i] >= r.end_ns[p].max() - tol, f"task {i} ready before a parent ended"
            assert r.end_ns[i] > r.end_ns[p].max()

    # --- lower bounds ----------------------------------------------------------------------------
    eff = np.array([spec.task_cost(k).compute_efficiency for k in g.kind_names])[g.kind]
    fixed = np.array([spec.task_cost(k).fixed_ns for k in g.kind_names])[g.kind]
    compute = g.flops / (spec.sm_gflops * eff)
    l2_bytes = np.add.reduceat(np.append(g.access_bytes, 0.0), g.access_ptr[:-1]) * (np.diff(g.access_ptr) > 0)
    lat = np.where(l2_bytes > 0, min(spec.l2_latency_ns, spec.dram_latency_ns), 0.0)
    mem = l2_bytes / spec.l2_bw_gbps / min(1.0, spec.tb_max_dram_bw_gbps / spec.dram_bw_gbps)
    own = fixed + lat + mem + compute                   # time from ready to end, at the least
    path = np.zeros(t)
    for i in np.argsort(r.end_ns, kind="stable"):       # parents end before children: a topological order
        path[i] = own[i] + (path[par[i]].max() if par[i].size else 0.0)
    claim_cost = min(spec.block_dispatch_ns, spec.atomic_latency_ns) + spec.atomic_latency_ns
    assert r.predicted_ns >= spec.kernel_launch_ns + claim_cost + path.max() - tol
    assert r.predicted_ns >= g.flops.sum() / spec.fp32_peak_gflops - tol
    assert r.predicted_ns >= compute.sum() / spec.sm_count - tol
    for sm in range(spec.sm_count):
        assert r.predicted_ns >= compute[r.sm == sm].sum() - tol
    assert r.predicted_ns >= r.dram_bytes / spec.dram_bw_gbps - tol
    work = np.maximum(r.task_dram_bytes / spec.dram_bw_gbps, l2_bytes / spec.l2_bw_gbps)
    assert r.predicted_ns >= work.sum() - tol
    if len(sched.launches) > 1:
        assert r.predicted_ns >= spec.kernel_launch_ns + (len(sched.launches) - 1) * spec.kernel_boundary_ns

    # --- bytes -----------------------------------------------------------------------------------
    tensor = np.where(g.access_region >= 0, g.region_tensor[np.maximum(g.access_region, 0)], -1)
    n_t = len(g.tensor_names)
    writes = np.array([g.access_bytes[(tensor == k) & g.access_write].sum() for k in range(n_t)])
    reads = np.array([g.access_bytes[(tensor == k) & ~g.access_write].sum() for k in range(n_t)])
    assert r.dram_write_bytes == pytest.approx(writes, rel=1e-12)        # writes always reach DRAM
    assert r.l2_read_bytes == pytest.approx(reads, rel=1e-12)
    assert np.all(r.dram_read_bytes <= r.l2_read_bytes * (1 + 1e-12))
    assert r.onchip_bytes == pytest.approx(g.access_bytes[tensor < 0].sum(), rel=1e-12)
    assert r.task_dram_bytes.sum() == pytest.approx(r.dram_bytes, rel=1e-12)
    s = r.summary()
    for k, name in enumerate(g.tensor_names):
        assert s["dram_bytes_by_tensor"][name] == pytest.approx(r.dram_read_bytes[k] + r.dram_write_bytes[k])
    assert sum(s["dram_bytes_by_tensor"].values()) == pytest.approx(s["dram_bytes"], rel=1e-12)
    # Input and weight parts are each read exactly once, so each read misses: compulsory traffic.
    problem = g.meta["problem"]
    for name, size in (("input", 4 * problem["n"] * problem["c"] * problem["h"] * problem["w"]),
                       ("weights", 4 * problem["k"] * problem["c"] * 9)):
        k = g.tensor_names.index(name)
        assert r.dram_read_bytes[k] == pytest.approx(size, rel=1e-12)
    assert s["tasks"] == t and s["taskgraph_hash"] == g.hash and s["schedule_hash"] == sched.hash
    assert r.kind_summary()[g.kind_names[0]]["tasks"] == int(np.sum(g.kind == 0))


def _cases():
    out = []
    for layer in LAYERS:
        for sname in SCHEDULES:
            for spec in SPECS:
                out.append(pytest.param(layer, sname, spec, id=f"{layer}-{sname}-{spec}"))
    return out


@pytest.mark.parametrize("layer,sname,spec_name", _cases())
def test_invariants(layer, sname, spec_name):
    g = graph(layer)
    sched = SCHEDULES[sname](g)
    spec = SPECS[spec_name]()
    placement = "fill" if sname in ("naive_fused", "persistent") else "round_robin"
    r = simulate(g, sched, spec, SimOptions(placement=placement))
    check_invariants(g, parents(layer), sched, spec, r, placement)


def test_invariant_checker_catches_overlap():
    """The checker itself can fail: shift one task's claim into its slot predecessor's run."""
    g = graph("small")
    sched = naive_fused(g)
    spec = tight_spec()
    r = simulate(g, sched, spec)
    check_invariants(g, parents("small"), sched, spec, r, "round_robin")
    order = sched.launches[0].order
    late = order[-1]
    prev = [i for i in order if r.sm[i] == r.sm[late] and r.slot[i] == r.slot[late] and i != late][-1]
    claim = r.claim_ns.copy()
    claim[late] = r.end_ns[prev] - 1.0
    bad = dataclasses.replace(r, claim_ns=claim)
    with pytest.raises(AssertionError):
        check_invariants(g, parents("small"), sched, spec, bad, "round_robin")
    faster = dataclasses.replace(r, predicted_ns=r.predicted_ns / 2, end_ns=r.end_ns / 2)
    with pytest.raises(AssertionError):
        check_invariants(g, parents("small"), sched, spec, faster, "round_robin")


def test_fused_beats_nonfused_on_small_layer():
    # Sanity of the model's direction (the paper's claim): the fused Algorithm 1 map is faster than four
    # kernels with barriers on a small layer, where launch boundaries dominate.
    g = graph("resnet-1/b1")
    spec = get_gpu("H100")
    fused = simulate(g, algorithm1(g, default_params(g)), spec).predicted_ns
    assert fused < simulate(g, nonfused(g), spec).predicted_ns


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["vgg-2", "yolov3-4"])
def test_invariants_full_size(layer):
    """A full-size Table 2 layer (batch 64) under Algorithm 1 on the H100 preset."""
    g = lower_winograd(parse_layer(layer))
    sched = algorithm1(g, default_params(g))
    spec = get_gpu("H100")
    r = simulate(g, sched, spec)
    check_invariants(g, g.parents_of(), sched, spec, r, "round_robin")
