"""Microbenchmarks behind `megasim calibrate`: measure the GPU, write a spec file.

    bash gpu/on_device.sh megasim calibrate --out megasim/hardware/calibrated/h200.json

Each probe is timed with CUDA events (``gpu.runtime.timing.time_cuda``, median of the runs) on the legacy
default stream; what it measures and how a spec value follows from it:

- ``dram_bw_gbps``: a device-to-device copy of a 2 GiB buffer (torch ``copy_``), read + write bytes
  counted: 2 x 2 GiB / time.
- ``l2_bw_gbps``: a Numba kernel whose 132 x 16 blocks of 256 threads read an 8 MiB buffer (fits in
  L2) 64 times, 4 independent coalesced loads per thread per step; bytes read / time.
- ``tb_max_dram_bw_gbps``: the same read kernel with ONE block of 128 threads over 256 MiB (DRAM).
- ``fp32_peak_gflops``: 132 x 8 blocks of 256 threads, 8 independent FMA chains per thread
  (fastmath: one FFMA each), 2 flops per FMA / time.
- ``dram_latency_ns`` / ``l2_latency_ns``: one thread chasing a random cyclic permutation of
  1 GiB / 4 MiB of int32 indices; time / steps. The DRAM probe starts each timed run at a new random
  element (runs from one start walk the same path, which the warm-up leaves in L2: an L2 hit; ``probe_chase``).
- ``l2_bytes``: the effective capacity, not the driver's nominal size: one thread
  chases a random cycle through a buffer the whole GPU has just read, at sizes from 8 to 512 MiB; a
  load takes l2 + (dram - l2)(1 - C / S) ns for a buffer of S bytes of which the L2 keeps C
  (``l2_capacity_from_chase``). On the H200 C is 33 MiB of the 60 MiB the driver reports.
- ``atomic_latency_ns``: one thread doing 20,000 dependent ``atomic.add`` on a global counter (the
  next address depends on the returned value); time / steps.
- ``kernel_launch_ns``: one launch of an empty kernel with 4 array arguments (the per-kind kernels'
  argument count), CUDA events around it: host launch path + GPU start.
- ``megakernel_launch_ns``: what ``PreparedSchedule.run`` does for a megakernel launch, with a map of
  zero tasks (the counter and control resets, then the real megakernel, one block per SM, whose blocks
  find no ticket and exit).
- ``kernel_boundary_ns``: a ~20 ms single-thread kernel, then 200 empty kernels enqueued behind it;
  events around the 200 (the host is far ahead, so only the GPU's per-kernel gap is timed); time / 200.
- ``block_dispatch_ns``: empty kernels of 256 x 132 x 4 and 2048 x 132 x 4 blocks of 128 threads with
  46 KiB of dynamic shared memory each (4 blocks per SM); per slot,
  (T_big - T_small) x slots / (blocks_big - blocks_small).
- per-kind ``TaskCost``: each launch of the non-fused schedule (the per-kind kernels, default
  implementation parameters unless --param) timed alone on the calibration layers (CALIBRATION_LAYERS),
  inputs rotated over 3 workspaces, then fitted by ``megasim.calibration.winograd`` (simulation of that launch
  alone matches the median). Never fused runs.
- ``queued_launch_ns`` and each kind's tasks alone at several occupancies (its kernel with unused
  dynamic shared memory forcing fewer blocks per SM; the megakernel running only that kind), timed
  with the host's launch cost hidden behind a spin kernel: ``gpu.calibrate.occupancy`` (also runnable
  on its own to extend a saved measurements file). ``megasim.calibration.winograd`` then fits
  ``block_sm_share`` per kind as well.

- ``megakernel_ticket_ns``: each kind's tasks alone in the per-task megakernel, with ticket and with
  blockIdx dispatch; the time saved per task's slot (``gpu.calibrate.occupancy.measure_megakernel_ticket``).

``sm_count`` is read from the driver (and ``l2_bytes`` when its probe fails). Everything else stays the preset's.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
from numba import cuda, float32

from gpu.calibrate.runs import empty4, empty_megakernel_run, nonfused_workspaces, spin_kernel
from gpu.runtime.fast_launch import FrozenLaunch
from gpu.runtime.small_grids import intended_small_grids
from gpu.runtime.timing import time_cuda
from gpu.kernels.common.vector_access import load4
from megasim.calibration.measurements import CALIBRATION_LAYERS, Measurements
from megasim.calibration.winograd import CalibrationProgress, calibrated_spec
from megasim.errors import SpecError
from megasim.hardware import dump_spec, get_gpu

log = logging.getLogger(__name__)


# --- kernels (module level, so the CUDA simulator could run them) ----------------------------------
@cuda.jit
def _empty_dyn(a):
    """Grid/block: any; dynamic shared memory set by the launch (occupancy). Does nothing."""
    pass


@cuda.jit
def _read4(a, reps, out, rotate):
    """Grid-stride read of every element of ``a``, ``reps`` times, 4 independent loads per thread per
    step, then the tail (fewer than 4 x grid size elements) one load per step; one write per thread so
    the loads are live. (Without the tail the L2 bandwidth probe read 91% of its 8 MiB buffer and counted
    all of it, about 10% high; docs/validation.md.)

    ``rotate`` (blocks): in round r the thread reads the elements of thread (i + r * rotate * blockDim)
    mod gridsize, a permutation, so each round still reads every element once. With 0 a thread re-reads
    its own elements every round, from the same SM, and a buffer small enough for the SMs' L1 is read
    partly from L1 (the L2 probe read 23.5 TB/s on an H100 and 9.9 on an H200, whose L2 is the same;
    docs/validation.md, the H200's calibration predicting an H100; ``gpu.probes.l2_bandwidth``). With a rotation coprime to the SM count, an element's next read comes from another SM,
    which has not cached it: the rounds after the first read from L2."""
    stride = cuda.gridsize(1)
    n = a.size
    s0 = float32(0.0)
    s1 = float32(0.0)
    s2 = float32(0.0)
    s3 = float32(0.0)
    for r in range(reps):
        i = (cuda.grid(1) + r * rotate * cuda.blockDim.x) % stride
        j = i
        while j + 3 * stride < n:
            s0 += a[j]
            s1 += a[j + stride]
            s2 += a[j + 2 * stride]
            s3 += a[j + 3 * stride]
            j += 4 * stride
        while j < n:
            s0 += a[j]
            j += stride
    out[cuda.grid(1)] = s0 + s1 + s2 + s3


@cuda.jit
def _read_vec4(a, reps, out, rotate):
    """The L2 bandwidth probe's kernel: ``_read4``'s rounds (every element once per round, each round's
    threads rotated by ``rotate`` blocks), reading 4 floats per load (``load4``, one 128-bit load), 4
    independent loads per thread per step: 64 bytes in flight per thread, 4x ``_read4``'s, so the rounds
    are not bounded by how few loads each thread keeps waiting. Reads ``a.size // 4`` float4 units: a
    remainder of fewer than 4 elements is not read (the probe's buffer is a multiple of 4)."""
    stride = cuda.gridsize(1)
    units = a.size // 4
    s0 = float32(0.0)
    s1 = float32(0.0)
    s2 = float32(0.0)
    s3 = float32(0.0)
    for r in range(reps):
        j = (cuda.grid(1) + r * rotate * cuda.blockDim.x) % stride
        while j + 3 * stride < units:
            x0, x1, x2, x3 = load4(a, 4 * j)
            y0, y1, y2, y3 = load4(a, 4 * (j + stride))
            z0, z1, z2, z3 = load4(a, 4 * (j + 2 * stride))
            w0, w1, w2, w3 = load4(a, 4 * (j + 3 * stride))
            s0 += (x0 + x1) + (x2 + x3)
            s1 += (y0 + y1) + (y2 + y3)
            s2 += (z0 + z1) + (z2 + z3)
            s3 += (w0 + w1) + (w2 + w3)
            j += 4 * stride
        while j < units:
            x0, x1, x2, x3 = load4(a, 4 * j)
            s0 += (x0 + x1) + (x2 + x3)
            j += stride
    out[cuda.grid(1)] = s0 + s1 + s2 + s3


FMA_UNROLL = 8     # steps per round of _fma


@cuda.jit(fastmath=True)
def _fma(out, iters, seed):
    """8 independent FMA chains per thread, ``iters`` rounds of FMA_UNROLL steps each: 16 * FMA_UNROLL
    flops per round per thread, all float32. (An int64 x float32 promotion once made the chains float64, so
    the probe read the FP64 rate, 27 TFLOP/s on the H200, as its FP32 peak; fixed at 7102752.)
    A round's FMA_UNROLL steps are unrolled, so the loop's counter, compare and branch are a few
    instructions per 64 FMAs."""
    i = cuda.grid(1)
    x0 = float32(seed) + float32(i) * float32(1e-7)   # float32(i): an int64 times a float32 is float64
    x1 = x0 + float32(1.0)
    x2 = x0 + float32(2.0)
    x3 = x0 + float32(3.0)
    x4 = x0 + float32(4.0)
    x5 = x0 + float32(5.0)
    x6 = x0 + float32(6.0)
    x7 = x0 + float32(7.0)
    b = float32(0.999999)
    c = float32(1e-6)
    for _ in range(iters):
        for _ in range(FMA_UNROLL):     # a constant trip count: unrolled by the compiler (PTX: 64 FMAs per round)
            x0 = x0 * b + c
            x1 = x1 * b + c
            x2 = x2 * b + c
            x3 = x3 * b + c
            x4 = x4 * b + c
            x5 = x5 * b + c
            x6 = x6 * b + c
            x7 = x7 * b + c
    out[i] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7


@cuda.jit
def _chase(nxt, start, steps, out):
    """One thread: j = nxt[j], ``steps`` times (dependent loads), from j = ``start``."""
    j = start
    for _ in range(steps):
        j = nxt[j]
    out[0] = j


@cuda.jit
def _atomic_chain(ctr, steps, out):
    """One thread: ``steps`` dependent atomic adds; the next slot depends on the returned value."""
    j = 0
    for _ in range(steps):
        old = cuda.atomic.add(ctr, j, 1)
        j = (j + 1 + (old & 0x40000000)) & 63
    out[0] = j


# --- probes -------------------------------------------------------------------------------------------
def _ms(fn, warmup=3, repeats=15) -> float:
    return time_cuda(lambda i: fn(), warmup=warmup, repeats=repeats).median_ms


def random_cycle(n: int, rng: np.random.Generator) -> np.ndarray:
    """int32 next-indices of one random cycle through all ``n`` elements (a pointer chase's buffer)."""
    perm = rng.permutation(n).astype(np.int32)
    nxt = np.empty(n, np.int32)
    nxt[perm] = np.roll(perm, -1)
    return nxt


def per_step_ns(launch, steps: int) -> float:
    """ns per step of a one-thread dependent chain: ``launch(k)`` enqueues a chain of k steps;
    (median time of ``steps`` steps - that of 1 step) / (steps - 1), so the launch cost cancels."""
    ms = _ms(lambda: launch(steps), warmup=1, repeats=5)
    ms0 = _ms(lambda: launch(1), warmup=1, repeats=5)
    return (ms - ms0) * 1e6 / (steps - 1)


def probe_dram(torch) -> tuple[float, str]:
    n = 2 ** 29                                    # 2 GiB of float32
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = _ms(lambda: dst.copy_(src), warmup=2, repeats=10)
    del src, dst
    return 2 * 4 * n / (ms * 1e6), "device-to-device copy of 2 GiB (torch copy_), read + write bytes / median time"


L2_PROBE_ROTATE_BLOCKS = 37     # not a multiple of the SM count (132): a round's reads move to other SMs


def probe_l2(sm: int, rotate: int = L2_PROBE_ROTATE_BLOCKS) -> tuple[float, str]:
    """L2 read bandwidth: an 8 MiB buffer (in L2) read 256 times by the whole GPU, each round's reads
    rotated by ``rotate`` blocks so that no SM re-reads what it read the round before (``_read_vec4``;
    ``_read4`` without rotation, 4 scalar loads in flight per thread re-read from the same SM, partly read L1).

    Timed with the host's launch cost hidden (``time_cuda_queued``: 10 launches back to back per sample)
    and divided by the rounds, not as a 64-round run minus a 1-round run, each holding Numba's ~50 us host
    launch cost, so that a few us of its jitter moved the difference 10% and more: readings of 7-24 TB/s for
    the same L2 (docs/validation.md, the H200's calibration predicting an H100)."""
    from gpu.runtime.timing import time_cuda_queued
    a = cuda.to_device(np.random.default_rng(0).random(2 * 2 ** 20, dtype=np.float32))   # 8 MiB
    grid, block, reps = sm * 16, 256, 256
    out = cuda.device_array(grid * block, np.float32)
    _read_vec4[grid, block](a, 1, out, rotate)
    ms = time_cuda_queued(lambda i: _read_vec4[grid, block](a, reps, out, rotate), inner=10, warmup=3,
                          repeats=7).median_ms
    how = (f"{grid} blocks x {block} threads read an 8 MiB buffer {reps} times (4 independent 128-bit loads per thread per step"
           + (f"; each round's reads rotated by {rotate} blocks, so that no SM re-reads from its L1" if rotate else "")
           + f"); bytes read / the kernel's time, 10 launches back to back per sample, median of 7")
    return reps * a.nbytes / (ms * 1e6), how


L2_SWEEP_MIB = (8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128, 192, 512)


def l2_chase_sweep(sm: int, sizes_mib=L2_SWEEP_MIB, steps: int = 20000) -> list[dict[str, float]]:
    """ns per dependent load of one thread chasing a random cycle through a buffer that the whole GPU
    has just read (twice), per buffer size: rows of (mib, ns_per_load). Each timed chase starts at a
    new random element; median of 8 runs, the time of a 1-step chase subtracted."""
    grid, block = sm * 16, 256
    out = cuda.device_array(grid * block, np.float32)
    one = cuda.device_array(1, np.int32)
    rows = []
    for mib in sizes_mib:
        n = mib * 2 ** 18
        rng = np.random.default_rng(mib)
        d = cuda.to_device(random_cycle(n, rng))
        f = d.view(np.float32)
        _chase[1, 1](d, 0, 10, one)
        ms = {}
        for k in (1, steps):
            ts = []
            for _ in range(9):
                _read4[grid, block](f, 2, out, 0)     # the buffer in L2, as far as it fits
                e0, e1 = cuda.event(), cuda.event()
                e0.record()
                _chase[1, 1](d, int(rng.integers(0, n)), k, one)
                e1.record()
                e1.synchronize()
                ts.append(cuda.event_elapsed_time(e0, e1))
            ms[k] = float(np.median(ts[1:]))
        rows.append({"mib": float(mib), "ns_per_load": (ms[steps] - ms[1]) * 1e6 / (steps - 1)})
        del d, f
    return rows


def l2_capacity_from_chase(rows: list[dict[str, float]], dram_latency_ns: float) -> float:
    """The effective L2 capacity (bytes) of a chase sweep. A buffer of S bytes that the L2 keeps C of
    hits C / S of its random loads, so a load takes l2 + (dram - l2)(1 - C / S) ns (l2: the mean of the
    sweep's two smallest sizes; dram: ``dram_latency_ns``); C is the median over the sizes where the
    hit fraction h is in (0.1, 0.9) of h x S."""
    rows = sorted(rows, key=lambda r: r["mib"])
    l2 = float(np.mean([r["ns_per_load"] for r in rows[:2]]))
    if not dram_latency_ns > l2:
        raise ValueError(f"dram_latency_ns={dram_latency_ns!r} must exceed the sweep's L2 latency {l2:.1f} ns")
    est = []
    for r in rows:
        h = (dram_latency_ns - r["ns_per_load"]) / (dram_latency_ns - l2)
        if 0.1 < h < 0.9:
            est.append(h * r["mib"] * 2 ** 20)
    if not est:
        raise ValueError("the L2 chase sweep shows no size that partly fits in L2")
    return float(np.median(est))


def probe_l2_capacity(sm: int, dram_latency_ns: float) -> tuple[float, str, list[dict[str, float]]]:
    rows = l2_chase_sweep(sm)
    return l2_capacity_from_chase(rows, dram_latency_ns), (
        f"one thread chases a random cycle through a buffer the whole GPU has just read, "
        f"{rows[0]['mib']:.0f} to {rows[-1]['mib']:.0f} MiB ({len(rows)} sizes); a load takes "
        f"l2 + (dram - l2)(1 - C/S) ns, C the effective capacity: the median of C over the sizes partly in L2 "
        f"(the driver's size is the nominal one; a buffer keeps about half of it)"), rows


def probe_tb_dram() -> tuple[float, str]:
    a = cuda.to_device(np.zeros(64 * 2 ** 20, np.float32))                               # 256 MiB
    out = cuda.device_array(128, np.float32)
    ms = _ms(lambda: _read4[1, 128](a, 1, out, 0), warmup=1, repeats=5)
    return a.nbytes / (ms * 1e6), "one block of 128 threads reads 256 MiB once (4 loads in flight per thread)"


def probe_tb_l2(sm: int, mib: int = 8, threads: int = 128) -> tuple[float, str]:
    """One block's read rate from the L2 (GB/s): the whole GPU reads a `mib` MiB buffer (it then sits in
    the L2; more than an SM's L1 holds), then ONE block of `threads` threads reads it 4 times with the
    kernel of ``probe_tb_dram`` (4 loads in flight per thread). Over ``probe_tb_dram``'s rate: how much
    faster a block moves the bytes it hits than those it misses (``GPUSpec.block_l2_bw_ratio``)."""
    a = cuda.to_device(np.zeros(mib * 2 ** 20 // 4, np.float32))
    warm = cuda.device_array(sm * 16 * 256, np.float32)
    out = cuda.device_array(threads, np.float32)
    reps = 4

    def run():
        _read4[sm * 16, 256](a, 1, warm, 0)         # the buffer into the L2
        _read4[1, threads](a, reps, out, 0)

    ms_both = _ms(run, warmup=1, repeats=7)
    ms_warm = _ms(lambda: _read4[sm * 16, 256](a, 1, warm, 0), warmup=1, repeats=7)
    return reps * a.nbytes / ((ms_both - ms_warm) * 1e6), (
        f"the GPU reads a {mib} MiB buffer (into the L2), then one block of {threads} threads reads it {reps} times "
        f"(4 loads in flight per thread); time of both less the first alone")


def probe_fp32(sm: int) -> tuple[float, str]:
    grid, block, rounds = sm * 8, 256, 2500
    out = cuda.device_array(grid * block, np.float32)
    ms = _ms(lambda: _fma[grid, block](out, rounds, 1.0))
    ms1 = _ms(lambda: _fma[grid, block](out, 1, 1.0))
    flops = 2.0 * 8 * FMA_UNROLL * (rounds - 1) * grid * block
    return flops / ((ms - ms1) * 1e6), (f"{grid} blocks x {block} threads, 8 independent FMA chains x "
                                         f"{rounds * FMA_UNROLL} steps, unrolled {FMA_UNROLL}x (fastmath FFMA), "
                                         "2 flops per FMA / (time - time of a 1-round launch)")


def probe_chase(nbytes: int, steps: int, fresh: bool) -> float:
    """ns per dependent load of one thread chasing a random cycle through ``nbytes``. ``fresh``: every
    timed run starts at a new random element, so its path was not loaded by an earlier run (a DRAM
    probe). Runs from the same start walk the same ``steps`` elements (20,000 x 32 B, in L2 after the
    warm-up), so a 1 GiB probe without it measures an L2 hit: 158 ns on the H200, where a fresh start gives
    about 350 ns (docs/validation.md)."""
    n = nbytes // 4
    rng = np.random.default_rng(1)
    d = cuda.to_device(random_cycle(n, rng))
    out = cuda.device_array(1, np.int32)
    _chase[1, 1](d, 0, 10, out)
    starts = iter(rng.integers(0, n, 64).tolist())

    def start() -> int:
        return next(starts) if fresh else 0
    return per_step_ns(lambda k: _chase[1, 1](d, start(), k, out), steps)


def probe_atomic() -> tuple[float, str]:
    ctr = cuda.to_device(np.zeros(64, np.int32))
    out = cuda.device_array(1, np.int32)
    steps = 20000
    _atomic_chain[1, 1](ctr, 10, out)
    return per_step_ns(lambda k: _atomic_chain[1, 1](ctr, k, out), steps), f"one thread, {steps} dependent atomic.add on 64 global counters; (time - time of 1) / steps"


def probe_launch() -> tuple[float, str]:
    a = cuda.device_array(16, np.float32)
    empty4[1, 32](a, a, a, a)
    launch = FrozenLaunch(empty4, 1, 32, 0, (a, a, a, a))
    ms = _ms(launch, warmup=5, repeats=50)
    return ms * 1e6, ("CUDA events around one launch of an empty kernel with 4 array arguments, arguments packed "
                      "once as PreparedSchedule launches (gpu.runtime.fast_launch; median of 50)")


def probe_megakernel_launch(sm: int) -> tuple[float, str]:
    run = empty_megakernel_run(sm)
    threads = run.threads
    run()
    ms = _ms(run, warmup=5, repeats=30)
    return ms * 1e6, (f"as PreparedSchedule.run: counter and control resets, then the megakernel ({sm} blocks x {threads}, "
                      "arguments packed once) "
                      "on a map of 0 tasks; CUDA events around it (median of 30)")


def probe_boundary(torch) -> tuple[float, str]:
    a = cuda.device_array(16, np.float32)
    spin_out = cuda.to_device(np.ones(1, np.float32))
    n = 200
    empty4[1, 32](a, a, a, a)
    spin_kernel[1, 1](spin_out, 10)
    cuda.synchronize()
    samples = []
    stream = torch.cuda.current_stream()
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spin_kernel[1, 1](spin_out, 10_000_000)           # ~20 ms of dependent FMAs on one thread
        e0.record(stream)
        for _ in range(n):
            empty4[1, 32](a, a, a, a)
        e1.record(stream)
        torch.cuda.synchronize()
        samples.append(e0.elapsed_time(e1))
    ms = float(np.median(samples))
    return ms * 1e6 / n, f"{n} empty kernels queued behind a long single-thread kernel; events around the {n} / {n}"


def probe_dispatch(sm: int) -> tuple[float, str]:
    a = cuda.device_array(16, np.float32)
    smem = 46 * 1024                                # 4 blocks/SM (no opt-in needed below 48 KiB)
    per_sm = 4
    small, big = 256 * sm * per_sm, 2048 * sm * per_sm
    _empty_dyn[small, 128, 0, smem](a)
    t_small = _ms(lambda: _empty_dyn[small, 128, 0, smem](a))
    t_big = _ms(lambda: _empty_dyn[big, 128, 0, smem](a))
    slots = sm * per_sm
    return (t_big - t_small) * 1e6 * slots / (big - small), (
        f"empty kernels of {small} and {big} blocks x 128 threads with {smem} B dynamic shared memory "
        f"({per_sm} blocks/SM); (T_big - T_small) x {slots} slots / extra blocks")


def time_kinds(layers, plan_params: str, repeats: int = 20) -> list[dict[str, Any]]:
    """Each launch of the non-fused schedule (per-kind kernels) timed alone, inputs rotated over 3 sets."""
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.schedule import Schedule
    rows = []
    rng = np.random.default_rng(7)
    for name in layers:
        graph, schedule, wplan, wss = nonfused_workspaces(name, plan_params, rng)
        for launch in schedule.launches:
            kind = graph.kind_names[int(graph.kind[int(launch.order[0])])]
            prep = PreparedSchedule(wplan, Schedule(launch.name, (launch,)), kernels="per_kind", check=False)
            st = time_cuda(lambda i: prep.run(wss[i]), warmup=3, repeats=repeats, rotate=3)
            rows.append({"layer": name, "kind": kind, "tasks": int(len(launch.order)), "median_ms": st.median_ms,
                         "min_ms": st.min_ms, "max_ms": st.max_ms})
            log.info("%s %s %.4f ms", name, kind, st.median_ms)
        del wss
    return rows


def preset_for(device_name: str) -> str:
    for key in ("H200", "H100", "A100", "V100", "3090"):
        if key in device_name.upper():
            return "RTX3090" if key == "3090" else key
    raise SpecError(f"no preset for the detected GPU {device_name!r} (presets: H200, H100, A100, V100, RTX3090)")


def _l2_capacity(m: Measurements, sm: int) -> tuple[float, str]:
    """The effective L2 capacity, its sweep kept in ``m.extra``; needs the DRAM latency measured."""
    value, method, rows = probe_l2_capacity(sm, m.values["dram_latency_ns"]["value"])
    m.extra["l2_chase_sweep"] = rows
    return value, method


@intended_small_grids()     # one-thread probes and one-block-per-SM runs are small on purpose
def measure(layers=CALIBRATION_LAYERS, plan_params: str = "",
            progress: Callable[[CalibrationProgress], None] | None = None) -> Measurements:
    """Every probe and every single-kind run of a calibration (``progress``: a ``CalibrationProgress`` of stage
    ``measuring`` as each step starts)."""
    import torch

    def tell(what: str) -> None:
        if progress is not None:
            progress(CalibrationProgress("measuring", what))
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    sm = int(dev.MULTIPROCESSOR_COUNT)
    m = Measurements(device=name, date=_dt.date.today().isoformat(), preset=preset_for(name), plan_params=plan_params)
    m.values["sm_count"] = {"value": sm, "method": "driver attribute MULTIPROCESSOR_COUNT"}
    try:
        nominal = int(torch.cuda.get_device_properties(0).L2_cache_size)
        m.values["l2_bytes"] = {"value": nominal, "method": "driver: torch.cuda.get_device_properties().L2_cache_size"}
        m.extra["l2_bytes_driver"] = nominal      # replaced by the measured capacity below, if that probe works
    except Exception as err:  # noqa: BLE001 - keep the preset's
        log.warning("L2 size not read: %s", err)
    probes = [
        ("dram_bw_gbps", lambda: probe_dram(torch)),
        ("l2_bw_gbps", lambda: probe_l2(sm)),
        ("tb_max_dram_bw_gbps", probe_tb_dram),
        ("fp32_peak_gflops", lambda: probe_fp32(sm)),
        ("dram_latency_ns", lambda: (probe_chase(2 ** 30, 20000, fresh=True), "one thread chases a random cycle through 1 GiB of int32, each timed run from a new random start; (time - time of 1 step) / steps")),
        ("l2_latency_ns", lambda: (probe_chase(4 * 2 ** 20, 50000, fresh=False), "one thread chases a random cycle through 4 MiB of int32 (in L2); (time - time of 1 step) / steps")),
        ("l2_bytes", lambda: _l2_capacity(m, sm)),
        ("atomic_latency_ns", probe_atomic),
        ("kernel_launch_ns", probe_launch),
        ("megakernel_launch_ns", lambda: probe_megakernel_launch(sm)),
        ("kernel_boundary_ns", lambda: probe_boundary(torch)),
        ("block_dispatch_ns", lambda: probe_dispatch(sm)),
    ]
    for field_name, probe in probes:
        tell(field_name)
        try:
            value, method = probe()
        except Exception as err:  # noqa: BLE001 - a failed probe keeps the preset's value, recorded
            m.extra.setdefault("failed_probes", {})[field_name] = f"{type(err).__name__}: {err}"[:300]
            log.warning("probe %s failed: %s", field_name, err)
            continue
        if not math.isfinite(value) or value < 0:
            m.extra.setdefault("failed_probes", {})[field_name] = f"non-physical value {value!r}"
            continue
        m.values[field_name] = {"value": float(value), "method": method}
        log.info("%s = %.4g (%s)", field_name, value, method)
    tell("each kind's non-fused kernel")
    m.kind_times = time_kinds(layers, plan_params)
    # Second round: each kind's tasks alone at several occupancies, the host's launch cost hidden
    # (gpu.calibrate.occupancy); megasim.calibration.winograd fits block_sm_share from these rows.
    from gpu.calibrate.occupancy import measure_occupancy
    tell("each kind at several occupancies")
    values, rows, notes = measure_occupancy(layers, plan_params)
    m.values.update(values)
    for r in m.kind_times:
        r["round"] = 1
    m.kind_times.extend({**r, "round": 2} for r in rows)
    m.extra["occupancy_round"] = notes
    # Checks, not fitted: two kinds interleaved in one megakernel launch, at the fused transform size.
    from gpu.calibrate.occupancy import fused_transform_params, time_mixed_kinds
    tell("mixed-kind runs")
    m.extra["mixed_kind_rows"] = time_mixed_kinds(layers, fused_transform_params(plan_params) or plan_params)
    # The order in which an SM's blocks end (the schedulers favour older blocks): fits younger_block_weight.
    from gpu.calibrate.occupancy import measure_block_end_order
    tell("block end order")
    m.extra["block_end_order"] = measure_block_end_order(layers, plan_params)
    # What the per-task megakernel's ticket costs (ticket vs blockIdx dispatch): megakernel_ticket_ns.
    from gpu.calibrate.occupancy import measure_megakernel_ticket
    tell("megakernel ticket")
    try:
        value, m.extra["megakernel_ticket_rows"] = measure_megakernel_ticket(layers, plan_params)
        m.values["megakernel_ticket_ns"] = value
    except Exception as err:  # noqa: BLE001 - a failed probe leaves the field unset (None: atomic_latency_ns)
        log.warning("megakernel_ticket_ns not measured: %s", err)
        m.extra.setdefault("failed_probes", {})["megakernel_ticket_ns"] = f"{type(err).__name__}: {err}"[:300]
    return m


def calibrate(out: str | Path, *, measurements_out: str | Path | None = None, layers=CALIBRATION_LAYERS,
              plan_params: str = "", workers: int | None = None,
              progress: Callable[[CalibrationProgress], None] | None = None,
              fit_mixed: bool = False, fit_epilogue: bool = True) -> dict[str, Any]:
    """Measure, fit, write the spec file (and the raw measurements beside it); returns the fit report.
    ``workers``: the fit's processes (default: all cores); ``progress``: ``CalibrationProgress`` records of
    the measuring and of the fit; ``fit_mixed``: fit mixed_kinds_sm_factor too; ``fit_epilogue``: the GEMMs'
    sm_fixed_ns too
    (``megasim.calibration.winograd.calibrated_spec``)."""
    m = measure(tuple(layers), plan_params, progress)
    raw = Path(measurements_out) if measurements_out else Path(out).with_suffix(".measurements.json")
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(m.as_dict(), indent=1) + "\n")
    spec, report = calibrated_spec(get_gpu(m.preset), m, tuple(layers), workers=workers, progress=progress,
                                   fit_mixed=fit_mixed, fit_epilogue=fit_epilogue)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    dump_spec(spec, out)
    report["measurements"] = str(raw)
    return report
