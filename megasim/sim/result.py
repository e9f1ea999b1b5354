"""What a simulation returns: the predicted time, per-task records, traffic totals, resource timelines,
and their exports (a JSON summary and a Chrome trace that opens in Perfetto / chrome://tracing)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from megasim.hardware.spec import GPUSpec
    from megasim.schedule import Schedule
    from megasim.taskgraph import TaskGraph


class RunRecords(Protocol):
    """What a finished run hands ``SimResult.from_run``: the SimPy engine's run (``megasim.sim.engine``)
    and the compiled loop's output (``megasim.sim.compiled_run``) both have these. Per task: claim,
    ready, claim_cost, mem_start, comp_start, end (ns), sm_of, slot_of; per tracked access (``tracked``
    indexes the graph's accesses): miss_of, the bytes that went to DRAM."""

    graph: "TaskGraph"
    spec: "GPUSpec"
    launch_log: list[dict]
    claim: Sequence[float]
    ready: Sequence[float]
    claim_cost: Sequence[float]
    mem_start: Sequence[float]
    comp_start: Sequence[float]
    end: Sequence[float]
    sm_of: Sequence[int]
    slot_of: Sequence[int]
    tracked: np.ndarray
    miss_of: Sequence[float]
    mem_cap: Any
    host_ns: float
    events: int


@dataclass(frozen=True)
class LaunchRecord:
    name: str
    style: str
    start_ns: float
    end_ns: float
    blocks_per_sm: int
    limited_by: str
    tasks: int


@dataclass(frozen=True, eq=False)
class SimResult:
    gpu: str
    schedule: str
    params: dict[str, Any]
    taskgraph_hash: str
    schedule_hash: str
    predicted_ns: float
    launches: tuple[LaunchRecord, ...]
    kind_names: tuple[str, ...]
    cost_names: tuple[str, ...]   # per kind, the name its TaskCost is looked up by (GPUSpec.task_cost)
    tensor_names: tuple[str, ...]
    kind: np.ndarray
    claim_ns: np.ndarray      # block takes the task (its start)
    ready_ns: np.ndarray      # dependencies satisfied, work begins
    mem_start_ns: np.ndarray
    compute_start_ns: np.ndarray
    end_ns: np.ndarray
    wait_ns: np.ndarray       # time spent polling dependency counters
    sm: np.ndarray
    slot: np.ndarray
    task_dram_bytes: np.ndarray
    flops: float
    dram_read_bytes: np.ndarray   # per tensor
    dram_write_bytes: np.ndarray  # per tensor
    l2_read_bytes: np.ndarray     # per tensor: region reads (hits + misses)
    onchip_bytes: float
    mem_cap: float
    sm_count: int
    dram_bw_gbps: float
    fp32_peak_gflops: float
    sim_wall_s: float
    events: int
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_run(cls, run: RunRecords, schedule: "Schedule", wall_s: float) -> "SimResult":
        g, spec = run.graph, run.spec
        launches = tuple(LaunchRecord(**rec) for rec in run.launch_log)
        # (np.asarray: the run's records become the result's without a copy where they are arrays already)
        claim = np.asarray(run.claim, np.float64)
        ready = np.asarray(run.ready, np.float64)
        # Traffic: each tracked access's DRAM bytes, aggregated by tensor and direction.
        tracked = run.tracked
        miss = np.asarray(run.miss_of, np.float64)
        region = g.access_region[tracked]
        write = g.access_write[tracked]
        tensor = g.region_tensor[region]
        n_t = len(g.tensor_names)
        owner = np.repeat(np.arange(g.num_tasks), np.diff(g.access_ptr))[tracked]
        task_dram = np.bincount(owner, weights=miss, minlength=g.num_tasks)
        claim_cost = np.asarray(run.claim_cost, np.float64)
        return cls(
            gpu=spec.name, schedule=schedule.name, params=dict(schedule.params),
            taskgraph_hash=g.hash, schedule_hash=schedule.hash,
            predicted_ns=max(float(max(rec.end_ns for rec in launches)) if launches else 0.0,
                             run.host_ns),
            launches=launches, kind_names=g.kind_names, cost_names=tuple(g.cost_names), tensor_names=g.tensor_names, kind=g.kind.copy(),
            claim_ns=claim, ready_ns=ready, mem_start_ns=np.asarray(run.mem_start, np.float64),
            compute_start_ns=np.asarray(run.comp_start, np.float64), end_ns=np.asarray(run.end, np.float64),
            wait_ns=np.maximum(0.0, ready - claim - claim_cost),
            sm=np.asarray(run.sm_of, np.int32), slot=np.asarray(run.slot_of, np.int32),
            task_dram_bytes=task_dram, flops=float(g.flops.sum()),
            dram_read_bytes=np.bincount(tensor[~write], weights=miss[~write], minlength=n_t),
            dram_write_bytes=np.bincount(tensor[write], weights=miss[write], minlength=n_t),
            l2_read_bytes=np.bincount(tensor[~write], weights=g.access_bytes[tracked][~write], minlength=n_t),
            onchip_bytes=float(g.access_bytes[~tracked].sum()),
            mem_cap=run.mem_cap, sm_count=spec.sm_count, dram_bw_gbps=spec.dram_bw_gbps,
            fp32_peak_gflops=spec.fp32_peak_gflops, sim_wall_s=wall_s, events=run.events,
        )

    # --- derived figures ---------------------------------------------------------------------------
    @property
    def predicted_us(self) -> float:
        return self.predicted_ns / 1e3

    @property
    def num_tasks(self) -> int:
        return int(self.kind.shape[0])

    @property
    def dram_bytes(self) -> float:
        return float(self.dram_read_bytes.sum() + self.dram_write_bytes.sum())

    @property
    def l2_hit_rate(self) -> float:
        """Fraction of bytes read from tracked regions that hit in L2 (on-chip halo traffic excluded)."""
        reads = float(self.l2_read_bytes.sum())
        return 1.0 - float(self.dram_read_bytes.sum()) / reads if reads else 0.0

    @property
    def achieved_gflops(self) -> float:
        return self.flops / self.predicted_ns if self.predicted_ns else 0.0

    @property
    def achieved_dram_gbps(self) -> float:
        return self.dram_bytes / self.predicted_ns if self.predicted_ns else 0.0

    def timelines(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Step functions (change times, value from each time on), derived from the task records:
        'memory_jobs' (blocks in their memory phase), 'busy_sms' (SMs with a block computing),
        'resident' (blocks holding a slot, waiting ones included)."""
        return {
            "memory_jobs": _count_intervals(self.mem_start_ns, self.compute_start_ns),
            "busy_sms": _busy_sms(self.sm, self.compute_start_ns, self.end_ns),
            "resident": _count_intervals(self.claim_ns, self.end_ns),
        }

    def utilization(self, bins: int = 100) -> dict[str, np.ndarray]:
        """Busy fraction of each resource in `bins` equal time bins over the run: 'memory' (delivered
        fraction of the memory system's bandwidth), 'compute' (fraction of SMs computing), 'slots'
        (resident blocks as a fraction of the most resident at any time)."""
        edges = np.linspace(0.0, self.predicted_ns, bins + 1)
        lines = self.timelines()
        peak = max(1.0, float(lines["resident"][1].max(initial=0.0)))
        return {
            "time_ns": 0.5 * (edges[1:] + edges[:-1]),
            "memory": _bin_average(*lines["memory_jobs"], edges, lambda n: np.minimum(1.0, n * self.mem_cap)),
            "compute": _bin_average(*lines["busy_sms"], edges, lambda n: n / self.sm_count),
            "slots": _bin_average(*lines["resident"], edges, lambda n: n / peak),
        }

    def kind_summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for k, name in enumerate(self.kind_names):
            sel = self.kind == k
            if not sel.any():
                continue
            dur = self.end_ns[sel] - self.ready_ns[sel]
            out[name] = {"tasks": int(sel.sum()), "mean_duration_ns": float(dur.mean()),
                         "mean_wait_ns": float(self.wait_ns[sel].mean()),
                         "max_wait_ns": float(self.wait_ns[sel].max())}
        return out

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (the CLI's --json output, plus what the caller adds)."""
        return {
            "gpu": self.gpu,
            "schedule": self.schedule,
            "params": self.params,
            "predicted_us": self.predicted_us,
            "tasks": self.num_tasks,
            "l2_hit_rate": self.l2_hit_rate,
            "dram_bytes": self.dram_bytes,
            "dram_bytes_by_tensor": {n: float(r + w) for n, r, w in
                                     zip(self.tensor_names, self.dram_read_bytes, self.dram_write_bytes)},
            "achieved_gflops": self.achieved_gflops,
            "achieved_dram_gbps": self.achieved_dram_gbps,
            "total_wait_us": float(self.wait_ns.sum() / 1e3),
            "launches": [{"name": l.name, "style": l.style, "start_us": l.start_ns / 1e3, "end_us": l.end_ns / 1e3,
                          "blocks_per_sm": l.blocks_per_sm, "limited_by": l.limited_by, "tasks": l.tasks}
                         for l in self.launches],
            "kinds": self.kind_summary(),
            "taskgraph_hash": self.taskgraph_hash,
            "schedule_hash": self.schedule_hash,
            "sim_wall_s": self.sim_wall_s,
            "sim_events": self.events,
        }

    def chrome_trace(self) -> dict[str, Any]:
        """Trace Event Format: one row per (SM, slot); a task is a complete event from claim to end,
        with its wait shown as a nested 'wait' slice. Times in microseconds."""
        events: list[dict[str, Any]] = []
        for sm in range(self.sm_count):
            events.append({"name": "process_name", "ph": "M", "pid": sm, "args": {"name": f"SM {sm}"}})
        for i in range(self.num_tasks):
            start, end = self.claim_ns[i] / 1e3, self.end_ns[i] / 1e3
            common = {"pid": int(self.sm[i]), "tid": int(self.slot[i])}
            events.append({"name": self.kind_names[self.kind[i]], "ph": "X", "ts": start, "dur": end - start,
                           "args": {"task": i, "wait_us": self.wait_ns[i] / 1e3,
                                    "dram_bytes": self.task_dram_bytes[i]}, **common})
            if self.wait_ns[i] > 0:
                events.append({"name": "wait", "ph": "X", "ts": self.ready_ns[i] / 1e3 - self.wait_ns[i] / 1e3,
                               "dur": self.wait_ns[i] / 1e3, **common})
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"gpu": self.gpu, "schedule": self.schedule, "taskgraph_hash": self.taskgraph_hash}}

    def write_chrome_trace(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.chrome_trace()))


def _count_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many [start, end) intervals are open, as a step function (times, counts)."""
    keep = end > start
    t = np.concatenate([start[keep], end[keep]])
    d = np.concatenate([np.ones(int(keep.sum())), -np.ones(int(keep.sum()))])
    order = np.lexsort((d, t))          # at equal times, ends (-1) before starts
    return t[order], np.cumsum(d[order])


def _busy_sms(sm: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many SMs have at least one [start, end) interval open, as a step function."""
    keep = end > start
    s = np.concatenate([sm[keep], sm[keep]])
    t = np.concatenate([start[keep], end[keep]])
    d = np.concatenate([np.ones(int(keep.sum())), -np.ones(int(keep.sum()))])
    order = np.lexsort((d, t, s))       # by SM, then time; each SM's deltas sum to zero
    t, d = t[order], d[order]
    count = np.cumsum(d)
    before = count - d
    change = np.where((before == 0) & (count > 0), 1.0, np.where((before > 0) & (count == 0), -1.0, 0.0))
    sel = change != 0
    order = np.lexsort((change[sel], t[sel]))
    return t[sel][order], np.cumsum(change[sel][order])


def _bin_average(times: np.ndarray, values: np.ndarray, edges: np.ndarray, transform) -> np.ndarray:
    """Average of transform(step function) over each bin [edges[i], edges[i+1])."""
    bins = edges.shape[0] - 1
    if times.shape[0] == 0 or edges[-1] <= edges[0]:
        return np.zeros(bins)
    v = transform(values)
    t = np.concatenate([times, [max(edges[-1], times[-1])]])
    cum = np.concatenate([[0.0], np.cumsum(v * np.diff(t))])      # integral up to each change time
    idx = np.searchsorted(t, edges, side="right") - 1
    inside = idx >= 0
    at = np.zeros_like(edges)
    i = np.clip(idx, 0, v.shape[0] - 1)
    at[inside] = cum[i[inside]] + v[i[inside]] * (edges[inside] - t[i[inside]])
    return np.diff(at) / np.diff(edges)
