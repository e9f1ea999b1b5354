"""Each task kind timed alone at several occupancies, with the host's launch cost hidden: the calibration's second
round (``megasim.calibration.winograd`` fits each kind's ``block_sm_ready``, DRAM rate and the rest from these rows).

    bash gpu/on_device.sh python -m gpu.calibrate.occupancy \
        --base megasim/hardware/calibrated/h200.measurements.json --out $OUT/h200.measurements.json
    # only the mixed-kind runs (two kinds interleaved in one megakernel launch; the transforms are fitted on them
    # beside the GEMM, and every one is a check):
    bash gpu/on_device.sh python -m gpu.calibrate.occupancy --mixed-only \
        --base megasim/hardware/calibrated/h200.measurements.json --out $OUT/h200.measurements.json
    # only the traced end order of an SM's first-wave GEMM blocks (fits younger_block_weight):
    bash gpu/on_device.sh python -m gpu.calibrate.occupancy --end-order-only \
        --base megasim/hardware/calibrated/h200.measurements.json --out $OUT/h200.measurements.json
    # only the big tiles' transforms (F(5x5), F(6x6)), a file of their rows alone, from which
    # ``megasim update-spec --refit compute_efficiency@itrans@m6 ...`` fits their own costs:
    bash gpu/on_device.sh python -m gpu.calibrate.occupancy --tiles-only \
        --base megasim/hardware/calibrated/h200.measurements.json --out $OUT/h200_tiles.measurements.json
    # only the per-task megakernel's ticket cost (megakernel_ticket_ns; ticket vs blockIdx dispatch):
    bash gpu/on_device.sh python -m gpu.calibrate.occupancy --ticket-only \
        --base megasim/hardware/calibrated/h200.measurements.json --out $OUT/h200.measurements.json

What it measures, on the calibration layers only (``CALIBRATION_LAYERS``: resnet-1, vgg-3, a 16-channel shape and a
few-wave 512-channel one; never a fused schedule):

- **Queued timing** (``time_queued``): a single-thread spin kernel (~1 ms, longer than the host takes
  to issue the measured launches) runs first; the start event is recorded after it, so the events
  bracket only the measured work's device time (plus the gap between two queued kernels), whatever
  the host's launch path costs. This is how back-to-back runs behave once the host is ahead
  (``gpu.runtime.timing.time_cuda``: the events of run i+1 are enqueued while the device works on run i).
- ``queued_launch_ns``: the queued time of an empty 4-argument kernel (the device-side start cost of
  a launch the host issued ahead); ``extra.queued_megakernel_launch_ns``: the same for what
  ``PreparedSchedule.run`` does for a megakernel launch of an empty map (two counter resets + the
  megakernel), and the host's own time to issue each (perf_counter around the call); their difference
  is the spec's ``megakernel_reset_ns`` (``megasim.calibration.winograd.reset_entry``).
- per kind and layer, its tasks of the non-fused schedule (at ``--param`` defaults; the transforms also
  at the fused schedule's 4 pairs per thread, rows tagged ``plan_params``), each variant queued-timed (median of 10
  after 2 warm-ups, inputs rotated over 3 workspaces):
  ``per_kind`` kernel at its natural occupancy; the same kernel with unused dynamic shared memory
  forcing 4 / 2 / 1 blocks per SM (46 KiB, 100 KiB, 160 KiB; above 48 KiB the kernel is opted in
  with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; only values below the natural occupancy);
  the ``megakernel`` running only that kind's tasks per task (128 registers: 4 blocks per SM) and
  as a persistent grid of 1 and of 2 blocks per SM (the persistent kernel: 216 registers). Counters start at zero (the kind's parents
  ran before), as in ``gpu.diagnostics.diagnose``. The persistent grid of 1 block per SM is also run once traced
  (``traced_parts``): the mean per task of claim -> ready, the body and the signal, so the
  megakernel's claim (``TaskCost.megakernel_claim_ns``) is measured rather than fitted.
  Also the per-kind kernel at natural occupancy timed as ``gpu.calibrate.measure.time_kinds`` does
  (``timing: events``: CUDA events around each run, host cost included when it dominates), to
  compare with the first round.

Rows go to ``Measurements.kind_times`` with the keys ``kernel`` (per_kind | megakernel), ``style``,
``blocks_per_sm`` (persistent grids), ``extra_shared_bytes``, ``timing`` (queued | events),
``blocks_per_sm_expected`` (the CUDA occupancy of the variant, from the driver).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

from megasim.calibration.winograd import reset_entry
from megasim.provenance import git_sha
from gpu.runtime.timing import TimingError, TimingStats, summarize
from gpu.calibrate.runs import empty4, empty_megakernel_run, launch_orders, nonfused_workspaces, spin_kernel, traced_alone

log = logging.getLogger(__name__)

SPIN_TARGET_MS = 1.0
FORCED_SHARED = {4: 46 * 1024, 2: 100 * 1024, 1: 160 * 1024}   # dynamic shared bytes -> blocks per SM (H100/H200)


# --- timing with the host hidden ------------------------------------------------------------------
class Spinner:
    """A single-thread spin kernel of about ``target_ms`` on the default stream."""

    def __init__(self, target_ms: float = SPIN_TARGET_MS) -> None:
        self._spin = spin_kernel
        self.out = cuda.to_device(np.ones(1, np.float32))
        probe = 100_000
        spin_kernel[1, 1](self.out, 10)
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(3):
            spin_kernel[1, 1](self.out, probe)
        cuda.synchronize()
        per_iter_s = (time.perf_counter() - t0) / (3 * probe)
        self.iters = max(1000, int(target_ms * 1e-3 / max(per_iter_s, 1e-12)))

    def __call__(self) -> None:
        self._spin[1, 1](self.out, self.iters)


def time_queued(fn: Callable[[int], object], spin: Callable[[], None], *, warmup: int = 2, repeats: int = 10,
                rotate: int = 1) -> tuple[TimingStats, float]:
    """Device time of ``fn(i)`` queued behind a spin kernel: (stats in ms, the host's longest issue
    time of ``fn`` in ms; it must stay below the spin's time for the host to be hidden)."""
    import torch
    stream = torch.cuda.current_stream()
    if stream.cuda_stream != 0:
        raise TimingError("time_queued times the legacy default stream")
    for i in range(warmup):
        spin()
        fn(i % rotate)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    host = 0.0
    for i in range(repeats):
        spin()
        starts[i].record(stream)
        t0 = time.perf_counter()
        fn(i % rotate)
        host = max(host, time.perf_counter() - t0)
        ends[i].record(stream)
    torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)]), host * 1e3


# --- launches -----------------------------------------------------------------------------------------
def _opt_in(kernel, nbytes: int) -> None:
    """Allow ``nbytes`` of dynamic shared memory on every compiled overload of ``kernel`` (> 48 KiB
    needs it). Raises if the driver refuses."""
    from numba.cuda.cudadrv.driver import binding, driver
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    overloads = list(kernel.overloads.values())
    if not overloads:
        raise RuntimeError("kernel not compiled yet")
    for k in overloads:
        cufunc = k._codelibrary.get_cufunc()
        driver.cuKernelSetAttribute(attr, int(nbytes), cufunc.handle, cufunc.device.id)


def _active_blocks(kernel, threads: int, smem: int) -> int:
    """The driver's occupancy of a compiled kernel (blocks per SM), -1 when it cannot say."""
    try:
        k = next(iter(kernel.overloads.values()))
        ctx = cuda.current_context()
        return int(ctx.get_active_blocks_per_multiprocessor(k._codelibrary.get_cufunc(), threads, smem))
    except Exception:
        return -1


def per_kind_launcher(plan, kind: int, d_table, size: int, d_prm, smem: int):
    """fn(ws) launching the kind's non-fused kernel over ``size`` table rows with ``smem`` bytes of
    dynamic shared memory (the GEMM's staging is at the start of it), the kernel and its block size."""
    from gpu.runtime import executor as ex
    kernel, threads, _, args_of = ex.per_kind_kernel(plan, kind, d_table, d_prm)

    def fn(ws):
        kernel[size, threads, 0, smem](*args_of(ws))
    return fn, kernel, threads


def time_per_kind(plan, kind: int, d_table, size: int, d_prm, natural_smem: int, wss, spin, repeats: int,
                  forced: bool = True):
    """The kind's own kernel over ``size`` table rows timed alone: at its natural occupancy (``natural_smem``
    bytes of dynamic shared memory), queued (the host's issue hidden) and between events, then, with
    ``forced``, queued at each lower occupancy ``FORCED_SHARED`` forces by asking for more shared memory.
    Yields (extra shared bytes, timing, the driver's blocks per SM, TimingStats, host issue ms or None,
    error): ``error`` a message where a shared-memory size could not be set (the stats None then)."""
    from gpu.runtime.timing import time_cuda
    fn, kernel, threads = per_kind_launcher(plan, kind, d_table, size, d_prm, natural_smem)
    fn(wss[0])
    cuda.synchronize()
    natural = _active_blocks(kernel, threads, natural_smem)
    st, host = time_queued(lambda i: fn(wss[i]), spin, repeats=repeats, rotate=3)
    yield 0, "queued", natural, st, host, None
    yield 0, "events", natural, time_cuda(lambda i: fn(wss[i]), warmup=3, repeats=repeats, rotate=3), None, None
    if not forced:
        return
    for bps, smem in sorted(FORCED_SHARED.items(), reverse=True):
        if natural > 0 and bps >= natural:
            continue
        smem = max(smem, natural_smem)
        try:
            if smem > 48 * 1024:
                _opt_in(kernel, smem)
            fn_s, _, _ = per_kind_launcher(plan, kind, d_table, size, d_prm, smem)
            fn_s(wss[0])
            cuda.synchronize()
        except Exception as err:  # noqa: BLE001 - reported to the caller, the run goes on
            yield smem, "queued", None, None, None, f"{type(err).__name__}: {err}"
            continue
        st, host = time_queued(lambda i: fn_s(wss[i]), spin, repeats=repeats, rotate=3)
        yield smem, "queued", _active_blocks(kernel, threads, smem), st, host, None


def probe_queued_launch(sm: int, spin) -> dict[str, Any]:
    """Device-side start cost of a queued plain launch and of a queued megakernel launch (empty map)."""
    a = cuda.device_array(16, np.float32)
    empty4[1, 32](a, a, a, a)
    plain, plain_host = time_queued(lambda i: empty4[1, 32](a, a, a, a), spin, warmup=3, repeats=30)
    empty = empty_megakernel_run(sm)
    empty()
    mega, mega_host = time_queued(lambda i: empty(), spin, warmup=3, repeats=30)
    return {"queued_launch_ns": plain.median_ms * 1e6, "queued_launch_host_ms": plain_host,
            "queued_megakernel_launch_ns": mega.median_ms * 1e6, "queued_megakernel_host_ms": mega_host}


def time_kinds_occupancy(layers, plan_params: str = "", spin=None, repeats: int = 10,
                         kinds: tuple[str, ...] | None = None) -> tuple[list[dict], dict]:
    """Rows of every (layer, kind, variant), each tagged with ``plan_params``; ``kinds``: only these
    (default all). See the module docstring."""
    from gpu.runtime import executor as ex
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.schedule import Launch, Schedule
    spin = spin or Spinner()
    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {"opt_in_failed": {}, "host_not_hidden": []}
    rng = np.random.default_rng(7)
    for name in layers:
        graph, schedule, wplan, wss = nonfused_workspaces(name, plan_params, rng)
        d_prm = cuda.to_device(wplan.params)
        zeros = cuda.to_device(np.zeros(graph.num_counters, np.int32))
        for launch in schedule.launches:
            kind_id = int(graph.kind[int(launch.order[0])])
            kind = graph.kind_names[kind_id]
            if kinds is not None and kind not in kinds:
                continue
            size = int(len(launch.order))
            d_table = cuda.to_device(ex.task_table(graph, np.asarray(launch.order, np.int64)))
            base = {"layer": name, "kind": kind, "tasks": size, "plan_params": plan_params}

            def record(variant: dict, stats: TimingStats, host_ms: float | None) -> None:
                row = {**base, **variant, "median_ms": stats.median_ms, "min_ms": stats.min_ms,
                       "max_ms": stats.max_ms}
                if host_ms is not None:
                    row["host_issue_ms"] = host_ms
                    if host_ms > 0.8 * SPIN_TARGET_MS:
                        notes["host_not_hidden"].append(f"{name} {kind} {variant}")
                rows.append(row)
                log.info("%s %s %s %.4f ms", name, kind, variant, stats.median_ms)

            for smem, timing, expected, st, host, error in time_per_kind(
                    wplan, kind_id, d_table, size, d_prm, wplan.shared_bytes if kind == "gemm" else 0, wss, spin,
                    repeats):
                if error is not None:
                    notes["opt_in_failed"][f"{name} {kind} {smem}"] = error[:300]
                    log.warning("%s %s: %d B of dynamic shared memory failed: %s", name, kind, smem, error)
                    continue
                record({"kernel": "per_kind", "style": "per_task", "extra_shared_bytes": smem, "timing": timing,
                        "blocks_per_sm_expected": expected}, st, host)
            for style, bps in (("per_task", None), ("persistent", 1), ("persistent", 2)):
                one = Schedule(launch.name, (Launch(launch.order, launch.name, style, "ticket", bps),))
                prep = PreparedSchedule(wplan, one, kernels="megakernel", check=False)
                prep.d_counters_init = zeros            # the kind's parents ran before (gpu.diagnostics.diagnose)
                prep.run(wss[0])
                prep.check()
                st, host = time_queued(lambda i: prep.run(wss[i]), spin, repeats=repeats, rotate=3)
                variant = {"kernel": "megakernel", "style": style, "blocks_per_sm": bps, "extra_shared_bytes": 0,
                           "timing": "queued"}
                if (style, bps) == ("persistent", 1):
                    variant.update(traced_parts(wplan, one, zeros, wss))
                record(variant, st, host)
            del d_table
        del wss
    notes["spin_iters"] = spin.iters
    return rows, notes


TICKET_MIN_WAVES = 4     # runs of fewer waves of tasks than this are recorded but not used


def measure_megakernel_ticket(layers, plan_params: str = "", spin=None, repeats: int = 10, rounds: int = 3,
                              sm_count: int | None = None) -> tuple[dict[str, Any], list[dict]]:
    """(``megakernel_ticket_ns`` value and method, rows): what the per-task megakernel's ticket costs a
    task's slot at full occupancy. Each kind's tasks of the non-fused schedule (the transforms also at
    the fused schedule's pairs per thread) run alone in the megakernel, one block per task, counters at
    zero, queued-timed (``time_queued``) with ticket and with blockIdx dispatch, alternately for
    ``rounds`` rounds. Per run, the saving per task is (T_ticket - T_blockidx) / waves, waves = tasks /
    (SMs x the driver's occupancy of the megakernel); the value is the median over the runs of at least
    ``TICKET_MIN_WAVES`` waves (the others are recorded, with ``used`` false). ``sm_count``: None = the
    driver's."""
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.schedule import Launch, Schedule
    spin = spin or Spinner()
    sm = sm_count or int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(11)
    param_sets = [(plan_params, None)]
    fused_params = fused_transform_params(plan_params)
    if fused_params is not None:
        param_sets.append((fused_params, TRANSFORM_KINDS))
    for params, kinds in param_sets:
        for name in layers:
            graph, schedule, wplan, wss = nonfused_workspaces(name, params, rng)
            zeros = cuda.to_device(np.zeros(graph.num_counters, np.int32))
            for launch in schedule.launches:
                kind = graph.kind_names[int(graph.kind[int(launch.order[0])])]
                if kinds is not None and kind not in kinds:
                    continue
                preps = {}
                for dispatch in ("ticket", "blockidx"):
                    one = Schedule(launch.name, (Launch(launch.order, launch.name, "per_task", dispatch),))
                    prep = PreparedSchedule(wplan, one, kernels="megakernel", check=False)
                    prep.d_counters_init = zeros            # the kind's parents ran before (gpu.diagnostics.diagnose)
                    prep.run(wss[0])
                    prep.check()
                    preps[dispatch] = prep
                pl = preps["ticket"].launches[0]
                per_sm = _active_blocks(pl.kernel, pl.threads, wplan.shared_bytes)
                times: dict[str, list[float]] = {"ticket": [], "blockidx": []}
                for _ in range(rounds):
                    for dispatch, prep in preps.items():
                        st, _host = time_queued(lambda i, p=prep: p.run(wss[i]), spin, repeats=repeats, rotate=3)
                        times[dispatch].append(st.median_ms)
                for prep in preps.values():
                    prep.check()
                tasks = int(len(launch.order))
                waves = tasks / (sm * per_sm) if per_sm > 0 else float("nan")   # -1: the driver cannot say
                t_ms, b_ms = float(np.median(times["ticket"])), float(np.median(times["blockidx"]))
                saving = (t_ms - b_ms) * 1e6 / waves
                rows.append({"layer": name, "kind": kind, "plan_params": params, "tasks": tasks,
                             "blocks_per_sm": per_sm, "waves": waves, "ticket_ms": times["ticket"],
                             "blockidx_ms": times["blockidx"], "ticket_median_ms": t_ms,
                             "blockidx_median_ms": b_ms, "saving_per_task_ns": saving,
                             "used": bool(waves >= TICKET_MIN_WAVES)})
                log.info("%s %s [%s] ticket %.4f blockIdx %.4f ms, %.1f waves: %.0f ns per task", name, kind,
                         params, t_ms, b_ms, waves, saving)
            del wss
    used = [r["saving_per_task_ns"] for r in rows if r["used"]]
    if not used:
        raise TimingError(f"megakernel ticket: no run of at least {TICKET_MIN_WAVES} waves of tasks")
    value = max(0.0, float(np.median(used)))
    method = (f"each kind's tasks alone in the per-task megakernel on {', '.join(layers)} (the transforms also at the "
              f"fused schedule's pairs per thread), counters at zero, queued-timed with ticket and with blockIdx "
              f"dispatch alternately ({rounds} rounds of {repeats}); per run (T_ticket - T_blockidx) / waves of "
              f"tasks (SMs x the driver's occupancy); median over the {len(used)} runs of >= {TICKET_MIN_WAVES} "
              f"waves (range {min(used):.0f} .. {max(used):.0f} ns) (gpu.calibrate.occupancy.measure_megakernel_ticket)")
    return {"value": value, "method": method}, rows


def traced_parts(wplan, schedule, counters_init, wss) -> dict[str, float]:
    """Where a megakernel task's time goes, from a traced run of ``schedule`` (the inputs rotated over
    ``wss``; the last run kept): the mean per task of ready - claim (``trace_claim_ns``: ticket, table
    row, counter look, acquire fence), done - ready (``trace_body_ns``) and end - done
    (``trace_signal_ns``: release fence, decrement). gpu/kernels/winograd/megakernel.py's ``TRACE_COLS``."""
    from gpu.runtime.prepared import PreparedSchedule
    prep = PreparedSchedule(wplan, schedule, kernels="megakernel", check=False, trace=True)
    prep.d_counters_init = counters_init
    for i in range(len(wss) + 1):
        prep.run(wss[i % len(wss)])
    cuda.synchronize()
    prep.check()
    tr = prep.traces()[0].astype(np.float64)      # claim, ready, end, sm, done
    return {"trace_claim_ns": float((tr[:, 1] - tr[:, 0]).mean()), "trace_body_ns": float((tr[:, 4] - tr[:, 1]).mean()),
            "trace_signal_ns": float((tr[:, 2] - tr[:, 4]).mean())}


def time_zeroed_order(wplan, wss, counters_init, order, label: str, spin, repeats: int = 10):
    """(TimingStats, host ms) of one per-task megakernel launch running the tasks ``order`` in that order,
    its counters starting at ``counters_init`` (zeros: no task waits; the data read may be stale, only time
    matters), queued behind a spin (``time_queued``), inputs rotated over the first three of ``wss``."""
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.schedule import Launch, Schedule
    one = Schedule(label, (Launch(np.asarray(order, np.int64), label, "per_task", "ticket", None),))
    prep = PreparedSchedule(wplan, one, kernels="megakernel", check=False)
    prep.d_counters_init = counters_init
    prep.run(wss[0])
    prep.check()
    return time_queued(lambda i: prep.run(wss[i]), spin, repeats=repeats, rotate=3)


def time_mixed_kinds(layers, plan_params: str = "", spin=None, repeats: int = 10) -> list[dict]:
    """Rows of the mixed-kind runs (``megasim.calibration.cases.MIXED_PAIRS``): two kinds' non-fused launches
    interleaved (``megasim.calibration.cases.mixed_order``) in one per-task megakernel launch, counters zeroed
    (no waits; the data read may be stale, only time matters), host hidden; with the sum of the two
    kinds' single-kind megakernel runs, timed the same way, beside it."""
    from megasim.calibration.cases import MIXED_PAIRS, mixed_order
    spin = spin or Spinner()
    rng = np.random.default_rng(8)
    rows = []
    for name in layers:
        graph, schedule, wplan, wss = nonfused_workspaces(name, plan_params, rng)
        zeros = cuda.to_device(np.zeros(graph.num_counters, np.int32))

        def timed(order, label):
            return time_zeroed_order(wplan, wss, zeros, order, label, spin, repeats)

        singles = {kind: timed(order, kind)[0].median_ms * 1e3 for kind, order in launch_orders(graph, schedule).items()}
        for pair in MIXED_PAIRS:
            st, host = timed(mixed_order(graph, schedule, pair), "+".join(pair))
            rows.append({"layer": name, "kind": "+".join(pair), "plan_params": plan_params,
                         "kernel": "megakernel", "style": "per_task",
                         "timing": "queued", "median_ms": st.median_ms, "min_ms": st.min_ms, "max_ms": st.max_ms,
                         "host_issue_ms": host, "single_kind_sum_us": sum(singles[k] for k in pair)})
            log.info("%s %s mixed %.4f ms (single-kind sum %.4f ms)", name, "+".join(pair), st.median_ms,
                     rows[-1]["single_kind_sum_us"] / 1e3)
        del wss
    return rows


def measure_block_end_order(layers, plan_params: str = "", kinds: tuple[str, ...] = ("gemm",),
                             runs: int = 4) -> list[dict]:
    """Rows of the order in which an SM's first-wave blocks end (``megasim.calibration.age``): each of
    ``kinds``' non-fused launch run alone by the megakernel per task (counters at zero, inputs rotated,
    the last of ``runs`` traced runs kept); ``end_us`` = ``block_end_order`` of its trace."""
    from megasim.calibration.age import block_end_order
    rng = np.random.default_rng(9)
    rows = []
    for name in layers:
        graph, schedule, wplan, wss = nonfused_workspaces(name, plan_params, rng)
        orders = launch_orders(graph, schedule)
        for kind in kinds:
            tr = traced_alone(wplan, wss, orders[kind], kind, "per_task", None, runs)   # claim, ready, end, sm, done
            end_us, sms = block_end_order(tr[:, 0], tr[:, 2], tr[:, 3])
            rows.append({"layer": name, "kind": kind, "plan_params": plan_params, "kernel": "megakernel",
                         "style": "per_task", "end_us": end_us, "sms": sms, "tasks": int(len(orders[kind]))})
            log.info("%s %s first-wave ends %s us (%d SMs)", name, kind, [round(e, 2) for e in end_us], sms)
        del wss
    return rows


TRANSFORM_KINDS = ("ftrans", "itrans", "otrans")


def fused_transform_params(plan_params: str) -> str | None:
    """``plan_params`` with the fused schedule's pairs per transform thread, or None when that is what
    ``plan_params`` already runs (the non-fused default differs: megasim.algorithms.winograd.lowering)."""
    from megasim.algorithms.winograd.lowering import DEFAULT_TRANSFORM_PAIRS_PER_THREAD
    from megasim.plan import Plan
    if Plan.parse("nonfused", plan_params).params.transform_pairs_per_thread is not None:
        return None
    pairs = DEFAULT_TRANSFORM_PAIRS_PER_THREAD["fused"]
    if pairs == DEFAULT_TRANSFORM_PAIRS_PER_THREAD["nonfused"]:
        return None
    return ",".join(p for p in (plan_params, f"pairs={pairs}") if p)


def variant_gemm_params(plan_params: str = "") -> str | None:
    """``plan_params`` with the GEMM at t = 32, the specialisation that has a cost of its own
    (``gemm@t32``, megasim.algorithms.winograd.lowering), or None when ``plan_params`` runs t = 32 already."""
    from megasim.plan import Plan
    if Plan.parse("nonfused", plan_params).params.tiles_per_group == 32:
        return None
    return ",".join([p for p in plan_params.split(",") if p and not p.strip().startswith("t=")] + ["t=32"])


def variant_tile_params(plan_params: str, m: int) -> str:
    """``plan_params`` with the Winograd tile F(m x m) (a tile whose transforms have costs of their own,
    ``ftrans@m6`` ...: megasim.algorithms.winograd.lowering.OWN_COST_TILES)."""
    return ",".join([p for p in plan_params.split(",") if p and not p.strip().startswith("tile=")] + [f"tile={m}"])


def tile_param_sets(plan_params: str = "") -> list[str]:
    """The parameter sets the big tiles' transforms are timed at: each of OWN_COST_TILES at ``plan_params``'s
    pairs per thread and at the fused schedule's."""
    from megasim.algorithms.winograd.lowering import OWN_COST_TILES
    out = []
    for m in OWN_COST_TILES:
        p = variant_tile_params(plan_params, m)
        out += [p] + ([f] if (f := fused_transform_params(p)) is not None else [])
    return out


def time_param_sets(layers, runs, spin=None) -> tuple[list[dict], dict]:
    """``time_kinds_occupancy``'s rows and notes over ``runs``, (plan params, kinds) pairs (kinds None: every kind;
    params None: the run is skipped)."""
    spin = spin or Spinner()
    rows: list[dict] = []
    notes: dict[str, Any] = {"opt_in_failed": {}, "host_not_hidden": []}
    for params, kinds in runs:
        if params is None:
            continue
        more, more_notes = time_kinds_occupancy(layers, params, spin, kinds=kinds)
        rows += more
        notes["opt_in_failed"].update(more_notes["opt_in_failed"])
        notes["host_not_hidden"] += more_notes["host_not_hidden"]
    notes["spin_iters"] = spin.iters
    return rows, notes


def tile_runs(plan_params: str = "") -> list[tuple[str, tuple[str, ...]]]:
    """The big tiles' runs for ``time_param_sets``: the transforms at each of ``tile_param_sets``."""
    return [(params, TRANSFORM_KINDS) for params in tile_param_sets(plan_params)]


def measure_occupancy(layers, plan_params: str = "") -> tuple[dict[str, dict], list[dict], dict]:
    """(spec values, kind_times rows, extra notes) of this module's measurements: every kind at
    ``plan_params``, the transforms again at the fused schedule's pairs per thread (their tasks in
    a fused run are that size) and at the big tiles (``tile_param_sets``), and the GEMM again at t = 32
    (``variant_gemm_params``)."""
    spin = Spinner()
    sm = int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    q = probe_queued_launch(sm, spin)
    values = {"queued_launch_ns": {"value": q["queued_launch_ns"], "method": (
        "an empty 4-argument kernel queued behind a ~1 ms single-thread spin kernel, CUDA events after the spin "
        "and after the kernel (the host's launch cost hidden; median of 30)")}}
    values["megakernel_reset_ns"] = reset_entry(values, {"occupancy_round": q})
    rows, notes = time_param_sets(layers, [(plan_params, None),
                                           (fused_transform_params(plan_params), TRANSFORM_KINDS),
                                           (variant_gemm_params(plan_params), ("gemm",)),
                                           *tile_runs(plan_params)], spin)
    notes.update({k: v for k, v in q.items() if k != "queued_launch_ns"})
    return values, rows, notes


def _write_measurements(m, out: str) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(m.as_dict(), indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    import datetime as dt

    from megasim.calibration.measurements import CALIBRATION_LAYERS, Measurements
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="measurements JSON of the first round (megasim calibrate)")
    ap.add_argument("--out", required=True, help="merged measurements JSON to write")
    ap.add_argument("--layers", nargs="+", default=list(CALIBRATION_LAYERS))
    ap.add_argument("--mixed", action="store_true",
                    help="also time two kinds interleaved in one megakernel launch (the transforms are "
                         "fitted on them beside the GEMM; each is a check)")
    ap.add_argument("--mixed-only", action="store_true",
                    help="only the mixed-kind runs, added to --base's measurements")
    ap.add_argument("--end-order-only", action="store_true",
                    help="only the traced end order of an SM's first-wave GEMM blocks, added to --base's measurements")
    ap.add_argument("--tiles-only", action="store_true",
                    help="only the big tiles' transforms (F(5x5), F(6x6): their own cost names), added to --base's "
                         "measurements")
    ap.add_argument("--ticket-only", action="store_true",
                    help="only the per-task megakernel's ticket cost (megakernel_ticket_ns), added to --base's measurements")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    m = Measurements.from_dict(json.loads(Path(args.base).read_text()))
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    date = dt.date.today().isoformat()
    t0 = time.perf_counter()
    if args.end_order_only:
        m.extra["block_end_order"] = measure_block_end_order(tuple(args.layers), m.plan_params)
        m.extra["block_end_order_meta"] = {"device": name, "date": date, "git_sha": git_sha()}
        _write_measurements(m, args.out)
        for r in m.extra["block_end_order"]:
            print(f"{r['layer']:9s} {r['kind']:6s} first-wave ends {[round(e, 2) for e in r['end_us']]} us ({r['sms']} SMs)")
        return 0
    if args.ticket_only:
        value, rows = measure_megakernel_ticket(tuple(args.layers), m.plan_params)
        m.values["megakernel_ticket_ns"] = {"value": value["value"],
                                            "method": f"{value['method']}; measured {date} on {name}"}
        m.extra["megakernel_ticket_rows"] = rows
        m.extra["megakernel_ticket_meta"] = {"device": name, "date": date, "git_sha": git_sha(),
                                             "seconds": round(time.perf_counter() - t0, 1)}
        _write_measurements(m, args.out)
        for r in rows:
            print(f"{r['layer']:9s} {r['kind']:6s} [{r['plan_params']}] ticket {r['ticket_median_ms'] * 1e3:8.1f} us  "
                  f"blockIdx {r['blockidx_median_ms'] * 1e3:8.1f} us  {r['waves']:6.1f} waves  "
                  f"{r['saving_per_task_ns']:6.0f} ns per task{'' if r['used'] else ' (not used)'}")
        print(f"megakernel_ticket_ns = {value['value']:.0f}")
        return 0
    if args.tiles_only:   # a measurements file of these rows alone (for megasim update-spec: the other
        rows, notes = time_param_sets(tuple(args.layers), tile_runs(m.plan_params))      # kinds' costs stay the spec's)
        for r in rows:
            r["round"] = 2
        m = Measurements(device=name, date=date, preset=m.preset, values=m.values, kind_times=rows,
                         plan_params=m.plan_params,
                         extra={"tile_round": {"device": name, "date": date,
                                               "git_sha": git_sha(),
                                               "seconds": round(time.perf_counter() - t0, 1), **notes}})
        _write_measurements(m, args.out)
        for r in rows:
            print(f"{r['layer']:9s} {r['kind']:7s} [{r['plan_params']}] {r['kernel']:10s} {r['style']:10s} "
                  f"bps={str(r.get('blocks_per_sm')):4s} smem={r['extra_shared_bytes']:6d} {r['timing']:6s} "
                  f"{r['median_ms'] * 1e3:9.1f} us")
        return 0
    if args.mixed or args.mixed_only:
        m.extra["mixed_kind_rows"] = time_mixed_kinds(tuple(args.layers), fused_transform_params(m.plan_params)
                                                      or m.plan_params)
        m.extra["mixed_kind_meta"] = {"device": name, "date": date, "git_sha": git_sha()}
    if args.mixed_only:
        _write_measurements(m, args.out)
        for r in m.extra["mixed_kind_rows"]:
            print(f"{r['layer']:9s} {r['kind']:12s} mixed {r['median_ms'] * 1e3:9.1f} us  "
                  f"single-kind sum {r['single_kind_sum_us']:9.1f} us")
        return 0
    values, rows, notes = measure_occupancy(tuple(args.layers), m.plan_params)
    for k, v in values.items():
        m.values[k] = {"value": v["value"], "method": f"{v['method']}; measured {date} on {name} (gpu.calibrate.occupancy)"}
    for r in m.kind_times:
        r.setdefault("round", 1)
    for r in rows:
        r["round"] = 2
    m.kind_times.extend(rows)
    m.extra["occupancy_round"] = {"device": name, "date": date, "git_sha": git_sha(),
                                  "seconds": round(time.perf_counter() - t0, 1), **notes}
    _write_measurements(m, args.out)
    print(f"wrote {args.out}: {len(rows)} rows; queued launch {values['queued_launch_ns']['value']:.0f} ns")
    for r in rows:
        print(f"{r['layer']:9s} {r['kind']:7s} {r['kernel']:10s} {r['style']:10s} bps={str(r.get('blocks_per_sm')):4s} "
              f"smem={r['extra_shared_bytes']:6d} {r['timing']:6s} exp={r.get('blocks_per_sm_expected', '')!s:3s} "
              f"{r['median_ms'] * 1e3:9.1f} us  host {r.get('host_issue_ms', float('nan')):.3f} ms")
    print(json.dumps({k: v for k, v in m.extra["occupancy_round"].items()}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
