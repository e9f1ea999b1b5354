"""Work limits checked before lowering (docs/errors.md): the task estimate of a problem whose one image is
too large to lower whole comes from a shrunken copy, so a huge single image is refused in a fraction of a
second instead of running NumPy out of memory; the sparse family's size limits; the ranges of a spec's
time and rate fields, at whose ends the model still finishes at once."""

from __future__ import annotations

import time

import pytest

from megasim.errors import ResourceError
from megasim.hardware import get_gpu
from megasim.hardware.spec import SPEC_RANGES, TASK_COST_RANGES
from megasim.plan import ESTIMATE_IMAGE_ELEMENTS, Plan, _shrunk, build, estimate_tasks
from megasim.workloads import network_layers, parse_layer

NETWORKS = ("vgg16", "vgg19", "resnet50", "yolov3", "densenet161", "im2win")


def test_no_catalogue_layer_is_shrunk():
    """The shrunken estimate is for images above every catalogue layer's: their estimates are unchanged."""
    for net in NETWORKS:
        for layer in network_layers(net):
            small, factor = _shrunk(layer)
            assert factor == 1 and (small.h, small.w, small.k, small.c) == (layer.h, layer.w, layer.k, layer.c), layer


@pytest.mark.parametrize("layer", ["N=1,C=3,K=700,H=3001,W=17,R=3,S=3,stride=2,padding=1",
                                   "N=1,C=2,K=9000000,H=1,W=1,R=1,S=1,padding=0",
                                   "N=1,C=9000000,K=1,H=1,W=1,R=1,S=1,padding=0"])
def test_the_shrunken_copy_is_below_the_limit_and_keeps_the_filter(layer):
    p = parse_layer(layer)
    small, factor = _shrunk(p)
    assert factor > 1 and small.n == 1 and (small.r, small.s, small.stride, small.padding) == (p.r, p.s, p.stride, p.padding)
    assert max(small.c * small.h * small.w, small.k * small.out_h * small.out_w) <= ESTIMATE_IMAGE_ELEMENTS
    assert small.out_h >= 1 and small.out_w >= 1


@pytest.mark.parametrize("algorithm, layer", [("winograd", "N=1,C=8,K=8,H=1100,W=1100"),
                                               ("im2win", "N=1,C=8,K=8,H=1100,W=1100"),
                                               ("im2col_gemm", "N=1,C=4,K=9000000,H=1,W=1,R=1,S=1,padding=0")])
def test_the_shrunken_estimate_is_close_to_the_exact_count(algorithm, layer):
    p = parse_layer(layer)
    assert _shrunk(p)[1] > 1
    plan = Plan.parse(None, None, algorithm=algorithm)
    spec = get_gpu("H100")
    estimate = estimate_tasks(p, plan, spec)
    exact = build(p, plan, spec)[0].num_tasks
    assert 0.95 * exact <= estimate <= 1.25 * exact, (estimate, exact)


@pytest.mark.parametrize("algorithm, layer", [
    ("winograd", "N=1,C=1,K=1,H=40000,W=40000"),                        # before: 3.5 s, then MemoryError
    ("im2win", "N=1,C=1,K=1000000000,H=1,W=1,R=1,S=1,padding=0"),       # before: 4 s, then MemoryError
    ("im2col_gemm", "N=1,C=1,K=1000000000,H=1,W=1,R=1,S=1,padding=0"),  # before: 1.6 s and 3.7 GB, then refused
    ("im2win", "N=1,C=1,K=1,H=1,W=2000000000,R=1,S=1,padding=0"),       # before: 13 s, then refused
])
def test_a_huge_single_image_is_refused_before_it_is_lowered(algorithm, layer):
    start = time.perf_counter()
    with pytest.raises(ResourceError) as info:
        build(parse_layer(layer), Plan.parse(None, None, algorithm=algorithm), get_gpu("H100"))
    assert time.perf_counter() - start < 2.0
    message = str(info.value)
    assert "from a smaller copy of one image" in message and "max_tasks=2,000,000" in message and "\n" not in message


@pytest.mark.parametrize("algorithm", ["ecr", "direct", "pecr", "direct_fused"])
@pytest.mark.parametrize("layer, needle", [
    ("N=1,C=1000000000,K=1,H=1,W=1,R=1,S=1,padding=0", "input N*C*H*W = 1,000,000,000 is not allowed"),
    ("N=1,C=1,K=1000000000,H=1,W=1,R=1,S=1,padding=0", "output N*K*P*Q = 1,000,000,000 is not allowed"),
    ("N=5,C=1,K=1,H=2048,W=2048", "pixels N*H*W = 20,971,520 is not allowed"),
])
def test_the_sparse_family_refuses_problems_above_its_limits(algorithm, layer, needle):
    """Before: NumPy's MemoryError as a traceback after seconds (2048x2048 at C=4 alone took 5 GB)."""
    with pytest.raises(ResourceError) as info:
        build(parse_layer(layer), Plan.parse(None, None, algorithm=algorithm))
    assert f"under {algorithm}: its {needle}" in str(info.value), str(info.value)


def test_no_catalogue_layer_at_batch_64_is_above_an_algorithms_limits():
    """The limits sit above every layer the network studies run (megasim sweep at batch 64)."""
    from megasim.algorithms import get_algorithm
    from megasim.algorithms.registry import ALGORITHMS
    from megasim.plan import PROBLEM_SIZES, check_problem_size
    get_algorithm("winograd")      # the registry filled
    assert len(ALGORITHMS) >= 7
    for alg in ALGORITHMS.values():
        assert set(alg.max_elements) <= set(PROBLEM_SIZES)
        for net in NETWORKS:
            for layer in network_layers(net):
                check_problem_size(layer.with_batch(64), alg)


def _ends(ranges):
    return [(name, value) for name, (low, high) in ranges.items() for value in (low, high)]


@pytest.mark.parametrize("field, value", _ends(SPEC_RANGES))
def test_a_spec_at_either_end_of_its_ranges_simulates_in_a_moment(field, value):
    """The ranges keep the model finishing: beyond them it ran for ever (kernel_launch_ns=1e12, l2_bw_gbps=1e-3)."""
    import dataclasses
    import math
    from megasim.plan import predict
    spec = dataclasses.replace(get_gpu("H100"), **{field: value})
    start = time.perf_counter()
    result, _ = predict(parse_layer("N=2,C=8,K=8,H=8,W=8"), spec)
    assert math.isfinite(result.predicted_us) and result.predicted_us > 0
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("field, value", _ends(TASK_COST_RANGES))
def test_a_task_cost_at_either_end_of_its_ranges_simulates_in_a_moment(field, value):
    import dataclasses
    import math
    from megasim.hardware.spec import TaskCost
    from megasim.plan import predict
    extra = {"block_sm_ready": 0.5} if field == "further_block_sm_ready" else {}
    if field == "block_sm_ready" or extra:
        extra["block_sm_share"] = 1.0
    cost = TaskCost(**{**extra, field: value})
    spec = get_gpu("H100")
    spec = dataclasses.replace(spec, task_costs={**spec.task_costs, "default": cost})
    start = time.perf_counter()
    result, _ = predict(parse_layer("N=2,C=8,K=8,H=8,W=8"), spec)
    assert math.isfinite(result.predicted_us) and result.predicted_us > 0
    assert time.perf_counter() - start < 5.0
