"""Fuzz the megakernel with random valid mappings: no hang, no wrong result.

For one small layer, draws `--mappings` schedules (random valid orders from megasim's
``random_order``, Algorithm 1 with random D_IG / D_GO / M at or above their minimums, the naive and
non-fused orders), each run in a random execution style (per-task ticket, blockIdx or ready-queue
dispatch, or a persistent grid of 1-4 blocks per SM, ticket or ready-queue), and checks every output against the float64 oracle (rel err
<= 1e-4) and against the first fused output bit for bit (every mapping computes the same sums in the
same order within a task, so results must be identical). A dependency wait that gives up raises
MegakernelError, which is counted as a failure, never a hang.

    bash gpu/on_device.sh python -m gpu.diagnostics.fuzz --mappings 1000          # on the GPU
    python -m gpu.diagnostics.fuzz --mappings 5 --layer N=1,C=5,K=6,H=6,W=5        # CUDA simulator (slow)

Writes DIR/fuzz_megakernel.json (counts, failures, the parameters of every failing mapping, time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from megasim.errors import MegasimError
from megasim.algorithms.winograd.lowering import (DEFAULT_TRANSFORM_PAIRS_PER_THREAD, GEMM_MATHS, WinogradConfig, DEFAULT_GEMM_MATH)
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES
from megasim.algorithms.winograd.algorithm1 import Algorithm1Params, counts, default_params
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.orders import random_order
from megasim.algorithms.winograd import winograd_naive, winograd_nonfused
from megasim.workloads import parse_layer


def _random_schedule(graph, rng: np.random.Generator):
    """A random valid schedule and its description."""
    kind = rng.choice(["random", "algorithm1", "algorithm1", "naive", "nonfused_as_megakernel"])
    if kind == "random":
        seed = int(rng.integers(1 << 31))
        return random_order(graph, seed), {"order": "random", "seed": seed}
    if kind == "naive":
        return winograd_naive(graph), {"order": "naive"}
    if kind == "nonfused_as_megakernel":
        return winograd_nonfused(graph), {"order": "nonfused"}
    n_g = counts(graph)["N_G"]
    m = int(rng.integers(1, n_g + 1))
    base = default_params(graph, m)
    d_ig = base.d_ig + int(rng.integers(0, 4 * base.d_ig + 8))
    d_go = base.d_go + int(rng.integers(0, 4 * base.d_go + 8))
    params = Algorithm1Params(d_ig, d_go, m)
    return algorithm1(graph, params), {"order": "algorithm1", **params.as_dict()}


def main(argv: list[str] | None = None) -> dict:
    from gpu.runtime import executor as ex
    from gpu.winograd import reference
    from megasim.workloads.problem import ConvProblem
    from numba import cuda

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mappings", type=int, default=1000)
    parser.add_argument("--layer", default="N=2,C=24,K=40,H=14,W=13")
    parser.add_argument("--t", type=int, default=4, help="tiles per group (small: many groups, many orders)")
    parser.add_argument("--m", type=int, choices=SUPPORTED_TILES, default=4, help="Winograd output tile F(m x m, 3 x 3)")
    parser.add_argument("--pairs", type=int, default=DEFAULT_TRANSFORM_PAIRS_PER_THREAD["fused"],
                        help="pairs per transform thread (default: the fused schedule's)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", default="experiments/results/fuzz")
    parser.add_argument("--poll-limit", type=int, default=1 << 22)
    parser.add_argument("--gemm-math", choices=GEMM_MATHS, default=None,
                        help="the GEMM's math (default: fp32)")
    args = parser.parse_args(argv)

    problem = parse_layer(args.layer)
    problem = ConvProblem(problem.n, problem.c, problem.k, problem.h, problem.w, padding=problem.padding)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((problem.n, problem.c, problem.h, problem.w)).astype(np.float32)
    w = rng.standard_normal((problem.k, problem.c, 3, 3)).astype(np.float32)
    ref = reference(x, w, padding=problem.padding)
    cfg = WinogradConfig(m=args.m, tiles_per_group=args.t, transform_pairs_per_thread=args.pairs,
                         gemm_math=args.gemm_math or DEFAULT_GEMM_MATH)
    plan = ex.make_plan(problem, cfg)
    d_x = cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    d_w = cuda.to_device(w)
    first = None
    failures: list[dict] = []
    styles: dict[str, int] = {}
    start = time.perf_counter()
    for i in range(args.mappings):
        schedule, info = _random_schedule(plan.graph, rng)
        style = str(rng.choice(["ticket", "blockidx", "ready", "persistent", "persistent-ready"]))
        if style.startswith("persistent"):
            k = int(rng.integers(1, 5))
            dispatch = "ready" if style.endswith("ready") else "ticket"
            schedule = schedule.with_style("persistent", dispatch, k)
            info["style"] = f"persistent-{k}" + ("-ready" if dispatch == "ready" else "")
        else:
            schedule = schedule.with_style("per_task", str(style))
            info["style"] = f"per_task-{style}"
        styles[info["style"]] = styles.get(info["style"], 0) + 1
        ws = ex.workspace(plan, d_x, d_w)
        ws.Y.copy_to_device(np.full(ws.Y.shape, np.nan, np.float32))     # poison: every output must be written
        try:
            ex.run_schedule(plan, schedule, ws, kernels="megakernel", poll_limit=args.poll_limit)
        except MegasimError as err:
            failures.append({**info, "error": str(err)})
            continue
        y = ws.Y.copy_to_host().transpose(0, 3, 1, 2)
        rel = float(np.linalg.norm(y - ref) / np.linalg.norm(ref)) if np.all(np.isfinite(y)) else float("inf")
        if first is None:
            first = y
        if not rel <= 1e-4 or not np.array_equal(y, first):
            failures.append({**info, "rel_err": rel, "bitwise_equal_to_first": bool(np.array_equal(y, first))})
    elapsed = time.perf_counter() - start
    report = {"layer": problem.spec_string(), "m": args.m, "tiles_per_group": args.t, "transform_pairs_per_thread": args.pairs, "mappings": args.mappings,
              "failures": len(failures), "failed": failures[:50], "styles": styles,
              "groups": counts(plan.graph)["N_G"], "tasks": plan.graph.num_tasks, "seconds": round(elapsed, 2),
              "device": str(getattr(cuda.get_current_device(), "name", "CUDA simulator"))}
    from megasim.calibration.validation import run_meta
    report["meta"] = run_meta({"gemm_math": plan.config.gemm_math,
                               "command": " ".join(["python -m gpu.diagnostics.fuzz", *sys.argv[1:]])})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz_megakernel.json").write_text(json.dumps(report, indent=1))
    print(f"{args.mappings} mappings of {problem.spec_string()} ({report['tasks']} tasks, {report['groups']} groups): "
          f"{len(failures)} failures in {elapsed:.1f} s; styles {styles}")
    return report


if __name__ == "__main__":
    raise SystemExit(1 if main()["failures"] else 0)
