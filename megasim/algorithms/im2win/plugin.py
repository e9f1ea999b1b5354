"""The im2win and im2col + GEMM plug-ins: parameters, schedule, search space, footprint.

``im2win`` (Lu et al., Euro-Par 2023): the window transform, then the tiled GEMM-view convolution of
Alg. 3 (or a variant of the paper's ablation: ``variant=basic|no_microkernel|no_vector|no_prefetch``; or its
multiply-adds on TF32 tensor cores by the FP32-accurate 3xTF32 split: ``math=3xtf32``).
``im2col_gemm``: the im2col matrix, then a batched GEMM tiled the same way (the model of
torch ``unfold`` + ``matmul``; it has no kernel table of its own: the GPU side measures torch).
``naive_direct``: the paper's naive direct convolution (one thread per output, every tap from global
memory: ``gpu.kernels.im2win.direct``, the bench's ``direct``; any filter size). The sparse family's
``direct`` is another, tiled dense direct convolution (at most 36 window elements per channel).

Both lower to two launches (``megasim.algorithms.im2win.lowering``): transform, then convolution.
Their costs are the GPUSpec's entries for the kinds ``im2win_transform``, ``im2win_conv`` (a
variant's kind ``im2win_conv_VARIANT`` is priced as ``im2win_conv@VARIANT``, which falls back to it),
``im2col_transform`` and ``im2col_gemm``, or its
``default`` entry until calibrated. ``footprint(problem, params)`` gives the bytes each allocates
beyond input, filter and output (the CLI's ``extra memory``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from megasim.algorithms.base import Algorithm, check_params
from megasim.algorithms.im2win.lowering import conv_kind, footprint_bytes, launches, lower_im2win, lower_naive_direct
from megasim.algorithms.im2win.tiling import (DEFAULT_M_B_CHOICES, MATHS, NO_MICROKERNEL_TILE, VARIANTS, Im2winTiling,
                                              default_m_b)
from megasim.algorithms.registry import register
from megasim.errors import MappingError
from megasim.schedule import Schedule
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

TILES = (32, 64, 128)
K_STEPS = (8, 16)
THREAD_TILES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Im2winParams:
    """Block tile m_b x n_b (filters x output pixels), K step k_b, register tile m_t x n_t, variant.
    ``m_b=None``: ``tiling.default_m_b``'s rule for the problem (filled in by ``Im2win.resolve``)."""

    m_b: int | None = None
    n_b: int = 128
    k_b: int = 16
    m_t: int = 8
    n_t: int = 8
    variant: str = "optimized"
    math: str = "fp32"

    KEYS: ClassVar[dict[str, str]] = {"m_b": "m_b", "n_b": "n_b", "k_b": "k_b", "m_t": "m_t", "n_t": "n_t",
                                      "variant": "variant", "math": "math"}
    CHOICES: ClassVar[dict[str, tuple]] = {"m_b": TILES, "n_b": TILES, "k_b": K_STEPS, "m_t": THREAD_TILES,
                                           "n_t": THREAD_TILES, "variant": VARIANTS, "math": MATHS}

    def __post_init__(self) -> None:
        check_params(self)
        if self.m_b is not None:
            self.tiling   # the layout checks (one line each)
        else:             # every filter tile the rule may pick must run
            for m_b in DEFAULT_M_B_CHOICES[self.variant == "no_microkernel"]:
                replace(self, m_b=m_b)

    @property
    def tiling(self) -> Im2winTiling:
        if self.m_b is None:
            raise MappingError("im2win parameters with m_b=None have no tiling yet: resolve them for a problem "
                               "(megasim.plan.build does)")
        return Im2winTiling(self.m_b, self.n_b, self.k_b, self.m_t, self.n_t, self.variant, self.math)


@dataclass(frozen=True)
class Im2colParams:
    """The batched GEMM's block tile m_b x n_b, K step k_b and register tile m_t x n_t."""

    m_b: int = 128
    n_b: int = 128
    k_b: int = 8
    m_t: int = 8
    n_t: int = 8

    KEYS: ClassVar[dict[str, str]] = {"m_b": "m_b", "n_b": "n_b", "k_b": "k_b", "m_t": "m_t", "n_t": "n_t"}
    CHOICES: ClassVar[dict[str, tuple]] = {"m_b": TILES, "n_b": TILES, "k_b": K_STEPS, "m_t": THREAD_TILES,
                                           "n_t": THREAD_TILES}

    def __post_init__(self) -> None:
        check_params(self)
        self.tiling

    @property
    def tiling(self) -> Im2winTiling:
        return Im2winTiling(self.m_b, self.n_b, self.k_b, self.m_t, self.n_t, "optimized")


class _TiledConv(Algorithm):
    """A transform launch then a tiled GEMM-view launch (module docstring); ``method`` picks the tensor."""

    method: ClassVar[str]
    schedules = ("kernel",)

    def lower(self, problem: ConvProblem, params: Any, schedule: str | None = None) -> TaskGraph:
        params = self.resolve(problem, params, schedule or self.default_schedule, None)
        return lower_im2win(problem, params.tiling, self.method)[0]

    def order(self, graph: TaskGraph, params: Any, schedule: str) -> tuple[Schedule, Any]:
        """The transform's launches (im2win: one; im2col: one per image), then the conv launch, each in grid
        order (``lowering.launches``: the order lower builds)."""
        return Schedule(schedule, launches(graph), {"method": self.method}), params

    def footprint(self, problem: ConvProblem, params: Any, schedule: str | None = None) -> dict[str, int]:
        """Bytes of each tensor allocated beyond input, filter and output (one schedule)."""
        return footprint_bytes(problem, self.method)

    # -- search: tile sizes and threads ------------------------------------------------------------
    @property
    def spaces(self):   # type: ignore[override]
        from megasim.search.space import Parameter, SearchSpace
        maths = (Parameter("math", MATHS, "the micro-kernel's math: FP32 pipe or 3xTF32 tensor cores"),) \
            if self.searches_math else ()
        tiles = (Parameter("m_b", TILES, "filters per block"), Parameter("n_b", TILES, "output pixels per block"),
                 Parameter("k_b", K_STEPS, "K step"), Parameter("m_t", (4, 8), "filters per thread"),
                 Parameter("n_t", (4, 8), "output pixels per thread"))
        out = {"default": lambda: SearchSpace((*tiles, *maths), name="default", algorithm=self.name)}
        if self.calibrated_m_b:
            out = {"default": lambda: SearchSpace((Parameter("m_b", self.calibrated_m_b, "filters per block"), *maths),
                                                  name="default", algorithm=self.name),
                   "tiles": lambda: SearchSpace((*tiles, *maths), name="tiles", algorithm=self.name)}
        return out

    searches_math: ClassVar[bool] = False
    # Filter tiles of the builds the calibration times (the other tile fields at the params' defaults); empty:
    # the default space is every tile (the model's own tiling of a library GEMM, im2col_gemm)
    calibrated_m_b: ClassVar[tuple[int, ...]] = ()
    space_defaults: ClassVar[dict[str, Any]] = {"m_b": 128, "n_b": 128, "k_b": 8, "m_t": 8, "n_t": 8}

    def _point_fields(self, point: dict[str, Any]) -> dict[str, Any]:
        """The params fields a point sets: its tile fields (the params' defaults for those it does not
        search) and its math, if it searches one."""
        defaults = self.params_type()
        fields = {k: int(point[k]) if k in point else getattr(defaults, k) for k in ("m_b", "n_b", "k_b", "m_t", "n_t")}
        if "math" in point:
            fields["math"] = str(point["math"])
        return fields

    def point_constraint(self, point: dict[str, Any], bound: tuple) -> str | None:
        """Why a point's layout cannot run (threads outside 32..1024, staging, shared memory, a tile the
        tensor cores cannot tile), or None."""
        fields = self._point_fields(point)
        try:
            Im2winTiling(*(fields[k] for k in ("m_b", "n_b", "k_b", "m_t", "n_t")), math=fields.get("math", "fp32"))
        except MappingError as e:
            return str(e)
        return None

    def point_plan(self, problem: ConvProblem, point: dict[str, Any], base: Any) -> Any:
        from megasim.plan import Plan
        base = base or Plan(algorithm=self.name)
        return replace(base, params=replace(base.params, **self._point_fields(point)))


class Im2win(_TiledConv):
    name = "im2win"
    calibration = "im2win_kinds"
    summary = "im2win: window-ordered input tensor, then a tiled GEMM-view convolution (Lu et al. 2023)"
    params_type = Im2winParams
    kinds = ("im2win_transform", *(conv_kind(v) for v in VARIANTS))
    method = "im2win"
    searches_math = True
    # The default space is the builds the calibration times (64- and 128-row filter tiles of n_b 128, k_b 16,
    # 8 x 8 register tiles; the 3xTF32 build at 64 rows): the model is not fitted on other tiles, and its picks
    # there measured slower than the default build (docs/im2win.md). ``--space tiles`` searches every tile.
    calibrated_m_b = (64, 128)
    space_defaults: ClassVar[dict[str, Any]] = {"m_b": 64, "n_b": 128, "k_b": 16, "m_t": 8, "n_t": 8, "math": "fp32"}

    def resolve(self, problem: ConvProblem, params: Im2winParams, schedule: str, spec: Any) -> Im2winParams:
        """m_b=None: the rule of ``tiling.default_m_b`` (64 filters per block; 32 for ``no_microkernel``).
        ``math=3xtf32`` needs a spec that prices the tensor-core build (its cost name ``im2win_conv@3xtf32``):
        falling back to the FP32 kernel's cost would predict another kernel's time."""
        costs = getattr(spec, "task_costs", None)
        if params.math != "fp32" and costs is not None and f"im2win_conv@{params.math}" not in costs:
            raise MappingError(f"--param math={params.math} is not allowed with GPU spec {spec.name!r}: it has no cost "
                               f"for im2win_conv@{params.math} (the tensor-core build); give a spec that has one, e.g. "
                               f"experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json, or calibrate it "
                               f"(docs/im2win.md)")
        if params.m_b is not None:
            return params
        return replace(params, m_b=default_m_b(problem, params.variant, getattr(spec, "sm_count", None)))

    def validation_plans(self, problem: ConvProblem, n: int, seed: int = 0) -> list[tuple[str, Any]]:
        """The default tiling under each variant (the paper's ablation), in VARIANTS order."""
        from megasim.plan import Plan
        out = []
        for variant in VARIANTS:
            params = Im2winParams(**NO_MICROKERNEL_TILE) if variant == "no_microkernel" else Im2winParams()
            params = self.resolve(problem, replace(params, variant=variant), "kernel", None)
            out.append((variant, Plan("kernel", params, self.name)))
        return out[:n]


class Im2colGemm(_TiledConv):
    name = "im2col_gemm"
    summary = "im2col matrix, then a tiled batched GEMM (the model of torch unfold + matmul)"
    params_type = Im2colParams
    kinds = ("im2col_transform", "im2col_gemm")
    method = "im2col"
    # Nothing to search: the GEMM's tiles are the model's stand-in for the ones cuBLAS picks per shape (its cost
    # fitted at the default tile), not a choice a user of torch's matmul has.
    spaces: ClassVar[dict] = {}


@dataclass(frozen=True)
class NaiveDirectParams:
    """The naive direct convolution has no mapping parameters (one thread per output, blocks of 256)."""

    KEYS: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        check_params(self)


class NaiveDirect(Algorithm):
    """The im2win paper's naive direct convolution (``lowering.lower_naive_direct``); its cost is the
    GPUSpec's entry ``naive_direct`` (fitted with the im2win kinds: ``megasim calibrate --algo im2win``)."""

    name = "naive_direct"
    summary = "naive direct convolution: one thread per output, every tap from global memory (the im2win paper's)"
    params_type = NaiveDirectParams
    kinds = ("naive_direct",)
    schedules = ("kernel",)

    def lower(self, problem: ConvProblem, params: Any, schedule: str | None = None) -> TaskGraph:
        return lower_naive_direct(problem)[0]

    def order(self, graph: TaskGraph, params: Any, schedule: str) -> tuple[Schedule, Any]:
        """One launch, the blocks in grid order."""
        import numpy as np
        from megasim.schedule import Launch
        return Schedule(schedule, (Launch(np.arange(graph.num_tasks), name="naive_direct"),),
                        {"method": "naive_direct"}), params

    def footprint(self, problem: ConvProblem, params: Any, schedule: str | None = None) -> dict[str, int]:
        """Nothing beyond input, filter and output."""
        return {}


IM2WIN = register(Im2win())
IM2COL_GEMM = register(Im2colGemm())
NAIVE_DIRECT = register(NaiveDirect())
