"""The Winograd MegaKernel as an algorithm plug-in (the paper's Algorithm 1 and its baselines).

Parameters (``WinogradParams``): the implementation's tile m of F(m x m, 3 x 3), tiles per group t,
transform threads and pairs per transform thread, the GEMM's k-tile, threads and arithmetic; and
Algorithm 1's D_IG, D_GO, M (fused schedule only). Schedules: ``fused`` (Algorithm 1's order in one
megakernel), ``nonfused`` (four kernels, the GEMM in batched-GEMM grid order) and ``naive`` (the
non-fused order in one megakernel, the paper's Fig. 3a). Pairs per transform thread default by
schedule (``DEFAULT_TRANSFORM_PAIRS_PER_THREAD``); D_IG and D_GO default to the tightest valid values for
M (``algorithm1.default_params``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from megasim.algorithms.base import Algorithm, check_params, param_items
from megasim.algorithms.registry import register
from megasim.algorithms.winograd.algorithm1 import Algorithm1Params, algorithm1, default_params
from megasim.algorithms.winograd.lowering import (DEFAULT_GEMM_MATH, DEFAULT_TRANSFORM_PAIRS_PER_THREAD, FLOAT_BYTES,
                                                  GEMM_MATHS, GEMM_REGISTER_TILE, KINDS, MAX_TRANSFORM_PAIRS_PER_THREAD,
                                                  WinogradConfig,
                                                  gemm_kernel_order, lower_winograd, winograd_shape)
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES
from megasim.errors import MappingError
from megasim.hardware.spec import SPEC_CEILINGS
from megasim.orders import naive_fused, nonfused
from megasim.schedule import Schedule
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem


@dataclass(frozen=True)
class WinogradParams:
    d_ig: int | None = None
    d_go: int | None = None
    m: int | None = None
    tiles_per_group: int = 64
    tile: int = 4
    gemm_k_tile: int = 64
    transform_threads: int = 128
    transform_pairs_per_thread: int | None = None    # None: the schedule's default
    gemm_threads: int = 128
    gemm_math: str = DEFAULT_GEMM_MATH               # "fp32" (FP32 pipe) or "3xtf32" (tensor cores)

    KEYS: ClassVar[dict[str, str]] = {
        "D_IG": "d_ig", "D_GO": "d_go", "M": "m", "t": "tiles_per_group", "tile": "tile",
        "gemm_k_tile": "gemm_k_tile", "threads": "transform_threads", "pairs": "transform_pairs_per_thread",
        "gemm_threads": "gemm_threads", "gemm_math": "gemm_math"}
    CHOICES: ClassVar[dict[str, tuple]] = {"gemm_math": GEMM_MATHS, "tile": SUPPORTED_TILES}

    def __post_init__(self) -> None:
        check_params(self)
        check_gemm_sizes(self)
        check_thread_sizes(self)

    @property
    def config(self) -> WinogradConfig:
        """The lowering's implementation config (pairs per thread resolved: ``WINOGRAD.resolve``)."""
        if self.transform_pairs_per_thread is None:
            raise MappingError("pairs per transform thread is not resolved: build the plan (megasim.plan.build) "
                               "or give --param pairs=N")
        return WinogradConfig(m=self.tile, tiles_per_group=self.tiles_per_group,
                              transform_threads=self.transform_threads,
                              transform_pairs_per_thread=self.transform_pairs_per_thread,
                              gemm_k_tile=self.gemm_k_tile, gemm_threads=self.gemm_threads,
                              gemm_math=self.gemm_math)


# The most shared memory any GPU spec may give one block (SPEC_CEILINGS, 64 MiB): a GEMM block that needs
# more fits no GPU, so its t and gemm_k_tile are refused as parameters, before any lowering.
MAX_BLOCK_SHARED_BYTES = SPEC_CEILINGS["max_shared_mem_per_block_bytes"]


def check_thread_sizes(params: WinogradParams, source: str = "--param") -> None:
    """One-line MappingError naming the user's key (threads, gemm_threads, pairs) for a value the lowering
    cannot take (its own error named the config's fields: transform_pairs_per_thread=0)."""
    for key, value in (("threads", params.transform_threads), ("gemm_threads", params.gemm_threads)):
        if not (32 <= value <= 1024 and value % 32 == 0):
            raise MappingError(f"{source} {key}={value} is not allowed: it must be a multiple of 32 from 32 to 1024")
    pairs = params.transform_pairs_per_thread
    if pairs is not None and not 1 <= pairs <= MAX_TRANSFORM_PAIRS_PER_THREAD:
        raise MappingError(f"{source} pairs={pairs} is not allowed: it must be an integer from 1 to "
                           f"{MAX_TRANSFORM_PAIRS_PER_THREAD}")


def check_gemm_sizes(params: WinogradParams, source: str = "--param", limit: int = MAX_BLOCK_SHARED_BYTES,
                     holder: str = "any GPU spec may give a block") -> None:
    """One-line MappingError unless t (tiles per group) and gemm_k_tile are positive and a GEMM block's
    shared memory (``WinogradConfig.gemm_shared_bytes``: two stages of gemm_k_step x (t + gemm_k_tile)
    floats) is at most `limit` (default ``MAX_BLOCK_SHARED_BYTES``; a spec's own when the plan is resolved
    for it, `holder` naming whose); the message names the key, its value and its range."""
    t, k = params.tiles_per_group, params.gemm_k_tile
    for key, value in (("t", t), ("gemm_k_tile", k)):
        if value < 1:
            raise MappingError(f"{source} {key}={value} is not allowed: it must be a positive integer")
    cfg = WinogradConfig(m=params.tile, tiles_per_group=t, gemm_k_tile=k, transform_pairs_per_thread=1,
                         gemm_math=params.gemm_math)
    need = cfg.gemm_shared_bytes
    if need <= limit:
        return
    # rows + cols (each padded to GEMM_REGISTER_TILE) that fit: 2 stages x gemm_k_step x (rows + cols) floats.
    pad = GEMM_REGISTER_TILE
    fit = limit // (2 * cfg.gemm_k_step * FLOAT_BYTES)
    key, value, other, other_value = ("t", t, "gemm_k_tile", k) if t >= k else ("gemm_k_tile", k, "t", t)
    high = (fit - -(-other_value // pad) * pad) // pad * pad
    allowed = (f"it must be from 1 to {high:,} with {other}={other_value:,}" if high >= 1 else
               f"{other}={other_value:,} is too large as well: t + gemm_k_tile must be at most about {fit - pad:,}")
    raise MappingError(f"{source} {key}={value:,} is not allowed: a GEMM block would stage {need:,} bytes in shared "
                       f"memory, above the {limit:,} {holder}; {allowed}")


def winograd_nonfused(graph: TaskGraph) -> Schedule:
    """The non-fused Winograd pipeline: four kernels, the GEMM kernel in batched-GEMM grid order."""
    return nonfused(graph, {"gemm": gemm_kernel_order(graph)})


def winograd_naive(graph: TaskGraph) -> Schedule:
    """The non-fused order in one megakernel (the paper's Fig. 3a)."""
    return naive_fused(graph, {"gemm": gemm_kernel_order(graph)})


_LOWERED: OrderedDict[tuple, TaskGraph] = OrderedDict()   # the last few lowerings (searches revisit configs)
_LOWERED_KEEP = 4


class Winograd(Algorithm):
    name = "winograd"
    summary = "Winograd F(m x m, 3x3): the fused megakernel (Algorithm 1), the non-fused pipeline, naive"
    params_type = WinogradParams
    schedules = ("fused", "nonfused", "naive")
    kinds = KINDS
    megakernel = True
    calibration = "megakernel_kinds"
    point_param_keys = {"d_ig_x": "D_IG", "d_go_x": "D_GO"}

    def check(self, params: WinogradParams, schedule: str) -> None:
        if schedule != "fused" and any(v is not None for v in (params.d_ig, params.d_go, params.m)):
            raise MappingError(f"D_IG, D_GO and M apply to the fused schedule only, not to {schedule!r}")

    def resolve(self, problem: ConvProblem, params: WinogradParams, schedule: str, spec: Any) -> WinogradParams:
        limit = getattr(spec, "max_shared_mem_per_block_bytes", None)
        if limit is not None:       # the spec's own limit, named by t or gemm_k_tile (not the engine's bytes)
            check_gemm_sizes(params, limit=limit, holder=f"{spec.name} gives a block")
        if params.transform_pairs_per_thread is not None:
            return params
        return replace(params, transform_pairs_per_thread=DEFAULT_TRANSFORM_PAIRS_PER_THREAD[schedule])

    def lower(self, problem: ConvProblem, params: WinogradParams, schedule: str | None = None) -> TaskGraph:
        key = (problem, params.config)
        graph = _LOWERED.get(key)
        if graph is None:
            graph = lower_winograd(problem, params.config)
            _LOWERED[key] = graph
            if len(_LOWERED) > _LOWERED_KEEP:
                _LOWERED.popitem(last=False)
        return graph

    def order(self, graph: TaskGraph, params: WinogradParams, schedule: str) -> tuple[Schedule, WinogradParams]:
        if schedule == "nonfused":
            return winograd_nonfused(graph), params
        if schedule == "naive":
            return winograd_naive(graph), params
        if None in (params.m, params.d_ig, params.d_go):   # the tightest valid values fill what is not given
            base = default_params(graph, params.m if params.m is not None else 4)
            params = replace(params, m=params.m if params.m is not None else base.m,
                             d_ig=params.d_ig if params.d_ig is not None else base.d_ig,
                             d_go=params.d_go if params.d_go is not None else base.d_go)
        return algorithm1(graph, Algorithm1Params(params.d_ig, params.d_go, params.m)), params

    def footprint(self, problem: ConvProblem, params: WinogradParams, schedule: str | None = None) -> dict[str, int]:
        """The transformed filter U, input V and products M (float32, ``gpu.runtime.executor.workspace``), which
        every schedule allocates: alpha^2 x C x K, alpha^2 x tiles x C and alpha^2 x tiles x K. The task
        tables and dependency counters (a few int32 per task) are not counted."""
        cfg = params.config
        a2, tiles = cfg.alpha ** 2, winograd_shape(problem, cfg).tiles
        return {"U": a2 * problem.c * problem.k * 4, "V": a2 * tiles * problem.c * 4, "M": a2 * tiles * problem.k * 4}

    def param_string(self, params: WinogradParams) -> str:
        return ",".join(item for item in param_items(params)
                        if item != f"gemm_math={DEFAULT_GEMM_MATH}")   # written only when not the default

    def record_extras(self, plan: Any) -> dict[str, Any]:
        return {"D_IG": plan.params.d_ig, "D_GO": plan.params.d_go}

    def validation_plans(self, problem: ConvProblem, n: int, seed: int = 0) -> list[tuple[str, Any]]:
        from megasim.algorithms.winograd.validation import winograd_validation_plans
        return winograd_validation_plans(problem, n, seed)

    # -- search ------------------------------------------------------------------------------------
    @property
    def spaces(self):   # type: ignore[override]
        from megasim.algorithms.winograd.space import SPACES
        return SPACES

    @property
    def space_defaults(self):   # type: ignore[override]
        from megasim.algorithms.winograd.space import SPACE_DEFAULTS
        return SPACE_DEFAULTS

    def point_constraint(self, point: dict[str, Any], bound: tuple) -> str | None:
        from megasim.algorithms.winograd.space import point_constraint
        return point_constraint(point, bound)

    def bind_space(self, space: Any, problem: ConvProblem) -> tuple:
        from megasim.algorithms.winograd.space import groups_by_t
        return groups_by_t(space, problem)

    def coarse_batch(self, problem: ConvProblem) -> int:
        from megasim.algorithms.winograd.space import coarse_batch
        return coarse_batch(problem)

    def point_plan(self, problem: ConvProblem, point: dict[str, Any], base: Any) -> Any:
        from megasim.algorithms.winograd.space import point_plan
        return point_plan(problem, point, base)


WINOGRAD = register(Winograd())
