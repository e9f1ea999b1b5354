"""experiments.studies.nonfused_waves.epilogue: the sweep's GEMM rows as calibration rows, refused at other parameters."""

from __future__ import annotations

import pytest

from experiments.studies.nonfused_waves.epilogue import sweep_rows
from megasim.errors import MegasimError

DOC = {"params": "", "rows": [
    {"layer": "N=4,C=8,K=16,H=8,W=8", "what": "kind", "kind": "gemm", "kernel": "per_kind", "timing": "queued",
     "extra_shared_bytes": 0, "median_ms": 0.01},
    {"layer": "N=4,C=8,K=16,H=8,W=8", "what": "kind", "kind": "itrans", "kernel": "per_kind", "timing": "queued",
     "median_ms": 0.01},
    {"layer": "N=4,C=8,K=16,H=8,W=8", "what": "pipeline", "timing": "queued", "median_ms": 0.05},
    {"layer": "N=4,C=8,K=16,H=8,W=8", "what": "kind", "kind": "gemm", "kernel": "per_kind", "error": "refused"}]}


def test_only_the_gemm_runs_that_were_timed_become_rows():
    rows = sweep_rows(DOC, "")
    assert len(rows) == 1 and rows[0]["kind"] == "gemm" and "what" not in rows[0]


def test_a_sweep_at_other_parameters_is_refused_in_one_line():
    with pytest.raises(MegasimError, match="--sweep was measured at --params '', the calibration at 'pairs=4'"):
        sweep_rows(DOC, "pairs=4")
