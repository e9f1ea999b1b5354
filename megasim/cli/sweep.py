"""`megasim sweep SPEC.toml`: a sweep file evaluated on a Dask cluster into its results table.

The sweep file is read and every point expanded (names checked) before a cluster starts; the table's
path is checked writable. The work runs on a LocalCluster of --workers processes (default: the usable
CPUs), or on the cluster at --scheduler. A progress line (points done of those to do, failures, time)
goes to stderr on a terminal. --dry-run counts the points and what the table already holds, and
starts nothing. Dask is imported only when a sweep runs (megasim.sweep.cluster).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from megasim.cli.common import check_out_path, integer, text

MAX_WORKERS = 256       # megasim.sweep.cluster.MAX_WORKERS (not imported here: the parser stays light)


def add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_file", metavar="SPEC.toml", type=text("a sweep file (TOML; docs/sweeps.md)"),
                   help="the sweep file (TOML; docs/sweeps.md)")
    p.add_argument("--out", help="the results table (.parquet or .csv; default: the file's `out`, else "
                   "NAME.parquet beside the sweep file, .csv without pyarrow)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=integer(1, MAX_WORKERS),
                       help="worker processes of the LocalCluster (default: the usable CPUs)")
    where.add_argument("--scheduler", type=text("a scheduler address, e.g. tcp://host:8786"),
                       help="run on the existing Dask cluster at this address, e.g. tcp://host:8786")
    p.add_argument("--batch-size", type=integer(1, 100_000),
                   help="points per Dask task (default: about 8 tasks per worker, at most 64 points each)")
    p.add_argument("--retry-failed", action="store_true", help="run the points the table records as failed again")
    p.add_argument("--redo-stale", action="store_true",
                   help="evaluate again the points whose rows another model version computed (their model_fingerprint "
                        "is not this checkout's), replacing those rows")
    p.add_argument("--dry-run", action="store_true", help="count the points and those still to do; run nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")


class _ProgressLine:
    """points done / to do, failures and elapsed time, on one updating stderr line (terminals only)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int, failed: int) -> None:
        width = 30
        fill = int(width * done / max(1, total))
        self.stream.write(f"\r\033[K[{'#' * fill}{'.' * (width - fill)}] {done:,}/{total:,} points, "
                          f"{failed:,} failed, {time.perf_counter() - self.start:.1f} s")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def run_sweep(args: argparse.Namespace) -> int:
    from megasim.sweep import load_sweep
    from megasim.sweep import runner
    from megasim.sweep.points import expand
    from megasim.sweep.table import ResultsTable

    sweep = load_sweep(args.sweep_file)
    path = runner.table_path(sweep, args.out)
    if args.dry_run:
        points = expand(sweep)
        todo, stale = runner.points_to_do(points, ResultsTable(path), args.retry_failed, args.redo_stale)
        modes = {m: sum(p.mode == m for p in points) for m in ("params", "space", "optimize")}
        summary = {"sweep": sweep.name, "sweep_hash": sweep.hash, "table": str(path), "points": len(points),
                   "to_do": len(todo), "stale": stale, "by_mode": modes}
        print(json.dumps(summary) if args.json else
              f"{sweep.name}: {len(points):,} points ({', '.join(f'{v:,} {k}' for k, v in modes.items() if v)}), "
              f"{len(todo):,} not in {path}; {stale:,} in it from another model version")
        return 0
    # the table's folder must exist, as every output path's (docs/errors.md): a typo is refused, not made
    check_out_path(str(path), "--out" if args.out else f"sweep file {sweep.source!r}: out")
    line = _ProgressLine() if not args.json and sys.stderr.isatty() else None
    try:
        result = runner.run_sweep(sweep, scheduler=args.scheduler, workers=args.workers, out=path,
                                  batch_size=args.batch_size, retry_failed=args.retry_failed,
                                  redo_stale=args.redo_stale, progress=line)
    finally:
        if line:
            line.close()
    summary = {"sweep": sweep.name, "sweep_hash": sweep.hash, "table": result.table, "points": result.points,
               "skipped": result.skipped, "stale": result.stale, "evaluated": result.evaluated, "failed": result.failed,
               "batches": result.batches, "workers": result.workers, "wall_s": round(result.wall_s, 3)}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{sweep.name} ({sweep.hash}): {result.points:,} points, {result.skipped:,} already in the table, "
          f"{result.evaluated:,} evaluated ({result.failed:,} failed) in {result.batches:,} batches on "
          f"{result.workers} workers, {result.wall_s:.1f} s")
    print(f"  table  {result.table}")
    if result.stale:
        print(f"  {result.stale:,} of the points skipped have rows another model version computed (model_fingerprint "
              f"not this checkout's); --redo-stale evaluates them again")
    return 0
