"""The pure parts of the im2win figure scripts: footprint ratios, ablation ratios, the algorithm ranking,
the Winograd layer filter and the batch a large layer is simulated at. Exact small cases; no simulation."""

import math
from types import SimpleNamespace

import pytest

from experiments.figures.algorithm_choice import best_by_schedule, fitting_batch, rank, winograd_layers
from experiments.figures.im2win_ablation import geomean, relative_times, summary
from experiments.figures.im2win_footprint import footprint_ratios


def test_footprint_ratio_is_im2win_over_im2col_per_layer_and_batch():
    rows = [{"layer": "a", "batch": "128", "impl": "im2win", "extra_bytes": "300"},
            {"layer": "a", "batch": "128", "impl": "im2col_cublas", "extra_bytes": "1200"},
            {"layer": "a", "batch": "64", "impl": "im2win", "extra_bytes": "150"},        # no im2col at 64: left out
            {"layer": "b", "batch": "128", "impl": "im2win", "extra_bytes": "10"},
            {"layer": "b", "batch": "128", "impl": "im2col_cublas", "extra_bytes": "0"},  # 0 bytes: no ratio
            {"layer": "a", "batch": "128", "impl": "direct", "extra_bytes": "0"}]
    assert footprint_ratios(rows) == {("a", 128): 0.25}


def test_relative_times_divide_by_the_base_at_the_same_point():
    times = {("c1", 128, "im2win"): 2.0, ("c1", 128, "im2win_basic"): 20.0, ("c1", 64, "im2win_basic"): 5.0,
             ("c1", 64, "im2win"): 0.0, ("c2", 128, "im2win_no_vector"): 1.0}
    assert relative_times(times) == {("c1", 128, "im2win_basic"): 10.0}


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(geomean([]))


def test_summary_geomeans_measured_and_predicted_ratios_per_batch_and_variant():
    rows = [{"batch": "128", "impl": "im2win_basic", "measured_over_im2win": "4", "predicted_over_im2win": "1"},
            {"batch": "128", "impl": "im2win_basic", "measured_over_im2win": "9", "predicted_over_im2win": "4"},
            {"batch": "128", "impl": "im2win", "measured_over_im2win": "1", "predicted_over_im2win": "1"}]
    out = summary(rows)
    assert list(out) == [(128, "im2win_basic")]
    assert out[(128, "im2win_basic")] == (pytest.approx(6.0), pytest.approx(2.0))


def test_rank_fastest_first_and_ties_keep_the_given_order():
    assert rank({"im2win": 3.0, "winograd_fused": 1.0, "winograd_nonfused": 2.0}) == \
        {"winograd_fused": 1, "winograd_nonfused": 2, "im2win": 3}
    assert rank({"b": 1.0, "a": 1.0}) == {"b": 1, "a": 2}


def test_best_by_schedule_keeps_the_fastest_of_each_schedule():
    def cand(schedule, us):
        return SimpleNamespace(plan=SimpleNamespace(schedule=schedule), predicted_us=us)
    cands = [cand("nonfused", 5.0), cand("fused", 7.0), cand("nonfused", 3.0), cand("fused", 7.0), cand("fused", 6.0)]
    best = best_by_schedule(cands)
    assert best["nonfused"] is cands[2] and best["fused"] is cands[4]


@pytest.mark.parametrize("per_image, batch, max_tasks, want", [(1000, 128, 500_000, 128), (10_000, 128, 500_000, 50),
                                                               (10**7, 64, 500_000, 1), (0, 64, 10, 10)])
def test_fitting_batch(per_image, batch, max_tasks, want):
    assert fitting_batch(per_image, batch, max_tasks) == want


def test_winograd_layers_of_the_im2win_catalogue_are_conv6_to_conv12():
    from megasim.workloads.catalogue import network_layers
    layers = winograd_layers(network_layers("im2win"))
    assert [p.name for p in layers] == [f"im2win/conv{i}" for i in range(6, 13)]
    assert all(p.padding == 0 for p in layers)


def test_measured_plan_reads_the_bench_detail_with_and_without_a_mapping():
    from experiments.figures.algorithm_choice import measured_plan
    bare = measured_plan("fused t=64,tile=5,gemm_k_tile=64,threads=128,pairs=4,gemm_threads=128 (prepared, NHWC)")
    assert bare.schedule == "fused" and bare.params.tile == 5 and bare.params.d_ig is None
    full = measured_plan("fused D_IG=96,D_GO=640,M=4,t=64,tile=4,pairs=2 (prepared, NHWC)")
    assert (full.params.d_ig, full.params.d_go, full.params.m, full.params.transform_pairs_per_thread) == (96, 640, 4, 2)
    assert measured_plan("nonfused t=64,tile=7,pairs=1 (prepared, NHWC)").schedule == "nonfused"
