"""The sparse-convolution family as algorithm plug-ins: ECR, PECR and their dense twins.

Four algorithms share one lowering (``lowering.lower_sparse``) and differ in the kernel they run:

- ``ecr``: ECR sparse convolution (each thread compresses its window's nonzeros, then multiplies);
- ``direct``: its dense twin, the same tiling multiplying every window element;
- ``pecr``: PECR, convolution + ReLU + max-pool in one kernel, skipping zeros;
- ``direct_fused``: its dense twin.

The pooled two have a second schedule, ``unfused``: the chain their fused kernel replaces (the
convolution kernel, then ReLU, then max-pool: three launches). Parameters (``SparseParams``,
``PooledSparseParams``): the map's zeros (``sparsity``, ``pattern``, ``cluster_px``, ``seed``; a real map
goes through ``predict.predict_sparse(x=...)``), the filter tile ``k_tile`` (None: chosen for the GPU's
SM count, ``tiling.choose_tiling``) and, for the pooled ones, the pool (``--param pool=SIZExSTRIDE``).
The time compared with a GPU measurement is the kernel span (first launch's start to last launch's end):
CUDA events around the launches measure it, the host's launch cost is outside it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from megasim.algorithms.base import Algorithm, check_params, param_items
from megasim.algorithms.registry import register
from megasim.algorithms.sparse.lowering import lower_sparse
from megasim.algorithms.sparse.tiling import CONV_K_TILES, FUSED_K_TILES, FUSED_KINDS, PoolSpec, choose_tiling, pooled_hw
from megasim.errors import MappingError
from megasim.schedule import Launch, Schedule
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem
from megasim.workloads.sparse import PATTERNS, SparsitySpec


def _pool(text: str) -> dict[str, Any]:
    size, sep, stride = text.partition("x")
    try:
        return {"pool_size": int(size), "pool_stride": int(stride)}
    except ValueError:
        raise MappingError(f"--param pool={text!r} is not allowed: write SIZExSTRIDE, e.g. pool=2x2") from None


@dataclass(frozen=True)
class SparseParams:
    sparsity: float = 0.0
    pattern: str = "uniform"
    cluster_px: int = 4
    seed: int = 0
    k_tile: int | None = None

    KEYS: ClassVar[dict[str, str]] = {"sparsity": "sparsity", "pattern": "pattern", "cluster_px": "cluster_px",
                                      "seed": "seed", "k_tile": "k_tile"}
    CHOICES: ClassVar[dict[str, tuple]] = {"pattern": PATTERNS}
    INT_RANGES: ClassVar[dict[str, tuple[int, int]]] = {"seed": (0, 2 ** 64 - 1)}

    def __post_init__(self) -> None:
        check_params(self)
        self.sparsity_spec   # the range checks of SparsitySpec

    @property
    def sparsity_spec(self) -> SparsitySpec:
        return SparsitySpec(float(self.sparsity), self.pattern, cluster_px=self.cluster_px, seed=self.seed)

    @property
    def pool(self) -> PoolSpec | None:
        return None


@dataclass(frozen=True)
class PooledSparseParams(SparseParams):
    pool_size: int = 2
    pool_stride: int = 2

    KEYS: ClassVar[dict[str, str]] = {**SparseParams.KEYS}
    PARSERS: ClassVar[dict[str, Any]] = {"pool": _pool}

    def __post_init__(self) -> None:
        super().__post_init__()
        self.pool   # PoolSpec's checks

    @property
    def pool(self) -> PoolSpec:
        return PoolSpec(self.pool_size, self.pool_stride)


class SparseConv(Algorithm):
    """One kernel of the family (see the module docstring); `kind` is its conv kind."""

    kinds: tuple[str, ...]
    calibration = "sparse_kinds"
    # The lowering generates the whole batch's feature map and counts every window's nonzeros: about 1.3 KB
    # per pixel (N*H*W; 1024x1024 at C = 4 to 64: 1.3-1.6 GB) and 0.3 us per input element (C=64 at
    # 1024x1024: 21 s; VGG-19's conv1_2 at batch 64: about 30 s). The limits sit just above the largest
    # catalogue layer at batch 64 (yolov3/conv0: 11 million pixels, 354 million input elements), about
    # 22 GB and 3 min at most; a larger problem is refused before it is lowered (before: C=10**9 at 1x1 or a
    # 46340x46340 image ran NumPy out of memory as a traceback).
    max_elements = {"pixels N*H*W": 2 ** 24, "input N*C*H*W": 2 ** 29, "output N*K*P*Q": 2 ** 29}

    def __init__(self, name: str, summary: str) -> None:
        self.name, self.summary = name, summary
        self.pooled = name in FUSED_KINDS
        self.sparse = name in ("ecr", "pecr")      # skips the zeros (the dense twins multiply every element)
        self.params_type = PooledSparseParams if self.pooled else SparseParams
        self.schedules = ("fused", "unfused") if self.pooled else ("kernel",)
        conv = {"pecr": "ecr", "direct_fused": "direct"}.get(name, name)
        self._conv = conv
        self.kinds = (name, conv, "relu", "maxpool") if self.pooled else (name,)
        self.k_tiles = FUSED_K_TILES if self.pooled else CONV_K_TILES

    def op(self, schedule: str) -> str:
        """lower_sparse's op of a schedule: the kernel itself, or the unfused chain."""
        return f"unfused_{self._conv}" if schedule == "unfused" else self.name

    def resolve(self, problem: ConvProblem, params: SparseParams, schedule: str, spec: Any) -> SparseParams:
        if params.k_tile is not None:
            return params
        kind = self.op(schedule).removeprefix("unfused_")
        sm_count = spec.sm_count if spec is not None else 1
        tiling = choose_tiling(problem, kind, sm_count, pool=params.pool if kind in FUSED_KINDS else None)
        return replace(params, k_tile=tiling.k_tile)

    def lower(self, problem: ConvProblem, params: SparseParams, schedule: str | None = None, *,
              costed: bool = True) -> TaskGraph:
        """The graph of the schedule's kernels; k_tile None: the tile lower_sparse picks for one SM (``resolve``
        picks it for the GPU). ``costed=False``: its structure only, for the GPU executor (``lower_sparse``)."""
        graph, _, _ = lower_sparse(problem, self.op(schedule or self.default_schedule), 1,
                                   sparsity=params.sparsity_spec, pool=params.pool, k_tile=params.k_tile,
                                   costed=costed)
        return graph

    def order(self, graph: TaskGraph, params: SparseParams, schedule: str) -> tuple[Schedule, SparseParams]:
        """One launch per kernel, each in grid order (the order lower_sparse builds its tasks in)."""
        op = self.op(schedule)
        launches = []
        for k, name in enumerate(graph.kind_names):
            tasks = np.flatnonzero(graph.kind == k)
            if tasks.size:
                launches.append(Launch(tasks, name=name))
        return Schedule(op, tuple(launches), {"op": op, "k_tile": params.k_tile}), params

    def footprint(self, problem: ConvProblem, params: SparseParams, schedule: str | None = None) -> dict[str, int]:
        """What the kernels allocate beyond input, filter and output (``gpu.runtime.sparse_kernels``): nothing,
        but the unfused chain's convolution output and its ReLU before pooling (float32, N x K x P x Q each)."""
        if (schedule or self.default_schedule) != "unfused":
            return {}
        plane = problem.n * problem.k * problem.out_h * problem.out_w * 4
        return {"conv output": plane, "activated": plane}

    def param_string(self, params: SparseParams) -> str:
        items = param_items(params)
        if self.pooled:
            items.append(f"pool={params.pool_size}x{params.pool_stride}")
        return ",".join(items)

    def time_us(self, result) -> float:
        return kernel_us(result)

    # -- validation: filter tiles x sparsity x schedules --------------------------------------------
    def validation_plans(self, problem: ConvProblem, n: int, seed: int = 0) -> list[tuple[str, Any]]:
        """Up to ``n`` (label, Plan), every field explicit: each filter tile and schedule on uniform maps
        of sparsity 0.5, 0.0, 0.8 and 0.95 (in that order), then random ones (sparsity 0-0.95, either
        pattern, map seed, tile and schedule drawn from ``seed`` and the problem). A tile or pool the
        problem cannot take is left out; the dense twins get one plan per tile and schedule (their
        program does not depend on the map's zeros). The measured input is the map the parameters describe
        (``megasim.workloads.sparse.sparse_feature_map``), the one the model counts its costs from."""
        import zlib
        from megasim.errors import LoweringError
        from megasim.plan import Plan
        out: list[tuple[str, Any]] = []
        seen: set = set()

        def add(label: str, schedule: str, params: SparseParams) -> None:
            kind = self.op(schedule).removeprefix("unfused_")
            try:
                choose_tiling(problem, kind, 1, pool=params.pool if kind in FUSED_KINDS else None, k_tile=params.k_tile)
                if params.pool is not None:
                    pooled_hw(problem, params.pool)
            except LoweringError:
                return
            # the dense twins' program (graph and order) does not depend on the map: one per tile and schedule
            key = (schedule, params if self.sparse else replace(params, sparsity=0.0, pattern="uniform", seed=0))
            if len(out) < n and key not in seen:
                seen.add(key)
                out.append((label, Plan(schedule, params, self.name)))

        for sparsity in (0.5, 0.0, 0.8, 0.95):
            for kt in self.k_tiles:
                for schedule in self.schedules:
                    add(f"{schedule}_kt{kt}_s{round(sparsity * 100)}", schedule,
                        self.params_type(sparsity=sparsity, k_tile=kt))
        rng = np.random.default_rng([seed, zlib.crc32(problem.spec_string().encode())])
        for _ in range(20 * n):
            if len(out) >= n:
                break
            sparsity = round(float(rng.uniform(0.0, 0.95)), 2)
            params = self.params_type(sparsity=sparsity, pattern=str(rng.choice(PATTERNS)),
                                      seed=int(rng.integers(0, 1000)), k_tile=int(rng.choice(self.k_tiles)))
            add("random", str(rng.choice(self.schedules)), params)
        return out

    # -- search: the filter tile -------------------------------------------------------------------
    @property
    def spaces(self):   # type: ignore[override]
        from megasim.search.space import Parameter, SearchSpace
        return {"default": lambda: SearchSpace((Parameter("k_tile", self.k_tiles, "filters per block"),),
                                               name="default", algorithm=self.name)}

    @property
    def space_defaults(self):   # type: ignore[override]
        return {"k_tile": self.k_tiles[0]}

    def point_plan(self, problem: ConvProblem, point: dict[str, Any], base: Any) -> Any:
        from megasim.plan import Plan
        base = base or Plan(algorithm=self.name)
        return replace(base, params=replace(base.params, k_tile=int(point["k_tile"])))


def kernel_us(result) -> float:
    """First launch's start to last launch's end, in us."""
    return (result.launches[-1].end_ns - result.launches[0].start_ns) / 1e3


ECR = register(SparseConv("ecr", "ECR sparse convolution (zeros of the input skipped)"))
DIRECT = register(SparseConv("direct", "dense direct convolution, ECR's twin"))
PECR = register(SparseConv("pecr", "PECR: sparse convolution + ReLU + max-pool in one kernel"))
DIRECT_FUSED = register(SparseConv("direct_fused", "dense convolution + ReLU + max-pool in one kernel, PECR's twin"))
