"""GPU specifications as data.

A GPUSpec holds what the model needs to know about one GPU: how many SMs it has and what fits on
each (threads, blocks, registers, shared memory), how fast it computes (FP32) and moves data (DRAM,
L2), how big its L2 is, a few latencies, and what launching kernels and dispatching thread blocks
costs. It also holds per-task-kind costs (TaskCost): the fraction of the SM's FP32 peak a kind's
device function reaches and a fixed time per task; presets carry assumed values, `megasim calibrate`
replaces them with measured ones.

Units are in the field names. Bandwidths are in GB/s, which is the same number as bytes per
nanosecond, the simulator's unit pair (time in ns, data in bytes).

Every value carries its source (a datasheet, a paper, "measured <date> on <device>", or "estimate:
..."), kept in `GPUSpec.sources` under the field name. Constructors do no I/O: files are read and
written by `load_spec` / `dump_spec` in `megasim.hardware.files`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Mapping

from megasim.errors import SpecError

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TaskCost:
    """What one task kind's device function costs beyond its bytes: a compute efficiency (fraction of
    the SM's FP32 peak it sustains while it computes), a fixed time per task (index arithmetic,
    synchronisation, epilogue) that no roofline term captures, the SM time of each of its non-FP32
    operations (``TaskGraph.other_ops``: e.g. the compare-and-store of a sparse kernel's compression;
    ns of the whole SM per operation), and the largest share of an SM's issue rate one block of the
    kind can use (``block_sm_share``: a block's few warps cannot hide their own latencies, so an SM
    with one block resident runs below peak), and the latency of each of a task's serial steps
    (``TaskGraph.serial_steps``, ``ns_per_step``: a delay that other resident blocks hide) and of
    each dependent loop iteration on its critical path (``TaskGraph.serial_iterations``,
    ``ns_per_iteration``, hidden the same way), and the SM time of each shared-memory replay
    (``TaskGraph.shared_replays``, ``ns_per_replay``).
    Optionally, the DRAM bandwidth one block of the kind can sustain (``block_dram_bw_gbps``: its
    loads in flight over the memory latency; None = the spec's ``tb_max_dram_bw_gbps``, measured
    with a plain read loop) and the extra fixed time of a task when the megakernel runs it
    (``megakernel_fixed_ns``: what the megakernel adds after the task is ready: the fence and signal
    after its body, and any slowdown of the body in the megakernel's code, which a kind's own kernel
    does not pay) and the time a megakernel block takes to claim a task of the kind
    (``megakernel_claim_ns``: its ticket, task-table row, first counter look and acquire fence, from
    the claim to the task being ready when its parents are done; None = the spec's
    ``atomic_latency_ns`` for the ticket plus one for the counter look). The claim runs before the
    task is ready, so it overlaps a wait on parents; ``megakernel_fixed_ns`` runs after.
    Alternatively to ``block_sm_share``, ``block_sm_ready``: the fraction of the time one block of the
    kind alone keeps its SM issuing; blocks then stall independently and share the SM by
    ``megasim.sim.servers.ReadinessSharedServer``'s rule (throughput saturating smoothly with the
    blocks resident) instead of water-filling under caps. A kind gives one of the two.
    ``coresident_stretch`` (gamma, in [0, 1), default 0 = off): how much the block's memory
    phase slows with the other blocks resident on its SM. A transform's loads are latency-bound (few
    in flight, each waiting for its issue slot and load/store queue, which co-resident warps share),
    so its memory phase runs at ``1 - gamma * U_others`` of its rate alone, ``U_others = 1 - prod
    (1 - block_sm_ready)`` over the other blocks on its SM that move data or compute when the phase
    starts (a kind without ``block_sm_ready`` counts as always ready). A kind that stretches gives
    ``block_sm_ready``.
    ``memory_overlap`` (in [0, 1], default 0): the fraction of the block's memory work that
    runs beside its compute phase rather than before it. A kernel that pipelines its loads (the GEMM's
    cp.async double buffer fetches the next k-step while it computes this one) starts computing after
    its first stage has arrived; the task ends when both its compute and the rest of its loads have.
    ``further_block_sm_ready`` (in (0, 1], default None = ``block_sm_ready``): the
    readiness of each block of the kind on an SM after the first, which keeps ``block_sm_ready``
    (``ReadinessSharedServer``): with n blocks of the kind alone an SM is busy
    ``1 - (1 - block_sm_ready)(1 - further_block_sm_ready)^(n - 1)`` of the time.
    ``launch_fixed_ns`` (default 0): a fixed time once per launch of a kernel running the
    kind, between the launch's start and its first blocks (the largest over the launch's kinds), where
    ``fixed_ns`` is paid by every task. The sparse kernels' fitted constant is this one: their
    calibration cases are at most a wave or two, where the two cannot be told apart, and on grids of
    many waves a per-block constant is paid once a wave (calibration round 4, docs/sparse.md).
    ``sm_fixed_ns`` (default 0): SM time every task of the kind spends beside its flops, whatever its
    size (a GEMM's prologue and epilogue: the accumulator tile zeroed, its values stored), added to
    its compute phase: unlike ``fixed_ns`` co-resident blocks do not hide it. A GEMM over few channels
    spends a larger share of its time there (docs/calibration.md, "The GEMM's epilogue")."""

    compute_efficiency: float = 0.5
    fixed_ns: float = 0.0
    ns_per_other_op: float = 0.0
    block_sm_share: float = 1.0
    ns_per_step: float = 0.0
    block_dram_bw_gbps: float | None = None
    megakernel_fixed_ns: float = 0.0
    block_sm_ready: float | None = None
    ns_per_iteration: float = 0.0
    ns_per_replay: float = 0.0
    megakernel_claim_ns: float | None = None
    coresident_stretch: float = 0.0
    memory_overlap: float = 0.0
    further_block_sm_ready: float | None = None
    launch_fixed_ns: float = 0.0
    sm_fixed_ns: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            if not finite_number(value):
                raise SpecError(f"{f.name}={value!r} is not allowed: it must be a finite number"
                                + (" or None" if f.default is None else ""))
            if value is not None and type(value) not in (int, float):
                object.__setattr__(self, f.name, float(value))     # a NumPy scalar: a plain float
        if not (self.launch_fixed_ns >= 0.0):
            raise SpecError(f"launch_fixed_ns={self.launch_fixed_ns!r} is not allowed: it must be >= 0")
        if not (0.0 <= self.memory_overlap <= 1.0):
            raise SpecError(f"memory_overlap={self.memory_overlap!r} is not allowed: it must be in [0, 1]")
        if not (0.0 <= self.coresident_stretch < 1.0):
            raise SpecError(f"coresident_stretch={self.coresident_stretch!r} is not allowed: it must be in [0, 1)")
        if self.coresident_stretch > 0.0 and self.block_sm_ready is None:
            raise SpecError(f"coresident_stretch={self.coresident_stretch!r} needs block_sm_ready (the rule reads "
                            f"the readiness of the blocks beside it); give block_sm_ready or a stretch of 0")
        if self.further_block_sm_ready is not None:
            if self.block_sm_ready is None:
                raise SpecError(f"further_block_sm_ready={self.further_block_sm_ready!r} needs block_sm_ready (it is "
                                f"the readiness of the kind's blocks after the first); give block_sm_ready or None")
            if not (0.0 < self.further_block_sm_ready <= 1.0):
                raise SpecError(f"further_block_sm_ready={self.further_block_sm_ready!r} is not allowed: it must be "
                                f"in (0, 1] or None")
        if self.block_sm_ready is not None:
            if not (0.0 < self.block_sm_ready <= 1.0):
                raise SpecError(f"block_sm_ready={self.block_sm_ready!r} is not allowed: it must be in (0, 1]")
            if self.block_sm_share != 1.0:
                raise SpecError(f"block_sm_share={self.block_sm_share!r} and block_sm_ready="
                                f"{self.block_sm_ready!r}: give one of them (block_sm_share must stay 1)")
        if self.block_dram_bw_gbps is not None and not (self.block_dram_bw_gbps > 0.0):
            raise SpecError(f"block_dram_bw_gbps={self.block_dram_bw_gbps!r} is not allowed: it must be > 0")
        if self.megakernel_claim_ns is not None and not (self.megakernel_claim_ns >= 0.0):
            raise SpecError(f"megakernel_claim_ns={self.megakernel_claim_ns!r} is not allowed: it must be >= 0 or None")
        if not (self.megakernel_fixed_ns >= 0.0):
            raise SpecError(f"megakernel_fixed_ns={self.megakernel_fixed_ns!r} is not allowed: it must be >= 0")
        if not (self.ns_per_replay >= 0.0):
            raise SpecError(f"ns_per_replay={self.ns_per_replay!r} is not allowed: it must be >= 0")
        if not (self.ns_per_iteration >= 0.0):
            raise SpecError(f"ns_per_iteration={self.ns_per_iteration!r} is not allowed: it must be >= 0")
        if not (self.ns_per_step >= 0.0):
            raise SpecError(f"ns_per_step={self.ns_per_step!r} is not allowed: it must be >= 0")
        if not (self.ns_per_other_op >= 0.0):
            raise SpecError(f"ns_per_other_op={self.ns_per_other_op!r} is not allowed: it must be >= 0")
        if not (self.sm_fixed_ns >= 0.0):
            raise SpecError(f"sm_fixed_ns={self.sm_fixed_ns!r} is not allowed: it must be >= 0")
        if not (0.0 < self.block_sm_share <= 1.0):
            raise SpecError(f"block_sm_share={self.block_sm_share!r} is not allowed: it must be in (0, 1]")
        if not (0.0 < self.compute_efficiency <= 1.0):
            raise SpecError(
                f"compute_efficiency={self.compute_efficiency!r} is not allowed: it must be in (0, 1]"
            )
        if not (self.fixed_ns >= 0.0):
            raise SpecError(f"fixed_ns={self.fixed_ns!r} is not allowed: it must be >= 0")
        for name, (low, high) in TASK_COST_RANGES.items():
            value = getattr(self, name)
            if value is not None and not low <= value <= high:
                raise SpecError(f"{name}={value!r} is not allowed: it must be in [{low:g}, {high:g}] (docs/errors.md: "
                                f"a range far beyond any kind measured; outside it the model stalls or its time "
                                f"means nothing)")


@dataclass(frozen=True)
class GPUSpec:
    """One GPU, as the model sees it. Frozen; use `dataclasses.replace` to derive variants."""

    name: str
    sm_count: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    shared_mem_per_sm_bytes: int
    max_shared_mem_per_block_bytes: int
    sm_clock_mhz: float
    fp32_peak_gflops: float
    dram_bw_gbps: float
    l2_bytes: int
    l2_bw_gbps: float
    l2_partitions: int
    dram_latency_ns: float
    l2_latency_ns: float
    atomic_latency_ns: float
    kernel_launch_ns: float
    kernel_boundary_ns: float
    block_dispatch_ns: float
    tb_max_dram_bw_gbps: float
    # Optional: the launch cost of a megakernel (a launch that mixes task kinds or runs a persistent
    # grid), when it differs from a plain kernel's; None = kernel_launch_ns. Numba's megakernel launch
    # path costs ~10x a small kernel's on the H200 (docs/winograd_gpu.md, docs/validation.md).
    megakernel_launch_ns: float | None = None
    # Optional: how runs are timed back to back (CUDA events around each run, no host synchronisation
    # between runs, as gpu.runtime.timing.time_cuda does). The host then issues a run's launches while the
    # device still works on the previous run, so the host's launch costs (kernel_launch_ns,
    # megakernel_launch_ns) overlap device work: a run's first kernel starts this long after the run
    # begins on the device (a kernel already queued), and the run takes the longer of its device time
    # and its host issue time (the sum of its launches' costs). None = the host's launch cost is
    # paid before the first kernel, in series with the device work (a run on an idle GPU).
    queued_launch_ns: float | None = None
    # Optional: the fraction of an SM's busy time that does useful work while blocks of two
    # or more task kinds share it (a megakernel mixing kinds); what the rest is lost to (instruction
    # fetch, the load/store queue, ...) is not separated. Fitted on the mixed-kind calibration runs
    # (megasim.calibration.cases.MIXED_PAIRS), which mix two kinds' non-fused tasks in one launch. None = 1.
    mixed_kinds_sm_factor: float | None = None
    # Optional: how the warp schedulers favour older blocks. Blocks on an SM whose kinds
    # give block_sm_ready split its busy time by weighted water-filling, the k-th oldest weighing
    # younger_block_weight**k (megasim.sim.servers.AgeWeightedReadinessServer). Fitted on a traced
    # single-kind run: the order in which an SM's blocks, started together, end
    # (megasim.calibration.age.fit_age_weight). None = 1, every block alike.
    younger_block_weight: float | None = None
    # Optional: what the per-task megakernel's ticket (an atomic on one global counter per
    # task claimed) costs a task's slot at full occupancy; blockIdx dispatch (block b runs map position
    # b) skips it, so a blockIdx launch's claim is each kind's megakernel_claim_ns less this. Measured by
    # each kind's tasks alone in the megakernel under both dispatches (gpu.calibrate.occupancy
    # .measure_megakernel_ticket). None = atomic_latency_ns (an idle round trip).
    megakernel_ticket_ns: float | None = None
    # Optional: the device time a megakernel launch waits, beyond a plain kernel's start, for the
    # reset before it: the executor (gpu.runtime.prepared.PreparedSchedule.run) issues a small kernel
    # before each megakernel launch that restores the dependency counters and the launch's control
    # array from pristine copies (gpu.kernels.winograd.megakernel.restore_kernel), and the megakernel
    # starts a kernel boundary after it ends. Measured by the calibration's queued probe: what the
    # reset and a megakernel launch of an empty map take, queued, less what an empty plain kernel
    # takes (gpu.calibrate.occupancy.probe_queued_launch). Paid before every megakernel launch, in
    # series with the device work; a launch of one kind's own kernel (the non-fused pipeline) has none.
    # None = not modelled (0).
    megakernel_reset_ns: float | None = None
    # Optional: how much faster one block moves the bytes the L2 serves than the bytes it misses to
    # DRAM. A block's memory phase takes at least max(dram_bytes / b, l2_bytes / (b * this)), b its
    # kind's block_dram_bw_gbps (megasim.sim.resources.block_rates). It belongs to the SM and the L2,
    # not to the DRAM, so a variant of a spec with another dram_bw_gbps or l2_bw_gbps keeps it. None =
    # l2_bw_gbps / dram_bw_gbps of the values given (the rule every calibration's per-block rates were
    # fitted under), fixed when the spec is made.
    block_l2_bw_ratio: float | None = None
    task_costs: Mapping[str, TaskCost] = field(default_factory=dict, compare=False)
    # Optional, per cost name: the kind's cost in its own kernel (a launch of that kind alone, not the
    # megakernel: the non-fused pipeline's launches), where it differs from ``task_costs``'. The two are
    # different builds of the kind's code: its own kernel at its own registers and threads, and a device
    # function of the megakernel. A calibration fits ``task_costs`` on all the kind's single-kind runs (both
    # kernels, every occupancy: what pins how its blocks share an SM) and then this on its own kernel's
    # runs alone, kept where it fits them better (megasim.calibration.winograd.kernel_fits). A cost name
    # without an entry here is priced by ``task_costs`` in both (``kernel_task_cost``).
    kernel_task_costs: Mapping[str, TaskCost] = field(default_factory=dict, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    description: str = ""

    def __post_init__(self) -> None:
        if self.block_l2_bw_ratio is None and _positive(self.l2_bw_gbps) and _positive(self.dram_bw_gbps):
            object.__setattr__(self, "block_l2_bw_ratio", self.l2_bw_gbps / self.dram_bw_gbps)
        for f in dataclasses.fields(self):
            if f.name in ("name", "task_costs", "kernel_task_costs", "sources", "description"):
                continue
            value = getattr(self, f.name)
            if f.name in OPTIONAL_FIELDS and value is None:
                continue
            if not finite_number(value):
                raise SpecError(f"GPU spec {self.name!r}: {f.name}={value!r} must be a finite number")
            if f.type == "int":
                if int(value) != value:
                    raise SpecError(f"GPU spec {self.name!r}: {f.name}={value!r} must be an integer")
                # 132.0 (a JSON writer's integer) is 132: the engine counts SMs, slots and registers with it
                value = int(value)
            elif type(value) is not int:
                value = float(value)                 # a NumPy scalar: a plain float (a JSON int stays as written)
            object.__setattr__(self, f.name, value)
            if f.name in ("dram_latency_ns", "l2_latency_ns", "atomic_latency_ns", "kernel_launch_ns",
                          "kernel_boundary_ns", "block_dispatch_ns", "megakernel_launch_ns",
                          "queued_launch_ns", "megakernel_ticket_ns", "megakernel_reset_ns"):
                if value < 0:
                    raise SpecError(f"GPU spec {self.name!r}: {f.name}={value!r} must be >= 0")
            elif not value > 0:
                raise SpecError(f"GPU spec {self.name!r}: {f.name}={value!r} must be > 0")
            if f.name in ("mixed_kinds_sm_factor", "younger_block_weight") and not value <= 1.0:
                raise SpecError(f"GPU spec {self.name!r}: {f.name}={value!r} must be in (0, 1]")
            if f.name in SPEC_CEILINGS and value > SPEC_CEILINGS[f.name]:
                raise SpecError(f"GPU spec {self.name!r}: {f.name}={value!r} is not allowed: it must be at most "
                                f"{SPEC_CEILINGS[f.name]:,} (docs/errors.md: a ceiling far above any GPU built)")
            if f.name in SPEC_RANGES and not SPEC_RANGES[f.name][0] <= value <= SPEC_RANGES[f.name][1]:
                low, high = SPEC_RANGES[f.name]
                raise SpecError(f"GPU spec {self.name!r}: {f.name}={value!r} is not allowed: it must be in "
                                f"[{low:g}, {high:g}] (docs/errors.md: a range far beyond any GPU measured; outside "
                                f"it the model stalls or its time means nothing)")

    # Derived quantities (not stored, so they can never disagree with the fields).
    @property
    def sm_gflops(self) -> float:
        """FP32 peak of one SM, in GFLOP/s (= FLOP per ns)."""
        return self.fp32_peak_gflops / self.sm_count

    @property
    def l2_ratio_implied(self) -> bool:
        """Whether ``block_l2_bw_ratio`` is the one the spec's bandwidths imply (its default)."""
        return self.block_l2_bw_ratio == self.l2_bw_gbps / self.dram_bw_gbps

    def launch_ns(self, megakernel: bool) -> float:
        """The host's cost of issuing one launch: a megakernel's or a plain kernel's."""
        if megakernel and self.megakernel_launch_ns is not None:
            return self.megakernel_launch_ns
        return self.kernel_launch_ns

    def reset_ns(self, megakernel: bool, first: bool) -> float:
        """The device time of the reset before a launch (``megakernel_reset_ns``): a megakernel launch's,
        0 for a plain kernel or when the spec does not give it. The first launch of a run on an idle
        GPU (``queued_launch_ns`` None) pays none: its ``megakernel_launch_ns``, measured with CUDA
        events around the reset and the megakernel, already holds it."""
        if not megakernel or self.megakernel_reset_ns is None:
            return 0.0
        if first and self.queued_launch_ns is None and self.megakernel_launch_ns is not None:
            return 0.0
        return self.megakernel_reset_ns

    def task_cost(self, kind: str) -> TaskCost:
        """The cost entry of a task kind, falling back to the 'default' entry, then to TaskCost(). An
        implementation variant ``kind@variant`` (``TaskGraph.cost_names``) without an entry of its own
        falls back to its kind's entry first."""
        if kind in self.task_costs:
            return self.task_costs[kind]
        base = base_kind(kind)
        if base in self.task_costs:
            return self.task_costs[base]
        return self.task_costs.get("default", TaskCost())

    def kernel_task_cost(self, cost_name: str) -> TaskCost:
        """The cost of a cost name's tasks in a launch of their kind's own kernel: its
        ``kernel_task_costs`` entry; a variant without an entry of its own in either table takes its kind's
        own-kernel entry (as ``task_cost`` falls back to the kind's); else ``task_cost``."""
        if cost_name in self.kernel_task_costs:
            return self.kernel_task_costs[cost_name]
        base = base_kind(cost_name)
        if cost_name not in self.task_costs and base in self.kernel_task_costs:
            return self.kernel_task_costs[base]
        return self.task_cost(cost_name)

    def prices(self, cost_name: str) -> bool:
        """Whether the spec has a cost of its own for `cost_name` (its entry, or its kind's), rather than
        the 'default' entry every kind it does not name falls back to (a preset has only that one)."""
        return cost_name in self.task_costs or base_kind(cost_name) in self.task_costs


def finite_number(value) -> bool:
    """Whether `value` is a real number (not a bool; NumPy's scalars count) that is finite as a float. An
    integer too large for a float (JSON reads 10**400 as an int) is not: ``math.isfinite`` raises
    OverflowError on it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):     # NumPy's bool is no numbers.Real
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _positive(value) -> bool:
    """A finite number > 0 (not a bool): a field the checks below will accept as a rate."""
    return finite_number(value) and value > 0


def base_kind(cost_name: str) -> str:
    """The kind of a cost name (``TaskGraph.cost_names``): ``gemm`` for ``gemm@t32`` and for ``gemm``."""
    return cost_name.split("@", 1)[0]


# Ceilings of the resource fields, 16x or more above the largest GPU to date (H200: 132 SMs, 2,048
# threads, 32 blocks, 65,536 registers and 228 KiB of shared memory per SM, 255 registers per thread,
# 60 MiB of L2): a value above one is a typo, and the engine sizes its tables by these fields.
# Ranges of the spec's time and rate fields, 30x or more beyond every preset and calibrated spec (their
# extremes: a megakernel launch of 283 us, a block's 4.9 GB/s). Outside them the model has stalled (a
# kernel launch of 1e12 ns, an L2 of 1e-3 GB/s or an FP32 peak of 1e-6 GFLOP/s ran for ever, even
# Ctrl-C) or reported times with no meaning.
_NS = (0.0, 1e7)
SPEC_RANGES = {"sm_clock_mhz": (1.0, 1e5), "fp32_peak_gflops": (1.0, 1e8), "l2_bw_gbps": (1.0, 1e7),
               "dram_bw_gbps": (1.0, 1e7), "tb_max_dram_bw_gbps": (0.01, 1e7),
               "block_l2_bw_ratio": (1e-3, 1e4),
               **{name: _NS for name in ("dram_latency_ns", "l2_latency_ns", "atomic_latency_ns", "kernel_launch_ns",
                                         "kernel_boundary_ns", "block_dispatch_ns", "megakernel_launch_ns",
                                         "queued_launch_ns", "megakernel_ticket_ns", "megakernel_reset_ns")}}
# The same for a task kind's costs (extremes measured: fixed_ns 7.5 us, launch_fixed_ns 43 us, a
# block_sm_ready of 0.043, 5.4 GB/s per block; block_sm_share 1e-12 or fixed_ns 1e10 ran for ever).
TASK_COST_RANGES = {"compute_efficiency": (1e-4, 1.0), "block_sm_share": (1e-4, 1.0), "block_sm_ready": (1e-4, 1.0),
                    "further_block_sm_ready": (1e-4, 1.0), "block_dram_bw_gbps": (0.01, 1e7),
                    **{name: _NS for name in ("fixed_ns", "ns_per_other_op", "ns_per_step", "megakernel_fixed_ns",
                                              "ns_per_iteration", "ns_per_replay", "megakernel_claim_ns",
                                              "launch_fixed_ns", "sm_fixed_ns")}}

SPEC_CEILINGS = {"sm_count": 4096, "max_threads_per_sm": 65536, "max_blocks_per_sm": 1024,
                 "registers_per_sm": 2 ** 22, "max_registers_per_thread": 4096,
                 "shared_mem_per_sm_bytes": 2 ** 26, "max_shared_mem_per_block_bytes": 2 ** 26,
                 "l2_bytes": 2 ** 36, "l2_partitions": 4096}

# Numeric fields a spec file may leave out (None: see the field's comment).
OPTIONAL_FIELDS = ("megakernel_launch_ns", "queued_launch_ns", "mixed_kinds_sm_factor", "younger_block_weight",
                   "megakernel_ticket_ns", "megakernel_reset_ns", "block_l2_bw_ratio")


def spec_field_names() -> tuple[str, ...]:
    """The numeric fields a spec file must give, in declaration order."""
    skip = {"name", "task_costs", "kernel_task_costs", "sources", "description", *OPTIONAL_FIELDS}
    return tuple(f.name for f in dataclasses.fields(GPUSpec) if f.name not in skip)
