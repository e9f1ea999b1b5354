"""The non-fused pipeline's kernels timed alone and in the pipeline, on shapes of few GEMM waves (issue 42).

The 416-mapping validation set predicts the non-fused pipeline 3-8% slow on the layers of small maps and
many channels (resnet-4 +8.0%, yolov3-5 +7.3%, resnet-3 +5.3%), whose GEMM is a grid of 2-5 waves and most
of the run. This script times, at the validation's non-fused parameters (``PARAMS``), on those three
layers (diagnosis only: never fitted) and on shapes of the same regime that are none of the 13 validation
layers (``STUDY_SHAPES``: small maps, C 256-768, 1-7 waves of GEMM tasks):

- ``pipeline``: the whole non-fused pipeline, CUDA events around back-to-back runs (as ``megasim validate``
  times it) and queued behind a spin kernel (device time only);
- ``prefix``: the pipeline's first 1..4 launches, queued (each launch's in-pipeline device time is the
  difference of two prefixes: its inputs as the previous launch left them in L2);
- ``kind``: each launch alone, in the calibration's own row format (``gpu.calibrate.occupancy``: its
  per-kind kernel at its natural occupancy, queued and with events, and at forced lower occupancies by
  unused shared memory), so ``megasim.calibration.cases.variant_case`` simulates each row as measured.

``--ncu``: one run of each listed shape's pipeline between ``cuda.profile_start()`` and ``profile_stop()``
(warm-up runs before), for Nsight Compute:

    bash gpu/on_device.sh python3 -m experiments.studies.nonfused_waves.measure --out $OUT/x
    bash gpu/on_device.sh ncu --profile-from-start off --cache-control none --clock-control none --csv \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,... --log-file $OUT/ncu.csv \\
        python3 -m experiments.studies.nonfused_waves.measure --ncu yolov3-5 N=64,C=512,K=512,H=9,W=9

The model's side is ``experiments.studies.nonfused_waves.compare`` (any CPU); the refits and what the validation
sets say of them, ``experiments.studies.nonfused_waves.refit``. Results (H200, 2026-11-28, a012111; both commands
in one device run of 88 s, the machine's start included): ``experiments/results/nvidia-h200/nonfused_waves/``
(``nonfused_waves_measured.json``, ``ncu.csv.gz``, the log gzipped: yolov3-5, resnet-4 and three study shapes, each pipeline's four
kernels in launch order); docs/findings.md, "Few-wave GEMM grids".
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

PARAMS = "t=64,tile=4,gemm_k_tile=64,threads=128,pairs=1,gemm_threads=128"
VALIDATION_SHAPES = ("resnet-4", "yolov3-5", "resnet-3", "yolov3-4")
STUDY_SHAPES = ("N=64,C=512,K=512,H=9,W=9", "N=64,C=384,K=384,H=12,W=12", "N=64,C=768,K=256,H=10,W=10",
                "N=32,C=512,K=512,H=8,W=8", "N=64,C=256,K=256,H=20,W=20")

log = logging.getLogger("nonfused_waves")


def _stats(st) -> dict[str, float]:
    return {"median_ms": st.median_ms, "min_ms": st.min_ms, "max_ms": st.max_ms}


def measure_shape(name: str, spin, repeats: int = 20, params: str = PARAMS) -> list[dict[str, Any]]:
    """Every row of one shape at plan ``params`` (see the module docstring)."""
    import numpy as np
    from numba import cuda
    from gpu.calibrate.occupancy import time_per_kind, time_queued
    from gpu.calibrate.runs import nonfused_workspaces
    from gpu.runtime import executor as ex
    from gpu.runtime.prepared import PreparedSchedule
    from gpu.runtime.timing import time_cuda
    from megasim.schedule import Schedule
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(11)
    graph, schedule, wplan, wss = nonfused_workspaces(name, params, rng)
    base = {"layer": name, "plan_params": params}
    full = PreparedSchedule(wplan, schedule, kernels="per_kind")
    st = time_cuda(lambda i: full.run(wss[i]), warmup=3, repeats=repeats, rotate=3)
    rows.append({**base, "what": "pipeline", "timing": "events", **_stats(st)})
    st, host = time_queued(lambda i: full.run(wss[i]), spin, repeats=repeats, rotate=3)
    rows.append({**base, "what": "pipeline", "timing": "queued", "host_issue_ms": host, **_stats(st)})
    for k in range(1, len(schedule.launches) + 1):
        pre = PreparedSchedule(wplan, Schedule(f"prefix{k}", schedule.launches[:k]), kernels="per_kind", check=False)
        st, host = time_queued(lambda i: pre.run(wss[i]), spin, repeats=repeats, rotate=3)
        rows.append({**base, "what": "prefix", "launches": k, "timing": "queued", "host_issue_ms": host, **_stats(st)})
    d_prm = cuda.to_device(wplan.params)
    for launch in schedule.launches:
        kind_id = int(graph.kind[int(launch.order[0])])
        kind = graph.kind_names[kind_id]
        size = int(len(launch.order))
        d_table = cuda.to_device(ex.task_table(graph, np.asarray(launch.order, np.int64)))
        kbase = {**base, "what": "kind", "kind": kind, "tasks": size, "kernel": "per_kind", "style": "per_task"}
        for smem, timing, expected, st, host, error in time_per_kind(
                wplan, kind_id, d_table, size, d_prm, wplan.shared_bytes if kind == "gemm" else 0, wss, spin, repeats,
                forced=kind == "gemm"):
            row = {**kbase, "extra_shared_bytes": smem}
            if error is not None:
                rows.append({**row, "error": error[:200]})
                continue
            row.update(timing=timing, blocks_per_sm_expected=expected)
            if host is not None:
                row["host_issue_ms"] = host
            rows.append({**row, **_stats(st)})
    log.info("%s: %d rows", name, len(rows))
    del wss
    return rows


def profile(shapes) -> None:
    """One pipeline run per shape inside the profiler range (three warm-up runs before it)."""
    import numpy as np
    from numba import cuda
    from gpu.calibrate.runs import nonfused_workspaces
    from gpu.runtime.prepared import PreparedSchedule
    for name in shapes:
        graph, schedule, wplan, wss = nonfused_workspaces(name, PARAMS, np.random.default_rng(11))
        full = PreparedSchedule(wplan, schedule, kernels="per_kind")
        for i in range(3):
            full.run(wss[i % 3])
        cuda.synchronize()
        cuda.profile_start()
        full.run(wss[0])
        cuda.synchronize()
        cuda.profile_stop()
        del wss


def check_inputs(prog: str, shapes, params: str) -> None:
    """One line naming the bad value (SystemExit) unless every shape parses and ``params`` are non-fused plan
    parameters: before any GPU work."""
    from megasim.errors import MegasimError
    from megasim.plan import Plan
    from megasim.workloads import parse_layer
    try:
        Plan.parse("nonfused", params)
        for name in shapes:
            parse_layer(name)
    except MegasimError as err:
        raise SystemExit(f"{prog}: {err}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for nonfused_waves_measured.json")
    ap.add_argument("--shapes", nargs="+", default=[*VALIDATION_SHAPES, *STUDY_SHAPES])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--params", default=PARAMS,
                    help=f"the non-fused plan parameters (default: the validation's, {PARAMS}; '' for the defaults, "
                         f"as the calibration measures)")
    ap.add_argument("--ncu", nargs="+", metavar="SHAPE", help="profile one pipeline run of each shape instead")
    args = ap.parse_args(argv)
    check_inputs("nonfused_waves.measure", args.ncu or args.shapes, args.params)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("numba").setLevel(logging.WARNING)
    if args.ncu:
        profile(args.ncu)
        return 0
    if not args.out:
        ap.error("--out is required unless --ncu")
    from gpu.calibrate.occupancy import Spinner
    from gpu.calibrate.validate import device_info
    from megasim.provenance import git_sha
    t0 = time.time()
    spin = Spinner()
    rows: list[dict[str, Any]] = []
    for name in args.shapes:
        rows += measure_shape(name, spin, args.repeats, args.params)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"what": "issue 42: the non-fused pipeline's kernels on shapes of few GEMM waves "
                   "(experiments.studies.nonfused_waves.measure)",
           "params": args.params, "git_sha": git_sha(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "device": device_info(), "spin_iters": spin.iters, "wall_s": time.time() - t0, "rows": rows}
    (out / "nonfused_waves_measured.json").write_text(json.dumps(doc, indent=1))
    log.info("wrote %s (%d rows, %.0f s)", out / "nonfused_waves_measured.json", len(rows), time.time() - t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
