"""Winograd's search space: Algorithm 1's parameters and the implementation's, as the optimiser sees them.

Algorithm 1's D_IG and D_GO only make sense relative to the layer and to M: the smallest valid values
(``algorithm1.default_params``) range from tens to thousands. The space therefore holds them as
*multiples* of that smallest valid value (``d_ig_x``, ``d_go_x``), so that nearly every point is valid
for every layer; ``point_plan`` converts a point to absolute Plan values (and both are recorded).
``d_ig_x = 1`` is the tightest valid D_IG for M; a larger multiple adds ``(x - 1) * unit`` input
transforms, where the unit is that smallest D_IG (or ``M * S_I``, one step's worth, when the smallest
D_IG is 0). ``d_go_x`` multiplies the smallest valid D_GO. The problem-dependent constraint M <= N_G
applies once the space is bound to a problem (``groups_by_t`` counts groups without lowering).

The low-fidelity problem of a search (``coarse_batch``), measured on resnet-1 (docs/optimizer.md): at 37
groups the ranking of the default space is unrelated to the full batch's (Spearman -0.02); it improves
with the group count, so the coarse problem keeps at least COARSE_MIN_GROUPS groups at t=32, and is only
used where the full problem is large enough for the saving to matter.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from collections import OrderedDict

from megasim.algorithms.winograd.algorithm1 import counts, scaled_params
from megasim.algorithms.winograd.lowering import WinogradConfig, winograd_shape
from megasim.algorithms.winograd.plugin import WINOGRAD, WinogradParams
from megasim.errors import MappingError, MegasimError
from megasim.search.space import Parameter, SearchSpace
from megasim.workloads.problem import ConvProblem

# Every parameter the space may vary, with the value it takes when the space does not vary it.
SPACE_DEFAULTS = {"t": 32, "threads": 128, "pairs": 4, "gemm_k_tile": 64, "gemm_threads": 128, "style": "per_task",
                  "dispatch": "ticket", "blocks_per_sm": 0, "d_ig_x": 1, "d_go_x": 1, "M": 4}
COARSE_MIN_TASKS = 40_000
COARSE_MIN_GROUPS = 128
COARSE_DIVISOR = 8


def default_space() -> SearchSpace:
    """The space `megasim optimize` searches unless told otherwise: 1,680 points before constraints.

    Algorithm 1's three parameters on finer grids than ``algorithm1_space`` (D_GO up to 8x: the
    smaller space's optimum sat at its edge, d_go_x = 4, on 12 of 13 layers), the group size t, and
    the execution: one block per task or a persistent grid, tickets in map order or the ready queue.
    Large enough that a budget of 200 is spent on 200 distinct programs on every Table-2 layer (the
    search answers points that build the same program, e.g. a D_IG past the last input transform, from
    the first one, uncounted). It contains ``algorithm1_space`` (the execution at its defaults).
    """
    return SearchSpace((
        Parameter("M", (1, 2, 4, 8, 16), "GEMM groups per batch (filter reuse, Sec. 5.4)"),
        Parameter("d_ig_x", (1, 1.5, 2, 3, 4, 6, 8), "D_IG as a multiple of the smallest valid D_IG for M"),
        Parameter("d_go_x", (1, 2, 3, 4, 6, 8), "D_GO as a multiple of the smallest valid D_GO for M"),
        Parameter("t", (32, 64), "tiles per group"),
        Parameter("style", ("per_task", "persistent"), "one block per task, or a persistent grid"),
        Parameter("dispatch", ("ticket", "ready"), "ticket in map order, or the ready queue"),
    ), name="default", algorithm="winograd")


def algorithm1_space() -> SearchSpace:
    """Algorithm 1's three parameters and the group size t, 120 points; threads, GEMM tile, execution
    style and dispatch at their defaults (128, 64, per_task, ticket). Small enough to search
    exhaustively (the optimiser benchmark's reference) and to measure on the GPU (the bench's fused
    sweep is its t = 64 half)."""
    return SearchSpace((
        Parameter("M", (1, 2, 4, 8, 16), "GEMM groups per batch (filter reuse, Sec. 5.4)"),
        Parameter("d_ig_x", (1, 2, 4, 8), "D_IG as a multiple of the smallest valid D_IG for M"),
        Parameter("d_go_x", (1, 2, 4), "D_GO as a multiple of the smallest valid D_GO for M"),
        Parameter("t", (32, 64), "tiles per group"),
    ), name="algorithm1", algorithm="winograd")


def full_space() -> SearchSpace:
    """Every parameter the optimiser knows, with more values (large: for sampling strategies)."""
    return SearchSpace((
        Parameter("M", (1, 2, 4, 8, 16)),
        Parameter("d_ig_x", (1, 1.5, 2, 3, 4, 6, 8)),
        Parameter("d_go_x", (1, 2, 4)),
        Parameter("t", (32, 64)),
        Parameter("threads", (128, 256)),
        Parameter("pairs", (1, 2, 4, 8), "pairs per transform thread"),
        Parameter("gemm_k_tile", (32, 64)),
        Parameter("gemm_threads", (128, 256)),
        Parameter("style", ("per_task", "persistent")),
        Parameter("blocks_per_sm", (0, 1, 2, 4), "persistent grid blocks per SM; 0 = as many as fit"),
        Parameter("dispatch", ("ticket", "ready"), "ticket in map order, or the ready queue"),
    ), name="full", algorithm="winograd")


SPACES = {"default": default_space, "algorithm1": algorithm1_space, "full": full_space}


def point_constraint(q: dict[str, Any], bound: tuple) -> str | None:
    if q["d_ig_x"] < 1 or q["d_go_x"] < 1:
        return "d_ig_x and d_go_x are multiples of the smallest valid value: they must be >= 1"
    n_g = dict(bound).get(q["t"])
    if n_g is not None and q["M"] > n_g:
        return f"M={q['M']} is not allowed: it must be at most the number of groups N_G={n_g} (t={q['t']})"
    return None


def groups_by_t(space: SearchSpace, problem: ConvProblem) -> tuple:
    """(t, N_G) for each t the space takes: the data of the M <= N_G constraint."""
    ts = dict(zip(space.names, (p.values for p in space.parameters))).get("t", (SPACE_DEFAULTS["t"],))
    groups = []
    for t in ts:
        try:
            groups.append((t, winograd_shape(problem, WinogradConfig(tiles_per_group=t)).groups))
        except MegasimError:
            continue
    return tuple(groups)


_TIGHTEST: OrderedDict[tuple, tuple[int, int, int]] = OrderedDict()   # (problem, config, M) -> D_IG, D_GO, unit
_TIGHTEST_KEEP = 64


def _tightest(problem: ConvProblem, params: WinogradParams, m: int) -> tuple[int, int, int]:
    """(smallest valid D_IG, smallest valid D_GO, D_IG unit) for M, as ``scaled_params`` computes them,
    remembered per (problem, config, M): ``default_params`` tries maps until one is valid, which costs
    as much as a tenth of a large layer's simulation, and a search asks for the same M hundreds of times."""
    key = (problem, params.config, m)
    hit = _TIGHTEST.get(key)
    if hit is None:
        graph = WINOGRAD.lower(problem, params)
        one = scaled_params(graph, m, 1, 1)        # MappingError when M > N_G
        unit = one.d_ig if one.d_ig > 0 else m * counts(graph)["S_I"]
        hit = _TIGHTEST[key] = (one.d_ig, one.d_go, unit)
        if len(_TIGHTEST) > _TIGHTEST_KEEP:
            _TIGHTEST.popitem(last=False)
    return hit


def point_plan(problem: ConvProblem, point: dict[str, Any], base: Any):
    """The absolute Plan of a (full) point: D_IG, D_GO from the multiples d_ig_x, d_go_x (the formula of
    ``algorithm1.scaled_params``; a test checks they agree); the base plan's tile and GEMM math kept."""
    from megasim.plan import Plan
    base_params = base.params if base is not None else WinogradParams()
    params = replace(base_params, d_ig=None, d_go=None, m=None, tiles_per_group=int(point["t"]),
                     transform_threads=int(point["threads"]), transform_pairs_per_thread=int(point["pairs"]),
                     gemm_k_tile=int(point["gemm_k_tile"]), gemm_threads=int(point["gemm_threads"]))
    m = int(point["M"])
    for name in ("d_ig_x", "d_go_x"):
        if not point[name] >= 1:
            raise MappingError(f"{name}={point[name]!r} is not allowed: it must be a number >= 1")
    d_ig, d_go, unit = _tightest(problem, params, m)
    d_ig = int(d_ig + round((float(point["d_ig_x"]) - 1) * unit))
    d_go = int(round(float(point["d_go_x"]) * d_go))
    return Plan("fused", replace(params, d_ig=d_ig, d_go=d_go, m=m), algorithm="winograd",
                style=point["style"], dispatch=point["dispatch"], blocks_per_sm=int(point["blocks_per_sm"]) or None)


def _tasks(problem: ConvProblem, cfg: WinogradConfig) -> int:
    shape = winograd_shape(problem, cfg)
    return shape.n_f + shape.groups * (shape.s_i + shape.s_g + shape.s_o)


def coarse_batch(problem: ConvProblem) -> int:
    """The batch of the low-fidelity problem: about N / 8, but at least COARSE_MIN_GROUPS groups of 32
    tiles; N (no coarse problem) when that is not at most half the batch or the full problem has fewer
    than COARSE_MIN_TASKS tasks (it is cheap enough to simulate as it is)."""
    cfg = WinogradConfig(tiles_per_group=32)
    if _tasks(problem, cfg) < COARSE_MIN_TASKS:
        return problem.n
    one = winograd_shape(replace(problem, n=1), cfg)
    batch = max(math.ceil(problem.n / COARSE_DIVISOR), math.ceil(COARSE_MIN_GROUPS * 32 / one.tiles))
    return batch if 2 * batch <= problem.n else problem.n
