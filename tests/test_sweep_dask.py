"""Sweeps on a real Dask LocalCluster of two worker processes (megasim.sweep.runner).

One cluster for the module (starting one costs seconds). A small sweep fills its table, failures are
rows with their reason, a repeated run adds nothing, an interrupted run resumes, and a worker killed in
the middle of a sweep loses no point and duplicates none (the scheduler reruns its batch elsewhere).
"""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("distributed", reason="dask[distributed] is not installed")

from megasim.sweep import parse_sweep, run_sweep  # noqa: E402
from megasim.sweep.points import expand  # noqa: E402
from megasim.sweep.table import read_table  # noqa: E402

SWEEP = {
    "name": "small",
    # the stride-2 layer cannot take Winograd: those points fail with the lowering's reason
    "problems": ["N=2,C=8,K=8,H=8,W=8", "N=2,C=16,K=16,H=8,W=8", "N=2,C=8,K=8,H=8,W=8,stride=2"],
    "gpus": ["H100", "A100"],
    "runs": [{"algorithm": "winograd", "schedules": ["fused"], "grid": {"t": [32, 64]}},
             {"algorithm": "winograd", "schedules": ["nonfused"]},
             {"algorithm": "direct", "param": "sparsity=0", "grid": {"k_tile": [8, 16]}}],
}


@pytest.fixture(scope="module")
def client():
    from megasim.sweep.cluster import local_cluster
    from distributed import Client
    cluster = local_cluster(2)
    with Client(cluster) as c:
        yield c
    cluster.close()


def _check_complete(path, sweep):
    rows = read_table(path)
    keys = [r["point_key"] for r in rows]
    assert len(keys) == len(set(keys)), "a point was written twice"
    assert set(keys) == {p.key for p in expand(sweep)}, "a point is missing"
    return rows


def test_a_small_sweep_fills_its_table_records_failures_and_a_rerun_adds_nothing(client, tmp_path):
    sweep = parse_sweep(SWEEP)
    out = tmp_path / "small.csv"
    first = run_sweep(sweep, client, out=out, batch_size=2)
    rows = _check_complete(out, sweep)
    assert first.evaluated == first.points == len(rows) and first.skipped == 0
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["problem"].endswith("stride=2,padding=1") and r["algorithm"] == "winograd"
                          and "stride" in r["reason"] and "\n" not in r["reason"] for r in failed)
    assert first.failed == len(failed)
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(r["predicted_us"] > 0 and r["taskgraph_hash"] and r["git_sha"] is not None and r["sweep_hash"] == sweep.hash
               and r["megasim_version"] and r["gpu_spec_hash"] and r["git_dirty"] in ("true", "false", "")
               and 0 <= r["sim_cpu_s"] for r in ok)
    # the same prediction as `megasim simulate` gives
    from megasim.hardware import get_gpu
    from megasim.plan import Plan, predict, predicted_time_us
    from megasim.workloads import parse_layer
    r = next(r for r in ok if r["schedule"] == "nonfused" and r["gpu"] == "A100")
    result, plan = predict(parse_layer(r["problem"]), get_gpu("A100"), Plan.parse("nonfused", None))
    assert r["predicted_us"] == pytest.approx(predicted_time_us(result, plan), rel=1e-12)
    again = run_sweep(sweep, client, out=out)
    assert again.evaluated == 0 and again.skipped == first.points
    assert read_table(out) == rows
    retried = run_sweep(sweep, client, out=out, retry_failed=True)
    assert retried.evaluated == len(failed) and retried.failed == len(failed)
    _check_complete(out, sweep)


def test_rows_of_another_model_version_are_counted_and_redone_on_request(client, tmp_path):
    from megasim.search.cache import model_fingerprint
    from megasim.sweep.table import write_table
    sweep = parse_sweep({**SWEEP, "problems": SWEEP["problems"][:1], "gpus": ["H100"]})
    out = tmp_path / "model.csv"
    first = run_sweep(sweep, client, out=out)
    rows = read_table(out)
    old = next(r for r in rows if r["status"] == "ok")
    write_table(out, [{**r, "model_fingerprint": "0ldm0de1", "predicted_us": -1.0} if r is old else r for r in rows])
    kept = run_sweep(sweep, client, out=out)
    assert kept.evaluated == 0 and kept.skipped == first.points and kept.stale == 1
    redone = run_sweep(sweep, client, out=out, redo_stale=True)
    assert redone.evaluated == 1 and redone.stale == 0 and redone.skipped == first.points - 1
    new = next(r for r in _check_complete(out, sweep) if r["point_key"] == old["point_key"])
    assert new["model_fingerprint"] == model_fingerprint() and new["predicted_us"] == old["predicted_us"]


def test_an_interrupted_sweep_resumes_where_it_stopped(client, tmp_path):
    sweep = parse_sweep(SWEEP)
    out = tmp_path / "small.parquet" if _parquet() else tmp_path / "small.csv"

    def interrupt(done, total, failed):
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, client, out=out, batch_size=1, progress=interrupt)
    kept = read_table(out)
    assert 4 <= len(kept) < len(expand(sweep))
    resumed = run_sweep(sweep, client, out=out, batch_size=1)
    assert resumed.skipped == len(kept) and resumed.evaluated == resumed.points - len(kept)
    _check_complete(out, sweep)
    assert run_sweep(sweep, client, out=out).evaluated == 0


def test_a_worker_killed_in_the_middle_loses_no_point(client, tmp_path):
    sweep = parse_sweep({**SWEEP, "problems": [*SWEEP["problems"], "N=4,C=32,K=32,H=16,W=16",
                                               "N=4,C=16,K=32,H=16,W=16"]})
    out = tmp_path / "killed.csv"
    killed: list[int] = []

    def kill_one(done, total, failed):
        if killed or done == 0:
            return
        busy = [addr for addr, keys in client.processing().items() if keys]
        pids = client.run(os.getpid, workers=busy) if busy else {}
        if pids:
            pid = next(iter(pids.values()))
            os.kill(pid, signal.SIGKILL)
            killed.append((pid, done, total))

    summary = run_sweep(sweep, client, out=out, batch_size=1, progress=kill_one)
    assert killed and killed[0][1] < killed[0][2], "no worker was killed while points were left"
    rows = _check_complete(out, sweep)
    assert summary.evaluated == len(rows) == len(expand(sweep))
    assert not any(r["reason"].startswith("cluster error") for r in rows)
    client.wait_for_workers(2, timeout=60)    # the nanny restarts it


def _parquet() -> bool:
    from megasim.sweep.table import have_pyarrow
    return have_pyarrow()


def _square(x):
    return x * x


def test_the_optimiser_calibration_validation_and_experiments_share_the_client(client):
    """Each batch evaluation on the shared cluster gives the numbers of one process, in order."""
    from megasim.algorithms.winograd.space import default_space
    from megasim.hardware import get_gpu
    from megasim.search import SimulatorEvaluator, run_search
    from megasim.workloads import parse_layer
    problem, spec = parse_layer("N=4,C=16,K=16,H=16,W=16"), get_gpu("H100")
    runs = []
    for kw in ({"workers": 1}, {"client": client}):
        with SimulatorEvaluator(problem, spec, default_space(), **kw) as ev:
            res = run_search(ev.space, ev, "multifidelity", budget=12, seed=1)
        runs.append([(r.params, r.time_us) for r in res.records])
    assert runs[0] == runs[1] and len(runs[0]) == 12

    import dataclasses
    from tests.test_calibration_pool import COST, gemm_cases, small_h200
    from megasim.calibration.pool import CasePool
    h, cases = small_h200(), gemm_cases()
    costs = [COST, dataclasses.replace(COST, fixed_ns=100.0)]
    with CasePool({"gemm": cases}, workers=1) as one, CasePool({"gemm": cases}, workers=1, client=client) as shared:
        assert shared.simulate_batch([("gemm", h, "gemm", c) for c in costs]) == \
            one.simulate_batch([("gemm", h, "gemm", c) for c in costs])
    assert client.status == "running"      # a client given is left open

    from megasim.calibration.validation import predict_rows
    rows = [{"layer": "N=2,C=8,K=8,H=8,W=8", "schedule": s, "params": "", "algorithm": "winograd"}
            for s in ("fused", "nonfused", "naive")]
    spec_path = "megasim/hardware/presets/h100.json"
    assert predict_rows(rows, spec_path, "h100", client=client) == predict_rows(rows, spec_path, "h100", workers=1)

    from experiments.sweeps import parallel_map
    assert parallel_map(_square, list(range(7)), 2, client=client) == [x * x for x in range(7)]
    from megasim.sweep.cluster import client_map
    assert client_map(client)(_square, range(5)) == [0, 1, 4, 9, 16]


def test_the_command_runs_a_sweep_file_and_a_rerun_adds_nothing(tmp_path, capsys):
    import json
    from megasim.cli.main import main
    sweep = tmp_path / "tiny.toml"
    sweep.write_text('problems = ["N=2,C=8,K=8,H=8,W=8"]\ngpus = ["H100"]\n'
                     '[[runs]]\nalgorithm = "winograd"\nschedules = ["fused", "nonfused"]\n'
                     '[[runs]]\nalgorithm = "direct"\noptimize = {budget = 2}\n')
    out = tmp_path / "sub" / "tiny.csv"
    out.parent.mkdir()          # the table's folder must exist (docs/errors.md); the command makes none
    assert main(["sweep", str(sweep), "--workers", "1", "--out", str(out), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["evaluated"] == first["points"] == 3 and first["failed"] == 0 and out.exists()
    assert main(["sweep", str(sweep), "--workers", "1", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["evaluated"] == 0
    assert [r["mode"] for r in read_table(out)] == ["params", "params", "optimize"]
