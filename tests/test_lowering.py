"""The Winograd lowering: task counts, bytes, flops and counters against hand formulas, including awkward
sizes (H, W not multiples of m, C, K not multiples of the tile, N=1, m=2, padding 0 and 2)."""

from __future__ import annotations

import numpy as np
import pytest

from megasim.errors import LoweringError
from megasim.plan import build
from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd, winograd_shape
from megasim.algorithms.winograd.lowering import GEMM_FAST_PATHS
from megasim.algorithms.winograd.winograd_math import (direct_conv2d_reference, transform_flops, winograd_conv2d_reference)
from megasim.algorithms.winograd.algorithm1 import counts
from megasim.workloads import ConvProblem, parse_layer

CASES = [
    ("N=2,C=32,K=48,H=14,W=14", WinogradConfig()),
    ("N=1,C=3,K=5,H=10,W=9", WinogradConfig()),                     # H, W not multiples of 4
    ("N=2,C=33,K=65,H=7,W=13", WinogradConfig(gemm_k_tile=32)),     # C, K not multiples of the tiles
    ("N=1,C=1,K=1,H=1,W=1", WinogradConfig()),
    ("N=3,C=17,K=9,H=6,W=5", WinogradConfig(m=2, tiles_per_group=7, transform_threads=32, gemm_k_tile=4)),
    ("N=1,C=8,K=8,H=10,W=11,padding=0", WinogradConfig()),          # last windows reach past the last band
    ("N=1,C=8,K=8,H=5,W=6,padding=2", WinogradConfig(m=2)),
    ("N=1,C=130,K=200,H=9,W=9", WinogradConfig(tiles_per_group=5, transform_threads=64)),
    ("N=2,C=33,K=65,H=7,W=13", WinogradConfig(transform_threads=32, transform_pairs_per_thread=3)),
    ("resnet-1", WinogradConfig(transform_pairs_per_thread=4)),
    ("resnet-4", WinogradConfig()),
    ("im2win/conv11", WinogradConfig()),                           # padding 0 catalogue layer
    ("densenet-1", WinogradConfig(tiles_per_group=64)),
]
IDS = [f"{s}|m{c.m}t{c.tiles_per_group}p{c.transform_pairs_per_thread}" for s, c in CASES]


def _problem(spec: str) -> ConvProblem:
    return parse_layer(spec, batch=1 if "=" not in spec else None)


def _tensor_bytes(g, tensor: str, write: bool) -> float:
    t = g.tensor_names.index(tensor)
    sel = (g.access_region >= 0) & (g.access_write == write)
    sel &= g.region_tensor[np.maximum(g.access_region, 0)] == t
    return float(g.access_bytes[sel].sum())


def _window_pixels(p: ConvProblem, m: int) -> int:
    """Brute force: in-image input pixels summed over every tile's (m+2)x(m+2) window, per image and channel."""
    ty, tx = -(-p.out_h // m), -(-p.out_w // m)
    total = 0
    for y in range(ty):
        for x in range(tx):
            rows = [r for r in range(m * y - p.padding, m * y - p.padding + m + 2) if 0 <= r < p.h]
            cols = [c for c in range(m * x - p.padding, m * x - p.padding + m + 2) if 0 <= c < p.w]
            total += len(rows) * len(cols)
    return total


@pytest.fixture(scope="module", params=range(len(CASES)), ids=IDS)
def case(request):
    spec, cfg = CASES[request.param]
    p = _problem(spec)
    return p, cfg, lower_winograd(p, cfg)


def test_validate_and_kinds(case):
    p, cfg, g = case
    g.validate()
    assert g.kind_names == ("ftrans", "itrans", "gemm", "otrans")
    assert g.meta["lowering"] == "winograd" and g.meta["config"]["m"] == cfg.m


def test_task_counts_match_shape(case):
    p, cfg, g = case
    sh = winograd_shape(p, cfg)
    tiles = p.n * -(-p.out_h // cfg.m) * -(-p.out_w // cfg.m)
    assert sh.tiles == tiles
    assert sh.groups == -(-tiles // cfg.tiles_per_group)
    assert sh.k_tiles == -(-p.k // cfg.gemm_k_tile)
    rows = [min(cfg.tiles_per_group, tiles - g_ * cfg.tiles_per_group) for g_ in range(sh.groups)]
    thr = cfg.transform_threads * cfg.transform_pairs_per_thread
    n_f = sum(-(-(p.c * min(cfg.gemm_k_tile, p.k - kt * cfg.gemm_k_tile)) // thr) for kt in range(sh.k_tiles))
    assert len(g.tasks_of_kind("ftrans")) == sh.n_f == n_f
    assert len(g.tasks_of_kind("itrans")) == sum(-(-r * p.c // thr) for r in rows)
    assert len(g.tasks_of_kind("gemm")) == sh.groups * (cfg.m + 2) ** 2 * sh.k_tiles
    assert len(g.tasks_of_kind("otrans")) == sum(-(-r * p.k // thr) for r in rows)
    c = counts(g)
    assert (c["N_F"], c["S_G"], c["N_G"]) == (sh.n_f, sh.s_g, sh.groups)
    assert c["S_I"] == sh.s_i and c["S_O"] == sh.s_o


def test_counter_init(case):
    p, cfg, g = case
    sh = winograd_shape(p, cfg)
    assert g.num_counters == 1 + 2 * sh.groups
    assert g.counter_init[0] == sh.n_f
    it, gm = g.tasks_of_kind("itrans"), g.tasks_of_kind("gemm")
    for grp in range(sh.groups):
        assert g.counter_init[1 + 2 * grp] == np.sum(g.group[it] == grp)
        assert g.counter_init[2 + 2 * grp] == np.sum(g.group[gm] == grp) == sh.s_g
    assert np.array_equal(g.parents_done_counts(), g.counter_init)


def test_parents(case):
    p, cfg, g = case
    parents = g.parents_of()
    ft, it, gm, ot = (g.tasks_of_kind(k) for k in g.kind_names)
    for t in np.concatenate([ft, it]):
        assert parents[t].size == 0
    for t in gm[:50]:
        expect = np.concatenate([ft, it[g.group[it] == g.group[t]]])
        assert np.array_equal(parents[t], np.sort(expect))
    for t in ot[:50]:
        assert np.array_equal(parents[t], gm[g.group[gm] == g.group[t]])


def test_bytes(case):
    p, cfg, g = case
    sh = winograd_shape(p, cfg)
    a2 = (cfg.m + 2) ** 2
    assert _tensor_bytes(g, "input", False) == p.input_bytes
    assert _tensor_bytes(g, "input", True) == 0
    assert _tensor_bytes(g, "weights", False) == p.weight_bytes
    assert _tensor_bytes(g, "output", True) == p.output_bytes
    assert _tensor_bytes(g, "output", False) == 0
    assert _tensor_bytes(g, "transformed_filter", True) == 4 * p.c * p.k * a2
    assert _tensor_bytes(g, "transformed_filter", False) == 4 * p.c * p.k * a2 * sh.groups
    assert _tensor_bytes(g, "transformed_input", True) == 4 * sh.tiles * p.c * a2
    assert _tensor_bytes(g, "transformed_input", False) == 4 * sh.tiles * p.c * a2 * sh.k_tiles
    assert _tensor_bytes(g, "products", True) == 4 * sh.tiles * p.k * a2
    assert _tensor_bytes(g, "products", False) == 4 * sh.tiles * p.k * a2
    # Core (from DRAM regions) plus halo (on-chip) is every in-image pixel of every window.
    onchip = float(g.access_bytes[g.access_region < 0].sum())
    assert np.all(g.access_bytes[g.access_region < 0] >= 0)
    assert p.input_bytes + onchip == 4 * p.n * p.c * _window_pixels(p, cfg.m)


def test_input_parts_read_once(case):
    """Every part of every input band is read by exactly one access (reuse type a: DRAM once)."""
    p, cfg, g = case
    t_in = g.tensor_names.index("input")
    hits = {}
    for i in np.flatnonzero((g.access_region >= 0)):
        r = int(g.access_region[i])
        if g.region_tensor[r] != t_in:
            continue
        cover = hits.setdefault(r, np.zeros(g.region_parts[r], int))
        cover[g.access_part_lo[i]:g.access_part_hi[i]] += 1
    assert len(hits) == p.n * -(-p.out_h // cfg.m)
    assert all(np.all(c == 1) for c in hits.values())


def test_flops(case):
    p, cfg, g = case
    sh = winograd_shape(p, cfg)
    a2 = (cfg.m + 2) ** 2
    tf = transform_flops(cfg.m)
    gm = g.tasks_of_kind("gemm")
    useful = 2 * sh.tiles * p.c * p.k * a2
    if cfg.gemm_key in GEMM_FAST_PATHS:      # the kernel's issued work: whole t x gemm_k_tile tiles, whole k-steps of C
        c_issued = -(-p.c // cfg.gemm_k_step) * cfg.gemm_k_step
        assert g.flops[gm].sum() == 2 * sh.groups * cfg.tiles_per_group * c_issued * sh.k_tiles * cfg.gemm_k_tile * a2
        assert g.flops[gm].sum() >= useful
    else:
        assert g.flops[gm].sum() == useful
    assert g.flops[g.tasks_of_kind("ftrans")].sum() == p.c * p.k * tf["ftrans"]
    assert g.flops[g.tasks_of_kind("itrans")].sum() == sh.tiles * p.c * tf["itrans"]
    assert g.flops[g.tasks_of_kind("otrans")].sum() == sh.tiles * p.k * tf["otrans"]
    assert np.all(g.flops > 0)


def test_footprints():
    cfg = WinogradConfig(tiles_per_group=32, gemm_k_tile=64, gemm_k_step=8, gemm_threads=256, gemm_registers=96,
                         transform_registers=64)
    g = lower_winograd(parse_layer("N=1,C=8,K=8,H=8,W=8"), cfg)
    assert g.kind_threads.tolist() == [128, 128, 256, 128]
    assert g.kind_registers.tolist() == [64, 64, 96, 64]
    assert g.kind_shared_bytes.tolist() == [0, 0, 2 * (32 + 64) * 8 * 4, 0]


@pytest.mark.parametrize("spec,needle", [("N=1,C=3,K=3,H=8,W=8,R=5,S=5", "3x3 filter"),
                                         ("N=1,C=3,K=3,H=8,W=8,stride=2", "stride 1")])
def test_unsupported_problems(spec, needle):
    with pytest.raises(LoweringError, match=needle):
        lower_winograd(parse_layer(spec))


@pytest.mark.parametrize("kw,needle", [({"m": 3}, "m=3"), ({"tiles_per_group": 0}, "tiles_per_group=0"),
                                       ({"transform_threads": 100}, "transform_threads=100"),
                                       ({"gemm_threads": 2048}, "gemm_threads=2048"),
                                       ({"transform_pairs_per_thread": 0}, "transform_pairs_per_thread=0"),
                                       ({"transform_pairs_per_thread": 17}, "transform_pairs_per_thread=17"),
                                       ({"gemm_registers": 300}, "gemm_registers=300"),
                                       ({"gemm_k_tile": True}, "gemm_k_tile=True")])
def test_bad_config(kw, needle):
    with pytest.raises(LoweringError) as err:
        WinogradConfig(**kw)
    assert needle in str(err.value)


def test_lowering_is_deterministic():
    p = parse_layer("N=2,C=33,K=65,H=7,W=13")
    assert lower_winograd(p).hash == lower_winograd(p).hash
    assert lower_winograd(p).hash != lower_winograd(p, WinogradConfig(m=2)).hash


@pytest.mark.parametrize("m", [2, 4, 5, 6])
@pytest.mark.parametrize("shape", [(1, 3, 2, 7, 9, 1), (2, 2, 3, 4, 5, 0), (1, 1, 1, 1, 1, 1)])
def test_winograd_reference_matches_direct(m, shape):
    n, c, k, h, w, pad = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w))
    wt = rng.standard_normal((k, c, 3, 3))
    assert np.allclose(winograd_conv2d_reference(x, wt, m, pad), direct_conv2d_reference(x, wt, pad), atol=1e-9)


def test_pairs_per_thread_default_by_schedule():
    from megasim.plan import Plan
    problem = parse_layer("resnet-4")
    config = lambda plan: build(problem, plan)[2].params.config   # noqa: E731
    assert config(Plan("fused")).transform_pairs_per_thread == 4
    assert config(Plan("naive")).transform_pairs_per_thread == 4
    assert config(Plan("nonfused")).transform_pairs_per_thread == 1
    assert "pairs=4" in build(problem, Plan("fused"))[2].param_string()
    assert "pairs=1" in build(problem, Plan("nonfused"))[2].param_string()
    assert config(Plan.parse("fused", "pairs=2")).transform_pairs_per_thread == 2
    p = parse_layer("N=2,C=33,K=65,H=7,W=13")
    g1 = lower_winograd(p, WinogradConfig(transform_threads=32))
    g3 = lower_winograd(p, WinogradConfig(transform_threads=32, transform_pairs_per_thread=3))
    for kind in ("ftrans", "itrans", "otrans"):     # the same pairs, in tasks three times as large
        t1, t3 = g1.tasks_of_kind(kind), g3.tasks_of_kind(kind)
        assert len(t3) < len(t1)
        assert g1.flops[t1].sum() == pytest.approx(g3.flops[t3].sum())
    assert g1.flops.sum() == pytest.approx(g3.flops.sum())


def test_gemm_math_sets_the_gemm_footprint_and_parses():
    from megasim.errors import MegasimError
    from megasim.plan import Plan
    fp32 = WinogradConfig()
    tc = WinogradConfig(gemm_math="3xtf32")
    assert fp32.gemm_shared_bytes == 25088 and tc.gemm_shared_bytes == 4 * 3 * (64 * 20 + 16 * 72)
    assert tc.gemm_registers_used == fp32.gemm_registers_used == 128
    with pytest.raises(MegasimError, match="gemm_math='bf16' is not allowed"):
        WinogradConfig(gemm_math="bf16")
    plan = Plan.parse("fused", "M=4,gemm_math=3xtf32")
    assert plan.params.gemm_math == "3xtf32" and "gemm_math=3xtf32" in plan.param_string()
    assert Plan.parse("fused", plan.param_string()).params == plan.params
    assert "gemm_math" not in Plan.parse("fused", "M=4").param_string()
    with pytest.raises(MegasimError, match="--param gemm_math='tf32' is not allowed"):
        Plan.parse("fused", "gemm_math=tf32")

