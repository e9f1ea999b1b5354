"""What a simulation returns: the predicted time, per-task records, traffic totals, resource timelines,
and their exports (a JSON summary and a Chrome trace that opens in Perfetto / chrome://tracing)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from megasim.mapping.schedule import Schedule
    from megasim.sim.engine import _Run


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
    mem_log: np.ndarray           # (time_ns, jobs in the memory system)
    busy_sm_log: np.ndarray       # (time_ns, SMs with a block computing)
    resident_log: np.ndarray      # (time_ns, blocks holding a slot)
    mem_cap: float
    sm_count: int
    dram_bw_gbps: float
    fp32_peak_gflops: float
    sim_wall_s: float
    events: int
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_run(cls, run: "_Run", schedule: "Schedule", wall_s: float) -> "SimResult":
        g, spec = run.graph, run.spec
        launches = tuple(LaunchRecord(**rec) for rec in run.launch_log)
        claim = np.array(run.claim)
        ready = np.array(run.ready)
        claim_cost = np.zeros(g.num_tasks)
        for rec, launch in zip(launches, schedule.launches):
            claim_cost[launch.order] = (spec.atomic_latency_ns if rec.style == "persistent"
                                        else spec.block_dispatch_ns) + spec.atomic_latency_ns
        return cls(
            gpu=spec.name, schedule=schedule.name, params=dict(schedule.params),
            taskgraph_hash=g.hash, schedule_hash=schedule.hash,
            predicted_ns=float(max(rec.end_ns for rec in launches)) if launches else 0.0,
            launches=launches, kind_names=g.kind_names, tensor_names=g.tensor_names, kind=g.kind.copy(),
            claim_ns=claim, ready_ns=ready, mem_start_ns=np.array(run.mem_start),
            compute_start_ns=np.array(run.comp_start), end_ns=np.array(run.end),
            wait_ns=np.maximum(0.0, ready - claim - claim_cost),
            sm=np.array(run.sm_of, np.int32), slot=np.array(run.slot_of, np.int32),
            task_dram_bytes=np.array(run.dram_of), flops=float(g.flops.sum()),
            dram_read_bytes=np.array(run.dram_read), dram_write_bytes=np.array(run.dram_write),
            l2_read_bytes=np.array(run.l2_read), onchip_bytes=run.onchip_bytes,
            mem_log=np.array(run.mem_log, dtype=np.float64).reshape(-1, 2),
            busy_sm_log=np.array(run.busy_sm_log, dtype=np.float64).reshape(-1, 2),
            resident_log=np.array(run.resident_log, dtype=np.float64).reshape(-1, 2),
            mem_cap=run.mem.cap, sm_count=spec.sm_count, dram_bw_gbps=spec.dram_bw_gbps,
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

    def utilization(self, bins: int = 100) -> dict[str, np.ndarray]:
        """Busy fraction of each resource in `bins` equal time bins over the run:
        'memory' (delivered fraction of the memory system), 'compute' (fraction of SMs computing),
        'slots' (blocks resident, as a fraction of the most resident at any time)."""
        edges = np.linspace(0.0, self.predicted_ns, bins + 1)

        def average(log: np.ndarray, transform) -> np.ndarray:
            if log.shape[0] == 0:
                return np.zeros(bins)
            t = np.concatenate([log[:, 0], [self.predicted_ns]])
            v = transform(log[:, 1])
            # Integral of the step function at each edge, then differences.
            cum = np.concatenate([[0.0], np.cumsum(v * np.diff(t))])
            idx = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, len(v) - 1)
            at_edges = cum[idx] + v[idx] * (edges - t[idx])
            at_edges[edges < t[0]] = 0.0
            return np.diff(at_edges) / np.diff(edges)

        peak_res = max(1.0, float(self.resident_log[:, 1].max())) if self.resident_log.shape[0] else 1.0
        return {
            "time_ns": 0.5 * (edges[1:] + edges[:-1]),
            "memory": average(self.mem_log, lambda n: np.minimum(1.0, n * self.mem_cap)),
            "compute": average(self.busy_sm_log, lambda n: n / self.sm_count),
            "slots": average(self.resident_log, lambda n: n / peak_res),
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
