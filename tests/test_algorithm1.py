"""Algorithm 1 (the paper's task mapping): structure on a known graph, and validity over a property-based
sweep of its parameters and of small problems and configs."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megasim.errors import MappingError
from megasim.algorithms.winograd.lowering import WinogradConfig, lower_winograd
from megasim.algorithms.winograd.algorithm1 import (Algorithm1Params, counts, default_params, recommended_params, scaled_params)
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.schedule import check_valid, first_violation
from megasim.orders import naive_fused, nonfused, random_order
from megasim.taskgraph import TaskGraphBuilder
from megasim.workloads import ConvProblem, parse_layer


@lru_cache(maxsize=None)
def graph_of(n, c, k, h, w, m, t, thr, gk):
    cfg = WinogradConfig(m=m, tiles_per_group=t, transform_threads=thr, gemm_k_tile=gk)
    return lower_winograd(ConvProblem(n, c, k, h, w), cfg)


def assert_permutation_and_valid(graph, schedule):
    assert len(schedule.launches) == 1
    order = schedule.launches[0].order
    assert order.size == graph.num_tasks
    assert np.array_equal(np.sort(order), np.arange(graph.num_tasks))
    check_valid(graph, schedule)


def _named_minimum(msg: str):
    """(parameter, minimum) named by an Algorithm 1 MappingError."""
    m = re.search(r"(D_IG|D_GO) >= (\d+) is needed", msg)
    if m:
        return m.group(1), int(m.group(2))
    m = re.search(r"M=\d+ is not allowed: it must be at most the number of groups N_G=(\d+)", msg)
    assert m, f"message names no parameter and minimum: {msg}"
    return "M", int(m.group(1))


def _with(params: Algorithm1Params, name: str, value: int) -> Algorithm1Params:
    kw = {"d_ig": params.d_ig, "d_go": params.d_go, "m": params.m}
    kw[{"D_IG": "d_ig", "D_GO": "d_go", "M": "m"}[name]] = value
    return Algorithm1Params(**kw)


problems = st.tuples(
    st.integers(1, 3),                     # N
    st.integers(1, 70),                    # C
    st.integers(1, 70),                    # K
    st.integers(1, 14),                    # H
    st.integers(1, 14),                    # W
    st.sampled_from([2, 4, 5, 6]),         # m
    st.integers(1, 12),                    # tiles per group
    st.sampled_from([32, 64, 128]),        # transform threads
    st.sampled_from([4, 16, 64]),          # gemm k tile
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.integers(0, 400), st.integers(0, 3000), st.integers(1, 8))
def test_algorithm1_valid_or_names_minimum(prob, d_ig, d_go, m):
    graph = graph_of(*prob)
    params = Algorithm1Params(d_ig, d_go, m)
    try:
        sched = algorithm1(graph, params)
    except MappingError as err:
        msg = str(err)
        assert "\n" not in msg
        name, need = _named_minimum(msg)
        if name == "M":
            assert m > need == counts(graph)["N_G"]
            assert msg.startswith(f"M={m}")
            fixed = _with(params, "M", need)
        else:
            assert msg.startswith(f"{name}={getattr(params, name.lower())} is too small")
            assert need > getattr(params, name.lower())
            fixed = _with(params, name, need)
            # The named value is the minimum: one less fails on the same parameter.
            with pytest.raises(MappingError, match=f"^{name}="):
                algorithm1(graph, _with(params, name, need - 1))
        # Fixing the named parameter gives a valid map, or an error about a parameter checked later
        # (M, then D_IG, then D_GO); never the same one again.
        rank = ("M", "D_IG", "D_GO")
        for _ in range(3):
            try:
                sched = algorithm1(graph, fixed)
                break
            except MappingError as err2:
                name2, need2 = _named_minimum(str(err2))
                assert rank.index(name2) > rank.index(name), f"{name} >= {need} was named but is not enough: {err2}"
                name, fixed = name2, _with(fixed, name2, need2)
        else:
            pytest.fail("no valid schedule after applying the named minimums")
        params = fixed
    assert_permutation_and_valid(graph, sched)
    assert sched.params == params.as_dict() | {"algorithm": "algorithm1"}


@settings(max_examples=60, deadline=None)
@given(problems, st.integers(1, 8))
def test_default_params_are_valid_and_tight(prob, m):
    graph = graph_of(*prob)
    n_g = counts(graph)["N_G"]
    params = default_params(graph, m)
    assert params.m == min(m, n_g)
    assert_permutation_and_valid(graph, algorithm1(graph, params))
    if params.d_ig > 0:
        with pytest.raises(MappingError, match="^D_IG="):
            algorithm1(graph, _with(params, "D_IG", params.d_ig - 1))
    with pytest.raises(MappingError, match="^D_GO="):
        algorithm1(graph, _with(params, "D_GO", params.d_go - 1))


def test_structure_on_known_graph():
    """resnet-1 at batch 1: N_F=32, S_I=16, S_G=36, S_O=16, N_G=7 (t=32, 128 threads, k-tile 64)."""
    g = lower_winograd(parse_layer("resnet-1", batch=1), WinogradConfig(tiles_per_group=32))
    assert counts(g) == {"N_F": 32, "S_I": 16, "S_G": 36, "S_O": 16, "N_G": 7}
    params = Algorithm1Params(d_ig=40, d_go=2 * 2 * (16 + 36), m=2)
    order = algorithm1(g, params).launches[0].order
    kinds = g.kind[order]
    names = g.kind_names
    # All filter transforms first, then D_IG input transforms.
    assert np.all(kinds[:32] == names.index("ftrans"))
    assert np.all(kinds[32:72] == names.index("itrans"))
    # GEMMs come in pairs (M=2) of the same column j from consecutive groups (reuse type b), batch by batch.
    gm = order[kinds == names.index("gemm")]
    cols = g.index_in_group[gm]
    grps = g.group[gm]
    full = 2 * 36 * 3                       # three full batches of M=2 groups, then one batch of 1 group
    assert np.array_equal(cols[:full:2], cols[1:full:2])
    assert np.array_equal(grps[1:full:2], grps[:full:2] + 1)
    assert np.array_equal(cols[:72:2], np.arange(36))
    assert np.all(grps[full:] == 6) and np.array_equal(cols[full:], np.arange(36))
    # No output transform during the initial iterations: D_GO // (M (S_I + S_G)) = 2 of them.
    first_o = int(np.flatnonzero(kinds == names.index("otrans"))[0])
    gemms_before = int(np.sum(kinds[:first_o] == names.index("gemm")))
    assert gemms_before >= 2 * 2 * 36


def test_m_larger_than_groups():
    g = lower_winograd(parse_layer("N=2,C=32,K=48,H=14,W=14"))      # one group
    with pytest.raises(MappingError, match=r"M=2 is not allowed: .*N_G=1"):
        algorithm1(g, Algorithm1Params(100, 1000, 2))
    assert default_params(g, m=4).m == 1


@pytest.mark.parametrize("kw,needle", [({"d_ig": -1, "d_go": 0, "m": 1}, "D_IG=-1"),
                                       ({"d_ig": 0, "d_go": -5, "m": 1}, "D_GO=-5"),
                                       ({"d_ig": 0, "d_go": 0, "m": 0}, "M=0"),
                                       ({"d_ig": 1.5, "d_go": 0, "m": 1}, "D_IG=1.5")])
def test_bad_params(kw, needle):
    with pytest.raises(MappingError) as err:
        Algorithm1Params(**kw)
    assert needle in str(err.value)


def test_graph_without_winograd_kinds():
    b = TaskGraphBuilder()
    b.add_kind("x")
    b.add_task("x")
    with pytest.raises(MappingError, match="this graph lacks ftrans, itrans, gemm, otrans$"):
        algorithm1(b.build(), Algorithm1Params(0, 0, 1))


@settings(max_examples=40, deadline=None)
@given(problems, st.integers(0, 2**32 - 1))
def test_other_orders_are_valid(prob, seed):
    graph = graph_of(*prob)
    for sched in (naive_fused(graph), random_order(graph, seed)):
        assert_permutation_and_valid(graph, sched)
    nf = nonfused(graph)
    assert [l.name for l in nf.launches] == list(graph.kind_names)
    assert first_violation(graph, nf) is None
    assert all(np.all(graph.kind[l.order] == i) for i, l in enumerate(nf.launches))


def test_named_minimums_on_known_graph():
    """Both error branches, explicitly: too small a D_IG, then too small a D_GO, each fixed by its minimum."""
    g = lower_winograd(parse_layer("resnet-1", batch=1), WinogradConfig(tiles_per_group=32))  # S_I=16, S_G=36, N_G=7
    with pytest.raises(MappingError, match=r"^D_IG=0 is too small for M=2") as err:
        algorithm1(g, Algorithm1Params(0, 10_000, 2))
    name, d_ig = _named_minimum(str(err.value))
    assert name == "D_IG" and d_ig > 0
    assert_permutation_and_valid(g, algorithm1(g, Algorithm1Params(d_ig, 10_000, 2)))
    with pytest.raises(MappingError, match=r"^D_GO=0 is too small for M=2") as err:
        algorithm1(g, Algorithm1Params(d_ig, 0, 2))
    name, d_go = _named_minimum(str(err.value))
    assert name == "D_GO" and d_go % (2 * (16 + 36)) == 0
    assert_permutation_and_valid(g, algorithm1(g, Algorithm1Params(d_ig, d_go, 2)))
    assert default_params(g, m=2) == Algorithm1Params(d_ig, d_go, 2)


@settings(max_examples=40, deadline=None)
@given(problems, st.integers(1, 16), st.sampled_from([1, 2, 8]), st.sampled_from([1, 2, 4]))
def test_scaled_params_are_valid_multiples(prob, m, d_ig_x, d_go_x):
    """The optimiser's coordinates: (1, 1) is the tightest map; larger multiples stay valid and grow."""
    graph = graph_of(*prob)
    n_g = counts(graph)["N_G"]
    if m > n_g:
        with pytest.raises(MappingError, match=rf"^M={m} is not allowed: .*N_G={n_g}$"):
            scaled_params(graph, m, d_ig_x, d_go_x)
        return
    base = default_params(graph, m)
    assert scaled_params(graph, m) == base
    params = scaled_params(graph, m, d_ig_x, d_go_x)
    assert params.m == m and params.d_go == round(d_go_x * base.d_go)
    assert params.d_ig >= base.d_ig and (params.d_ig > base.d_ig) == (d_ig_x > 1)
    assert_permutation_and_valid(graph, algorithm1(graph, params))


@pytest.mark.parametrize("kw,needle", [({"d_ig_x": 0.5}, "d_ig_x=0.5 is not allowed"),
                                       ({"d_go_x": float("nan")}, "d_go_x=nan is not allowed")])
def test_scaled_params_bad_multiples(kw, needle):
    graph = graph_of(2, 16, 16, 12, 12, 4, 4, 32, 8)
    with pytest.raises(MappingError, match=needle):
        scaled_params(graph, 1, **kw)


@settings(max_examples=30, deadline=None)
@given(problems)
def test_recommended_params_are_the_documented_multiples(prob):
    """The GPU API's default: M = 8 (at most N_G), d_ig_x = 8, d_go_x = 4; always a valid map."""
    graph = graph_of(*prob)
    params = recommended_params(graph)
    assert params == scaled_params(graph, min(8, counts(graph)["N_G"]), 8, 4)
    assert_permutation_and_valid(graph, algorithm1(graph, params))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.integers(0, 500), st.integers(0, 40), st.integers(1, 9))
def test_build_matches_the_step_by_step_map(prob, d_ig, iters, m):
    """The vectorised map equals Algorithm 1 emitted step by step, for any D_IG, iterations and M
    (valid or not), rounding half to even at the same floating-point values."""
    from megasim.algorithms.winograd.algorithm1 import _build, _build_reference, _streams
    st_ = _streams(graph_of(*prob))
    m = min(m, st_.n_g)
    assert np.array_equal(_build(st_, d_ig, iters, m), _build_reference(st_, d_ig, iters, m))


@pytest.mark.parametrize("layer", ["resnet-1", "vgg-1", "yolov3-1"])
def test_build_matches_the_step_by_step_map_on_table2_layers(layer):
    from megasim.algorithms.winograd.algorithm1 import _build, _build_reference, _streams
    graph = lower_winograd(parse_layer(layer, batch=8), WinogradConfig(m=4, tiles_per_group=64))
    st_ = _streams(graph)
    for d_ig, iters, m in ((0, 1, 1), (96, 3, 2), (700, 12, 4), (10**6, 0, 8)):
        assert np.array_equal(_build(st_, d_ig, iters, m), _build_reference(st_, d_ig, iters, m))
