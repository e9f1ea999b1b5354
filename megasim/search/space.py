"""The parameter space the optimiser searches: named discrete parameters and constraints.

Algorithm 1's D_IG and D_GO only make sense relative to the layer and to M: the smallest valid
values (``megasim.mapping.default_params``) range from tens to thousands. The space therefore holds
them as *multiples* of that smallest valid value (``d_ig_x``, ``d_go_x``), so that nearly every
point is valid for every layer; ``to_plan`` converts a point to absolute Plan values (and both are
recorded). ``d_ig_x = 1`` is the tightest valid D_IG for M; a larger multiple adds
``(x - 1) * unit`` input transforms, where the unit is that smallest D_IG (or ``M * S_I``, one
step's worth, when the smallest D_IG is 0). ``d_go_x`` multiplies the smallest valid D_GO.

Constraints return a one-line reason or None: an impossible combination is a point with a reason,
never an exception. Problem-dependent constraints (M <= N_G) apply once the space is bound to a
problem (``SearchSpace.bind``), which only counts groups (no lowering).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from megasim.errors import MegasimError
from megasim.algorithms.winograd.lowering import WinogradConfig, winograd_shape
from megasim.schedule import DISPATCHES, STYLES
from megasim.workloads.problem import ConvProblem


@dataclass(frozen=True)
class Parameter:
    name: str
    values: tuple[Any, ...]
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.values or len(set(self.values)) != len(self.values):
            raise MegasimError(f"parameter {self.name}: values must be non-empty and distinct, got {self.values}")


# Plan fields that the space's implementation parameters map to, and their Plan defaults.
_FIXED_DEFAULTS = {"t": 32, "threads": 128, "pairs": 4, "gemm_k_tile": 64, "gemm_threads": 128, "style": "per_task",
                   "dispatch": "ticket", "blocks_per_sm": 0, "d_ig_x": 1, "d_go_x": 1, "M": 4}


@dataclass(frozen=True)
class SearchSpace:
    parameters: tuple[Parameter, ...]
    name: str = "custom"
    # t -> N_G for the bound problem (empty: not bound, the M <= N_G check is skipped)
    groups_by_t: tuple[tuple[int, int], ...] = field(default=())

    def __post_init__(self) -> None:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise MegasimError(f"duplicate parameter names in {names}")
        unknown = [n for n in names if n not in _FIXED_DEFAULTS]
        if unknown:
            raise MegasimError(f"unknown parameter(s) {', '.join(unknown)} (allowed: {', '.join(_FIXED_DEFAULTS)})")

    # -- structure ---------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(p.values) for p in self.parameters)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def points(self) -> Iterator[dict[str, Any]]:
        """Every point, valid or not, in a fixed (row-major) order."""
        for combo in itertools.product(*(p.values for p in self.parameters)):
            yield dict(zip(self.names, combo))

    def valid_points(self) -> list[dict[str, Any]]:
        return [p for p in self.points() if self.constraint(p) is None]

    def point_at(self, index: Sequence[int]) -> dict[str, Any]:
        return {p.name: p.values[int(i)] for p, i in zip(self.parameters, index)}

    def index_of(self, point: dict[str, Any]) -> tuple[int, ...]:
        return tuple(p.values.index(point[p.name]) for p in self.parameters)

    def key(self, point: dict[str, Any]) -> str:
        """Kernel Tuner's cache key: the values in parameter order, comma-joined."""
        return ",".join(str(point[n]) for n in self.names)

    def full(self, point: dict[str, Any]) -> dict[str, Any]:
        """The point with every parameter the space does not vary set to its default."""
        return {**_FIXED_DEFAULTS, **point}

    # -- constraints -------------------------------------------------------------------------------
    def check_point(self, point: dict[str, Any]) -> None:
        """MegasimError if the point names unknown parameters or values outside the space."""
        for p in self.parameters:
            if p.name not in point:
                raise MegasimError(f"point {point} lacks parameter {p.name}")
            if point[p.name] not in p.values:
                raise MegasimError(f"{p.name}={point[p.name]!r} is not in the space (allowed: "
                                   f"{', '.join(map(str, p.values))})")

    def constraint(self, point: dict[str, Any]) -> str | None:
        """None if the point can run, else why not (one line)."""
        q = self.full(point)
        if q["style"] not in STYLES:
            return f"style={q['style']!r} is not allowed (allowed: {', '.join(STYLES)})"
        if q["dispatch"] not in DISPATCHES:
            return f"dispatch={q['dispatch']!r} is not allowed (allowed: {', '.join(DISPATCHES)})"
        if q["blocks_per_sm"] and q["style"] != "persistent":
            return "blocks_per_sm applies to style=persistent only"
        if q["d_ig_x"] < 1 or q["d_go_x"] < 1:
            return "d_ig_x and d_go_x are multiples of the smallest valid value: they must be >= 1"
        if self.groups_by_t:
            n_g = dict(self.groups_by_t).get(q["t"])
            if n_g is not None and q["M"] > n_g:
                return f"M={q['M']} is not allowed: it must be at most the number of groups N_G={n_g} (t={q['t']})"
        return None

    def bind(self, problem: ConvProblem) -> "SearchSpace":
        """This space with the problem-dependent constraints (M <= N_G for each t) switched on."""
        ts = dict(zip(self.names, (p.values for p in self.parameters))).get("t", (_FIXED_DEFAULTS["t"],))
        groups = []
        for t in ts:
            try:
                groups.append((t, winograd_shape(problem, WinogradConfig(tiles_per_group=t)).groups))
            except MegasimError:
                continue
        return replace(self, groups_by_t=tuple(groups))

    # -- neighbourhood (for local strategies) ------------------------------------------------------
    def neighbours(self, point: dict[str, Any]) -> list[dict[str, Any]]:
        """Points that differ in one parameter by one position in its value list."""
        idx = self.index_of(point)
        out = []
        for d, p in enumerate(self.parameters):
            for step in (-1, 1):
                j = idx[d] + step
                if 0 <= j < len(p.values):
                    out.append({**point, p.name: p.values[j]})
        return out


def default_space() -> SearchSpace:
    """The space `megasim optimize` searches unless told otherwise: 120 points before constraints.

    Algorithm 1's three parameters and the group size t. Threads, GEMM tile, execution style and
    dispatch stay at their defaults (128, 64, per_task, ticket): the model's best predictions barely
    move with them (persistent vs per_task: < 0.5% on resnet-2; the ready queue speeds up poor maps,
    not the best one: docs/winograd_gpu.md, session 17), so they live in ``full_space`` only, and the
    default space stays small enough that its exhaustive optimum is affordable for a benchmark.
    """
    return SearchSpace((
        Parameter("M", (1, 2, 4, 8, 16), "GEMM groups per batch (filter reuse, Sec. 5.4)"),
        Parameter("d_ig_x", (1, 2, 4, 8), "D_IG as a multiple of the smallest valid D_IG for M"),
        Parameter("d_go_x", (1, 2, 4), "D_GO as a multiple of the smallest valid D_GO for M"),
        Parameter("t", (32, 64), "tiles per group"),
    ), name="default")


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
    ), name="full")


SPACES = {"default": default_space, "full": full_space}
