"""experiments/benchmarks/optimize_cli.py: it runs `megasim optimize` as a process and reads back its answer
and the memory of its process tree (no timing assertions: the numbers depend on the machine)."""

from __future__ import annotations

import os

import pytest

from experiments.benchmarks import optimize_cli

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="reads /proc (Linux)")


def test_the_process_tree_memory_counts_this_process():
    assert optimize_cli.tree_pss_kb(os.getpid()) > 1000


def test_a_run_reports_the_commands_answer_and_its_memory():
    row = optimize_cli.run_layer("N=1,C=8,K=8,H=8,W=8", "H100")
    assert row["evaluations"] > 0 and row["predicted_us"] > 0 and row["best_params"].startswith("D_IG=")
    assert row["peak_pss_mb"] > 10 and row["wall_s"] > 0
