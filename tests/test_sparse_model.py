"""The sparse workloads and the ECR/PECR lowering: generator contracts, nonzero counting against a
brute-force count on tiny problems, and the two engine terms the sparse kinds need (other_ops priced by
ns_per_other_op, a block's share of its SM)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from megasim.errors import LoweringError, WorkloadError
from megasim.hardware import TaskCost, get_gpu
from megasim.algorithms.sparse.lowering import OPS, lower_sparse
from megasim.algorithms.sparse.tiling import PoolSpec, choose_tiling, grid, patch_hw, pooled_hw
from megasim.schedule import Launch, Schedule
from megasim.sim import simulate
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem
from megasim.workloads.sparse import (SparsitySpec, measured_sparsity, relu_chain_maps, sparse_feature_map,
                                      vgg19_sparse_layers, zero_mask)
from tests.test_sim_scenarios import compute_graph, one_launch, toy_spec


# --- generator ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", ["uniform", "clustered"])
@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.9, 1.0])
def test_generator_exact_sparsity_and_positive_values(pattern, sparsity):
    x = sparse_feature_map((2, 3, 11, 7), SparsitySpec(sparsity, pattern, seed=5))
    assert x.dtype == np.float32
    if pattern == "uniform":
        per_image = (x.reshape(2, -1) == 0).sum(axis=1)
        assert np.all(per_image == round(sparsity * 3 * 11 * 7))
    else:
        per_map = (x.reshape(6, -1) == 0).sum(axis=1)
        assert np.all(per_map == round(sparsity * 11 * 7))
    assert np.all(x[x != 0] >= 0.05)


def test_generator_is_seeded():
    a = sparse_feature_map((1, 2, 8, 8), SparsitySpec(0.5, "clustered", seed=1))
    b = sparse_feature_map((1, 2, 8, 8), SparsitySpec(0.5, "clustered", seed=1))
    c = sparse_feature_map((1, 2, 8, 8), SparsitySpec(0.5, "clustered", seed=2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def _neighbour_agreement(mask: np.ndarray) -> float:
    """Fraction of horizontally adjacent pixel pairs that are both zero or both nonzero."""
    return float(np.mean(mask[..., 1:] == mask[..., :-1]))


def test_clustered_zeros_come_in_patches():
    shape = (1, 4, 64, 64)
    uniform = zero_mask(shape, SparsitySpec(0.5, "uniform", seed=3))
    clustered = zero_mask(shape, SparsitySpec(0.5, "clustered", cluster_px=6, seed=3))
    assert _neighbour_agreement(uniform) == pytest.approx(0.5, abs=0.03)
    assert _neighbour_agreement(clustered) > 0.8


@pytest.mark.parametrize("cluster_px", [6, 55, 56, 64, 1000])
def test_clustered_zeros_hit_the_sparsity_for_any_cluster_size(cluster_px):
    """A cluster as large as the map blurred its field flat and zeroed the whole map (sparsity 0.5 on
    resnet-1 with cluster_px=64 predicted as 1.0)."""
    mask = zero_mask((2, 3, 56, 56), SparsitySpec(0.5, "clustered", cluster_px=cluster_px, seed=7))
    assert (mask.reshape(6, -1).sum(axis=1) == round(0.5 * 56 * 56)).all()
    if cluster_px != 55:   # a box just under the side wraps into a field that is no longer smooth
        assert _neighbour_agreement(mask) > 0.8   # in patches (one run of rows when the field is flat)


@pytest.mark.parametrize("bad", [dict(sparsity=1.5), dict(sparsity=-0.1), dict(sparsity=0.5, pattern="stripes"),
                                 dict(sparsity=0.5, cluster_px=0)])
def test_sparsity_spec_rejects_bad_values(bad):
    with pytest.raises(WorkloadError, match="is not allowed"):
        SparsitySpec(**bad)


def test_relu_chain_maps_shapes_and_sparsity():
    maps = relu_chain_maps(32, seed=1, layers=6)
    names = [p.name for p in vgg19_sparse_layers(1)][:6]
    assert list(maps) == names
    assert maps["vgg19/conv1_1"].shape == (1, 3, 32, 32) and measured_sparsity(maps["vgg19/conv1_1"]) == 0.0
    assert maps["vgg19/conv2_1"].shape == (1, 64, 16, 16)          # pooled after conv1_2
    assert 0.2 < measured_sparsity(maps["vgg19/conv1_2"]) < 0.8
    sparser = relu_chain_maps(32, seed=1, layers=2, bias=-0.5)
    assert measured_sparsity(sparser["vgg19/conv1_2"]) > measured_sparsity(maps["vgg19/conv1_2"])
    with pytest.raises(WorkloadError, match="multiple of 16"):
        relu_chain_maps(30)


def test_vgg19_layers():
    layers = vgg19_sparse_layers(2)
    assert len(layers) == 16 and all(p.n == 2 for p in layers)
    assert layers[-1].c == 512 and layers[-1].h == 14


# --- lowering: counts against brute force ----------------------------------------------------------------
def brute_conv_issue(problem: ConvProblem, x: np.ndarray, kind: str, sm_count: int, pool=None, loop=False):
    """Per block (in grid order): sum over warps and chunks of the busiest thread's multiply-add
    iterations, counted with explicit loops over the kernel's threads. ``loop``: instead, the sum over
    chunks of the block's busiest thread's loop iterations (a fused kernel's patch element is one)."""
    t = choose_tiling(problem, kind, sm_count, pool=pool)
    sparse = kind in ("ecr", "pecr")
    fused = kind in ("pecr", "direct_fused")
    if fused:
        oh_, ow_ = pooled_hw(problem, t.pool)
        ph, pw = patch_hw(problem, t.pool)
    else:
        oh_, ow_ = problem.out_h, problem.out_w
    pixels = problem.n * oh_ * ow_
    chunks = -(-problem.c // t.c_chunk)
    counts = np.zeros((pixels, chunks))
    for g in range(pixels):
        n, rem = divmod(g, oh_ * ow_)
        oy, ox = divmod(rem, ow_)
        for ch in range(chunks):
            total = 0
            # The dense twins run every chunk's c_chunk channels (a missing channel reads zeros).
            for c in range(ch * t.c_chunk, (ch + 1) * t.c_chunk if not sparse else min(problem.c, (ch + 1) * t.c_chunk)):
                if not fused:
                    for r in range(problem.r):
                        for s in range(problem.s):
                            ih = oy * problem.stride - problem.padding + r
                            iw = ox * problem.stride - problem.padding + s
                            inside = 0 <= ih < problem.h and 0 <= iw < problem.w
                            if not sparse or (inside and x[n, c, ih, iw] != 0):  # c < C when sparse
                                total += 1
                else:
                    st = problem.stride
                    y0 = oy * t.pool.stride * st - problem.padding
                    x0 = ox * t.pool.stride * st - problem.padding
                    for py in range(ph):
                        for px in range(pw):
                            ih, iw = y0 + py, x0 + px
                            inside = 0 <= ih < problem.h and 0 <= iw < problem.w
                            if sparse and not (inside and x[n, c, ih, iw] != 0):
                                continue
                            hits = sum(1 for dy in range(t.pool.size) for dx in range(t.pool.size)
                                       if 0 <= py - dy * st < problem.r and 0 <= px - dx * st < problem.s)
                            total += 1 if loop else hits
            counts[g, ch] = total
    tiles_p, tiles_k = grid(problem, t)
    per_tile = []
    for bp in range(tiles_p):
        s = 0.0
        if loop:
            per_tile.append(counts[bp * t.threads:(bp + 1) * t.threads].max(axis=0).sum())
            continue
        for w0 in range(bp * t.threads, (bp + 1) * t.threads, 32):
            warp = counts[w0:min(w0 + 32, pixels)]
            if warp.size:
                s += warp.max(axis=0).sum()
        per_tile.append(s * warp_slot_scale(bp, pixels, t))
    return np.array([per_tile[bp] for bk in range(tiles_k) for bp in range(tiles_p)]), t


@pytest.mark.parametrize("kind", ["ecr", "direct"])
@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 0), (1, 0)])
def test_conv_issue_counts_match_brute_force(kind, stride, padding):
    p = ConvProblem(n=2, c=5, k=6, h=9, w=7, stride=stride, padding=padding)
    x = sparse_feature_map((2, 5, 9, 7), SparsitySpec(0.6, seed=4))
    x[0, :, :4, :4] = 0                                    # all-zero windows
    graph, schedule, info = lower_sparse(p, kind, 4, x=x)
    expected, t = brute_conv_issue(p, x, kind, 4)
    conv = graph.tasks_of_kind(kind)
    assert np.allclose(graph.flops[conv], 2 * 32 * t.k_tile * expected)
    assert info.sparsity == pytest.approx(measured_sparsity(x))


@pytest.mark.parametrize("kind", ["pecr", "direct_fused"])
@pytest.mark.parametrize("stride,padding,pool", [(1, 1, PoolSpec(2, 2)), (1, 0, PoolSpec(2, 1)), (2, 1, PoolSpec(2, 2))])
def test_fused_issue_counts_match_brute_force(kind, stride, padding, pool):
    p = ConvProblem(n=2, c=3, k=5, h=10, w=9, stride=stride, padding=padding)
    x = sparse_feature_map((2, 3, 10, 9), SparsitySpec(0.5, "clustered", seed=2))
    graph, _, _ = lower_sparse(p, kind, 4, x=x, pool=pool)
    expected, t = brute_conv_issue(p, x, kind, 4, pool=pool)
    assert np.allclose(graph.flops[graph.tasks_of_kind(kind)], 2 * 32 * t.k_tile * expected)


def brute_input_parts(p: ConvProblem, kind: str, pool, threads: int) -> list[set[int]]:
    """Per pixel tile, the input parts (image, row, 32-column segment) its threads' windows touch."""
    conv = kind in ("ecr", "direct")
    out_p, out_q = (p.out_h, p.out_w) if conv else pooled_hw(p, pool)
    step = p.stride * (1 if conv else pool.stride)
    span_h, span_w = (p.r, p.s) if conv else patch_hw(p, pool)
    segs = -(-p.w // 32)
    pixels = p.n * out_p * out_q
    tiles = []
    for first in range(0, pixels, threads):
        touched = set()
        for px in range(first, min(first + threads, pixels)):
            img, o, q = px // (out_p * out_q), (px // out_q) % out_p, px % out_q
            for y in range(o * step - p.padding, o * step - p.padding + span_h):
                for x in range(q * step - p.padding, q * step - p.padding + span_w):
                    if 0 <= y < p.h and 0 <= x < p.w:
                        touched.add((img * p.h + y) * segs + x // 32)
        tiles.append(touched)
    return tiles


@pytest.mark.parametrize("kind,stride,padding,pool", [("ecr", 1, 1, None), ("direct", 2, 0, None), ("direct", 1, 0, None),
                                                      ("pecr", 1, 1, PoolSpec(2, 2)), ("direct_fused", 2, 1, PoolSpec(2, 2)),
                                                      ("pecr", 1, 0, PoolSpec(2, 1))])
@pytest.mark.parametrize("h,w", [(5, 70), (9, 33), (4, 200), (6, 20)])
def test_input_reads_are_the_segments_the_windows_cover(kind, stride, padding, pool, h, w):
    """Each block reads the input parts its windows touch (brute force), each once, in merged runs, and
    moves the real bytes of their columns (the last segment of a row may be short)."""
    p = ConvProblem(n=2, c=3, k=5, h=h, w=w, stride=stride, padding=padding)
    x = sparse_feature_map((2, 3, h, w), SparsitySpec(0.5, seed=3))
    graph, _, info = lower_sparse(p, kind, 4, x=x, pool=pool)
    expected = brute_input_parts(p, kind, pool, info.tiling.threads)
    region = graph.tensor_names.index("input")
    tasks = graph.tasks_of_kind(kind)
    for t in tasks:
        rows = np.arange(graph.access_ptr[t], graph.access_ptr[t + 1])
        rows = rows[graph.access_region[rows] == np.flatnonzero(graph.region_tensor == region)[0]]
        lo, hi = graph.access_part_lo[rows], graph.access_part_hi[rows]
        got = set().union(*(range(a, b) for a, b in zip(lo, hi)))
        assert got == expected[graph.group[t]]
        assert (hi - lo).sum() == len(got)                                  # disjoint runs
        assert np.all(lo[1:] > hi[:-1])                                     # merged: no touching runs
        segs = -(-w // 32)
        columns = sum(min(32, w - (part % segs) * 32) for part in got)
        assert graph.access_bytes[rows].sum() == columns * p.c * 4


@pytest.mark.parametrize("kind,pool", [("ecr", None), ("direct", None), ("pecr", PoolSpec(2, 2)),
                                       ("direct_fused", PoolSpec(2, 1))])
def test_serial_iterations_match_brute_force(kind, pool):
    """serial_iterations: per block, the busiest thread's loop iterations summed over the chunks."""
    p = ConvProblem(n=2, c=5, k=6, h=9, w=7, stride=1, padding=1)
    x = sparse_feature_map((2, 5, 9, 7), SparsitySpec(0.6, seed=4))
    x[0, :, :4, :4] = 0
    graph, _, _ = lower_sparse(p, kind, 4, x=x, pool=pool)
    expected, _ = brute_conv_issue(p, x, kind, 4, pool=pool, loop=True)
    assert np.allclose(graph.serial_iterations[graph.tasks_of_kind(kind)], expected)
    zero, _, _ = lower_sparse(p, kind, 4, x=np.zeros_like(x), pool=pool)
    assert (zero.serial_iterations[zero.tasks_of_kind(kind)] == 0).all() == (kind in ("ecr", "pecr"))


def test_dense_input_ecr_issues_as_much_as_direct():
    """On a dense map every warp holds a thread with a full window, so skipping the padding saves no
    issue slots (the warp runs as long as its busiest thread); both scan every element."""
    p = ConvProblem(n=1, c=8, k=16, h=12, w=12)
    x = sparse_feature_map((1, 8, 12, 12), 0.0)
    g_e, _, _ = lower_sparse(p, "ecr", 4, x=x)
    g_d, _, _ = lower_sparse(p, "direct", 4, x=x)
    assert np.array_equal(g_e.flops, g_d.flops)
    assert np.array_equal(g_e.other_ops, g_d.other_ops)
    x[:, :, :8, :] = 0                          # the first 96 pixels' windows hold zeros only
    g_z, _, _ = lower_sparse(p, "ecr", 4, x=x)
    assert g_z.flops.sum() < g_e.flops.sum()


@pytest.mark.parametrize("op", OPS)
def test_every_op_lowers_simulates_and_gets_faster_with_sparsity(op):
    p = ConvProblem(n=2, c=16, k=32, h=20, w=20)
    spec = get_gpu("h200")
    times = []
    for s in (0.0, 0.5, 0.95):
        graph, schedule, info = lower_sparse(p, op, spec.sm_count, sparsity=s)
        graph.validate()
        assert info.sparsity == pytest.approx(s, abs=0.01)
        times.append(simulate(graph, schedule, spec).predicted_ns)
    if "direct" in op:
        assert times[0] == times[1] == times[2]
    else:
        assert times[0] > times[1] > times[2]
    if op.startswith("unfused_"):
        assert [l.name for l in schedule.launches] == [op.removeprefix("unfused_"), "relu", "maxpool"]


def test_lowering_rejects_bad_input():
    p = ConvProblem(n=1, c=4, k=4, h=8, w=8)
    with pytest.raises(LoweringError, match="op 'sparse' is not allowed"):
        lower_sparse(p, "sparse", 4, sparsity=0.5)
    with pytest.raises(LoweringError, match="exactly one"):
        lower_sparse(p, "ecr", 4)
    with pytest.raises(LoweringError, match="shape"):
        lower_sparse(p, "ecr", 4, x=np.ones((1, 4, 8, 9), np.float32))
    with pytest.raises(LoweringError, match="k_tile=5 is not allowed"):
        lower_sparse(p, "ecr", 4, sparsity=0.5, k_tile=5)
    with pytest.raises(LoweringError, match="pool size 9"):
        lower_sparse(p, "pecr", 4, sparsity=0.5, pool=PoolSpec(9, 1))
    with pytest.raises(LoweringError, match="takes no pool"):
        lower_sparse(p, "ecr", 4, sparsity=0.5, pool=PoolSpec())


# --- engine terms used by the sparse kinds ----------------------------------------------------------
def test_other_ops_priced_by_ns_per_other_op():
    base = compute_graph([100.0])
    graph = dataclasses.replace(base, other_ops=np.array([50.0]))
    spec = toy_spec(task_costs={"default": TaskCost(1.0, 0.0, ns_per_other_op=2.0)})
    assert simulate(graph, one_launch([0]), spec).predicted_ns == pytest.approx(100.0 + 2.0 * 50.0)
    assert graph.hash != base.hash
    with pytest.raises(Exception, match="other_ops"):
        dataclasses.replace(base, other_ops=np.array([-1.0])).validate()


def test_block_sm_share_caps_a_lone_block():
    graph = compute_graph([100.0, 100.0], kind_kw=dict(threads=128))
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=2, task_costs={"default": TaskCost(1.0, 0.0, block_sm_share=0.25)})
    # Two blocks on one SM, each capped at a quarter of it: 400 ns, not the 200 ns of a fair share.
    assert simulate(graph, one_launch([0, 1]), spec).predicted_ns == pytest.approx(400.0)
    full = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=2, task_costs={"default": TaskCost(1.0, 0.0, block_sm_share=0.5)})
    assert simulate(graph, one_launch([0, 1]), full).predicted_ns == pytest.approx(200.0)


@pytest.mark.parametrize("sharing", ["share", "ready"])
def test_sparse_calibration_recovers_known_costs(sharing):
    """Times simulated with known costs are fitted back to those costs (the fit's own consistency),
    under either SM-sharing rule."""
    from megasim.calibration.sparse import SHARING_FIELD, _simulated_us, calibration_cases, case_graph, fit_kind

    spec = get_gpu("h200")
    ecr = [c for c in calibration_cases() if c["kind"] == "ecr"]
    cases = ecr[:8] + ecr[16:24]        # problems 1, 2, 5, 6: few and many chunks, few and many blocks
    graphs = [case_graph(c, spec.sm_count) for c in cases]
    field = SHARING_FIELD[sharing]
    true = TaskCost(0.4, launch_fixed_ns=1500.0, ns_per_other_op=0.02, ns_per_step=300.0, ns_per_iteration=20.0,
                    ns_per_replay=0.2, **{field: 0.35})
    measured = _simulated_us(spec, "ecr", true, graphs)
    fit = fit_kind(spec, "ecr", graphs, measured, max_evals=300, sharing=sharing)
    got = fit["cost"]
    assert fit["rms_log_error"] < 1e-4
    assert got.fixed_ns == 0.0
    for name in ("compute_efficiency", "launch_fixed_ns", "ns_per_other_op", field, "ns_per_step", "ns_per_iteration",
                 "ns_per_replay"):
        assert getattr(got, name) == pytest.approx(getattr(true, name), rel=1e-2)


def test_sparse_calibration_rejects_unknown_sharing():
    from megasim.calibration.sparse import free_fields
    from megasim.errors import SpecError

    with pytest.raises(SpecError, match="sharing='cap' is not allowed"):
        free_fields("ecr", "cap")


def test_sparse_calibration_fits_ready_kinds_by_the_readiness_rule(monkeypatch):
    """``ready_kinds`` are fitted with block_sm_ready, the other kinds by ``sharing``; an unknown kind
    is refused before anything is fitted."""
    import megasim.calibration.sparse as cs
    from megasim.errors import SpecError

    seen = {}

    def fake_fit(spec, kind, graphs, measured, max_evals, sharing):
        seen[kind] = sharing
        return {"cost": TaskCost(compute_efficiency=1.0), "simulated_us": measured, "measured_us": measured,
                "rms_log_error": 0.0, "evaluations": 0}

    monkeypatch.setattr(cs, "fit_kind", fake_fit)
    monkeypatch.setattr(cs, "case_graph", lambda case, sm_count: None)
    rows = [{**c, "median_ms": 1.0} for c in cs.calibration_cases()]
    _, report = cs.calibrate_sparse(get_gpu("h200"), rows, device="d", date="2026-11-25", ready_kinds=("direct",))
    assert seen == {"ecr": "share", "pecr": "share", "direct": "ready", "direct_fused": "share",
                    "relu": "share", "maxpool": "share"}
    assert report["ready_kinds"] == ["direct"]
    with pytest.raises(SpecError, match="ready kind 'relu' is not allowed"):
        cs.calibrate_sparse(get_gpu("h200"), rows, device="d", date="2026-11-25", ready_kinds=("relu",))


def test_calibration_cases_are_not_vgg19():
    from megasim.calibration.sparse import calibration_cases
    from megasim.workloads import parse_layer

    vgg = {(p.c, p.k, p.h, p.w) for p in vgg19_sparse_layers(1)}
    for case in calibration_cases():
        p = parse_layer(case["problem"])
        assert (p.c, p.k, p.h, p.w) not in vgg


def test_cli_sparse_predicts_and_rejects_bad_input(capsys):
    import json as _json

    from megasim.cli.main import main

    times = []
    for s in ("0", "0.9"):
        assert main(["simulate", "vgg19/conv5_1", "--gpu", "h200", "--batch", "1", "--algo", "ecr",
                     "--param", f"sparsity={s}", "--json"]) == 0
        times.append(_json.loads(capsys.readouterr().out)["time_us"])
    assert times[0] > times[1]
    assert main(["simulate", "vgg19/conv5_1", "--gpu", "h200", "--algo", "pecr", "--param", "pool=x"]) == 2
    assert "--param pool='x' is not allowed" in capsys.readouterr().err
    assert main(["simulate", "vgg19/conv5_1", "--gpu", "h200", "--algo", "ecr", "--param", "sparsity=2"]) == 2
    assert "sparsity=2.0 is not allowed" in capsys.readouterr().err


def test_serial_steps_delay_a_task_but_do_not_occupy_the_sm():
    base = compute_graph([100.0, 100.0], kind_kw=dict(threads=128))
    graph = dataclasses.replace(base, serial_steps=np.array([3.0, 3.0]))
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=2,
                    task_costs={"default": TaskCost(1.0, 0.0, ns_per_step=10.0)})
    # Both blocks wait 30 ns, then share the SM: 30 + 200 ns; the delay is paid once, in parallel.
    assert simulate(graph, one_launch([0, 1]), spec).predicted_ns == pytest.approx(230.0)
    with pytest.raises(Exception, match="serial_steps"):
        dataclasses.replace(base, serial_steps=np.array([1.0])).validate()


def test_launch_fixed_time_is_paid_once_per_launch_not_per_wave():
    """fixed_ns delays every task (once a wave on a long grid); launch_fixed_ns holds back the launch's
    first blocks once."""
    graph = compute_graph([100.0] * 4, kind_kw=dict(threads=128))     # 4 waves of one block on one SM
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=1)
    per_block = dataclasses.replace(spec, task_costs={"default": TaskCost(1.0, 50.0)})
    per_launch = dataclasses.replace(spec, task_costs={"default": TaskCost(1.0, launch_fixed_ns=50.0)})
    assert simulate(graph, one_launch([0, 1, 2, 3]), per_block).predicted_ns == pytest.approx(600.0)
    result = simulate(graph, one_launch([0, 1, 2, 3]), per_launch)
    assert result.predicted_ns == pytest.approx(450.0)
    assert result.launches[0].end_ns - result.launches[0].start_ns == pytest.approx(450.0)
    with pytest.raises(Exception, match="launch_fixed_ns=-1.0 is not allowed"):
        TaskCost(1.0, launch_fixed_ns=-1.0)


def test_serial_iterations_are_priced_as_latency():
    base = compute_graph([100.0, 100.0], kind_kw=dict(threads=128))
    graph = dataclasses.replace(base, serial_iterations=np.array([4.0, 2.0]))
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=2,
                    task_costs={"default": TaskCost(1.0, 0.0, ns_per_iteration=10.0)})
    # Block 0 waits 40 ns, block 1 20 ns: block 1 computes alone from 20 to 40 ns (20 of its 100), then
    # both share the SM: block 1 finishes at 40 + 2 * 80 = 200 ns, block 0 then has 20 left: 220 ns.
    assert simulate(graph, one_launch([0, 1]), spec).predicted_ns == pytest.approx(220.0)
    with pytest.raises(Exception, match="serial_iterations"):
        dataclasses.replace(base, serial_iterations=np.array([-1.0, 0.0])).validate()
    with pytest.raises(Exception, match="ns_per_iteration=-1.0 is not allowed"):
        TaskCost(1.0, 0.0, ns_per_iteration=-1.0)


def test_sparse_validate_pipeline_on_a_small_measured_csv(tmp_path):
    """experiments.studies.sparse_model.sparse_validate end to end on a tiny CSV in sparse_bench's format (times made up:
    this checks the pipeline -- predictions, crossovers, summary, figures -- not the model)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from experiments.provenance import write_results
    from experiments.studies.sparse_model.sparse_validate import crossover, main, sustained_crossover

    assert crossover([0.0, 0.5, 1.0], [3.0, 2.0, 1.0], [2.0, 2.0, 2.0]) == pytest.approx(0.5)
    assert crossover([0.0, 0.5], [1.0, 1.0], [2.0, 2.0]) == 0.0
    assert crossover([0.5, 0.8], [1.0, 1.0], [2.0, 2.0]) == 0.5
    assert crossover([0.0, 0.5], [3.0, 3.0], [2.0, 2.0]) is None
    # Faster at 0, slower at 0.2 and 0.4 (by 1 and 2), faster at 0.6 (by 2): the first crossing is 0,
    # the sustained one where the last slower point's difference meets zero, 0.4 + 0.2 * 2 / 4 = 0.5.
    s, a, b = [0.0, 0.2, 0.4, 0.6], [1.9, 3.0, 4.0, 0.0], [2.0, 2.0, 2.0, 2.0]
    assert crossover(s, a, b) == 0.0
    assert sustained_crossover(s, a, b) == pytest.approx(0.5)
    assert sustained_crossover([0.0, 0.5, 1.0], [3.0, 2.0, 1.0], [2.0, 2.0, 2.0]) == pytest.approx(0.5)
    assert sustained_crossover([0.0, 0.5], [1.0, 1.0], [2.0, 2.0]) == 0.0
    assert sustained_crossover([0.0, 0.5], [1.0, 3.0], [2.0, 2.0]) is None
    rows = []
    for layer, c, k, hw in (("vgg19/conv5_4", 512, 512, 14),):
        for s in (0.0, 0.5, 0.9):
            for op, ms in (("ecr", 0.5 - 0.3 * s), ("direct", 0.4), ("cudnn", 0.1), ("pecr", 1.0 - s / 2),
                           ("direct_fused", 0.8), ("unfused_ecr", 0.6 - 0.3 * s), ("unfused_direct", 0.5),
                           ("cudnn_chain", 0.12)):
                rows.append({"layer": layer, "batch": 1, "C": c, "K": k, "HW": hw, "sparsity": s, "pattern": "uniform",
                             "seed": 15, "op": op, "k_tile": "" if op.startswith("cudnn") else (4 if op in ("ecr", "direct",
                             "unfused_ecr", "unfused_direct") else 2), "median_ms": ms, "status": "ok"})
    write_results(rows, tmp_path, "sparse_bench", {})
    assert main(["--measured", str(tmp_path / "sparse_bench.csv"), "--spec", "h200", "--out", str(tmp_path)]) == 0
    for name in ("sparse_validation.csv", "sparse_crossover.csv", "sparse_summary.json", "sparse_speedup_b1.png",
                 "pecr_speedup.png", "sparse_pred_vs_measured.png", "sparse_theta.png"):
        assert (tmp_path / name).exists(), name
    # The measured times above, through the CSV: ECR (0.5 - 0.3 s ms) against direct (0.4 ms) is slower
    # by 0.1 at s = 0 and faster by 0.05 at s = 0.5: the crossing is at 0.5 * 0.1 / 0.15 = 1/3.
    import csv
    cross = {(r["op"], r["vs"]): r for r in csv.DictReader((tmp_path / "sparse_crossover.csv").open(newline=""))}
    assert float(cross[("ecr", "direct")]["measured_crossover"]) == pytest.approx(1 / 3)
    assert float(cross[("ecr", "direct")]["measured_speedup_at_max"]) == pytest.approx(0.4 / (0.5 - 0.3 * 0.9))


def test_committed_sparse_predictions_are_reproduced():
    """A few rows of a committed H200 sparse validation (tests/data/h200_sparse/sparse_validation.csv; its
    README names the results file), re-predicted from the committed spec and the same seeded map, give the
    committed predicted_us (the results are what the code computes)."""
    import csv
    from pathlib import Path

    from megasim.hardware import load_spec
    from megasim.algorithms.sparse.predict import kernel_us
    from megasim.workloads import parse_layer

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "megasim/hardware/calibrated/h200_sparse.json")
    with (root / "tests/data/h200_sparse/sparse_validation.csv").open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["batch"] == "1" and r["layer"] == "vgg19/conv5_2"
                and r["sparsity"] in ("0.0", "0.9")]
    assert len(rows) >= 4
    for r in rows:
        p = parse_layer(r["layer"], batch=1)
        x = sparse_feature_map((p.n, p.c, p.h, p.w), SparsitySpec(float(r["sparsity"]), r["pattern"], seed=int(r["seed"])))
        graph, schedule, _ = lower_sparse(p, r["op"], spec.sm_count, x=x, k_tile=int(r["k_tile"]))
        assert kernel_us(simulate(graph, schedule, spec)) == pytest.approx(float(r["predicted_us"]), rel=1e-9)


def test_sparse_bench_times_finds_close_cudnn_algorithms_itself():
    """cuDNN's Find timing is one noisy sample: the bench re-times Find's successful algorithms within
    1.5x of its fastest (at most 4), failures and slow ones left out."""
    from experiments.benchmarks.sparse_bench import cudnn_candidates
    from gpu.cudnn_legacy import AlgoResult

    def r(algo, t, ok=True):
        return AlgoResult(algo, "CUDNN_STATUS_SUCCESS" if ok else "CUDNN_STATUS_NOT_SUPPORTED", t, 0, "FMA", ok)

    found = [r("FFT", 0.30), r("IMPLICIT_GEMM", 0.10), r("IMPLICIT_PRECOMP_GEMM", 0.12), r("GEMM", 0.14),
             r("WINOGRAD", 0.05, ok=False), r("DIRECT", float("nan")), r("FFT_TILING", 0.149), r("WINOGRAD_NONFUSED", 0.16)]
    assert cudnn_candidates(found) == ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "FFT_TILING"]


def test_row_conflict_counts_on_hand_made_warps():
    """experiments.studies.sparse_model.sparse_row_conflicts: same row -> 1 distinct row, one wavefront per quarter warp;
    rows 0, 8, 16, 24 (one bank group at k_tile 32) -> 4 wavefronts per quarter; padding (-1) skipped."""
    from experiments.studies.sparse_model.sparse_row_conflicts import conflict_stats

    same = np.zeros((32, 2), int)
    same[:, 1] = -1
    st = conflict_stats(same, 32)
    assert st == {"warp_iterations": 1, "active_lanes": 32.0, "distinct_rows": 1.0, "wavefronts_per_load": 4.0}
    clash = np.stack([8 * (np.arange(32) % 4), np.arange(32)], axis=1)   # iteration 1: rows 0..31, 8 groups
    st = conflict_stats(clash, 32)
    assert st["warp_iterations"] == 2 and st["distinct_rows"] == pytest.approx((4 + 32) / 2)
    assert st["wavefronts_per_load"] == pytest.approx((4 * 4 + 4 * 1) / 2)


def warp_slot_scale(tile: int, pixels: int, t) -> float:
    """A partial pixel tile is priced as a full block: its warps' counts times warps / active warps."""
    active = -(-min(t.threads, pixels - tile * t.threads) // 32)
    return (t.threads // 32) / active


def brute_row_replays(problem: ConvProblem, x: np.ndarray, sm_count: int) -> tuple[np.ndarray, object]:
    """Per ECR pixel tile, with explicit loops: per warp, chunk and iteration of the loop, the 128-bit
    weight loads' wavefronts beyond one (a warp-uniform row: one; else per quarter warp the largest
    count of distinct rows starting in one 4-bank group), times k_tile / 4 loads."""
    from megasim.algorithms.sparse.tiling import weight_row_floats

    t = choose_tiling(problem, "ecr", sm_count)
    stride = weight_row_floats(t.k_tile)
    p_, q_ = problem.out_h, problem.out_w
    pixels = problem.n * p_ * q_
    tiles_p, _ = grid(problem, t)
    out = np.zeros(tiles_p)
    for c0 in range(0, problem.c, t.c_chunk):
        lists = []
        for g in range(pixels):
            n, rem = divmod(g, p_ * q_)
            oy, ox = divmod(rem, q_)
            rows = []
            for cc in range(t.c_chunk):
                for r in range(problem.r):
                    for s in range(problem.s):
                        ih, iw = oy * problem.stride - problem.padding + r, ox * problem.stride - problem.padding + s
                        c = c0 + cc
                        if c < problem.c and 0 <= ih < problem.h and 0 <= iw < problem.w and x[n, c, ih, iw] != 0:
                            rows.append(cc * problem.r * problem.s + r * problem.s + s)
            lists.append(rows)
        for w0 in range(0, pixels, 32):
            lanes = lists[w0:w0 + 32] + [[]] * max(0, w0 + 32 - pixels)
            for i in range(max(len(lane) for lane in lanes)):
                col = [lane[i] if i < len(lane) else None for lane in lanes]
                active = {j for j in col if j is not None}
                if len(active) == 1:
                    wf = 1
                else:
                    wf = 0
                    for qt in range(4):
                        distinct = {j for j in col[qt * 8:(qt + 1) * 8] if j is not None}
                        if distinct:
                            wf += max(sum(1 for j in distinct if (j * stride % 32) // 4 == g) for g in range(8))
                out[w0 // t.threads] += (wf - 1) * (t.k_tile // 4)
    return out * np.array([warp_slot_scale(bp, pixels, t) for bp in range(tiles_p)]), t


@pytest.mark.parametrize("pattern", ["uniform", "clustered"])
def test_row_replays_match_brute_force(pattern):
    p = ConvProblem(n=2, c=9, k=40, h=11, w=13, stride=1, padding=1)
    x = sparse_feature_map((2, 9, 11, 13), SparsitySpec(0.5, pattern, seed=6))
    x[1, :, :5, :5] = 0
    graph, _, _ = lower_sparse(p, "ecr", 4, x=x)
    expected, t = brute_row_replays(p, x, 4)
    assert t.k_tile % 4 == 0 and expected.sum() > 0
    tiles_p, tiles_k = grid(p, t)
    assert np.allclose(graph.shared_replays[graph.tasks_of_kind("ecr")], np.tile(expected, tiles_k))
    direct, _, _ = lower_sparse(p, "direct", 4, x=x)
    assert not direct.shared_replays.any()


def test_shared_replays_are_priced_as_sm_time():
    base = compute_graph([100.0], kind_kw=dict(threads=128))
    graph = dataclasses.replace(base, shared_replays=np.array([30.0]))
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=1,
                    task_costs={"default": TaskCost(1.0, 0.0, ns_per_replay=2.0)})
    assert simulate(graph, one_launch([0]), spec).predicted_ns == pytest.approx(160.0)
    with pytest.raises(Exception, match="ns_per_replay=-1.0 is not allowed"):
        TaskCost(1.0, 0.0, ns_per_replay=-1.0)


def test_sm_fixed_time_is_sm_time_that_co_resident_blocks_do_not_hide():
    """Two blocks on one SM: fixed_ns delays each (they wait side by side), sm_fixed_ns is SM work (they queue)."""
    graph = compute_graph([100.0, 100.0], kind_kw=dict(threads=128))
    spec = toy_spec(sm_count=1, fp32_peak_gflops=1.0, max_blocks_per_sm=2)
    latency = dataclasses.replace(spec, task_costs={"default": TaskCost(1.0, 50.0)})
    sm_time = dataclasses.replace(spec, task_costs={"default": TaskCost(1.0, 0.0, sm_fixed_ns=50.0)})
    assert simulate(graph, one_launch([0, 1]), latency).predicted_ns == pytest.approx(250.0)
    assert simulate(graph, one_launch([0, 1]), sm_time).predicted_ns == pytest.approx(300.0)
    with pytest.raises(Exception, match="sm_fixed_ns=-1.0 is not allowed"):
        TaskCost(1.0, 0.0, sm_fixed_ns=-1.0)


def test_sparse_repeat_compares_runs_by_hand():
    """Two runs of one sweep: ECR 0.5 - 0.3 s ms against direct 0.4 (crossing at 1/3) and ECR scaled by 1.1
    (0.55 - 0.33 s against 0.4: 0.15 / 0.33 = 0.4545...); the spread is the 10% scale."""
    from experiments.benchmarks.sparse_repeat import compare

    def run(scale):
        m = {}
        for s in (0.0, 0.5, 0.9):
            m[("L", 1, "uniform", "ecr", s)] = scale * (500.0 - 300.0 * s)
            m[("L", 1, "uniform", "direct", s)] = 400.0
        return m
    (row,) = compare({"a": run(1.0), "b": run(1.1)}, predicted=run(1.0))
    assert row["first_a"] == pytest.approx(1 / 3) and row["first_predicted"] == pytest.approx(1 / 3)
    assert row["first_b"] == pytest.approx(0.15 / 0.33)
    assert row["max_spread_ecr"] == pytest.approx(0.1) and row["max_spread_direct"] == 0.0
