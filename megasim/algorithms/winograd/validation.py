"""Winograd's validation plans: the mappings ``megasim validate --algo winograd`` predicts and measures.

Per layer: the non-fused schedule, the naive fused order (the paper's Fig. 3a), Algorithm 1 with its
default parameters, an Algorithm 1 grid (M at its tightest D_IG/D_GO; D_IG and D_GO widened at
M = 4), t = 32 and a persistent grid at the defaults, then Algorithm 1 with random parameters within
the valid ranges (M from 1..16, D_IG and D_GO 1-8x / 1-4x their smallest valid values for that M).
Parameter sets that give the same program (TaskGraph and task maps) are measured once: the first
label keeps it. ``megasim.calibration.validation.summarize`` reads the labels ``nonfused`` and
``a1_default`` for the fused-over-non-fused speedup.
"""

from __future__ import annotations

import zlib

import numpy as np

from megasim.errors import MappingError
from megasim.workloads.problem import ConvProblem


def winograd_validation_plans(problem: ConvProblem, n: int, seed: int = 0) -> list[tuple[str, object]]:
    """Up to ``n`` (label, resolved Plan), each a different program, in a fixed order (deterministic)."""
    from megasim.algorithms.winograd.algorithm1 import default_params
    from megasim.algorithms.winograd.lowering import DEFAULT_TRANSFORM_PAIRS_PER_THREAD, lower_winograd
    from megasim.algorithms.winograd.plugin import WinogradParams
    from megasim.plan import Plan, build

    out: list[tuple[str, Plan]] = []
    seen: set = set()
    graph = lower_winograd(problem, WinogradParams(
        transform_pairs_per_thread=DEFAULT_TRANSFORM_PAIRS_PER_THREAD["fused"]).config)

    def add(label: str, plan: Plan) -> None:
        if len(out) >= n:
            return
        try:
            built, schedule, plan = build(problem, plan)
        except MappingError:
            return
        key = (built.hash, schedule.hash)
        if key not in seen:
            seen.add(key)
            out.append((label, plan))

    def scaled(m: int, x_ig: float, x_go: float) -> Plan | None:
        try:
            p = default_params(graph, m)
        except MappingError:
            return None
        if p.m != m:
            return None
        return Plan("fused", WinogradParams(d_ig=max(int(round(p.d_ig * x_ig)), p.d_ig),
                                            d_go=max(int(round(p.d_go * x_go)), p.d_go), m=m))

    add("nonfused", Plan("nonfused"))
    add("naive", Plan("naive"))
    add("a1_default", Plan("fused"))
    for m in (1, 2, 8, 16):
        p = scaled(m, 1, 1)
        if p:
            add(f"a1_M{m}", p)
    for x_ig, x_go in ((2, 1), (4, 1), (1, 2), (1, 4), (4, 4)):
        p = scaled(4, x_ig, x_go)
        if p:
            add(f"a1_M4_ig{x_ig}_go{x_go}", p)
    add("a1_default_t32", Plan("fused", WinogradParams(tiles_per_group=32)))
    add("a1_default_persistent", Plan("fused", style="persistent"))
    rng = np.random.default_rng([seed, zlib.crc32(problem.spec_string().encode())])
    tries = 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        m = int(rng.choice([1, 2, 3, 4, 6, 8, 12, 16]))
        p = scaled(m, float(rng.uniform(1, 8)), float(rng.uniform(1, 4)))
        if p:
            add("a1_random", p)
    return out
