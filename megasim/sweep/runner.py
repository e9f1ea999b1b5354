"""``run_sweep``: a sweep file's points evaluated on a Dask cluster, into its results table.

1. The sweep is expanded into points (``megasim.sweep.points``); every name is checked first.
2. The table (``megasim.sweep.table``) is read; points whose key is there are skipped (failed ones too,
   unless ``retry_failed``), so a rerun or a resumed run adds only what is missing. A point's key names
   what it computes, not the model's code, so a row another model version wrote (its
   ``model_fingerprint`` differs from this checkout's) still answers its point: the summary counts those
   (``stale``), and ``redo_stale`` evaluates them again, replacing their rows.
3. The rest go to the cluster in batches (``megasim.sweep.evaluate.evaluate_batch``): a simulation
   takes 1-50 ms and a Dask task costs about a millisecond to schedule, so a batch holds up to
   ``MAX_BATCH`` points, sized so that each worker gets about ``BATCHES_PER_WORKER`` of them (enough
   to balance uneven points; a search is a batch of one).
4. Rows come back as batches finish (``distributed.as_completed``), get the points' names and the
   run's provenance (sweep hash, package version, model fingerprint, commit, date), and are written
   every ``FLUSH_S`` seconds (less often when a write takes more than 1/``FLUSH_SHARE`` of that) and
   at the end, in the points' order. A batch lost with a worker is rerun by the scheduler elsewhere;
   its rows arrive once, since only a finished task's result is written. A batch the cluster gives up
   on (``KilledWorker`` after repeated deaths, an error outside the points' own handling) becomes a
   failed row per point with the reason, and the sweep goes on.

An interrupted sweep (Ctrl-C, a killed client) keeps the rows of its last flush; running it again
resumes. Progress is reported through a callback (``progress(done, total, failed)``); the command
line draws it on a terminal.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from megasim.errors import InputError
from megasim.sweep.points import SweepPoint, expand
from megasim.sweep.spec import SweepSpec, load_sweep
from megasim.sweep.table import ResultsTable, check_path, default_suffix

MAX_BATCH = 64
BATCHES_PER_WORKER = 8
FLUSH_S = 2.0
FLUSH_SHARE = 50     # at most 1/50 of the time goes to writing the table

Progress = Callable[[int, int, int], None]


@dataclass(frozen=True)
class SweepSummary:
    """What one run of a sweep did."""

    table: str
    points: int            # in the sweep
    skipped: int           # already in the table
    stale: int             # of those, rows of another model version (model_fingerprint)
    evaluated: int         # rows added by this run
    failed: int            # of those, failed
    batches: int
    workers: int
    wall_s: float


def table_path(sweep: SweepSpec, out: str | Path | None = None) -> Path:
    """Where the sweep's table goes: `out`, else the file's ``out`` (beside the sweep file), else
    ``<name>.parquet`` (``.csv`` without pyarrow) beside the sweep file."""
    if out is not None:
        return check_path(out, "--out")
    if sweep.out is not None:
        path = Path(sweep.out)
        return check_path(path if path.is_absolute() else (sweep.folder / path).resolve(), f"{sweep.source}: out")
    return check_path(sweep.folder / f"{sweep.name}{default_suffix()}")


def batches_of(points: list[SweepPoint], workers: int, batch_size: int | None = None) -> list[list[SweepPoint]]:
    """Points in batches: searches alone, the others in contiguous runs of `batch_size` (default: about
    BATCHES_PER_WORKER batches per worker, at most MAX_BATCH points each)."""
    single = [[p] for p in points if p.mode == "optimize"]
    rest = [p for p in points if p.mode != "optimize"]
    size = batch_size or max(1, min(MAX_BATCH, math.ceil(len(rest) / (BATCHES_PER_WORKER * max(1, workers)))))
    return single + [rest[i:i + size] for i in range(0, len(rest), size)]


def _provenance(sweep: SweepSpec) -> dict[str, Any]:
    """The run's provenance columns. ``git_dirty``: whether the package's files differ from the commit
    (``true``/``false``; empty where git cannot tell): the model fingerprint then names the source run."""
    import subprocess
    from megasim import __version__
    from megasim.provenance import REPO, git_sha
    from megasim.search.cache import model_fingerprint
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "megasim"], cwd=REPO,
                                capture_output=True, text=True, timeout=10, check=True).stdout
        dirty = "true" if status.strip() else "false"
    except (OSError, subprocess.SubprocessError):
        dirty = ""
    return {"sweep": sweep.name, "sweep_hash": sweep.hash, "megasim_version": __version__,
            "model_fingerprint": model_fingerprint(), "git_sha": git_sha(), "git_dirty": dirty,
            "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def _describe(p: SweepPoint) -> dict[str, Any]:
    import json
    return {"point_key": p.key, "layer": p.layer, "problem": p.problem.spec_string(), "batch": p.problem.n,
            "gpu": p.gpu, "gpu_name": p.spec.name, "gpu_spec_hash": p.gpu_spec_hash, "algorithm": p.algorithm,
            "schedule": p.schedule, "mode": p.mode, "sweep_param": p.param,
            "point": json.dumps(dict(p.point), sort_keys=True) if p.point else ""}


def points_to_do(points: list[SweepPoint], table: ResultsTable, retry_failed: bool = False,
                 redo_stale: bool = False) -> tuple[list[SweepPoint], int]:
    """The points a run evaluates (those without a row in `table`, after dropping its failed rows with
    ``retry_failed`` and its rows of another model version with ``redo_stale``), and how many of the
    points left to skip have rows of another model version."""
    from megasim.search.cache import model_fingerprint
    if retry_failed:
        table.drop(table.keys() - table.keys(include_failed=False))
    stale = table.stale_keys(model_fingerprint()) & {p.key for p in points}
    if redo_stale:
        table.drop(stale)
        stale = set()
    done = table.keys()
    return [p for p in points if p.key not in done], len(stale)


def run_sweep(sweep: SweepSpec | str | Path, client: Any = None, *, scheduler: str | None = None,
              workers: int | None = None, out: str | Path | None = None, batch_size: int | None = None,
              retry_failed: bool = False, redo_stale: bool = False,
              progress: Progress | None = None) -> SweepSummary:
    """Evaluate the sweep's missing points (see the module's docstring) on `client`, or on the cluster
    at `scheduler`, or on a LocalCluster of `workers` processes (default: the available CPUs)."""
    from megasim.sweep.cluster import check_workers, open_client, worker_count
    start = time.perf_counter()
    if not isinstance(sweep, SweepSpec):
        sweep = load_sweep(sweep)
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise InputError(f"batch_size={batch_size!r} is not allowed: it must be an integer >= 1")
    if workers is not None:
        check_workers(workers)
    points = expand(sweep)
    table = ResultsTable(table_path(sweep, out))
    todo, stale = points_to_do(points, table, retry_failed, redo_stale)
    order = {p.key: p.index for p in points}
    skipped = len(points) - len(todo)
    if not todo:
        table.flush(order)
        return SweepSummary(str(table.path), len(points), skipped, stale, 0, 0, 0, 0, time.perf_counter() - start)
    meta = _provenance(sweep)
    with open_client(client, scheduler, workers) as c:
        n_workers = worker_count(c)
        groups = batches_of(todo, n_workers, batch_size)
        if progress:
            progress(0, len(todo), 0)
        try:
            failed = _collect(c, groups, table, meta, progress, len(todo), order)
        finally:
            table.flush(order)
    return SweepSummary(str(table.path), len(points), skipped, stale, table.added, failed, len(groups),
                        n_workers, time.perf_counter() - start)


def _collect(client: Any, groups: list[list[SweepPoint]], table: ResultsTable, meta: dict[str, Any],
             progress: Progress | None, total: int, order: dict[str, int]) -> int:
    from distributed import as_completed
    from megasim.sweep.evaluate import evaluate_batch
    futures = {client.submit(evaluate_batch, g, pure=False): g for g in groups}
    failed = n_done = 0
    last_flush, flush_every = time.perf_counter(), FLUSH_S
    try:
        for future in as_completed(futures):
            group = futures.pop(future)
            try:
                rows = future.result()
            except Exception as err:  # noqa: BLE001 - the cluster gave the batch up: its points fail, the sweep goes on
                reason = " ".join(f"cluster error: {type(err).__name__}: {err}".split())[:500]
                rows = [{"point_key": p.key, "status": "failed", "reason": reason} for p in group]
            for p, row in zip(group, rows):
                if table.add({**_describe(p), **row, **meta}):
                    n_done += 1
                    failed += row.get("status") != "ok"
            future.release()
            if progress:
                progress(n_done, total, failed)
            if time.perf_counter() - last_flush > flush_every:
                t = time.perf_counter()
                table.flush(order)
                last_flush = time.perf_counter()
                flush_every = max(FLUSH_S, FLUSH_SHARE * (last_flush - t))   # a large table: rarer writes
    finally:
        for future in futures:
            future.cancel()
    return failed
