"""The shared resources of one run: the memory system's server and the SMs' servers, per launch.

Each launch needs servers whose rule fits the kinds it runs (``megasim.sim.servers``), per kind from its
``TaskCost``:

- **SMs.** A launch with a kind that gives ``block_sm_ready`` shares its SMs by independent stalls:
  ``readiness`` servers, or ``age_weighted`` ones when the spec's ``younger_block_weight`` rho is not 1.
  A class there is (readiness of a kind's first block on an SM, of each further one), and every kind a
  class of its own when the spec gives ``mixed_kinds_sm_factor``; a kind without ``block_sm_ready`` counts
  as always ready (1). Such blocks count on their SM through their memory phase too (``presence``).
  Otherwise a block's share of its SM is capped by its kind's ``block_sm_share``: ``shared`` servers when
  the launch's kinds agree on it (the fast path), ``capped`` ones (water-filling) when they differ.
- **Memory system.** A block moves its bytes no faster than its kind's ``block_dram_bw_gbps`` b
  (default ``tb_max_dram_bw_gbps``) on the bytes it misses and ``b * block_l2_bw_ratio`` on all its
  bytes (``block_rates``): its memory phase, a job of ``max(dram_bytes / dram_bw, l2_bytes / l2_bw)``
  ns on the memory server, takes at least ``max(dram_bytes / b, l2_bytes / (b * ratio))`` ns alone. At
  a spec's own bandwidths with the ratio they imply (``l2_bw / dram_bw``, the default) that floor is
  the job's work times ``dram_bw / b`` for every job, so a block's share of the server is one cap per
  kind, ``b / dram_bw``: ``shared`` servers when the launch's kinds agree, ``capped`` when they differ.
  Otherwise (a stated ratio, or a variant of a spec with another bandwidth, which keeps its ratio) the
  share depends on the job's hit fraction: a fraction q <= 1 of its kind's largest cap, set when its
  accesses are resolved. With co-residence stretch (a kind with ``coresident_stretch`` gamma > 0) a
  block moves its data at ``1 - gamma * U_others`` of its cap, ``U_others`` read from its SM's
  readiness server when its memory phase starts. Either way the cap is taken in steps of
  1/``STRETCH_LEVELS`` of the kind's largest: one ``capped`` server over (cap, level) classes serves
  every launch.

A server is made the first time a launch needs it and kept for the rest of the run: the servers are
idle between launches, so they can be swapped, and reusing one keeps its virtual times where the last
launch left them (which the predictions depend on, bit for bit). ``shared`` servers take each launch's
cap.
"""

from __future__ import annotations

from megasim.hardware.spec import GPUSpec, TaskCost
from megasim.sim.servers import make_server

STRETCH_LEVELS = 64     # resolution of a memory phase's co-residence factor (TaskCost.coresident_stretch)


def classes_of(keys_of_kind: list, task_kind: list[int]) -> tuple[list, list[int]]:
    """The distinct keys (sorted) and, per task, the index of its kind's key among them."""
    keys = sorted(set(keys_of_kind))
    of_kind = [keys.index(k) for k in keys_of_kind]
    return keys, [of_kind[k] for k in task_kind]


def kind_caps(spec: GPUSpec, costs: list[TaskCost]) -> tuple[float, list[float], list[float],
                                                            list[tuple[float, float]]]:
    """The memory system's default per-block cap; each kind's largest cap and the scale of its hit level
    (``block_rates``); and each kind's readiness (first block, further blocks; (1, 1) for a kind without
    ``block_sm_ready``)."""
    mem_cap = min(1.0, spec.tb_max_dram_bw_gbps / spec.dram_bw_gbps)
    mem_caps, hit_scale = block_rates(spec, costs)
    block_ready = [(1.0, 1.0) if c.block_sm_ready is None else
                   (c.block_sm_ready, c.block_sm_ready if c.further_block_sm_ready is None
                    else c.further_block_sm_ready) for c in costs]
    return mem_cap, mem_caps, hit_scale, block_ready


def block_rates(spec: GPUSpec, costs: list[TaskCost]) -> tuple[list[float], list[float]]:
    """Per kind, its largest share of the memory server, and the scale s of its hit fraction's level.

    A block of kind b (its ``block_dram_bw_gbps``, else the spec's ``tb_max_dram_bw_gbps``; GB/s =
    bytes/ns) with ``d`` DRAM and ``l`` L2 bytes, server work ``w = max(d / dram_bw, l / l2_bw)`` ns,
    takes at least ``T = max(d, l / ratio) / b`` ns, so its share is at most ``w / T``. That is at most
    ``b * max(1 / dram_bw, ratio / l2_bw)`` (the kind's largest, capped at 1) and is ``q = w * s /
    max(d, l / ratio)`` of it, ``s = b / largest``. At the ratio the bandwidths imply, every job's share
    is ``b / dram_bw`` (q = 1): those caps are computed as before the ratio was a field, bit for bit."""
    bw = [spec.tb_max_dram_bw_gbps if c.block_dram_bw_gbps is None else c.block_dram_bw_gbps for c in costs]
    if not spec.l2_ratio_implied:
        per_byte = max(1.0 / spec.dram_bw_gbps, spec.block_l2_bw_ratio / spec.l2_bw_gbps)
        caps = [min(1.0, b * per_byte) for b in bw]
    else:
        caps = [min(1.0, b / spec.dram_bw_gbps) for b in bw]
    return caps, [b / cap for b, cap in zip(bw, caps)]


def hit_level(work_ns: float, dram_bytes: float, l2_bytes: float, scale: float, ratio: float) -> float:
    """The fraction q (<= 1) of its kind's largest cap that a memory job may take (``block_rates``)."""
    q = work_ns * scale / max(dram_bytes, l2_bytes / ratio)
    return q if q < 1.0 else 1.0


class Resources:
    """The servers of one run's memory system and SMs, chosen per launch (module docstring)."""

    def __init__(self, clock, spec: GPUSpec, costs: list[TaskCost], task_kind: list[int], age_of: list[int],
                 mem_done, comp_done) -> None:
        """`costs` per kind; `task_kind` and `age_of` per task (``age_of`` is filled in as blocks are
        dispatched); `mem_done` and `comp_done` receive the task whose memory or compute job ended."""
        self.clock, self.spec, self.task_kind, self.age_of = clock, spec, task_kind, age_of
        self.mem_done, self.comp_done = mem_done, comp_done
        self.mem_cap, self.mem_caps, self.hit_scale, self.block_ready = kind_caps(spec, costs)
        self.block_share = [c.block_sm_share for c in costs]
        self.ready_kinds = {k for k, c in enumerate(costs) if c.block_sm_ready is not None}
        self.track_age = spec.younger_block_weight not in (None, 1.0)
        self.stretch = [c.coresident_stretch for c in costs]
        self.hit_on = not spec.l2_ratio_implied
        # Memory classes by level: a stretch, or a cap that depends on the job's hit fraction.
        self.stretch_on = self.hit_on or any(g > 0.0 for g in self.stretch)
        if self.stretch_on:
            levels = range(1, STRETCH_LEVELS + 1)
            caps = sorted({cap * lv / STRETCH_LEVELS for cap in self.mem_caps for lv in levels})
            index = {c: i for i, c in enumerate(caps)}
            # Per kind, the memory class at each level (index 0 unused); per task, its memory phase's class.
            self.mem_class = [[0] + [index[cap * lv / STRETCH_LEVELS] for lv in levels] for cap in self.mem_caps]
            self.mem_class_of = [0] * len(task_kind)
            self._stretch_caps = caps
        self._made: dict[str, object] = {}

    def _get(self, name: str, make):
        server = self._made.get(name)
        if server is None:
            server = self._made[name] = make()
        return server

    def _sm_servers(self, rule: str, **params) -> list:
        return [make_server(rule, self.clock, self.comp_done, **params) for _ in range(self.spec.sm_count)]

    def for_launch(self, kinds: list[int]) -> tuple[list, object, bool]:
        """The SMs' servers, the memory system's server, and whether blocks count on their SM while they
        move data, for a launch of task kinds `kinds`."""
        presence = bool(self.ready_kinds.intersection(kinds))
        shares = {self.block_share[k] for k in kinds}
        if presence:
            sms = self._get("sm_ready", self._make_ready_sms)
        elif len(shares) == 1:
            sms = self._get("sm_shared", lambda: self._sm_servers("shared", cap=1.0))
            share = shares.pop()
            for sm in sms:
                sm.cap = share
        else:
            sms = self._get("sm_capped", lambda: self._sm_servers("capped", **self._caps(self.block_share)))
        mem_caps = {self.mem_caps[k] for k in kinds}
        if self.stretch_on:
            mem = self._get("mem_stretch", lambda: make_server(
                "capped", self.clock, self.mem_done, caps=self._stretch_caps, class_of=self.mem_class_of))
        elif len(mem_caps) == 1:
            mem = self._get("mem_shared", lambda: make_server("shared", self.clock, self.mem_done, cap=self.mem_cap))
            mem.cap = mem_caps.pop()
        else:
            mem = self._get("mem_capped", lambda: make_server("capped", self.clock, self.mem_done,
                                                              **self._caps(self.mem_caps)))
        return sms, mem, presence

    def close(self) -> None:
        """Drop the servers' references to their own methods and to the run (they make reference
        cycles, which would keep the run's tables alive until the next cyclic garbage collection)."""
        for made in self._made.values():
            for server in made if isinstance(made, list) else (made,):
                server.add = server._fire = server.on_done = None
        self._made.clear()

    def _caps(self, caps_of_kind: list[float]) -> dict:
        """A ``capped`` server's parameters: the distinct caps, and per task its kind's among them."""
        caps, class_of = classes_of(caps_of_kind, self.task_kind)
        return {"caps": caps, "class_of": class_of}

    def _make_ready_sms(self) -> list:
        mixed = self.spec.mixed_kinds_sm_factor
        # With a mixing factor, every kind is a class of its own (kinds are what mix).
        keys = self.block_ready if mixed is None else [(*r, k) for k, r in enumerate(self.block_ready)]
        classes, class_of = classes_of(keys, self.task_kind)
        params = dict(caps=[c[0] for c in classes], class_of=class_of, further=[c[1] for c in classes],
                      mixed=1.0 if mixed is None else mixed)
        if self.track_age:
            return self._sm_servers("age_weighted", age_of=self.age_of, rho=self.spec.younger_block_weight, **params)
        return self._sm_servers("readiness", **params)

    def stretch_class(self, kind: int, sm, task: int, q: float = 1.0) -> int:
        """The memory system's cap class of `task`'s memory phase (its block has entered `sm`, a
        readiness server, when it counts there): its kind's largest cap times `q` (``hit_level``) times
        ``1 - gamma * U_others``, ``U_others = 1 - prod(1 - ready)`` over the other blocks on the SM
        that move data or compute."""
        gamma = self.stretch[kind]
        if gamma <= 0.0:
            if q == 1.0:
                return self.mem_class[kind][STRETCH_LEVELS]
            level = int(round(q * STRETCH_LEVELS))
        else:
            idle = sm.idle_beside(task)
            level = int(round(q * (1.0 - gamma * (1.0 - idle)) * STRETCH_LEVELS))
        return self.mem_class[kind][level if level > 1 else 1]
