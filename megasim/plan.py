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

Resource limits (docs/errors.md): ``build`` and ``predict`` refuse, before lowering the whole problem,
a problem with a tensor of more than ``MAX_TENSOR_ELEMENTS`` elements (the GPU kernels index with
32-bit integers) or a size above its algorithm's ``max_elements`` (a lowering that materialises the problem,
e.g. the sparse family's generated feature map), and a problem whose task count, estimated from its lowering at batch 1 times its batch,
exceeds ``max_tasks`` (default ``DEFAULT_MAX_TASKS``; the CLI's ``--max-tasks``). Progress goes to an
optional callback, never to a stream: ``predict(..., progress=f)`` calls ``f(message)`` as it lowers
and simulates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Callable

from megasim.algorithms import get_algorithm
from megasim.algorithms.base import Algorithm, convert, params_from_items, parse_items
from megasim.errors import MappingError, MegasimError, ResourceError
from megasim.hardware.spec import GPUSpec
from megasim.schedule import DISPATCHES, STYLES, Schedule
from megasim.sim import SimOptions, SimResult, simulate
from megasim.taskgraph import TaskGraph
from megasim.workloads.problem import ConvProblem

# The default ceiling on the tasks of one simulation: about 6 s and 1.3 GB at the compiled engine's ~700k
# tasks/s on the 2-core development machine (docs/errors.md; resnet-1 at batch 64 has 10,200 Winograd tasks).
DEFAULT_MAX_TASKS = 2_000_000
# The largest tensor (input, output or filters) in elements: the GPU kernels index with 32-bit integers.
MAX_TENSOR_ELEMENTS = 2 ** 31 - 1

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

    def __new__(cls, *args: Any, **kwargs: Any) -> "Plan":
        # The generated __init__ would raise a raw TypeError for a misspelt or misplaced field; the
        # usual slip is an algorithm parameter (Plan(m=4)), which belongs in params or Plan.parse.
        names = [f.name for f in fields(cls)]
        unknown = [k for k in kwargs if k not in names]
        if unknown or len(args) > len(names):
            what = f"field {unknown[0]!r}" if unknown else f"{len(args)} positional arguments"
            raise MappingError(f"Plan(...): {what} is not allowed (allowed: {', '.join(names)}); algorithm "
                               f"parameters go in params, e.g. Plan.parse('fused', 'M=4,D_IG=128')")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        for name in ("algorithm", "style", "dispatch"):
            if not isinstance(getattr(self, name), str):
                raise MappingError(f"Plan {name}={getattr(self, name)!r} is not allowed: it must be a string")
        if self.schedule is not None and not isinstance(self.schedule, str):
            raise MappingError(f"Plan schedule={self.schedule!r} is not allowed: it must be a string or None")
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
        if text is not None and not isinstance(text, str):
            raise MappingError(f"--param {text!r} is not allowed: give a string of KEY=VALUE items, e.g. M=4,t=32")
        if schedule is not None and not isinstance(schedule, str):
            raise MappingError(f"--schedule {schedule!r} is not allowed: give one of {', '.join(alg.schedules)}")
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
                listed = ", ".join(allowed) or "none: it has no parameters"
                raise MappingError(f"unknown --param key {key!r} for {alg.name} (allowed: {listed})")
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


def check_max_tasks(max_tasks: Any, source: str = "max_tasks") -> int:
    """`max_tasks` if it is a positive integer; one-line ResourceError naming `source` otherwise."""
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
        raise ResourceError(f"{source}={max_tasks!r} is not allowed: it must be a positive integer "
                            f"(default {DEFAULT_MAX_TASKS:,})")
    return max_tasks


# The sizes of a problem a plug-in may limit (``Algorithm.max_elements``), in elements.
PROBLEM_SIZES: dict[str, Callable[[ConvProblem], int]] = {
    "input N*C*H*W": lambda p: p.n * p.c * p.h * p.w,
    "output N*K*P*Q": lambda p: p.n * p.k * p.out_h * p.out_w,
    "pixels N*H*W": lambda p: p.n * p.h * p.w,
}


def check_problem_size(problem: ConvProblem, alg: Algorithm | None = None) -> None:
    """ResourceError when a tensor of the problem has more than MAX_TENSOR_ELEMENTS elements, or, with the
    algorithm `alg`, when a size is above the plug-in's ``max_elements`` (what its lowering can afford)."""
    p = problem
    for what, elements in (("input N*C*H*W", p.n * p.c * p.h * p.w), ("output N*K*P*Q", p.n * p.k * p.out_h * p.out_w),
                           ("filters K*C*R*S", p.k * p.c * p.r * p.s)):
        if elements > MAX_TENSOR_ELEMENTS:
            raise ResourceError(f"layer {p.name or p.spec_string()!r} ({p.spec_string()}): its {what} = {elements:,} "
                                f"elements is not allowed: at most {MAX_TENSOR_ELEMENTS:,} (2**31 - 1: the kernels' "
                                f"32-bit indices; docs/errors.md)")
    for what, limit in (getattr(alg, "max_elements", None) or {}).items():
        elements = PROBLEM_SIZES[what](p)
        if elements > limit:
            raise ResourceError(f"layer {p.name or p.spec_string()!r} ({p.spec_string()}) under {alg.name}: its {what} "
                                f"= {elements:,} is not allowed: at most {limit:,} (the {alg.name} lowering "
                                f"materialises the problem; a smaller batch or layer; docs/errors.md)")


# Above this many elements in one image's input (C*H*W) or output (K*P*Q), the batch-1 lowering that sizes
# the estimate is itself too big to run blind (a 40000x40000 image, or K = 2*10**8 at 1x1, took seconds and
# gigabytes before NumPy ran out of memory): the estimate lowers a shrunken copy instead (_shrunk). The
# largest catalogue image is yolov3/conv0's output, 5,537,792 elements.
ESTIMATE_IMAGE_ELEMENTS = 2 ** 23


def _shrunk(problem: ConvProblem) -> tuple[ConvProblem, float]:
    """(a copy of the batch-1 problem whose image has at most ESTIMATE_IMAGE_ELEMENTS input and output
    elements, the factor its task count is scaled by). It halves the larger spatial side first (every
    plug-in's tasks grow with the output pixels), then K, then C, and the factor is the ratio of output
    pixels times those of K and C: an over-estimate where tasks grow more slowly."""
    p = problem.with_batch(1)
    h, w, k, c = p.h, p.w, p.k, p.c

    def pq(h: int, w: int) -> int:
        return ((h + 2 * p.padding - p.r) // p.stride + 1) * ((w + 2 * p.padding - p.s) // p.stride + 1)

    min_h, min_w = max(1, p.r - 2 * p.padding), max(1, p.s - 2 * p.padding)
    while max(c * h * w, k * pq(h, w)) > ESTIMATE_IMAGE_ELEMENTS:
        if h > min_h or w > min_w:
            if h - min_h >= w - min_w:
                h = max(min_h, h // 2)
            else:
                w = max(min_w, w // 2)
        elif k > 1 and k * pq(h, w) > ESTIMATE_IMAGE_ELEMENTS:
            k = max(1, k // 2)
        elif c > 1:
            c = max(1, c // 2)
        else:
            break
    factor = (pq(p.h, p.w) / pq(h, w)) * (p.k / k) * (p.c / c)
    return replace(p, h=h, w=w, k=k, c=c, name=""), factor


def estimate_tasks(problem: ConvProblem, plan: Plan | None = None, spec: GPUSpec | None = None, *,
                   costed: bool = True) -> int | None:
    """An upper estimate of the problem's tasks under the plan, without lowering the whole problem: the
    tasks at batch 1 times the batch (per-image tasks scale with the batch, the rest is counted once
    per image, so this over-counts). An image above ESTIMATE_IMAGE_ELEMENTS is not lowered whole either:
    a shrunken copy's tasks are scaled up (``_shrunk``). None when batch 1 cannot be lowered under the plan."""
    _check_args(problem, plan, spec)
    plan = plan or Plan()
    check_problem_size(problem, plan.algo)
    one, factor = _shrunk(problem)
    try:
        params = plan.algo.resolve(one, plan.params, plan.schedule, spec)
        tasks = _lower(plan.algo, one, params, plan.schedule, costed).num_tasks
    except MegasimError:
        return None
    return math.ceil(tasks * factor) * problem.n


def build(problem: ConvProblem, plan: Plan | None = None, spec: GPUSpec | None = None, *,
          max_tasks: int = DEFAULT_MAX_TASKS, progress: Callable[[str], None] | None = None,
          costed: bool = True) -> tuple[TaskGraph, Schedule, Plan]:
    """Lower the problem and order its tasks: (graph, schedule, plan with defaults resolved). `spec` is
    needed by algorithms whose defaults depend on the GPU (the sparse kernels' filter tile). Work above
    `max_tasks` tasks is refused with a ResourceError before it is lowered (module docstring);
    `progress(message)`, if given, hears what is being done. ``costed=False``: the graph's structure
    only (its tasks, launches and accesses; what the GPU executor runs), from a plug-in whose ``lower``
    takes ``costed`` (the sparse family, where pricing counts every window's zeros); not for predictions."""
    _check_args(problem, plan, spec)
    check_max_tasks(max_tasks)
    if progress is not None and not callable(progress):
        raise MappingError(f"progress={progress!r} is not allowed: give a function of one message (a str), or None")
    plan = plan or Plan()
    alg = plan.algo
    check_problem_size(problem, alg)
    if problem.n > 1 or _shrunk(problem)[1] > 1:
        estimate = estimate_tasks(problem, plan, spec, costed=costed)
        if estimate is not None and estimate > max_tasks:
            how = f"{estimate // problem.n:,} at batch 1 times N={problem.n:,}" if _shrunk(problem)[1] == 1 else \
                f"from a smaller copy of one image, scaled up, times N={problem.n:,}"
            _refuse(problem, plan, f"about {estimate:,} tasks (estimated: {how})", max_tasks)
    if progress is not None:
        progress(f"lowering {problem.name or problem.spec_string()} ({plan.algorithm})")
    params = alg.resolve(problem, plan.params, plan.schedule, spec)
    graph = _lower(alg, problem, params, plan.schedule, costed)
    if graph.num_tasks > max_tasks:
        _refuse(problem, plan, f"{graph.num_tasks:,} tasks", max_tasks)
    schedule, params = alg.order(graph, params, plan.schedule)
    if plan.style != "per_task" or plan.dispatch != "ticket":
        schedule = schedule.with_style(plan.style, plan.dispatch, plan.blocks_per_sm, plan.ready_window)
    return graph, schedule, replace(plan, params=params)


def _lower(alg: Algorithm, problem: ConvProblem, params: Any, schedule: str | None, costed: bool) -> TaskGraph:
    """``alg.lower``; ``costed=False`` is passed only when asked for (plug-ins need not take it)."""
    if costed:
        return alg.lower(problem, params, schedule)
    return alg.lower(problem, params, schedule, costed=False)


def _refuse(problem: ConvProblem, plan: Plan, what: str, max_tasks: int) -> None:
    raise ResourceError(f"layer {problem.name or problem.spec_string()!r} under {plan.algorithm} is {what}: more than "
                        f"max_tasks={max_tasks:,} is not allowed (a smaller batch, or raise the limit with "
                        f"--max-tasks / max_tasks=; the compiled engine runs ~700k tasks/s; docs/errors.md)")


def _check_args(problem: Any, plan: Any, spec: Any) -> None:
    """One-line errors for arguments of the wrong type (the public API's first check)."""
    if not isinstance(problem, ConvProblem):
        raise MappingError(f"problem {problem!r} is not allowed: give a ConvProblem (megasim.workloads.parse_layer)")
    if plan is not None and not isinstance(plan, Plan):
        raise MappingError(f"plan {plan!r} is not allowed: give a Plan (Plan.parse(schedule, params, algorithm)) or None")
    if spec is not None and not isinstance(spec, GPUSpec):
        raise MappingError(f"spec {spec!r} is not allowed: give a GPUSpec (megasim.hardware.get_gpu or load_spec)")


def predict(problem: ConvProblem, spec: GPUSpec, plan: Plan | None = None,
            options: SimOptions | None = None, *, max_tasks: int = DEFAULT_MAX_TASKS,
            progress: Callable[[str], None] | None = None) -> tuple[SimResult, Plan]:
    """Simulate one plan; returns the result and the resolved plan. The time to compare with a GPU
    measurement is ``plan.algo.time_us(result)`` (``predicted_time_us``). Work above `max_tasks` tasks
    is refused before it starts (``build``); `progress(message)`, if given, hears each stage."""
    if not isinstance(spec, GPUSpec):
        raise MappingError(f"spec {spec!r} is not allowed: give a GPUSpec (megasim.hardware.get_gpu or load_spec)")
    _check_args(problem, plan, spec)
    if options is not None and not isinstance(options, SimOptions):
        raise MappingError(f"options {options!r} are not allowed: give a SimOptions or None")
    graph, schedule, plan = build(problem, plan, spec, max_tasks=max_tasks, progress=progress)
    if progress is None:
        return simulate(graph, schedule, spec, options), plan
    progress(f"simulating {graph.num_tasks:,} tasks on {spec.name}")

    def tasks_ended(done: int, total: int) -> None:
        progress(f"simulating on {spec.name}: {done:,} of {total:,} tasks")
    return simulate(graph, schedule, spec, options, progress=tasks_ended), plan


def predicted_time_us(result: SimResult, plan: Plan) -> float:
    """The simulated time a measurement of the plan's algorithm is compared with."""
    return plan.algo.time_us(result)
