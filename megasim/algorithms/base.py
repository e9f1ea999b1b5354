"""The interface every convolution algorithm implements, and the --param parsing they share.

An algorithm is a plug-in: a package under ``megasim.algorithms`` that registers one ``Algorithm``
object (``megasim.algorithms.registry``). The object knows

- ``params_type``: its parameters, a frozen dataclass (every field has a default). The class names its
  ``--param`` keys in ``KEYS`` (key -> field) and may restrict values in ``CHOICES`` (field -> allowed);
- ``lower(problem, params[, schedule]) -> TaskGraph``: the work as tasks, counters and memory regions;
- ``schedules``: its named task orders (the first is the default) and ``order(graph, params, schedule)``,
  which returns the Schedule and the parameters with the defaults that needed the graph filled in;
- ``resolve(problem, params, schedule, spec)``: defaults that depend on the schedule or the GPU, filled
  in before lowering (so a lowering is a function of the problem and the parameters alone);
- ``kinds``: the task kinds whose costs calibration fits for it, and ``calibration``, the procedure
  that fits them (``megasim calibrate --algo NAME``);
- its search space (``spaces``, ``space_defaults``, ``point_plan``, ``point_constraint``, ``bind_space``);
- ``time_us(result)``: the simulated time that a GPU measurement of it is compared with;
- ``max_elements``: the largest problem its lowering can afford (input, output, pixels; empty: no limit
  beyond the kernels'), for a lowering that materialises it (the sparse family generates its feature map);
- ``validation_plans(problem, n, seed)``: the plans ``megasim validate --algo NAME`` predicts and
  measures (default: each schedule at its default parameters).

Everything that takes an algorithm (``megasim.plan.predict``, the optimiser, calibration, the CLI, the
GPU executor) takes it by name through the registry; nothing outside an algorithm's package names it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from megasim.errors import MappingError

if TYPE_CHECKING:
    from megasim.hardware.spec import GPUSpec
    from megasim.schedule import Schedule
    from megasim.sim.result import SimResult
    from megasim.taskgraph import TaskGraph
    from megasim.workloads.problem import ConvProblem

_TYPES = {"int": int, "float": float, "str": str}

# The range of an integer parameter unless its params class declares another (INT_RANGES): the GPU
# kernels index with 32-bit integers, and a value of 2**63 or more overflowed the lowering's int64
# arithmetic (an OverflowError traceback from Algorithm 1's plan).
INT_PARAM_RANGE = (0, 2 ** 31 - 1)


def _field_type(field: dataclasses.Field) -> tuple[type, bool]:
    """(value type, None allowed) of a params field annotated as int / float / str, optionally | None."""
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    parts = [p.strip() for p in text.split("|")]
    optional = "None" in parts
    names = [p for p in parts if p != "None"]
    if len(names) != 1 or names[0] not in _TYPES:
        raise TypeError(f"params field {field.name}: annotate it int, float or str (optionally | None), not {text}")
    return _TYPES[names[0]], optional


def convert(value: str, kind: type, what: str) -> Any:
    """`value` (text) as `kind`; one-line MappingError naming `what` otherwise."""
    if kind is str:
        return value
    try:
        return kind(value)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise MappingError(f"{what}={value!r} is not allowed: it must be {noun}") from None


def check_params(params: Any, source: str = "--param") -> None:
    """One-line MappingError when a field of a params dataclass has the wrong type, a value outside its
    CHOICES or an integer outside its range (INT_RANGES, else INT_PARAM_RANGE) (called by every params
    class's __post_init__)."""
    keys = {name: key for key, name in getattr(params, "KEYS", {}).items()}
    choices = getattr(params, "CHOICES", {})
    int_ranges = getattr(params, "INT_RANGES", {})
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        kind, optional = _field_type(f)
        what = f"{source} {keys.get(f.name, f.name)}"
        if value is None:
            if not optional:
                raise MappingError(f"{what}=None is not allowed: give a value")
            continue
        ok = (isinstance(value, kind) and not isinstance(value, bool)) or \
            (kind is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            raise MappingError(f"{what}={value!r} is not allowed: it must be {kind.__name__}")
        if f.name in choices and value not in choices[f.name]:
            raise MappingError(f"{what}={value!r} is not allowed (allowed: {', '.join(map(str, choices[f.name]))})")
        if kind is int:
            low, high = int_ranges.get(f.name, INT_PARAM_RANGE)
            if not low <= value <= high:
                raise MappingError(f"{what}={value} is not allowed: it must be an integer from {low:,} to {high:,}")


def parse_items(text: str | None, source: str = "--param") -> list[tuple[str, str]]:
    """KEY=VALUE items of a comma-joined string, each key once; one-line MappingError otherwise."""
    items: list[tuple[str, str]] = []
    seen: set[str] = set()
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise MappingError(f"malformed {source} item {item!r}: write KEY=VALUE, e.g. D_IG=128,M=4")
        if key in seen:
            raise MappingError(f"{source} {key} is given twice: give each key once")
        seen.add(key)
        items.append((key, value))
    return items


def params_from_items(params_type: type, items: list[tuple[str, str]], source: str = "--param") -> Any:
    """An instance of `params_type` from (key, text value) items, each converted to its field's type."""
    kwargs: dict[str, Any] = {}
    fields = {f.name: f for f in dataclasses.fields(params_type)}
    parsers: dict[str, Callable[[str], dict[str, Any]]] = getattr(params_type, "PARSERS", {})
    for key, value in items:
        if key in parsers:
            kwargs.update(parsers[key](value))
            continue
        name = params_type.KEYS[key]
        kind, _ = _field_type(fields[name])
        kwargs[name] = convert(value, kind, f"{source} {key}")
    return params_type(**kwargs)


def param_items(params: Any) -> list[str]:
    """KEY=VALUE strings of every field that is set, in KEYS order."""
    out = []
    for key, name in params.KEYS.items():
        value = getattr(params, name)
        if value is not None:
            out.append(f"{key}={value}")
    return out


class Algorithm:
    """Base of the algorithm plug-ins: subclasses set the class attributes and implement lower/order."""

    name: ClassVar[str]
    summary: ClassVar[str]
    params_type: ClassVar[type]
    schedules: ClassVar[tuple[str, ...]]
    kinds: ClassVar[tuple[str, ...]]
    megakernel: ClassVar[bool] = False     # whether the execution styles (persistent, dispatch) apply
    calibration: ClassVar[str | None] = None   # the calibration procedure that fits `kinds` (megasim calibrate)
    # What this plug-in's lowering can afford where it materialises a problem element by element: a size
    # of ``megasim.plan.PROBLEM_SIZES`` ("input N*C*H*W", "output N*K*P*Q", "pixels N*H*W") -> the most
    # allowed; empty: no limit beyond the kernels' MAX_TENSOR_ELEMENTS. ``megasim.plan`` refuses a larger
    # problem before lowering it (docs/errors.md).
    max_elements: ClassVar[dict[str, int]] = {}

    @property
    def default_schedule(self) -> str:
        return self.schedules[0]

    def check(self, params: Any, schedule: str) -> None:
        """MappingError when the parameters do not apply to the schedule (default: all do)."""

    def resolve(self, problem: "ConvProblem", params: Any, schedule: str, spec: "GPUSpec") -> Any:
        """The parameters with the defaults that depend on the schedule or the GPU filled in."""
        return params

    def lower(self, problem: "ConvProblem", params: Any, schedule: str | None = None) -> "TaskGraph":
        """The TaskGraph of the problem. `schedule` matters only where a schedule is another set of
        kernels (the sparse family's unfused chains); None: the default schedule. A plug-in whose pricing
        is slow may also take ``costed=False`` (structure only, for the GPU executor:
        ``megasim.plan.build(..., costed=False)``)."""
        raise NotImplementedError

    def order(self, graph: "TaskGraph", params: Any, schedule: str) -> tuple["Schedule", Any]:
        raise NotImplementedError

    def param_string(self, params: Any) -> str:
        return ",".join(param_items(params))

    def record_extras(self, plan: Any) -> dict[str, Any]:
        """Columns a search record of a resolved plan carries beside its --param string (default none)."""
        return {}

    def footprint(self, problem: "ConvProblem", params: Any, schedule: str | None = None) -> dict[str, int] | None:
        """Bytes of each tensor the algorithm's GPU kernels allocate beyond input, filter and output, by
        name, for ``schedule`` (None: the default schedule); an empty dict: nothing; None: not modelled.
        ``megasim simulate`` reports it as extra memory."""
        return None

    def time_us(self, result: "SimResult") -> float:
        """The simulated time a measurement of this algorithm is compared with: the whole run."""
        return result.predicted_us

    # -- validation (megasim validate --algo NAME) -------------------------------------------------
    def validation_plans(self, problem: "ConvProblem", n: int, seed: int = 0) -> list[tuple[str, Any]]:
        """Up to ``n`` (label, resolved Plan) of one problem that ``megasim validate`` predicts and
        measures, each a different program (TaskGraph and task maps), in a fixed order for a seed.
        Default: each schedule at the default parameters, labelled by its name."""
        from megasim.plan import Plan, build
        out: list[tuple[str, Any]] = []
        seen: set = set()
        for schedule in self.schedules:
            if len(out) >= n:
                break
            try:
                graph, order, plan = build(problem, Plan(schedule, algorithm=self.name))
            except MappingError:
                continue
            if (graph.program_hash, order.hash) not in seen:
                seen.add((graph.program_hash, order.hash))
                out.append((schedule, plan))
        return out

    # -- search (see megasim.search.space) ---------------------------------------------------------
    spaces: ClassVar[dict[str, Callable[[], Any]]] = {}
    space_defaults: ClassVar[dict[str, Any]] = {}
    # A point's fields whose --param key has another name (Winograd: d_ig_x sets D_IG); the others set the
    # key of their own name. ``SearchSpace.check_base`` refuses a base --param of a key a point sets.
    point_param_keys: ClassVar[dict[str, str]] = {}

    def point_constraint(self, point: dict[str, Any], bound: tuple) -> str | None:
        """Why a full point cannot run (one line), or None."""
        return None

    def bind_space(self, space: Any, problem: "ConvProblem") -> tuple:
        """Problem-dependent data that point_constraint needs (hashable), computed without lowering."""
        return ()

    def coarse_batch(self, problem: "ConvProblem") -> int:
        """The batch of a cheaper problem that ranks points roughly alike (default: none, the same batch)."""
        return problem.n

    def point_plan(self, problem: "ConvProblem", point: dict[str, Any], base: Any) -> Any:
        """The Plan of a full search point, the base plan's other parameters kept."""
        raise NotImplementedError(f"algorithm {self.name!r} has no search space")
