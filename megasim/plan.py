"""A Plan: everything that decides how a convolution runs, beyond the problem and the GPU.

A plan names the schedule (``nonfused``: four kernels; ``fused``: the Algorithm 1 megakernel;
``naive``: the megakernel in non-fused order, the paper's Fig. 3a) and its parameters: Algorithm 1's
D_IG, D_GO, M; the Winograd implementation parameters (tile m, tiles per group t, threads, pairs per
transform thread (default by schedule: 4 in the megakernel, 1 non-fused), GEMM k-tile); and the execution style (one block per task or a persistent grid; ticket, blockIdx
or ready-queue dispatch, with the ready queue's window of roots). Parameters left out take defaults (Algorithm 1: the tightest valid D_IG and D_GO for M,
see ``megasim.mapping.default_params``).

Plans travel as ``--param`` strings, ``KEY=VALUE`` pairs joined by commas, e.g.
``D_IG=128,D_GO=416,M=4,t=32,style=persistent,blocks_per_sm=4``. ``Plan.param_string()`` writes the
complete string (defaults resolved) that reproduces a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from megasim.errors import MappingError
from megasim.hardware.spec import GPUSpec
from megasim.algorithms.winograd.lowering import (DEFAULT_TRANSFORM_PAIRS_PER_THREAD, GEMM_MATHS, WinogradConfig, DEFAULT_GEMM_MATH, gemm_kernel_order, lower_winograd)
from megasim.schedule import DISPATCHES, STYLES, Schedule
from megasim.algorithms.winograd.algorithm1 import Algorithm1Params, default_params
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.orders import naive_fused, nonfused
from megasim.sim import SimOptions, SimResult, simulate
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

SCHEDULES = ("fused", "nonfused", "naive")
# --param key -> (Plan field, type)
_INT_KEYS = {"D_IG": "d_ig", "D_GO": "d_go", "M": "m", "t": "tiles_per_group", "tile": "tile",
             "gemm_k_tile": "gemm_k_tile", "threads": "transform_threads",
             "pairs": "transform_pairs_per_thread", "gemm_threads": "gemm_threads",
             "blocks_per_sm": "blocks_per_sm", "ready_window": "ready_window"}
_STR_KEYS = {"style": ("style", STYLES), "dispatch": ("dispatch", DISPATCHES), "gemm_math": ("gemm_math", GEMM_MATHS)}


@dataclass(frozen=True)
class Plan:
    schedule: str = "fused"
    d_ig: int | None = None
    d_go: int | None = None
    m: int | None = None
    tile: int = 4
    tiles_per_group: int = 64
    transform_threads: int = 128
    transform_pairs_per_thread: int | None = None    # None: the schedule's default
    gemm_k_tile: int = 64
    gemm_threads: int = 128
    style: str = "per_task"
    dispatch: str = "ticket"
    blocks_per_sm: int | None = None
    ready_window: int | None = None     # dispatch=ready: roots queued at the start (None: one per SM)
    gemm_math: str = DEFAULT_GEMM_MATH   # "fp32" or "3xtf32" (WinogradConfig.gemm_math)

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise MappingError(f"schedule {self.schedule!r} is not allowed (allowed: {', '.join(SCHEDULES)})")
        if self.schedule != "fused" and any(v is not None for v in (self.d_ig, self.d_go, self.m)):
            raise MappingError(f"D_IG, D_GO and M apply to the fused schedule only, not to {self.schedule!r}")
        if self.blocks_per_sm is not None and self.style != "persistent":
            raise MappingError("blocks_per_sm applies to style=persistent only")
        if self.ready_window is not None and (self.dispatch != "ready" or self.ready_window < 1):
            raise MappingError(f"ready_window={self.ready_window} is not allowed: it must be a positive integer, "
                               "with dispatch=ready")

    @property
    def pairs_per_thread(self) -> int:
        """Pairs per transform thread: as given, or the schedule's default (DEFAULT_TRANSFORM_PAIRS_PER_THREAD)."""
        if self.transform_pairs_per_thread is not None:
            return self.transform_pairs_per_thread
        return DEFAULT_TRANSFORM_PAIRS_PER_THREAD[self.schedule]

    @property
    def config(self) -> WinogradConfig:
        return WinogradConfig(m=self.tile, tiles_per_group=self.tiles_per_group,
                              transform_threads=self.transform_threads,
                              transform_pairs_per_thread=self.pairs_per_thread, gemm_k_tile=self.gemm_k_tile,
                              gemm_threads=self.gemm_threads, gemm_math=self.gemm_math)

    @classmethod
    def parse(cls, schedule: str = "fused", text: str | None = None) -> "Plan":
        """A plan from a schedule name and a --param string; one-line MappingError on bad input."""
        kwargs: dict[str, Any] = {"schedule": schedule}
        seen: set[str] = set()
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not value:
                raise MappingError(f"malformed --param item {item!r}: write KEY=VALUE, e.g. D_IG=128,M=4")
            if key in seen:
                raise MappingError(f"--param {key} is given twice: give each key once")
            seen.add(key)
            if key in _INT_KEYS:
                try:
                    number = int(value)
                except ValueError:
                    raise MappingError(f"--param {key}={value!r} is not allowed: it must be an integer") from None
                kwargs[_INT_KEYS[key]] = number
            elif key in _STR_KEYS:
                name, allowed = _STR_KEYS[key]
                if value not in allowed:
                    raise MappingError(f"--param {key}={value!r} is not allowed (allowed: {', '.join(allowed)})")
                kwargs[name] = value
            else:
                raise MappingError(f"unknown --param key {key!r} (allowed: {', '.join([*_INT_KEYS, *_STR_KEYS])})")
        return cls(**kwargs)

    def resolved(self, graph: TaskGraph) -> "Plan":
        """The same plan with Algorithm 1's defaults filled in for this graph."""
        if self.schedule != "fused":
            return self
        base = default_params(graph, self.m if self.m is not None else 4)
        m = self.m if self.m is not None else base.m
        d_ig = self.d_ig if self.d_ig is not None else base.d_ig
        d_go = self.d_go if self.d_go is not None else base.d_go
        return replace(self, d_ig=d_ig, d_go=d_go, m=m)

    def param_string(self) -> str:
        """The --param string of this plan, every parameter written out."""
        parts = []
        for key, name in _INT_KEYS.items():
            value = self.pairs_per_thread if key == "pairs" else getattr(self, name)
            if value is not None:
                parts.append(f"{key}={value}")
        parts += [f"style={self.style}", f"dispatch={self.dispatch}"]
        if self.gemm_math != DEFAULT_GEMM_MATH:
            parts.append(f"gemm_math={self.gemm_math}")   # (written whenever it is not the plain default)
        return ",".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def winograd_nonfused(graph: TaskGraph) -> Schedule:
    """The non-fused Winograd pipeline: four kernels, the GEMM kernel in batched-GEMM grid order."""
    return nonfused(graph, {"gemm": gemm_kernel_order(graph)})


def winograd_naive(graph: TaskGraph) -> Schedule:
    """The non-fused order in one megakernel (the paper's Fig. 3a)."""
    return naive_fused(graph, {"gemm": gemm_kernel_order(graph)})


def build(problem: ConvProblem, plan: Plan) -> tuple[TaskGraph, Schedule, Plan]:
    """Lower the problem and order its tasks: (graph, schedule, plan with defaults resolved)."""
    graph = lower_winograd(problem, plan.config)
    plan = plan.resolved(graph)
    if plan.schedule == "nonfused":
        schedule = winograd_nonfused(graph)
    elif plan.schedule == "naive":
        schedule = winograd_naive(graph)
    else:
        schedule = algorithm1(graph, Algorithm1Params(plan.d_ig, plan.d_go, plan.m))
    if plan.style != "per_task" or plan.dispatch != "ticket":
        schedule = schedule.with_style(plan.style, plan.dispatch, plan.blocks_per_sm, plan.ready_window)
    return graph, schedule, plan


def predict(problem: ConvProblem, spec: GPUSpec, plan: Plan | None = None,
            options: SimOptions | None = None) -> tuple[SimResult, Plan]:
    """Simulate one plan; returns the result and the resolved plan."""
    graph, schedule, plan = build(problem, plan or Plan())
    return simulate(graph, schedule, spec, options), plan
