"""A Plan: everything that decides how a convolution runs, beyond the problem and the GPU.

A plan names the algorithm (a plug-in of ``megasim.algorithms``: ``winograd``, ``ecr``, ``pecr``, ...),
one of its schedules (task orders: for Winograd ``fused``, ``nonfused``, ``naive``), its parameters
(the algorithm's frozen dataclass, e.g. ``WinogradParams``) and the execution parameters every
megakernel shares: the style (one block per task, or a persistent grid of ``blocks_per_sm`` blocks per
SM) and the dispatch (ticket, blockIdx, or a ready queue with a window of roots). Parameters left out
take the algorithm's defaults, resolved by ``build``.

Plans travel as ``--param`` strings, ``KEY=VALUE`` pairs joined by commas, e.g.
``D_IG=128,D_GO=416,M=4,t=32,style=persistent,blocks_per_sm=4``: the algorithm's keys and the execution
keys together. ``Plan.param_string()`` writes the complete string (defaults resolved) that reproduces
a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from megasim.algorithms import get_algorithm
from megasim.algorithms.base import Algorithm, convert, params_from_items, parse_items
from megasim.errors import MappingError
from megasim.hardware.spec import GPUSpec
from megasim.schedule import DISPATCHES, STYLES, Schedule
from megasim.sim import SimOptions, SimResult, simulate
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

# --param keys of the execution parameters (shared by every megakernel algorithm) -> (field, type)
EXECUTION_KEYS = {"style": ("style", str), "dispatch": ("dispatch", str), "blocks_per_sm": ("blocks_per_sm", int),
                  "ready_window": ("ready_window", int)}


@dataclass(frozen=True)
class Plan:
    schedule: str | None = None     # None: the algorithm's default schedule
    params: Any = None              # the algorithm's params dataclass; None: its defaults
    algorithm: str = "winograd"
    style: str = "per_task"
    dispatch: str = "ticket"
    blocks_per_sm: int | None = None
    ready_window: int | None = None     # dispatch=ready: roots queued at the start (None: one per SM)

    def __post_init__(self) -> None:
        alg = get_algorithm(self.algorithm, "algorithm")
        if self.schedule is None:
            object.__setattr__(self, "schedule", alg.default_schedule)
        if self.schedule not in alg.schedules:
            raise MappingError(f"schedule {self.schedule!r} is not allowed for {alg.name} "
                               f"(allowed: {', '.join(alg.schedules)})")
        if self.params is None:
            object.__setattr__(self, "params", alg.params_type())
        if not isinstance(self.params, alg.params_type):
            raise MappingError(f"params {self.params!r} are not allowed for {alg.name}: give a "
                               f"{alg.params_type.__name__}")
        alg.check(self.params, self.schedule)
        if self.style not in STYLES:
            raise MappingError(f"style={self.style!r} is not allowed (allowed: {', '.join(STYLES)})")
        if self.dispatch not in DISPATCHES:
            raise MappingError(f"dispatch={self.dispatch!r} is not allowed (allowed: {', '.join(DISPATCHES)})")
        if not alg.megakernel and (self.style != "per_task" or self.dispatch != "ticket"
                                   or self.blocks_per_sm is not None or self.ready_window is not None):
            raise MappingError(f"style, dispatch, blocks_per_sm and ready_window apply to megakernels only, "
                               f"not to {alg.name}'s kernels")
        for name in ("blocks_per_sm", "ready_window"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise MappingError(f"{name}={value!r} is not allowed: it must be a positive integer")
        if self.blocks_per_sm is not None and self.style != "persistent":
            raise MappingError("blocks_per_sm applies to style=persistent only")
        if self.ready_window is not None and self.dispatch != "ready":
            raise MappingError(f"ready_window={self.ready_window} is not allowed: it applies to dispatch=ready only")

    @property
    def algo(self) -> Algorithm:
        return get_algorithm(self.algorithm, "algorithm")

    @classmethod
    def parse(cls, schedule: str | None = None, text: str | None = None, algorithm: str = "winograd") -> "Plan":
        """A plan from an algorithm, a schedule name and a --param string; one-line MappingError on bad input."""
        alg = get_algorithm(algorithm)
        own: list[tuple[str, str]] = []
        execution: dict[str, Any] = {}
        for key, value in parse_items(text):
            if key in EXECUTION_KEYS:
                name, kind = EXECUTION_KEYS[key]
                execution[name] = convert(value, kind, f"--param {key}")
            elif key in alg.params_type.KEYS or key in getattr(alg.params_type, "PARSERS", {}):
                own.append((key, value))
            else:
                allowed = [*alg.params_type.KEYS, *getattr(alg.params_type, "PARSERS", {})]
                if alg.megakernel:
                    allowed += list(EXECUTION_KEYS)
                raise MappingError(f"unknown --param key {key!r} for {alg.name} (allowed: {', '.join(allowed)})")
        return cls(schedule, params_from_items(alg.params_type, own), algorithm, **execution)

    def param_string(self) -> str:
        """The --param string of this plan, every parameter written out."""
        parts = [p for p in [self.algo.param_string(self.params)] if p]
        if self.algo.megakernel:
            parts += [f"{key}={value}" for key, value in (("blocks_per_sm", self.blocks_per_sm),
                                                           ("ready_window", self.ready_window)) if value is not None]
            parts += [f"style={self.style}", f"dispatch={self.dispatch}"]
        return ",".join(parts)

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "params"}
        out.update({f.name: getattr(self.params, f.name) for f in fields(self.params)})
        return out


def build(problem: ConvProblem, plan: Plan | None = None, spec: GPUSpec | None = None
          ) -> tuple[TaskGraph, Schedule, Plan]:
    """Lower the problem and order its tasks: (graph, schedule, plan with defaults resolved). `spec` is
    needed by algorithms whose defaults depend on the GPU (the sparse kernels' filter tile)."""
    plan = plan or Plan()
    alg = plan.algo
    params = alg.resolve(problem, plan.params, plan.schedule, spec)
    graph = alg.lower(problem, params, plan.schedule)
    schedule, params = alg.order(graph, params, plan.schedule)
    if plan.style != "per_task" or plan.dispatch != "ticket":
        schedule = schedule.with_style(plan.style, plan.dispatch, plan.blocks_per_sm, plan.ready_window)
    return graph, schedule, replace(plan, params=params)


def predict(problem: ConvProblem, spec: GPUSpec, plan: Plan | None = None,
            options: SimOptions | None = None) -> tuple[SimResult, Plan]:
    """Simulate one plan; returns the result and the resolved plan. The time to compare with a GPU
    measurement is ``plan.algo.time_us(result)`` (``predicted_time_us``)."""
    if not isinstance(spec, GPUSpec):
        raise MappingError(f"spec {spec!r} is not allowed: give a GPUSpec (megasim.hardware.get_gpu or load_spec)")
    if not isinstance(problem, ConvProblem):
        raise MappingError(f"problem {problem!r} is not allowed: give a ConvProblem (megasim.workloads.parse_layer)")
    graph, schedule, plan = build(problem, plan, spec)
    return simulate(graph, schedule, spec, options), plan


def predicted_time_us(result: SimResult, plan: Plan) -> float:
    """The simulated time a measurement of the plan's algorithm is compared with."""
    return plan.algo.time_us(result)
