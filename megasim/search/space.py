"""The parameter space the optimiser searches: named discrete parameters and constraints.

A space belongs to an algorithm (``megasim.algorithms``): the algorithm says which parameters exist and
their values when the space does not vary them (``space_defaults``), which combinations cannot run
(``point_constraint``, with problem data computed once by ``bind_space``) and how a point becomes a Plan
(``point_plan``). The algorithms' own spaces live in their packages (``Algorithm.spaces``).

Constraints return a one-line reason or None: an impossible combination is a point with a reason,
never an exception. Problem-dependent constraints apply once the space is bound to a problem
(``SearchSpace.bind``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from megasim.errors import MappingError, MegasimError
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




@dataclass(frozen=True)
class SearchSpace:
    parameters: tuple[Parameter, ...]
    name: str = "custom"
    algorithm: str = "winograd"
    # problem data of the algorithm's constraints (Algorithm.bind_space; empty: not bound)
    bound: tuple = field(default=())

    def __post_init__(self) -> None:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise MegasimError(f"duplicate parameter names in {names}")
        defaults = self.defaults
        unknown = [n for n in names if n not in defaults]
        if unknown:
            raise MegasimError(f"unknown parameter(s) {', '.join(unknown)} of algorithm {self.algorithm!r} "
                               f"(allowed: {', '.join(defaults)})")

    @property
    def defaults(self) -> dict[str, Any]:
        from megasim.algorithms import get_algorithm
        return get_algorithm(self.algorithm, "search space algorithm").space_defaults

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

    def check_base(self, param: str | None, source: str = "--param") -> None:
        """MappingError naming the first key of the base --param string `param` that a point of this space
        sets: a key the space varies, or one it holds at its default (``full``). The search would replace
        its value without a word (``--param M=4`` on the default space returned a best M=2)."""
        from megasim.algorithms import get_algorithm
        from megasim.algorithms.base import parse_items
        rename = get_algorithm(self.algorithm, "search space algorithm").point_param_keys
        varied = {rename.get(n, n): n for n in self.names}
        held = {rename.get(n, n): (n, v) for n, v in self.defaults.items() if n not in self.names}
        for key, value in parse_items(param, source):
            if key in varied:
                raise MappingError(f"{source} {key}={value} is not allowed with space {self.name!r} of "
                                   f"{self.algorithm}: the search varies {key} (the space's parameters: "
                                   f"{', '.join(self.names)}); give --param only keys the search does not set")
            if key in held:
                name, default = held[key]
                held_as = f"{default}" if name == key else f"its default ({name}={default})"
                raise MappingError(f"{source} {key}={value} is not allowed with space {self.name!r} of "
                                   f"{self.algorithm}: the search holds {key} at {held_as} in every point; "
                                   f"give --param only keys the search does not set")

    def full(self, point: dict[str, Any]) -> dict[str, Any]:
        """The point with every parameter the space does not vary set to its default."""
        return {**self.defaults, **point}

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
        if q.get("style", "per_task") not in STYLES:
            return f"style={q['style']!r} is not allowed (allowed: {', '.join(STYLES)})"
        if q.get("dispatch", "ticket") not in DISPATCHES:
            return f"dispatch={q['dispatch']!r} is not allowed (allowed: {', '.join(DISPATCHES)})"
        if q.get("blocks_per_sm") and q.get("style") != "persistent":
            return "blocks_per_sm applies to style=persistent only"
        from megasim.algorithms import get_algorithm
        return get_algorithm(self.algorithm).point_constraint(q, self.bound)

    def bind(self, problem: ConvProblem) -> "SearchSpace":
        """This space with the problem-dependent constraints switched on."""
        from megasim.algorithms import get_algorithm
        return replace(self, bound=get_algorithm(self.algorithm).bind_space(self, problem))

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



def spaces_of(algorithm: str) -> dict[str, Any]:
    """The named spaces of an algorithm (name -> factory)."""
    from megasim.algorithms import get_algorithm
    return get_algorithm(algorithm).spaces
