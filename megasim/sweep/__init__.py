"""Sweeps on Dask: a sweep file (problems or whole networks x GPU specs x algorithms, schedules and
mappings, or the optimiser per point) evaluated on a Dask cluster into one results table with the
provenance of every row. See docs/sweeps.md.

- ``spec``: the sweep file (TOML) -> ``SweepSpec``; ``points``: its expansion into ``SweepPoint``s;
- ``evaluate``: a batch of points in one worker; ``runner``: ``run_sweep`` (batches, resume, failures);
- ``table``: the Parquet / CSV results table; ``cluster``: the shared Dask client (a LocalCluster by
  default, or a cluster's address) and the batched map the optimiser, calibration and validation use;
- ``gpus``: one Dask worker per GPU of a host, for measured (validation, benchmark) sweeps.

Importing this package does not import Dask; running a sweep does.
"""

from megasim.sweep.runner import SweepSummary, run_sweep
from megasim.sweep.spec import OptimizeSpec, RunSpec, SweepSpec, load_sweep, parse_sweep

__all__ = ["OptimizeSpec", "RunSpec", "SweepSpec", "SweepSummary", "load_sweep", "parse_sweep", "run_sweep"]
