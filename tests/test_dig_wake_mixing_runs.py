"""The model's side of the dig_wake follow-up's calibration-layer runs (experiments.studies.dig_wake.mixed_proportion,
fused_zeroed): the thinned mixed-kind run holds exactly the listed tasks and, unthinned, is the calibration's
own mixed-kind case; the zeroed fused run is the fused order with no counters."""

import numpy as np

from experiments.studies.dig_wake.fused_zeroed import fused_zeroed_case
from experiments.studies.dig_wake.mixed_proportion import mixed_proportion_case, thinned_order
from megasim.calibration.cases import mixed_case, mixed_us
from megasim.hardware import get_gpu
from megasim.plan import Plan, build
from megasim.workloads import parse_layer

LAYER = "N=2,C=16,K=32,H=16,W=16"


def test_thinned_mixed_run_keeps_every_nth_gemm():
    spec = get_gpu("H100")
    graph, schedule, _ = build(parse_layer(LAYER), Plan.parse("nonfused", "pairs=4"))
    gemm = graph.kind_id("gemm")
    n_gemm = int((graph.kind == gemm).sum())
    order = thinned_order(graph, schedule, ("itrans", "gemm"), 4)
    assert int((graph.kind[order] == gemm).sum()) == len(range(0, n_gemm, 4))
    sub, sched = mixed_proportion_case(LAYER, ("itrans", "gemm"), "pairs=4", 4)
    assert sub.num_tasks == order.size == len(sched.launches[0].order)
    assert mixed_us(spec, mixed_proportion_case(LAYER, ("gemm", "otrans"), "pairs=4", 1)) == \
        mixed_us(spec, mixed_case(LAYER, ("gemm", "otrans"), "pairs=4"))


def test_zeroed_fused_run_has_the_fused_order_and_no_counters():
    graph, schedule, _ = build(parse_layer(LAYER), Plan.parse("fused", "D_IG=1,D_GO=40,M=1"))
    sub, sched = fused_zeroed_case(LAYER, "D_IG=1,D_GO=40,M=1")
    assert sub.num_tasks == graph.num_tasks
    assert np.array_equal(sub.kind[sched.launches[0].order], graph.kind[schedule.launches[0].order])
    assert (sub.wait_counters < 0).all()
