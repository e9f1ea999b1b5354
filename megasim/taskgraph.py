"""The TaskGraph: the one description of a megakernel's work that both executors read.

A TaskGraph knows nothing of convolutions. It is a table of tasks, each one a thread block's worth
of work of some *kind* (a device function), plus the dependency counters that order them and the
memory regions they touch:

- ``kind[i]``, ``group[i]``, ``index_in_group[i]``: which device function task i runs and on which
  part of the data (the executor passes group and index to the device function).
- ``wait_counters[i, :]``: the counters task i must see at zero before it may start (-1 = unused
  slot). ``signal_counters[i, :]``: the counters it decrements once when it has finished (-1 =
  unused). ``counter_init[c]`` is the number of decrements counter c receives, i.e. the number of
  parents behind it. This is the paper's dependency-counter scheduler (Sec. 6, Listing 2).
- ``flops[i]``: floating-point work of the task (2 per multiply-add).
- ``other_ops[i]`` (optional, None = none): work that is not FP32 arithmetic, counted in the unit the
  kind's ``TaskCost.ns_per_other_op`` prices (e.g. the window elements a sparse kernel scans and
  compresses); it adds to the task's compute phase.
- ``serial_steps[i]`` (optional, None = none): barrier-separated steps the task runs one after the
  other (e.g. the channel chunks of a sparse kernel); each adds the kind's ``TaskCost.ns_per_step`` of
  latency, which co-resident blocks hide (it delays the task, it does not occupy the SM).
- ``shared_replays[i]`` (optional, None = none): shared-memory wavefronts the task's loads cost beyond
  one per load (bank conflicts, lanes of a warp reading different rows); each adds the kind's
  ``TaskCost.ns_per_replay`` of SM time to its compute phase.
- ``serial_iterations[i]`` (optional, None = none): dependent loop iterations on the task's critical
  path (e.g. a sparse kernel's busiest thread's stored nonzeros, summed over its chunks); each adds
  the kind's ``TaskCost.ns_per_iteration`` of latency, hidden the same way.
- Memory accesses, in CSR form: task i's accesses are rows ``access_ptr[i]:access_ptr[i+1]`` of
  ``access_region``, ``access_part_lo``, ``access_part_hi``, ``access_bytes``, ``access_write``.
  A *region* is a tensor slice that the L2 model tracks as a unit: it has ``region_parts[r]`` equal
  parts of ``region_part_bytes[r]`` bytes, and an access touches parts ``range(part_lo, part_hi,
  part_step)`` of one region (``access_part_step``, usually 1), moving ``bytes`` bytes.
  Region -1 means traffic that the lowering knows is served on chip
  (e.g. halo re-reads of neighbouring tiles): it costs L2 bandwidth and is never a miss.
- ``region_tensor[r]`` indexes ``tensor_names`` (e.g. 'input', 'transformed_input') for reports.
- Per kind: threads, registers per thread and shared memory per block (``kind_threads``,
  ``kind_registers``, ``kind_shared_bytes``). A launch's blocks all take the largest footprint of
  the kinds it runs, as a megakernel's blocks do; ``megakernel_registers`` (0 = that largest) is
  what the compiled megakernel really allocates, which can exceed every device function's own
  count (the compiler sizes the kernel for the union of their live ranges); ``persistent_registers``
  (0 = ``megakernel_registers``) is the persistent megakernel's, whose claim loop keeps more live.

The order in which tasks run is not part of the graph: a mapping (``megasim.mapping``) gives it.
``TaskGraph.hash`` identifies the graph; results store it so a prediction and a measurement are only
compared when they come from the same graph.

Build graphs with vectorised NumPy (see ``megasim.algorithms.winograd.lowering``) or, for small hand-made
graphs, with ``TaskGraphBuilder`` (see the docstring example there).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from megasim.errors import MegasimError

# The optional per-task cost arrays, each with the TaskCost field that prices it: the SM costs add SM
# time to the task's compute phase, the latencies delay its memory phase (``megasim.sim.engine``).
PER_TASK_SM_COSTS = (("other_ops", "ns_per_other_op"), ("shared_replays", "ns_per_replay"))
PER_TASK_LATENCIES = (("serial_steps", "ns_per_step"), ("serial_iterations", "ns_per_iteration"))
OPTIONAL_TASK_ARRAYS = ("other_ops", "serial_steps", "serial_iterations", "shared_replays")   # hash order


@dataclass(frozen=True, eq=False)
class TaskGraph:
    kind_names: tuple[str, ...]
    kind: np.ndarray             # int16 (T,)
    group: np.ndarray            # int32 (T,)
    index_in_group: np.ndarray   # int32 (T,)
    wait_counters: np.ndarray    # int32 (T, Wmax), -1 = unused
    signal_counters: np.ndarray  # int32 (T, Smax), -1 = unused
    counter_init: np.ndarray     # int32 (C,)
    flops: np.ndarray            # float64 (T,)
    access_ptr: np.ndarray       # int64 (T+1,)
    access_region: np.ndarray    # int32 (A,), -1 = on-chip traffic
    access_part_lo: np.ndarray   # int32 (A,)
    access_part_hi: np.ndarray   # int32 (A,)
    access_part_step: np.ndarray  # int32 (A,), >= 1
    access_bytes: np.ndarray     # float64 (A,)
    access_write: np.ndarray     # bool (A,)
    region_parts: np.ndarray     # int32 (R,)
    region_part_bytes: np.ndarray  # float64 (R,)
    region_tensor: np.ndarray    # int16 (R,)
    tensor_names: tuple[str, ...]
    kind_threads: np.ndarray     # int32 (K,)
    kind_registers: np.ndarray   # int32 (K,)
    kind_shared_bytes: np.ndarray  # int32 (K,)
    megakernel_registers: int = 0
    persistent_registers: int = 0
    other_ops: np.ndarray | None = None   # float64 (T,) or None
    serial_steps: np.ndarray | None = None  # float64 (T,) or None
    serial_iterations: np.ndarray | None = None  # float64 (T,) or None
    shared_replays: np.ndarray | None = None  # float64 (T,) or None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tasks(self) -> int:
        return int(self.kind.shape[0])

    @property
    def num_counters(self) -> int:
        return int(self.counter_init.shape[0])

    @property
    def num_regions(self) -> int:
        return int(self.region_parts.shape[0])

    def kind_id(self, name: str) -> int:
        try:
            return self.kind_names.index(name)
        except ValueError:
            raise MegasimError(f"task kind {name!r} is not in this graph (kinds: {', '.join(self.kind_names)})") from None

    @property
    def cost_names(self) -> tuple[str, ...]:
        """The name under which each kind's cost is looked up in a GPUSpec: the kind's own name, or
        an implementation variant of it (``kind@variant``, e.g. ``gemm@t32``, given by the lowering in
        ``meta["cost_names"]``), which ``GPUSpec.task_cost`` resolves to the kind's entry when the
        spec has none of its own. Not part of the hash: the tasks are the same, only their price is
        (``program_hash`` tells such graphs apart)."""
        variants = self.meta.get("cost_names", {})
        return tuple(variants.get(k, k) for k in self.kind_names)

    @property
    def program_hash(self) -> str:
        """``hash``, or where a kind is priced under another name than its own, a hash of ``hash`` and
        the cost names: what identifies the program a prediction simulates. Two graphs of the same tasks
        priced as different builds (im2win's FP32 and 3xTF32 micro-kernels: the same tiles, another
        kernel) share ``hash`` but not this, so a search or a validation does not take one for the other."""
        if self.cost_names == self.kind_names:
            return self.hash
        return hashlib.sha256(json.dumps([self.hash, self.cost_names]).encode()).hexdigest()[:16]

    def tasks_of_kind(self, name: str) -> np.ndarray:
        return np.flatnonzero(self.kind == self.kind_id(name))

    def parents_done_counts(self) -> np.ndarray:
        """How many signals each counter receives from the graph's tasks (must equal counter_init)."""
        sig = self.signal_counters[self.signal_counters >= 0]
        return np.bincount(sig, minlength=self.num_counters)

    def validate(self) -> None:
        """Check the internal consistency of the arrays (shapes, index ranges, counter totals) and that
        every number the engine prices is finite and non-negative (a NaN would otherwise vanish from the
        prediction without a word); one-line MegasimError naming the array and the first bad entry."""
        t = self.num_tasks
        if t == 0:
            raise MegasimError("TaskGraph has no tasks: a graph needs at least one task")
        for name in OPTIONAL_TASK_ARRAYS:
            arr = getattr(self, name)
            if arr is not None and (arr.shape != (t,) or np.any(arr < 0)):
                raise MegasimError(f"TaskGraph.{name} must have shape ({t},) and be >= 0")
        for name in ("group", "index_in_group", "flops"):
            if getattr(self, name).shape != (t,):
                raise MegasimError(f"TaskGraph.{name} has shape {getattr(self, name).shape}, expected ({t},)")
        for name in ("flops", *OPTIONAL_TASK_ARRAYS):
            _check_non_negative(self, name, "task")
        for name in ("group", "index_in_group"):
            if np.any(getattr(self, name) < 0):
                i = int(np.flatnonzero(getattr(self, name) < 0)[0])
                raise MegasimError(f"TaskGraph.{name}[{i}]={getattr(self, name)[i]} is not allowed: it must be >= 0")
        for name in ("wait_counters", "signal_counters"):
            arr = getattr(self, name)
            if arr.ndim != 2 or arr.shape[0] != t:
                raise MegasimError(f"TaskGraph.{name} must have shape ({t}, k)")
            if arr.size and (arr.min() < -1 or arr.max() >= self.num_counters):
                raise MegasimError(f"TaskGraph.{name} refers to a counter outside [0, {self.num_counters})")
        if self.kind.size and (self.kind.min() < 0 or self.kind.max() >= len(self.kind_names)):
            raise MegasimError("TaskGraph.kind refers to an unknown kind")
        if self.access_ptr.shape != (t + 1,) or self.access_ptr[0] != 0 or np.any(np.diff(self.access_ptr) < 0):
            raise MegasimError("TaskGraph.access_ptr must be a non-decreasing CSR pointer of length T+1 from 0")
        if np.any(self.region_parts < 1):
            r = int(np.flatnonzero(self.region_parts < 1)[0])
            raise MegasimError(f"TaskGraph.region_parts[{r}]={self.region_parts[r]} is not allowed: a region has "
                               f"at least 1 part")
        _check_non_negative(self, "region_part_bytes", "region")
        a = int(self.access_ptr[-1])
        for name in ("access_region", "access_part_lo", "access_part_hi", "access_part_step", "access_bytes",
                     "access_write"):
            if getattr(self, name).shape != (a,):
                raise MegasimError(f"TaskGraph.{name} must have {a} rows")
        if a:
            if self.access_region.min() < -1 or self.access_region.max() >= self.num_regions:
                raise MegasimError("TaskGraph.access_region refers to an unknown region")
            on_chip = self.access_region < 0
            parts = np.where(on_chip, 1, self.region_parts[np.maximum(self.access_region, 0)])
            bad = (~on_chip) & ((self.access_part_lo < 0) | (self.access_part_hi > parts)
                                | (self.access_part_lo >= self.access_part_hi) | (self.access_part_step < 1))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise MegasimError(f"TaskGraph access {i}: parts [{self.access_part_lo[i]}, {self.access_part_hi[i]}) "
                                   f"outside region {self.access_region[i]}")
            _check_non_negative(self, "access_bytes", "access")
        if np.any(self.counter_init < 0):
            raise MegasimError("TaskGraph.counter_init must be >= 0")
        got = self.parents_done_counts()
        if not np.array_equal(got, self.counter_init):
            c = int(np.flatnonzero(got != self.counter_init)[0])
            raise MegasimError(f"counter {c} starts at {self.counter_init[c]} but receives {got[c]} signals")
        for name, low in (("kind_threads", 1), ("kind_registers", 1), ("kind_shared_bytes", 0)):
            arr = getattr(self, name)
            if arr.shape != (len(self.kind_names),):
                raise MegasimError(f"TaskGraph.{name} must have one entry per kind")
            if np.any(arr < low):
                k = int(np.flatnonzero(arr < low)[0])
                raise MegasimError(f"TaskGraph.{name}={arr[k]} of kind {self.kind_names[k]!r} is not allowed: "
                                   f"it must be >= {low}")

    @property
    def hash(self) -> str:
        """A content hash (16 hex digits) of every array and the kind/tensor names."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            h = hashlib.sha256()
            regs = [self.megakernel_registers] + ([self.persistent_registers] if self.persistent_registers else [])
            h.update(json.dumps([self.kind_names, self.tensor_names, *regs]).encode())
            for name in ("kind", "group", "index_in_group", "wait_counters", "signal_counters", "counter_init",
                         "flops", "access_ptr", "access_region", "access_part_lo", "access_part_hi",
                         "access_part_step", "access_bytes", "access_write", "region_parts", "region_part_bytes", "region_tensor",
                         "kind_threads", "kind_registers", "kind_shared_bytes"):
                arr = np.ascontiguousarray(getattr(self, name))
                h.update(name.encode())
                h.update(str(arr.dtype).encode())
                h.update(str(arr.shape).encode())
                h.update(arr.tobytes())
            for name in OPTIONAL_TASK_ARRAYS:   # absent from the hash when absent: older hashes hold
                if getattr(self, name) is not None:
                    h.update(name.encode())
                    h.update(np.ascontiguousarray(getattr(self, name), np.float64).tobytes())
            cached = h.hexdigest()[:16]
            object.__setattr__(self, "_hash", cached)
        return cached

    def parents_of(self) -> list[np.ndarray]:
        """For each task, the tasks that signal a counter it waits on (slow; for checks and tests)."""
        signalers: dict[int, list[int]] = {}
        for i, row in enumerate(self.signal_counters):
            for c in row:
                if c >= 0:
                    signalers.setdefault(int(c), []).append(i)
        out = []
        for row in self.wait_counters:
            ps: list[int] = []
            for c in row:
                if c >= 0:
                    ps.extend(signalers.get(int(c), []))
            out.append(np.array(sorted(set(ps)), dtype=np.int64))
        return out


def _check_non_negative(graph: TaskGraph, name: str, what: str) -> None:
    """MegasimError unless every entry of the graph's array `name` (None: absent) is finite and >= 0."""
    arr = getattr(graph, name)
    if arr is None or not arr.size:
        return
    values = np.asarray(arr, np.float64)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MegasimError(f"TaskGraph.{name}[{i}]={float(values[i])!r} ({what} {i}) is not allowed: it must be a finite "
                           f"number >= 0")


INT32_MAX = 2 ** 31 - 1     # the graph's index arrays are int32


def _int(value: Any, what: str, low: int, high: int = INT32_MAX) -> int:
    """`value` as an int in [low, high] (Python or NumPy integers); one-line MegasimError otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise MegasimError(f"{what}={_shown(value)} is not allowed: it must be an integer from {low:,} to {high:,}")
    return int(value)


def _number(value: Any, what: str) -> float:
    """`value` as a finite float >= 0; one-line MegasimError otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value < 0:
        raise MegasimError(f"{what}={_shown(value)} is not allowed: it must be a finite number >= 0")
    return float(value)


def _shown(value: Any) -> str:
    """repr of a value, NumPy scalars as the Python number they hold (5, not np.int64(5))."""
    return repr(value.item() if isinstance(value, np.generic) else value)


class TaskGraphBuilder:
    """Builds a TaskGraph task by task: for hand-made graphs and tests (large graphs should be built
    with vectorised NumPy).

    Example: two producers and one consumer that waits on both::

        b = TaskGraphBuilder()
        b.add_kind("produce", threads=128)
        b.add_kind("consume", threads=128)
        data = b.add_region("data", parts=2, part_bytes=4096)
        ready = b.add_counter()
        for i in range(2):
            b.add_task("produce", group=0, index=i, signals=[ready],
                       accesses=[(data, i, i + 1, 4096, True)])
        b.add_task("consume", group=0, index=0, waits=[ready], flops=1e6,
                   accesses=[(data, 0, 2, 8192, False)])
        graph = b.build()   # counter_init is counted from the signals
    """

    def __init__(self) -> None:
        self._kinds: list[tuple[str, int, int, int]] = []
        self._tensors: list[str] = []
        self._regions: list[tuple[int, float, int]] = []
        self._counters = 0
        self._tasks: list[tuple[int, int, int, tuple[int, ...], tuple[int, ...], float]] = []
        self._accesses: list[list[tuple[int, int, int, float, bool, int]]] = []

    def add_kind(self, name: str, threads: int = 128, registers: int = 32, shared_bytes: int = 0) -> int:
        """A task kind (a device function): its block's threads, registers per thread and shared memory."""
        if not isinstance(name, str) or not name.strip():
            raise MegasimError(f"add_kind name={name!r} is not allowed: give a non-empty string")
        if any(k[0] == name for k in self._kinds):
            raise MegasimError(f"task kind {name!r} added twice")
        self._kinds.append((name, _int(threads, f"add_kind({name!r}) threads", 1),
                            _int(registers, f"add_kind({name!r}) registers", 1),
                            _int(shared_bytes, f"add_kind({name!r}) shared_bytes", 0)))
        return len(self._kinds) - 1

    def add_region(self, tensor: str, parts: int = 1, part_bytes: float = 0.0) -> int:
        """A region of `parts` equal parts of `part_bytes` bytes in tensor `tensor`; returns its id."""
        if not isinstance(tensor, str) or not tensor.strip():
            raise MegasimError(f"add_region tensor={tensor!r} is not allowed: give a non-empty string")
        parts = _int(parts, f"add_region({tensor!r}) parts", 1)
        part_bytes = _number(part_bytes, f"add_region({tensor!r}) part_bytes")
        if tensor not in self._tensors:
            self._tensors.append(tensor)
        self._regions.append((self._tensors.index(tensor), part_bytes, parts))
        return len(self._regions) - 1

    def add_counter(self) -> int:
        self._counters += 1
        return self._counters - 1

    def add_task(self, kind: str, group: int = 0, index: int = 0, waits: Sequence[int] = (),
                 signals: Sequence[int] = (), flops: float = 0.0,
                 accesses: Sequence[tuple] = ()) -> int:
        """Add a task; each access is (region, part_lo, part_hi, bytes, write[, part_step]), region -1 for
        on-chip traffic. Counters in `waits` and `signals` must have been added (add_counter)."""
        names = [k[0] for k in self._kinds]
        if kind not in names:
            raise MegasimError(f"unknown task kind {kind!r} (added: {', '.join(names)})")
        where = f"add_task #{len(self._tasks)} ({kind})"
        group = _int(group, f"{where} group", 0)
        index = _int(index, f"{where} index", 0)
        counters = {}
        for label, ids in (("waits", waits), ("signals", signals)):
            if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
                raise MegasimError(f"{where} {label}={ids!r} is not allowed: give a list of counter ids")
            counters[label] = tuple(_int(c, f"{where} {label} counter", 0, self._counters - 1)
                                    if self._counters else self._no_counter(where, label, c) for c in ids)
        flops = _number(flops, f"{where} flops")
        rows = []
        for j, a in enumerate(accesses):
            if not isinstance(a, (tuple, list)) or len(a) not in (5, 6):
                raise MegasimError(f"{where} access {j}={a!r} is not allowed: give (region, part_lo, part_hi, "
                                   f"bytes, write[, part_step])")
            region = _int(a[0], f"{where} access {j} region", -1, len(self._regions) - 1)
            lo = _int(a[1], f"{where} access {j} part_lo", 0)
            hi = _int(a[2], f"{where} access {j} part_hi", 0)
            nbytes = _number(a[3], f"{where} access {j} bytes")
            if not isinstance(a[4], (bool, np.bool_)):
                raise MegasimError(f"{where} access {j} write={a[4]!r} is not allowed: give True or False")
            step = _int(a[5], f"{where} access {j} part_step", 1) if len(a) == 6 else 1
            rows.append((region, lo, hi, nbytes, bool(a[4]), step))
        self._tasks.append((names.index(kind), group, index, counters["waits"], counters["signals"], flops))
        self._accesses.append(rows)
        return len(self._tasks) - 1

    @staticmethod
    def _no_counter(where: str, label: str, counter: Any) -> int:
        raise MegasimError(f"{where} {label} counter={counter!r} is not allowed: no counter has been added "
                           f"(add_counter)")

    def build(self, meta: dict[str, Any] | None = None) -> TaskGraph:
        t = len(self._tasks)
        wmax = max([len(x[3]) for x in self._tasks] + [1])
        smax = max([len(x[4]) for x in self._tasks] + [1])
        waits = np.full((t, wmax), -1, np.int32)
        sigs = np.full((t, smax), -1, np.int32)
        for i, task in enumerate(self._tasks):
            waits[i, :len(task[3])] = task[3]
            sigs[i, :len(task[4])] = task[4]
        counter_init = np.bincount(sigs[sigs >= 0], minlength=self._counters).astype(np.int32)
        flat = [a for acc in self._accesses for a in acc]
        ptr = np.zeros(t + 1, np.int64)
        ptr[1:] = np.cumsum([len(acc) for acc in self._accesses])
        graph = TaskGraph(
            kind_names=tuple(k[0] for k in self._kinds),
            kind=np.array([x[0] for x in self._tasks], np.int16),
            group=np.array([x[1] for x in self._tasks], np.int32),
            index_in_group=np.array([x[2] for x in self._tasks], np.int32),
            wait_counters=waits, signal_counters=sigs, counter_init=counter_init,
            flops=np.array([x[5] for x in self._tasks], np.float64),
            access_ptr=ptr,
            access_region=np.array([a[0] for a in flat], np.int32),
            access_part_lo=np.array([a[1] for a in flat], np.int32),
            access_part_hi=np.array([a[2] for a in flat], np.int32),
            access_part_step=np.array([a[5] for a in flat], np.int32),
            access_bytes=np.array([a[3] for a in flat], np.float64),
            access_write=np.array([a[4] for a in flat], bool),
            region_parts=np.array([r[2] for r in self._regions], np.int32),
            region_part_bytes=np.array([r[1] for r in self._regions], np.float64),
            region_tensor=np.array([r[0] for r in self._regions], np.int16),
            tensor_names=tuple(self._tensors),
            kind_threads=np.array([k[1] for k in self._kinds], np.int32),
            kind_registers=np.array([k[2] for k in self._kinds], np.int32),
            kind_shared_bytes=np.array([k[3] for k in self._kinds], np.int32),
            meta=dict(meta or {}),
        )
        graph.validate()
        return graph
