"""The sparse calibration's round-3 cases (ECR's grid just past one wave), timing a subset of the
cases and merging it into earlier measurements with provenance, and the warp-slot pricing of a partial
pixel tile (why round 3 exists: docs/sparse.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from megasim.calibration.sparse import (CAL_PROBLEMS, FEW_CHANNEL_PROBLEMS, SPARSE_SPARSITIES, TAIL_PROBLEMS, calibration_cases, merge_measurements, run_dates, select_cases)
from megasim.errors import SpecError
from megasim.hardware import get_gpu
from megasim.algorithms.sparse.lowering import kernel_registers, lower_sparse
from megasim.algorithms.sparse.tiling import choose_tiling, grid
from megasim.sim.occupancy import Footprint, occupancy
from megasim.workloads import parse_layer
from megasim.workloads.problem import ConvProblem
from megasim.workloads.sparse import SparsitySpec, sparse_feature_map

MEASURED = Path(__file__).resolve().parents[1] / "megasim/hardware/calibrated/h200.sparse_measurements.json"
KEY = ("op", "kind", "problem", "sparsity", "pattern", "seed", "pool")


def ecr_regime(text: str) -> dict:
    """What the lowering and the engine make of ECR on the problem: the tiling, blocks per SM, the grid."""
    spec = get_gpu("h200")
    p = parse_layer(text)
    t = choose_tiling(p, "ecr", spec.sm_count)
    tiles_p, tiles_k = grid(p, t)
    per_sm = occupancy(spec, Footprint(t.threads, kernel_registers(t), t.shared_bytes(p))).blocks_per_sm
    pixels = p.n * p.out_h * p.out_w
    return {"k_tile": t.k_tile, "per_sm": per_sm, "blocks": tiles_p * tiles_k,
            "tail": tiles_p * tiles_k - per_sm * spec.sm_count, "chunks": -(-p.c // t.c_chunk),
            "last_tile_px": pixels - (tiles_p - 1) * t.threads, "map": (p.out_h, p.out_w)}


@pytest.mark.parametrize("problem,expected", [
    # VGG-19 conv3_x at batch 1 (k_tile 16, 64 chunks) and conv5_x at batch 16 (k_tile 32, 128 chunks).
    ("N=1,C=256,K=256,H=56,W=56", dict(k_tile=16, per_sm=3, blocks=400, tail=4, chunks=64, last_tile_px=64)),
    ("N=16,C=512,K=512,H=14,W=14", dict(k_tile=32, per_sm=3, blocks=400, tail=4, chunks=128, last_tile_px=64)),
    # Round 3: the same regimes on other shapes, and a contrast without a partial tile.
    (TAIL_PROBLEMS[0], dict(k_tile=16, per_sm=3, blocks=403, tail=7, chunks=66, last_tile_px=64)),
    (TAIL_PROBLEMS[1], dict(k_tile=32, per_sm=3, blocks=399, tail=3, chunks=120, last_tile_px=32, map=(18, 18))),
    (TAIL_PROBLEMS[2], dict(k_tile=32, per_sm=3, blocks=400, tail=4, chunks=112, last_tile_px=128, map=(16, 16))),
])
def test_round3_problems_put_ecr_just_past_one_wave(problem, expected):
    got = ecr_regime(problem)
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize("problems,later", [(TAIL_PROBLEMS, FEW_CHANNEL_PROBLEMS), (FEW_CHANNEL_PROBLEMS, ())])
def test_later_rounds_are_few_and_come_last(problems, later):
    """Rounds 3 and 4 give ECR and its dense twin only, appended in order after every earlier case."""
    cases = calibration_cases()
    new = [c for c in cases if c["problem"] in problems]
    after = [c for c in cases if c["problem"] in later]
    assert len(new) <= 16 and {c["kind"] for c in new} == {"ecr", "direct"}
    assert sorted({c["sparsity"] for c in new if c["kind"] == "ecr"}) == list(SPARSE_SPARSITIES)
    assert cases[len(cases) - len(after) - len(new):len(cases) - len(after)] == new
    assert not set(problems) & set(CAL_PROBLEMS)


def test_earlier_cases_keep_their_index():
    """The committed measurements are the first cases, in order (the GPU seeds weights by the index)."""
    # (the wave-tail probe's rows, merged into the same file, are not calibration cases)
    rows = [r for r in json.loads(MEASURED.read_text())["rows"] if "wave_fraction" not in r]
    cases = calibration_cases()
    assert [tuple(str(r[k]) for k in KEY) for r in rows] == [tuple(str(c[k]) for k in KEY) for c in cases[:len(rows)]]


def test_select_cases_by_problem():
    everything = select_cases()
    assert [i for i, _ in everything] == list(range(len(calibration_cases())))
    picked = select_cases(["round3"])
    assert len(picked) == 15 and {c["problem"] for _, c in picked} == set(TAIL_PROBLEMS)
    assert all(everything[i][1] == c for i, c in picked)
    # Compared as parsed problems: the defaults may be spelled out.
    same = select_cases([TAIL_PROBLEMS[1] + ",R=3,S=3,stride=1,padding=1"])
    assert [i for i, _ in same] == [i for i, c in picked if c["problem"] == TAIL_PROBLEMS[1]]


@pytest.mark.parametrize("text,message", [("N=1,C=7,K=9,H=10,W=10", "is not a calibration problem"),
                                          ("N=1,C=7", "cannot be read"), ("vgg19/nope", "cannot be read")])
def test_select_cases_rejects_unknown_problems(text, message):
    with pytest.raises(SpecError, match=message) as err:
        select_cases([text])
    assert "\n" not in str(err.value)


def _new_run(problems=("round3",), date="2026-12-01T10:00:00+00:00", sha="abc123"):
    rows = [{**c, "k_tile": 16, "median_ms": 0.5, "rel_err": 1e-7} for _, c in select_cases(list(problems))]
    return {"meta": {"date_utc": date, "git_sha": sha, "device": "NVIDIA H200"}, "rows": rows}


def _base() -> dict:
    """The committed measurements without round 3 (first merged into them from a run of its own; measured
    with the other rounds in one run since)."""
    data = json.loads(MEASURED.read_text())
    tail = {parse_layer(p).spec_string() for p in TAIL_PROBLEMS}
    return {"meta": data["meta"], "rows": [r for r in data["rows"] if "merged_run" not in r
                                           and parse_layer(r["problem"]).spec_string() not in tail]}


def test_merge_keeps_old_rows_and_names_each_new_rows_run():
    base = _base()
    before = json.dumps(base, sort_keys=True)
    merged = merge_measurements(base, _new_run())
    assert json.dumps(base, sort_keys=True) == before             # the input is not modified
    assert merged["meta"] == base["meta"] and merged["rows"][:len(base["rows"])] == base["rows"]
    new = merged["rows"][len(base["rows"]):]
    assert len(new) == 15 and all(r["merged_run"] == 0 and r["git_sha"] == "abc123"
                                  and r["date_utc"].startswith("2026-12-01") for r in new)
    assert merged["merged"][0]["rows_added"] == 15 and merged["merged"][0]["git_sha"] == "abc123"
    # A second merge is run 1; measuring a case again is refused, not overwritten.
    other = {"meta": {"date_utc": "2026-12-02", "git_sha": "def"}, "rows": [dict(base["rows"][0], seed=99)]}
    again = merge_measurements(merged, other)
    assert again["rows"][-1]["merged_run"] == 1 and len(again["merged"]) == 2
    with pytest.raises(SpecError, match="already in the base measurements"):
        merge_measurements(merged, _new_run())
    with pytest.raises(SpecError, match="must be a"):
        merge_measurements({"rows": []}, _new_run())


def test_fit_sources_name_every_run_date():
    """A kind fitted on rows of two runs names both days in its sources."""
    merged = merge_measurements(_base(), _new_run())
    direct = [r for r in merged["rows"] if r["kind"] == "direct"]
    assert run_dates(direct, "2026-11-21") == "2026-11-21 and 2026-12-01"
    assert run_dates(direct[:1], "2026-11-21") == "2026-11-21"


def test_gpu_calibrate_sparse_rejects_bad_input_in_one_line(capsys, tmp_path):
    """Checked before any GPU work (this runs without a GPU)."""
    from gpu.calibrate.sparse import main

    assert main(["--problems", "N=1,C=7,K=9,H=10,W=10", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: problem 'N=1,C=7,K=9,H=10,W=10' is not a calibration problem") and err.count("\n") == 1
    # A problem the earlier file already holds is refused (nothing is overwritten) ...
    assert main(["--problems", CAL_PROBLEMS[0], "--merge", str(MEASURED), "--out", str(tmp_path)]) == 2
    assert "already in the base measurements" in capsys.readouterr().err
    # ... and an unreadable file too.
    assert main(["--problems", "round3", "--merge", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: --merge")
    assert not list(tmp_path.iterdir())


def test_partial_pixel_tile_is_priced_as_a_full_block():
    """The last pixel tile (2 of 4 warps active) costs what a full block does: the dense twin's counts
    are the same for every warp, so the two tiles' work is equal."""
    p = ConvProblem(n=1, c=8, k=16, h=12, w=16)          # 192 pixels: a full tile and one of 64
    g, _, info = lower_sparse(p, "direct", 4, sparsity=0.5)
    tasks = g.tasks_of_kind("direct")
    full, part = tasks[g.group[tasks] == 0], tasks[g.group[tasks] == 1]
    assert np.allclose(g.flops[part], g.flops[full]) and np.allclose(g.other_ops[part], g.other_ops[full])
    # ECR: the partial tile's work is its two warps' counts doubled.
    e, _, _ = lower_sparse(p, "ecr", 4, sparsity=SparsitySpec(0.5, seed=3))
    t = e.tasks_of_kind("ecr")
    assert e.flops[t][e.group[t] == 1].min() > 0.8 * e.flops[t][e.group[t] == 0].max()


def test_k_tile_32_counts_match_brute_force():
    """conv5_x at batch 16 runs ECR at k_tile 32: its multiply-adds, loop iterations and replays there
    match the brute-force counts too (the other brute-force tests run k_tile 4 and 16)."""
    from tests.test_sparse_model import brute_conv_issue, brute_row_replays

    p = ConvProblem(n=2, c=9, k=40, h=11, w=13)          # 286 pixels: 3 tiles, the last of 30
    x = sparse_feature_map((2, 9, 11, 13), SparsitySpec(0.5, seed=6))
    g, _, info = lower_sparse(p, "ecr", 1, x=x)
    assert info.tiling.k_tile == 32
    t = g.tasks_of_kind("ecr")
    flops, _ = brute_conv_issue(p, x, "ecr", 1)
    loops, _ = brute_conv_issue(p, x, "ecr", 1, loop=True)
    replays, _ = brute_row_replays(p, x, 1)
    assert np.allclose(g.flops[t], 2 * 32 * 32 * flops)
    assert np.allclose(g.serial_iterations[t], loops)
    assert np.allclose(g.shared_replays[t], np.tile(replays, 2)) and replays.sum() > 0


def test_occupancy_probe_cases_give_b_blocks_per_sm_of_equal_work():
    """Each probe case's grid is exactly b blocks per SM of the 132, every block a full 128-pixel row
    doing 128 x 32 x 128 x 9 multiply-adds, and one wave holds b blocks (b <= what fits) or two."""
    from megasim.calibration.sparse import OCCUPANCY_SM_COUNT, occupancy_cases

    spec = get_gpu("H200")
    assert spec.sm_count == OCCUPANCY_SM_COUNT
    cases = occupancy_cases()
    assert len({c["seed"] for c in cases}) == len(cases)
    for case in cases:
        problem = parse_layer(case["problem"])
        tiling = choose_tiling(problem, case["kind"], spec.sm_count, k_tile=case["force_k_tile"])
        tiles_p, tiles_k = grid(problem, tiling)
        assert tiles_k == 1 and tiles_p == case["blocks_per_sm"] * OCCUPANCY_SM_COUNT
        assert problem.out_w == 128 and problem.n * problem.out_h * problem.out_w == tiles_p * 128
        assert 128 * tiling.k_tile * problem.c * 9 == 128 * 32 * 128 * 9
        # the probe was sized for the dense twin as it was then, which loaded inline (fewer registers)
        regs = INLINE_TWIN_REGISTERS[tiling.k_tile] if case["kind"] == "direct" else kernel_registers(tiling)
        fits = occupancy(spec, Footprint(tiling.threads, regs, tiling.shared_bytes(problem))).blocks_per_sm
        assert case["blocks_per_sm"] <= fits or case["blocks_per_sm"] == 2 * fits


INLINE_TWIN_REGISTERS = {32: 80, 16: 70, 8: 64, 4: 64}


def test_map_shape_probe_keeps_the_grid_and_changes_the_width():
    """Every width of the map-shape probe gives the same grid: 396 blocks of 128 pixels, one filter
    tile of 32, C = 128 (3 per SM on the 132 SMs); each problem appears once per kernel variant."""
    from megasim.calibration.sparse import MAP_SHAPE_VGG, MAP_SHAPE_WIDTHS, map_shape_cases, map_shape_problems

    spec = get_gpu("H200")
    cases = map_shape_cases()
    assert len({c["seed"] for c in cases}) == len(cases) == 4 * len(map_shape_problems())
    widths = []
    for text in map_shape_problems():
        problem = parse_layer(text)
        tiling = choose_tiling(problem, "direct", spec.sm_count, k_tile=32)
        if text in MAP_SHAPE_VGG:
            assert grid(problem, tiling) == (98, 4)
            continue
        widths.append(problem.out_w)
        assert grid(problem, tiling) == (396, 1) and problem.c == 128 and problem.n == 1
        assert problem.out_h * problem.out_w > 395 * 128
    assert tuple(widths) == MAP_SHAPE_WIDTHS
