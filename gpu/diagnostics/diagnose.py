"""Where does the fused megakernel lose time? Per task kind, the same tasks run by the per-kind kernel
and by the megakernel (each launch of the non-fused schedule on its own), plus the kernels'
registers, local memory and blocks per SM, and the fused schedule itself.

    bash gpu/on_device.sh python -m gpu.diagnostics.diagnose --layers resnet-1 yolov3-1 vgg-3

Prints a table and writes DIR/diagnose_fused.json (default $OUT or experiments/results/<device>).
These per-kind times are also what issue 4's calibration needs: each task kind timed alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from numba import cuda

from gpu.runtime import executor as ex
from gpu.kernels.winograd import megakernel as mk
from gpu.runtime.prepared import PreparedSchedule
from gpu.runtime.timing import time_cuda
from megasim.algorithms.winograd.lowering import WinogradConfig
from megasim.schedule import Schedule
from megasim.algorithms.winograd.algorithm1 import algorithm1
from megasim.algorithms.winograd.algorithm1 import default_params
from megasim.algorithms.winograd import winograd_nonfused
from megasim.workloads import parse_layer


def _resources(kernel) -> dict:
    """Registers, local memory and static shared memory of a compiled kernel (largest overload)."""
    def largest(getter) -> int:
        try:
            values = getter()   # no signature: a dict over the compiled overloads
        except Exception as err:  # noqa: BLE001 - report, do not lose the timings
            return -1 if err else -1
        return int(max(values.values())) if isinstance(values, dict) and values else int(values or 0)
    return {"registers": largest(kernel.get_regs_per_thread),
            "local_bytes": largest(kernel.get_local_mem_per_thread),
            "shared_static_bytes": largest(kernel.get_shared_mem_per_block)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=["resnet-1", "yolov3-1", "vgg-3"])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(7)
    rows = []
    for name in args.layers:
        problem = parse_layer(name)
        plan = ex.make_plan(problem, WinogradConfig())
        x = rng.standard_normal((problem.n, problem.h, problem.w, problem.c)).astype(np.float32)
        w = rng.standard_normal((problem.k, problem.c, 3, 3)).astype(np.float32)
        ws = ex.workspace(plan, cuda.to_device(x), cuda.to_device(w))
        nonfused = winograd_nonfused(plan.graph)
        # Run everything once so every launch's inputs exist (U, V, M written).
        PreparedSchedule(plan, nonfused, kernels="per_kind").run(ws)
        cuda.synchronize()
        for launch in nonfused.launches:
            one = Schedule(launch.name, (launch,))
            for kernels in ("per_kind", "megakernel"):
                # One kind alone: its parents ran before, so the megakernel's counters start at zero.
                prep = PreparedSchedule(plan, one, kernels=kernels, check=False)
                if prep.d_counters_init is not None:
                    prep.d_counters_init = cuda.to_device(np.zeros(plan.graph.num_counters, np.int32))
                stats = time_cuda(lambda i: prep.run(ws), warmup=3, repeats=args.repeats)
                rows.append({"layer": name, "what": f"{launch.name}:{kernels}", "tasks": int(len(launch.order)),
                             "median_ms": round(stats.median_ms, 4), "min_ms": round(stats.min_ms, 4)})
        for label, sched in (("nonfused:per_kind", nonfused), ("nonfused:megakernel", nonfused),
                             ("fused:megakernel", algorithm1(plan.graph, default_params(plan.graph)))):
            prep = PreparedSchedule(plan, sched, kernels=label.split(":")[1])
            stats = time_cuda(lambda i: prep.run(ws), warmup=3, repeats=args.repeats)
            rows.append({"layer": name, "what": label, "tasks": plan.graph.num_tasks,
                         "median_ms": round(stats.median_ms, 4), "min_ms": round(stats.min_ms, 4)})
    for row in rows:
        print(f"{row['layer']:10s} {row['what']:24s} {row['tasks']:8d} {row['median_ms']:9.4f} ms")
    math_kernels = mk.kernels_for(WinogradConfig().gemm_math)
    resources = {k: _resources(getattr(math_kernels, k, None) or getattr(mk, k)) for k in
                 ("megakernel", "ftrans_kernel", "itrans_kernel", "gemm_kernel", "otrans_kernel")}
    for k, v in resources.items():
        print(f"{k:14s} {v}")
    out = Path(args.out or "experiments/results/gpu")
    out.mkdir(parents=True, exist_ok=True)
    from experiments.provenance import provenance
    meta = provenance({"script": "gpu.diagnostics.diagnose", "device": str(cuda.get_current_device().name),
                       "resources": resources})
    (out / "diagnose_fused.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
