"""The im2win and im2col_gemm plug-ins: tensor sizes (the paper's Fig. 1), the lowering's tasks, FLOPs and
bytes against counts made here from first principles, the regions the L2 model shares, the CLI and
one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from megasim.algorithms import ALGORITHMS
from megasim.algorithms.im2win.lowering import lower_im2win
from megasim.algorithms.im2win.tiling import (TRANSFORM_ELEMENTS, VARIANTS, Im2winTiling, im2col_elements,
                                              im2win_elements, im2win_shape)
from megasim.cli.main import main
from megasim.errors import MappingError
from megasim.hardware import get_gpu
from megasim.plan import Plan, build, predict
from megasim.workloads import parse_layer
from megasim.workloads.catalogue import CATALOGUE
from megasim.workloads.problem import ConvProblem

AWKWARD = [ConvProblem(1, 3, 7, 9, 11, 3, 3, 2, 1), ConvProblem(2, 1, 33, 13, 13, 11, 11, 4, 3),
           ConvProblem(3, 5, 9, 7, 6, 5, 2, 3, 2), ConvProblem(1, 4, 130, 6, 6, 1, 1, 1, 0)]
TILINGS = [Im2winTiling(), Im2winTiling(32, 64, 16, 4, 8), Im2winTiling(variant="basic"),
           Im2winTiling(32, 32, 8, 1, 1, "no_microkernel"), Im2winTiling(64, 32, 8, 8, 4, "no_prefetch")]


def _kind_tasks(graph, prefix):
    return np.flatnonzero(np.isin(graph.kind, [i for i, n in enumerate(graph.kind_names) if n.startswith(prefix)]))


def _accesses(graph, task):
    lo, hi = graph.access_ptr[task], graph.access_ptr[task + 1]
    return [(graph.tensor_names[graph.region_tensor[graph.access_region[j]]], int(graph.access_part_lo[j]),
             int(graph.access_part_hi[j]), int(graph.access_part_step[j]), float(graph.access_bytes[j]),
             bool(graph.access_write[j])) for j in range(lo, hi)]


def test_fig1_sizes_27_input_values_become_36_with_im2win_and_48_with_im2col():
    problem = ConvProblem(1, 3, 1, 3, 3, 2, 2, 1, 0)
    assert problem.n * problem.c * problem.h * problem.w == 27
    assert im2win_shape(problem) == (1, 3, 2, 6) and im2win_elements(problem) == 36
    assert im2col_elements(problem) == 48
    assert ALGORITHMS["im2win"].footprint(problem, None) == {"window": 144}
    assert ALGORITHMS["im2col_gemm"].footprint(problem, None) == {"columns": 192}


def test_catalogue_im2win_layers_follow_the_papers_table_2():
    # (C, K, H, R, stride, output H) of Table 2
    table2 = [(3, 96, 227, 11, 4, 55), (3, 96, 231, 11, 4, 56), (3, 64, 227, 7, 2, 111), (64, 64, 224, 7, 2, 109),
              (96, 256, 24, 5, 1, 20), (256, 512, 12, 3, 1, 10), (3, 64, 224, 3, 1, 222), (64, 128, 112, 3, 1, 110),
              (64, 64, 56, 3, 1, 54), (128, 128, 28, 3, 1, 26), (256, 256, 14, 3, 1, 12), (512, 512, 7, 3, 1, 5)]
    for i, (c, k, h, r, stride, out) in enumerate(table2, start=1):
        p = CATALOGUE[f"im2win/conv{i}"]
        assert (p.c, p.k, p.h, p.w, p.r, p.s, p.stride, p.padding, p.out_h) == (c, k, h, h, r, r, stride, 0, out)
        assert parse_layer(f"Conv{i}") == p


@pytest.mark.parametrize("problem", AWKWARD, ids=lambda p: p.spec_string())
@pytest.mark.parametrize("tiling", TILINGS, ids=lambda t: f"{t.variant}-{t.m_b}x{t.n_b}")
def test_tasks_flops_and_bytes_of_the_im2win_lowering(problem, tiling):
    graph, schedule = lower_im2win(problem, tiling)
    p = problem
    npq, kdim = p.n * p.out_h * p.out_w, p.c * p.r * p.s
    transform, conv = _kind_tasks(graph, "im2win_transform"), _kind_tasks(graph, "im2win_conv")
    tm, tn = -(-p.k // tiling.tile_m), -(-npq // tiling.tile_n)
    assert transform.size == -(-im2win_elements(p) // TRANSFORM_ELEMENTS) and conv.size == tm * tn
    assert [len(l.order) for l in schedule.launches] == [transform.size, conv.size]
    direct = 2.0 * p.n * p.k * p.c * p.r * p.s * p.out_h * p.out_w
    if tiling.variant == "basic":       # Alg. 2: threads outside the output return at once
        assert graph.flops.sum() == pytest.approx(direct, rel=1e-12)
    else:                               # every block executes its whole tile over whole K steps
        steps = -(-kdim // tiling.k_b)
        assert graph.flops[conv].tolist() == [2.0 * tiling.m_b * tiling.n_b * tiling.k_b * steps] * conv.size
        assert graph.flops.sum() >= direct
    assert graph.flops[transform].sum() == 0
    written = {name: 0.0 for name in graph.tensor_names}
    read = dict(written)
    for t in range(graph.num_tasks):
        for name, _, _, _, nbytes, write in _accesses(graph, t):
            (written if write else read)[name] += nbytes
    assert written["window"] == 4 * im2win_elements(p)          # every element of J written once
    assert written["output"] == 4 * p.n * p.k * p.out_h * p.out_w
    assert read["filter"] == 4 * p.k * kdim * tn                 # every output tile reads its filter rows
    # The window bytes each tile reads against the union of its pixels' windows counted element by element
    # (equal when the windows of a row touch, stride <= S; an upper bound otherwise).
    for task in conv:
        nt, mt = int(graph.group[task]), int(graph.index_in_group[task])
        assert mt < tm and nt < tn
        pixels = np.arange(nt * tiling.tile_n, min(npq, (nt + 1) * tiling.tile_n))
        img, pq = pixels // (p.out_h * p.out_w), pixels % (p.out_h * p.out_w)
        cols = set()
        for i, oh, ow in zip(img, pq // p.out_w, pq % p.out_w):
            cols.update((i, oh, ow * p.stride * p.r + e) for e in range(p.r * p.s))
        exact = 4 * p.c * len(cols)
        got = sum(b for name, *_, b, w in _accesses(graph, task) if name == "window")
        assert got == exact if p.stride <= p.s else got >= exact


def test_filter_tiles_are_shared_across_output_tiles_and_window_rows_across_filter_tiles():
    problem = ConvProblem(2, 3, 70, 9, 9, 3, 3, 1, 1)
    graph, _ = lower_im2win(problem, Im2winTiling(32, 32, 8, 4, 4))
    conv = _kind_tasks(graph, "im2win_conv")
    by_tile = {(int(graph.group[t]), int(graph.index_in_group[t])): _accesses(graph, t) for t in conv}
    tn = max(g for g, _ in by_tile) + 1
    for (nt, mt), acc in by_tile.items():
        filt = [a for a in acc if a[0] == "filter"]
        assert filt == [a for a in by_tile[(0, mt)] if a[0] == "filter"] and filt[0][1:3] == (mt, mt + 1)
        win = [a for a in acc if a[0] == "window"]
        assert win and win == [a for a in by_tile[(nt, 0)] if a[0] == "window"]
        assert all(a[3] == problem.out_h for a in win)           # one row of every channel per covered row
    assert tn == -(-2 * 81 // 32)


@pytest.mark.parametrize("problem", AWKWARD[:2], ids=lambda p: p.spec_string())
def test_im2col_lowering_writes_the_column_matrix_and_sums_the_flops(problem):
    graph, schedule = lower_im2win(problem, Im2winTiling(64, 64, 8, 8, 8), "im2col")
    assert graph.flops.sum() == pytest.approx(problem.direct_flops, rel=1e-12)
    written = sum(b for t in _kind_tasks(graph, "im2col_transform") for name, *_, b, w in _accesses(graph, t) if w)
    assert written == 4 * im2col_elements(problem)
    assert graph.meta["extra_bytes"] == {"columns": 4 * im2col_elements(problem)}


@pytest.mark.parametrize("problem", AWKWARD[:2] + [ConvProblem(3, 40, 8, 30, 30, 3, 3, 1, 1)],
                         ids=lambda p: p.spec_string())
def test_im2col_transform_is_torchs_unfold_one_launch_per_image(problem):
    """torch's unfold (ATen im2col.cuh): per image a grid of ceil(C*P*Q / 128) blocks of 1,024 threads, one
    thread per (channel, output pixel) copying its R*S values one after another; the blocks past C*P*Q
    threads are empty; one launch per image, then the GEMM's; the plug-in's order is the lowering's."""
    from megasim.algorithms.im2win.lowering import UNFOLD_GRID_THREADS, UNFOLD_THREADS
    graph, schedule = lower_im2win(problem, Im2winTiling(64, 64, 8, 8, 8), "im2col")
    p = problem
    threads = p.c * p.out_h * p.out_w
    grid = -(-threads // UNFOLD_GRID_THREADS)
    names = [l.name for l in schedule.launches]
    assert names == ["im2col_transform"] * p.n + ["im2col_gemm"]
    for img, launch in enumerate(schedule.launches[:-1]):
        assert launch.order.size == grid and (graph.group[launch.order] == img).all()
        ops = graph.other_ops[launch.order]
        working = -(-threads // UNFOLD_THREADS)
        assert ops.sum() == threads * p.r * p.s and (ops[:working] > 0).all() and (ops[working:] == 0).all()
        assert (graph.serial_steps[launch.order][:working] == p.r * p.s).all()
        assert all(not _accesses(graph, t) for t in launch.order[working:])
    assert graph.kind_threads[graph.kind_id("im2col_transform")] == UNFOLD_THREADS
    plugin_schedule, _ = ALGORITHMS["im2col_gemm"].order(graph, None, "kernel")
    assert [l.order.tolist() for l in plugin_schedule.launches] == [l.order.tolist() for l in schedule.launches]


def test_im2col_calibration_case_runs_every_images_launch():
    from megasim.algorithms.im2win.calibration import calibration_cases, case_graph
    case = next(c for c in calibration_cases() if c["kind"] == "im2col_transform")
    sub, schedule = case_graph(case)
    assert len(schedule.launches) == parse_layer(case["problem"]).n
    assert sorted(np.concatenate([l.order for l in schedule.launches]).tolist()) == list(range(sub.num_tasks))
    gemm, gemm_schedule = case_graph(next(c for c in calibration_cases() if c["kind"] == "im2col_gemm"))
    assert len(gemm_schedule.launches) == 1 and set(gemm.kind_names[k] for k in gemm.kind) == {"im2col_gemm"}


@pytest.mark.parametrize("problem", AWKWARD + [ConvProblem(2, 3, 300, 5, 5, 3, 3, 1, 1)], ids=lambda p: p.spec_string())
def test_naive_direct_lowering_counts_every_tap_and_output(problem):
    """One task per 256 outputs (the kernel's grid); FLOPs 2 C R S per output; every output written once; a
    block reads the rows of its filters and the input rows its outputs need; nothing allocated beyond."""
    from megasim.algorithms.im2win.lowering import NAIVE_DIRECT_THREADS, lower_naive_direct
    graph, schedule = lower_naive_direct(problem)
    outputs = problem.n * problem.k * problem.out_h * problem.out_w
    assert graph.num_tasks == -(-outputs // NAIVE_DIRECT_THREADS) == schedule.launches[0].order.size
    assert graph.flops.sum() == pytest.approx(problem.direct_flops, rel=1e-12)
    assert (graph.serial_steps == problem.c * problem.r * problem.s).all()
    acc = [a for t in range(graph.num_tasks) for a in _accesses(graph, t)]
    assert sum(b for name, *_, b, w in acc if w) == 4 * outputs
    assert all(name == "output" for name, *_, w in acc if w)
    filters = sum(b for name, *_, b, w in acc if name == "filter")
    assert 4 * problem.k * problem.c * problem.r * problem.s <= filters
    assert ALGORITHMS["naive_direct"].footprint(problem, None) == {}


def test_prediction_is_deterministic_and_above_its_floors():
    problem, spec = parse_layer("Conv5", batch=8), get_gpu("H100")
    first, plan = predict(problem, spec, Plan(algorithm="im2win"))
    again, _ = predict(problem, spec, Plan(algorithm="im2win"))
    assert first.predicted_us == again.predicted_us and first.taskgraph_hash == again.taskgraph_hash
    assert first.predicted_us * 1e3 >= problem.direct_flops / spec.fp32_peak_gflops
    assert first.predicted_us * 1e3 >= 4 * im2win_elements(problem) / spec.dram_bw_gbps
    variants = {v: build(problem, Plan.parse(None, f"variant={v}" + (",m_b=32,n_b=32,m_t=1,n_t=1" if v == "no_microkernel"
                                                                       else ""), "im2win"))[0].hash for v in VARIANTS}
    assert len(set(variants.values())) == len(VARIANTS)         # each variant is its own program


@pytest.mark.parametrize("param,needle", [("m_b=48", "m_b=48 is not allowed (allowed: 32, 64, 128)"),
                                          ("variant=fast", "variant='fast' is not allowed"),
                                          ("variant=no_microkernel", "one output per thread"),
                                          ("m_t=3", "m_t=3 is not allowed"),
                                          ("m_b=32,n_b=32", "gives 16 threads per block: allowed are multiples of 32"),
                                          ("k_tile=4", "unknown --param key 'k_tile' for im2win")])
def test_bad_parameters_give_one_line_errors(param, needle):
    with pytest.raises(MappingError) as err:
        Plan.parse(None, param, "im2win")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_cli_simulate_reports_time_and_footprint(capsys):
    assert main(["simulate", "Conv5", "--algo", "im2win", "--gpu", "H100", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    window = 4 * im2win_elements(parse_layer("Conv5", batch=2))
    assert "predicted" in out and f"window {window / 1e6:,.1f} MB" in out
    assert main(["simulate", "Conv5", "--algo", "im2col_gemm", "--gpu", "H100", "--batch", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["extra_bytes"] == {"columns": 4 * im2col_elements(parse_layer("Conv5", batch=2))}
    assert summary["time_us"] > 0


def test_cli_bad_input_is_one_line_with_status_2(capsys):
    assert main(["simulate", "Conv5", "--algo", "im2win", "--gpu", "H100", "--param", "n_b=100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "n_b=100 is not allowed" in err and "\n" not in err


def test_cli_optimize_searches_the_tiles(capsys):
    assert main(["optimize", "Conv12", "--algo", "im2win", "--gpu", "H100", "--batch", "2", "--budget", "3",
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "best params" in out and "variant=optimized" in out


def test_the_search_space_holds_the_math_and_refuses_tiles_the_tensor_cores_cannot_tile():
    alg = ALGORITHMS["im2win"]
    space = alg.spaces["default"]()
    assert "math" in space.names and alg.space_defaults["math"] == "fp32"
    assert ALGORITHMS["im2col_gemm"].spaces == {}       # cuBLAS picks its tiles: nothing to search
    assert set(space.names) == {"m_b", "math"} and {"m_b", "n_b", "math"} <= set(alg.spaces["tiles"]().names)
    ok = dict(m_b=64, n_b=128, k_b=16, m_t=8, n_t=8)
    assert alg.point_constraint({**ok, "math": "3xtf32"}, ()) is None
    bad = dict(m_b=32, n_b=32, k_b=16, m_t=1, n_t=2)    # 16 warps cannot tile 32 x 32 as 16 x 8 MMA tiles
    assert alg.point_constraint(bad, ()) is None
    assert "whole 16 x 8 MMA tiles" in alg.point_constraint({**bad, "math": "3xtf32"}, ())
    plan = alg.point_plan(parse_layer("Conv12"), {**ok, "math": "3xtf32"}, None)
    assert plan.params.math == "3xtf32" and plan.params.tiling.math == "3xtf32"
    graph, _ = lower_im2win(parse_layer("Conv12", batch=1), plan.params.tiling)
    from megasim.algorithms.im2win.lowering import conv_cost_name
    assert conv_cost_name(plan.params.tiling) == "im2win_conv@3xtf32" and graph.meta["math"] == "3xtf32"


def test_the_tensor_core_build_needs_a_spec_that_prices_it(capsys):
    assert main(["simulate", "Conv12", "--algo", "im2win", "--gpu", "H100", "--batch", "1", "--param", "math=3xtf32"]) == 2
    err = capsys.readouterr().err
    assert "no cost for im2win_conv@3xtf32" in err and err.count("\n") == 1
    spec = "experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json"
    times = {}
    for math in ("fp32", "3xtf32"):
        assert main(["simulate", "Conv12", "--algo", "im2win", "--spec", spec, "--batch", "1", "--param",
                     f"math={math}", "--json"]) == 0
        times[math] = json.loads(capsys.readouterr().out)["time_us"]
    assert times["fp32"] != times["3xtf32"]


def test_the_fp32_and_3xtf32_builds_are_two_programs():
    """The same tasks priced as different builds: one graph hash, two program hashes; the optimiser simulates both
    (it does not answer one from the other's record) and the default space is the calibrated builds."""
    from megasim.search import optimize
    from megasim.hardware.files import load_spec
    p = parse_layer("Conv12", batch=1)
    graphs = {m: lower_im2win(p, Im2winTiling(64, 128, 16, 8, 8, math=m))[0] for m in ("fp32", "3xtf32")}
    assert graphs["fp32"].hash == graphs["3xtf32"].hash
    assert graphs["fp32"].program_hash != graphs["3xtf32"].program_hash
    plain = lower_im2win(p, Im2winTiling(128, 128, 16, 8, 8))[0]        # priced under its own kind name
    assert plain.program_hash == plain.hash
    spec = load_spec("experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json")
    result = optimize(p, spec, strategy="exhaustive", budget=10, workers=1, base=Plan(algorithm="im2win"),
                      space=ALGORITHMS["im2win"].spaces["default"]())
    assert result.simulated == 4 and {r.params["math"] for r in result.records} == {"fp32", "3xtf32"}


def test_default_filter_tile_rule():
    """64 rows (32 for no_microkernel); the register cap leaves room for 2 blocks of 256 and 3 of 128 threads."""
    from megasim.algorithms.im2win.tiling import default_m_b, register_cap
    layer = parse_layer
    assert default_m_b(layer("im2win/conv7", batch=128)) == 64
    assert default_m_b(layer("im2win/conv8", batch=128)) == 64
    assert default_m_b(layer("im2win/conv12", batch=64), sm_count=16) == 64
    assert default_m_b(layer("im2win/conv8", batch=128), "no_microkernel") == 32
    assert (register_cap(256), register_cap(128), register_cap(1024)) == (128, 168, 255)
    from megasim.algorithms.im2win import Im2winParams
    from megasim.plan import Plan, build
    _, _, plan = build(layer("im2win/conv12", batch=64), Plan("kernel", Im2winParams(), "im2win"))
    assert plan.params.m_b == 64


def test_conv_cost_names_and_alg2_filter_loads():
    """The 64-row optimized tiles and each variant have cost names of their own; Alg. 2's filter loads are
    its other_ops, and again its replays when C*R*S is a multiple of 32 (rows at one L1 offset)."""
    from megasim.algorithms.im2win.lowering import basic_filter_loads, conv_cost_name
    assert conv_cost_name(Im2winTiling(64, 128, 16, 8, 8)) == "im2win_conv@m64"
    assert conv_cost_name(Im2winTiling(128, 128, 16, 8, 8)) == "im2win_conv"
    assert conv_cost_name(Im2winTiling(64, 128, 16, 8, 8, "no_vector")) == "im2win_conv@no_vector"
    basic = Im2winTiling(variant="basic")
    assert basic_filter_loads(basic, 27) == (32 * 27, 0.0)
    assert basic_filter_loads(basic, 576) == (32 * 576, 32 * 576)
    assert basic_filter_loads(Im2winTiling(), 576) == (0.0, 0.0)
    problem = ConvProblem(1, 64, 40, 8, 8, 3, 3, 1, 1)          # C*R*S = 576
    graph, _ = lower_im2win(problem, basic)
    assert graph.shared_replays is not None and graph.shared_replays.max() == 32 * 576
    graph, _ = lower_im2win(problem, Im2winTiling(64, 128, 16, 8, 8))
    assert graph.cost_names[graph.kind_names.index("im2win_conv")] == "im2win_conv@m64"


def test_k_offsets_and_division_magic_match_the_gemm_view():
    from megasim.algorithms.im2win.tiling import k_offsets
    p = ConvProblem(2, 3, 5, 9, 8, 3, 2, 2, 1)
    off = k_offsets(p, 4)
    kd = p.c * p.r * p.s
    kdp = -(-kd // 4) * 4
    assert off.shape == (2 * kdp,) and off.dtype == np.int32
    ww = (p.w + 2 * p.padding) * p.r
    for k in range(kd):
        c, rem = divmod(k, p.r * p.s)
        v, u = divmod(rem, p.r)
        assert off[k] == c * p.r * p.s + u * p.s + v                 # w[m, c, u, v] within a filter row
        assert off[kdp + k] == c * p.out_h * ww + v * p.r + u        # J[i, c, oh, q*stride*R + v*R + u] from the window start
    assert not off[kd:kdp].any() and not off[kdp + kd:].any()


# --- megasim calibrate --algo im2win ------------------------------------------------------------------------
CAL_CSV = "experiments/results/nvidia-h100/im2win_calibration/im2win_calibration.csv"
BASE_SPEC = "megasim/hardware/calibrated/h100_from_h200.json"


def _cal_rows(tmp_path, edit=None, name="m.csv"):
    import csv
    with open(CAL_CSV, newline="") as fh:
        rows = list(csv.DictReader(fh))
    rows = [r for r in rows if r["kind"] == "im2win_transform"]
    if edit:
        edit(rows)
    path = tmp_path / name
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return str(path)


def test_calibrate_im2win_fits_the_transform_from_saved_runs(tmp_path, capsys):
    out = tmp_path / "spec.json"
    assert main(["calibrate", "--algo", "im2win", "--from-measurements", _cal_rows(tmp_path), "--spec", BASE_SPEC,
                 "--out", str(out), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert list(k for k in answer if k.startswith("im2win")) == ["im2win_transform"]
    spec = json.loads(out.read_text())
    base = json.loads(open(BASE_SPEC).read())
    fitted, committed = spec["task_costs"]["im2win_transform"], base["task_costs"]["im2win_transform"]
    # the same rows as the committed fit's transform: the same costs
    assert {f: e["value"] for f, e in fitted.items()} == pytest.approx({f: e["value"] for f, e in committed.items()})
    assert any("kernel alone" in e["source"] for e in fitted.values())
    assert all(e["source"] != "unknown" for e in fitted.values())
    assert (tmp_path / "spec.im2win_fit.json").exists()


@pytest.mark.parametrize("edit,message", [
    (lambda rows: rows[0].update(median_ms="fast"), "line 2: median_ms='fast' is not allowed"),
    (lambda rows: rows[1].update(kind="im2win_gemm"), "line 3: kind='im2win_gemm' is not allowed"),
    (lambda rows: rows[0].update(m_b="-4"), "line 2: m_b='-4' is not allowed"),
    (lambda rows: rows[0].update(problem="N=0,C=1"), "line 2 problem"),
])
def test_calibrate_im2win_refuses_a_bad_row_in_one_line(tmp_path, capsys, edit, message):
    assert main(["calibrate", "--algo", "im2win", "--from-measurements", _cal_rows(tmp_path, edit), "--spec", BASE_SPEC,
                 "--out", str(tmp_path / "s.json")]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_calibrate_im2win_needs_measurements_and_a_base_spec(tmp_path, capsys):
    assert main(["calibrate", "--algo", "im2win", "--out", str(tmp_path / "s.json")]) != 0
    assert "--from-measurements" in capsys.readouterr().err
    (tmp_path / "empty.csv").write_text("a,b\n1,2\n")
    assert main(["calibrate", "--algo", "im2win", "--from-measurements", str(tmp_path / "empty.csv"), "--spec",
                 BASE_SPEC, "--out", str(tmp_path / "s.json")]) != 0
    assert "must be im2win_calibration.csv" in capsys.readouterr().err
