"""The GPU executor's kernel tables (gpu.runtime.table, gpu.runtime.execute): every registered algorithm's
schedules, built by megasim.plan.build, run launch by launch through its table and match the float64
references; orders a kernel cannot honour, kinds without a kernel and algorithms without a table are
refused in one line; the validation hook gives each algorithm's plans.

Runs on Numba's CUDA simulator (tests/conftest.py) or, with NUMBA_ENABLE_CUDASIM=0, on the GPU. Shapes
are tiny and awkward (odd sizes, channels not a multiple of the chunk, K not a multiple of the tile);
inputs are fresh random maps with zeros (sparse) or standard normal (Winograd).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from megasim.algorithms import ALGORITHMS
from megasim.algorithms.base import Algorithm
from megasim.algorithms.sparse.plugin import PooledSparseParams, SparseParams
from megasim.algorithms.winograd.plugin import WinogradParams
from megasim.calibration.validation import summarize, validation_plans
from megasim.plan import Plan, build
from megasim.schedule import Launch, Schedule
from megasim.workloads.problem import ConvProblem

numba = pytest.importorskip("numba")
from numba import cuda  # noqa: E402

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) nor a CUDA GPU is available",
                allow_module_level=True)

from gpu.errors import KernelInputError  # noqa: E402
from gpu.runtime.execute import PreparedRun, execute  # noqa: E402
from gpu.runtime.table import KERNEL_TABLES, kernel_table  # noqa: E402
from gpu.sparse import reference_conv2d, reference_conv_relu_maxpool  # noqa: E402

pytestmark = [pytest.mark.cudasim, pytest.mark.usefixtures("fast_simulator_barriers")]
TOL = 1e-4
# Winograd on the simulator: 32-thread blocks, 2 tiles per group, 8-wide k-tiles (few, small blocks)
SMALL_WINOGRAD = WinogradParams(tile=2, tiles_per_group=2, gemm_k_tile=8, transform_threads=32, gemm_threads=32)


def _rel_err(y, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(y, np.float64) - ref).max() / np.abs(ref).max())


def _sparse_inputs(problem: ConvProblem, seed: int):
    rng = np.random.default_rng(seed)
    x = np.abs(rng.standard_normal((problem.n, problem.c, problem.h, problem.w))).astype(np.float32) + 0.1
    x[rng.random(x.shape) < 0.5] = 0.0
    return x, rng.standard_normal((problem.k, problem.c, problem.r, problem.s)).astype(np.float32)


def _plan(name: str, schedule: str) -> Plan:
    if name == "winograd":
        return Plan(schedule, SMALL_WINOGRAD if schedule != "fused" else replace(SMALL_WINOGRAD, m=2), name)
    if name == "naive_direct":
        return Plan(schedule, ALGORITHMS[name].params_type(), name)
    params = ALGORITHMS[name].params_type(k_tile=ALGORITHMS[name].k_tiles[-2])
    return Plan(schedule, params, name)


PROBLEMS = {"winograd": ConvProblem(1, 3, 5, 5, 7, padding=1),
            "sparse": ConvProblem(1, 5, 7, 7, 9, 3, 3, 1, 1)}
# every algorithm registered when megasim.algorithms is imported, each of its schedules (im2win's kernels:
# tests/test_im2win_gpu.py; im2col_gemm is measured through torch and has no table)
CASES = [(name, schedule) for name, alg in ALGORITHMS.items() for schedule in alg.schedules
         if name not in ("im2win", "im2col_gemm")]


@pytest.mark.parametrize("name,schedule", CASES)
def test_every_schedule_runs_through_the_table(name, schedule):
    table = kernel_table(name)
    problem = PROBLEMS["winograd" if name == "winograd" else "sparse"]
    graph, sched, plan = build(problem, _plan(name, schedule))
    seed = abs(hash((name, schedule))) % 1000
    if name == "winograd":
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((problem.n, problem.c, problem.h, problem.w)).astype(np.float32)
        w = rng.standard_normal((problem.k, problem.c, 3, 3)).astype(np.float32)
        x_in = cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))       # the table's NHWC
        y = execute(problem, plan, x_in, cuda.to_device(w), graph=graph, schedule=sched).copy_to_host()
        ref = reference_conv2d(x, w, 1, problem.padding).transpose(0, 2, 3, 1)
    else:
        x, w = _sparse_inputs(problem, seed)
        y = execute(problem, plan, cuda.to_device(x), cuda.to_device(w), graph=graph, schedule=sched).copy_to_host()
        pool = getattr(plan.params, "pool", None)
        ref = (reference_conv2d(x, w, problem.stride, problem.padding) if pool is None else
               reference_conv_relu_maxpool(x, w, problem.stride, problem.padding, pool.size, pool.stride))
    assert table.input_layout in ("NCHW", "NHWC")
    assert y.shape == ref.shape and _rel_err(y, ref) < TOL


def test_a_prepared_run_repeats_on_one_workspace_and_keeps_its_steps():
    problem = PROBLEMS["sparse"]
    graph, sched, plan = build(problem, Plan("unfused", PooledSparseParams(k_tile=4), "pecr"))
    run = PreparedRun(problem, plan, graph, sched)
    assert run.kernels == ("ecr conv_kernel", "relu_kernel", "maxpool_kernel")
    x, w = _sparse_inputs(problem, 3)
    ws = run.workspace(cuda.to_device(x), cuda.to_device(w))
    run.run(ws)
    first = run.output(ws).copy_to_host()
    steps = run.steps(ws)
    run.run(ws)
    assert run.steps(ws) is steps and len(steps) == 3
    assert np.array_equal(run.output(ws).copy_to_host(), first)
    assert _rel_err(first, reference_conv_relu_maxpool(x, w, 1, 1)) < TOL


@pytest.mark.parametrize("name", ["ecr", "pecr"])
def test_an_order_a_grid_kernel_cannot_honour_is_refused(name):
    problem = PROBLEMS["sparse"]
    alg = ALGORITHMS[name]
    graph, sched, plan = build(problem, Plan(alg.default_schedule, alg.params_type(k_tile=alg.k_tiles[-1]), name))
    launch = sched.launches[0]
    assert len(launch.order) >= 2
    reversed_ = Schedule("reversed", (Launch(np.asarray(launch.order)[::-1], name=launch.name),))
    with pytest.raises(KernelInputError, match="grid order") as err:
        PreparedRun(problem, plan, graph, reversed_)
    assert "\n" not in str(err.value)
    half = len(launch.order) // 2
    split = Schedule("split", (Launch(launch.order[:half], name="a"), Launch(launch.order[half:], name="b")))
    with pytest.raises(KernelInputError, match=f"holds {half} of the {len(launch.order)}"):
        PreparedRun(problem, plan, graph, split)


def test_a_launch_mixing_kinds_needs_a_megakernel():
    problem = PROBLEMS["winograd"]
    graph, sched, plan = build(problem, Plan("naive", SMALL_WINOGRAD))
    with pytest.raises(KernelInputError, match="mixes task kinds"):
        PreparedRun(problem, plan, graph, sched, kernels="per_kind")
    sgraph, ssched, splan = build(PROBLEMS["sparse"], Plan("unfused", PooledSparseParams(k_tile=4), "pecr"))
    mixed = Schedule("one", (Launch(np.arange(sgraph.num_tasks), name="all"),))
    with pytest.raises(KernelInputError, match="mixes task kinds"):
        PreparedRun(PROBLEMS["sparse"], splan, sgraph, mixed, check=False)
    with pytest.raises(KernelInputError, match="has no megakernel"):
        PreparedRun(PROBLEMS["sparse"], splan, sgraph, ssched, kernels="megakernel")


def test_unknown_options_and_kernel_choices_are_refused():
    problem = PROBLEMS["sparse"]
    graph, sched, plan = build(problem, _plan("ecr", "kernel"))
    with pytest.raises(KernelInputError, match="option 'poll_limit' is not allowed for the ecr kernels"):
        PreparedRun(problem, plan, graph, sched, options={"poll_limit": 10})
    with pytest.raises(KernelInputError, match="kernels='fused' is not allowed"):
        PreparedRun(problem, plan, graph, sched, kernels="fused")


class _NoKernels(Algorithm):
    name = "test_no_kernels"
    summary = "an algorithm registered without GPU kernels"
    params_type = SparseParams
    schedules = ("kernel",)
    kinds = ("ecr",)

    def lower(self, problem, params, schedule=None):
        return ALGORITHMS["ecr"].lower(problem, replace(params, k_tile=4))

    def order(self, graph, params, schedule):
        return Schedule(schedule, (Launch(np.arange(graph.num_tasks), name="ecr"),)), params


def test_a_plugin_without_a_kernel_table_gets_a_clear_error(monkeypatch):
    monkeypatch.setitem(ALGORITHMS, _NoKernels.name, _NoKernels())
    problem = PROBLEMS["sparse"]
    graph, sched, plan = build(problem, Plan(algorithm=_NoKernels.name))
    x, w = _sparse_inputs(problem, 1)
    with pytest.raises(KernelInputError, match="'test_no_kernels' has no GPU kernel table") as err:
        execute(problem, plan, cuda.to_device(x), cuda.to_device(w), graph=graph, schedule=sched)
    assert "register_kernels" in str(err.value) and "\n" not in str(err.value)


def test_a_table_missing_a_kind_names_it(monkeypatch):
    table = kernel_table("pecr")
    monkeypatch.setitem(KERNEL_TABLES, "pecr", replace(table, kinds={k: v for k, v in table.kinds.items()
                                                                    if k != "relu"}))
    problem = PROBLEMS["sparse"]
    graph, sched, plan = build(problem, Plan("unfused", PooledSparseParams(k_tile=4), "pecr"))
    with pytest.raises(KernelInputError, match="task kind 'relu' has no kernel in the pecr table"):
        PreparedRun(problem, plan, graph, sched)


def test_registering_a_table_twice_raises():
    from gpu.runtime.table import register_kernels
    with pytest.raises(ValueError, match="already registered"):
        register_kernels(kernel_table("ecr"))


# --- the validation hook (CPU side of megasim validate --algo) --------------------------------------

@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_validation_plans_of_every_algorithm_build_and_rebuild_from_their_rows(name):
    problem = ConvProblem(1, 8, 12, 10, 11, 3, 3, 1, 1)
    plans = validation_plans(problem, 6, seed=1, algorithm=name)
    assert 1 <= len(plans) <= 6
    keys = set()
    for label, plan in plans:
        assert plan.algorithm == name
        graph, sched, _ = build(problem, plan)
        again, sched2, _ = build(problem, Plan.parse(plan.schedule, plan.param_string(), name))
        assert again.hash == graph.hash and sched2.hash == sched.hash   # a CSV row rebuilds the program
        keys.add((graph.hash, sched.hash))
    assert len(keys) == len(plans)
    assert validation_plans(problem, 6, seed=1, algorithm=name) == plans           # deterministic


def test_sparse_validation_covers_tiles_schedules_and_sparsity():
    problem = ConvProblem(1, 8, 12, 10, 11, 3, 3, 1, 1)
    plans = validation_plans(problem, 40, algorithm="pecr")
    assert {p.schedule for _, p in plans} == {"fused", "unfused"}
    assert {p.params.k_tile for _, p in plans} == {8, 4, 2}
    assert len({p.params.sparsity for _, p in plans}) >= 4


def test_sparse_validation_inputs_are_the_map_the_model_counts():
    from megasim.workloads.sparse import zero_mask
    problem = ConvProblem(2, 8, 12, 10, 11, 3, 3, 1, 1)
    (_, plan), = [lp for lp in validation_plans(problem, 40, algorithm="ecr") if lp[1].params.sparsity == 0.8][:1]
    x, w = (a.copy_to_host() for a in kernel_table("ecr").inputs(problem, plan, 0))
    assert x.dtype == np.float32 and w.dtype == np.float32 and w.shape == (12, 8, 3, 3)
    assert np.array_equal(x == 0, zero_mask(x.shape, plan.params.sparsity_spec))
    assert np.array_equal(kernel_table("ecr").inputs(problem, plan, 1)[0].copy_to_host(), x)          # one map for every set


def test_summarize_of_no_points_meets_no_target():
    s = summarize([])
    assert s["overall"]["points"] == 0 and "no points" in s["overall"]["outcome"]
    assert s["targets_met"] and not any(s["targets_met"].values())
    rows = [{"layer": "L", "schedule": "kernel", "label": "a", "params": "x", "predicted_us": 1, "measured_us": ""}]
    assert not any(summarize(rows)["targets_met"].values())


def test_summarize_leaves_out_targets_no_layer_can_have():
    rows = [{"layer": "L", "schedule": "kernel", "label": f"k{i}", "params": str(i), "predicted_us": 10 + i,
             "measured_us": 10 + i} for i in range(3)]
    s = summarize(rows)
    assert "speedup within 10% in every layer" in s["targets_not_applicable"]
    assert "speedup within 10% in every layer" not in s["targets_met"]
    assert s["targets_met"]["mape<=10%"]
