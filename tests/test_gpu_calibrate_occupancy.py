"""gpu.calibrate.occupancy's launch paths on Numba's CUDA simulator (tiny layer, timers faked: the
simulator has no CUDA events): every (kind, variant) row is produced and the kernels run."""

from __future__ import annotations

import pytest

numba = pytest.importorskip("numba")
if not numba.config.ENABLE_CUDASIM:
    pytest.skip("runs on the CUDA simulator only (on a GPU, python -m gpu.calibrate.occupancy)", allow_module_level=True)

from gpu.calibrate import occupancy as co
from gpu.runtime.timing import summarize

pytestmark = [pytest.mark.cudasim, pytest.mark.slow, pytest.mark.usefixtures("fast_simulator_barriers")]


class FakeSpin:
    iters = 1

    def __call__(self):
        pass


def test_rows_for_every_kind_and_variant(monkeypatch):
    import gpu.runtime.timing as timing
    calls = []

    def fake_queued(fn, spin, **kw):
        fn(0)
        calls.append("q")
        return summarize([0.01]), 0.0

    def fake_cuda(fn, **kw):
        fn(0)
        return summarize([0.02])

    monkeypatch.setattr(co, "time_queued", fake_queued)
    monkeypatch.setattr(timing, "time_cuda", fake_cuda)
    rows, _ = co.time_kinds_occupancy(["N=1,C=2,K=3,H=4,W=4"], "t=2,gemm_k_tile=8,threads=32,gemm_threads=32",
                                          spin=FakeSpin(), repeats=1)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"ftrans", "itrans", "gemm", "otrans"}
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        variants = {(r["kernel"], r["style"], r.get("blocks_per_sm"), r["timing"]) for r in mine}
        assert ("per_kind", "per_task", None, "queued") in variants
        assert ("per_kind", "per_task", None, "events") in variants
        assert {("megakernel", "per_task", None, "queued"), ("megakernel", "persistent", 1, "queued"),
                ("megakernel", "persistent", 2, "queued")} <= variants
        # The 46 KiB variant needs no opt-in: it runs on the simulator too.
        assert any(r["extra_shared_bytes"] == 46 * 1024 for r in mine)
    # Each row carries its own timer's result: the faked event timer's 0.02 ms, the queued one's 0.01 ms.
    assert all(r["median_ms"] == (0.02 if r["timing"] == "events" else 0.01) and r["tasks"] > 0 for r in rows)
    assert all(r["plan_params"] == "t=2,gemm_k_tile=8,threads=32,gemm_threads=32" for r in rows)
    # The persistent grid of 1 block per SM is traced too: its claim, body and signal per task.
    for r in rows:
        traced = (r["kernel"], r["style"], r.get("blocks_per_sm")) == ("megakernel", "persistent", 1)
        assert ("trace_claim_ns" in r) == traced
        if traced:
            assert r["trace_claim_ns"] > 0 and r["trace_body_ns"] > 0 and r["trace_signal_ns"] >= 0


def test_transform_rows_at_the_fused_pair_count(monkeypatch):
    monkeypatch.setattr(co, "time_queued", lambda fn, spin, **kw: (fn(0), (summarize([0.01]), 0.0))[1])
    import gpu.runtime.timing as timing
    monkeypatch.setattr(timing, "time_cuda", lambda fn, **kw: (fn(0), summarize([0.02]))[1])
    params = co.fused_transform_params("t=2,gemm_k_tile=8,threads=32,gemm_threads=32")
    assert params.endswith(",pairs=4")
    assert co.fused_transform_params("pairs=2") is None        # given explicitly: measured as given
    rows, _ = co.time_kinds_occupancy(["N=1,C=5,K=3,H=6,W=6"], params, spin=FakeSpin(), repeats=1,
                                      kinds=co.TRANSFORM_KINDS)
    assert {r["kind"] for r in rows} == {"ftrans", "itrans", "otrans"}
    assert all(r["plan_params"] == params for r in rows)


def test_gemm_rows_at_t32_have_their_own_params():
    # gemm@t32 (the t = 32 GEMM specialisation) is fitted on its own single-kind runs: the calibration
    # times the GEMM again at t = 32, other parameters kept, unless it runs t = 32 already.
    assert co.variant_gemm_params("") == "t=32"
    assert co.variant_gemm_params("pairs=2,t=64") == "pairs=2,t=32"
    assert co.variant_gemm_params("t=32") is None
    from megasim.plan import Plan, build
    from megasim.workloads import parse_layer
    graph, _, _ = build(parse_layer("resnet-1"), Plan.parse("nonfused", co.variant_gemm_params("")))
    assert graph.cost_names[graph.kind_id("gemm")] == "gemm@t32"


def test_fp32_probe_computes_in_float32():
    # The probe once ran its chains in float64 (an int64 index times a float32 promoted them) and so
    # measured the FP64 rate. Under the simulator the kernel is Python on NumPy scalars: a float32
    # recurrence gives exactly the float32 result below, a float64 one would not.
    import numpy as np
    from numba import cuda

    from gpu.calibrate.measure import FMA_UNROLL, _fma
    out = cuda.device_array(2, np.float32)
    _fma[1, 2](out, 3, 1.0)
    b, c = np.float32(0.999999), np.float32(1e-6)
    for i in range(2):
        x0 = np.float32(1.0) + np.float32(i) * np.float32(1e-7)
        xs = [x0 + np.float32(k) for k in range(8)]
        for _ in range(3 * FMA_UNROLL):
            xs = [x * b + c for x in xs]
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        assert out.copy_to_host()[i] == total


def test_trace_mixed_runs_and_counts_coresidency(tmp_path):
    import csv

    import numpy as np

    from gpu.diagnostics import trace_mixed as tm
    # Hand example on one SM: GEMM task 0 runs [0, 10) beside a transform over [5, 15) (half its time):
    # 0.5; GEMM task 1 runs [20, 30) beside two transforms for all of it: 2.
    start = np.array([0, 5, 20, 18, 19.0])
    end = np.array([10, 15, 30, 35, 40.0])
    kind = np.array([2, 1, 2, 1, 1])
    co = tm.coresidency(start, end, np.zeros(5, int), kind, 2, 1)
    assert co[0] == 0.5 and co[2] == 2.0 and np.isnan(co[1])
    assert tm.main(["--layers", "N=1,C=8,K=8,H=8,W=8", "--params",
                    "t=2,gemm_k_tile=8,threads=32,gemm_threads=32,pairs=2", "--runs", "1", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "trace_mixed.csv").open()))
    assert {(r["run"], r["source"]) for r in rows} >= {("itrans+gemm", "measured"), ("itrans+gemm", "model"),
                                                       ("gemm", "measured"), ("itrans", "model")}


def test_trace_kinds_splits_a_task_and_chains_persistent_blocks(tmp_path):
    import csv

    import numpy as np

    from gpu.diagnostics import trace_kinds as tk
    # One SM, two persistent blocks: tasks claimed at 0 and 1 end at 10 and 12; the task claimed at 11
    # continues the block that ended at 10 (the only one free), the one claimed at 13 the block that
    # ended at 12 (the later of the two free ones).
    claim = np.array([0, 1, 11, 13.0])
    end = np.array([10, 12, 20, 25.0])
    sm = np.zeros(4, int)
    slot = tk.block_slots(claim, end, sm)
    assert slot.tolist() == [0, 1, 0, 1]
    gap = tk.persistent_gaps(claim, end, sm, slot)
    assert np.isnan(gap[:2]).all() and gap[2:].tolist() == [1.0, 1.0]
    rows = tk.summarise("L", "r", "measured", ["a", "b"], np.array([0, 0, 1, 1]), claim, claim + 1,
                        end - 2, end, sm, slot)
    a, b = rows
    assert (a["kind"], a["tasks"]) == ("a", 2) and a["claim_us"] == 1e-3 and a["signal_us"] == 2e-3
    assert a["body_us"] == ((10 - 2 - 1) + (12 - 2 - 2)) / 2 / 1e3 and b["gap_us"] == 1e-3
    assert tk.main(["--layers", "N=1,C=8,K=8,H=8,W=8", "--params", "t=2,gemm_k_tile=8,threads=32,gemm_threads=32,pairs=2",
                    "--kinds", "itrans", "--pairs", "itrans+gemm", "--runs", "1", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "trace_kinds.csv").open()))
    assert {(r["run"], r["source"], r["kind"]) for r in rows} == {
        (f"itrans {s}", src, "itrans") for s in ("persistent x1", "persistent x2", "per_task") for src in ("measured", "model")
    } | {("itrans+gemm per_task", src, k) for src in ("measured", "model") for k in ("itrans", "gemm")}
    measured = [r for r in rows if r["source"] == "measured"]
    assert all(float(r["claim_us"]) > 0 and float(r["body_us"]) > 0 and float(r["signal_us"]) >= 0 for r in measured)
