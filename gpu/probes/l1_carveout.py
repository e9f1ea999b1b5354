"""Does a transform's own kernel slow with dynamic shared memory that leaves its occupancy unchanged?
(a diagnostic; not fitted).

    bash gpu/on_device.sh python -m gpu.probes.l1_carveout     # writes $OUT/l1_carveout.json

The calibration holds a kind's kernel below its natural occupancy with dynamic shared memory
(``gpu.calibrate.occupancy.FORCED_SHARED``). Shared memory and the L1 cache share one array per SM,
so those runs also shrink the L1: they measure occupancy only if the kernel does not depend on L1.
This times each transform's non-fused kernel (resnet-1 and vgg-3, at the default and the fused
transform size, pairs=4) at growing dynamic shared memory, up to the most that keeps its natural
occupancy and past it, with the driver's blocks per SM for each; host hidden behind a spin kernel
(``gpu.calibrate.occupancy.time_queued``), median of 15 runs, inputs rotated over 3 workspaces."""

from __future__ import annotations

import numpy as np
from numba import cuda

from gpu.diagnostics.output import out_dir_arg, write_result

LAYERS = ("resnet-1", "vgg-3")
SHARED_PER_SM_BYTES = 228 * 1024      # H100 / H200: the largest shared-memory carve-out


def main(argv: list[str] | None = None) -> None:
    out_dir = out_dir_arg(argv, __doc__.splitlines()[0])
    from gpu.runtime import executor as ex
    from gpu.calibrate.runs import nonfused_workspaces
    from gpu.calibrate.occupancy import Spinner, _active_blocks, _opt_in, per_kind_launcher, time_queued
    spin = Spinner()
    rows = []
    for params in ("", "pairs=4"):
        for name in LAYERS:
            graph, schedule, wplan, wss = nonfused_workspaces(name, params, np.random.default_rng(7))
            d_prm = cuda.to_device(wplan.params)
            for launch in schedule.launches:
                kind_id = int(graph.kind[int(launch.order[0])])
                kind = graph.kind_names[kind_id]
                if kind == "gemm":            # stages through shared memory itself
                    continue
                size = len(launch.order)
                d_table = cuda.to_device(ex.task_table(graph, np.asarray(launch.order, np.int64)))
                fn, kernel, threads = per_kind_launcher(wplan, kind_id, d_table, size, d_prm, 0)
                fn(wss[0])
                cuda.synchronize()
                natural = _active_blocks(kernel, threads, 0)
                keep = SHARED_PER_SM_BYTES // natural - 1024      # 1 KiB per block is reserved
                for smem in sorted({0, 4096, 16384, keep // 2, keep - 4096, keep, keep + 4096,
                                    46 * 1024, 100 * 1024, 160 * 1024}):
                    if smem > 48 * 1024:
                        _opt_in(kernel, smem)
                    run, _, _ = per_kind_launcher(wplan, kind_id, d_table, size, d_prm, smem)
                    run(wss[0])
                    cuda.synchronize()
                    st, _ = time_queued(lambda i: run(wss[i]), spin, repeats=15, rotate=3)
                    row = {"layer": name, "params": params, "kind": kind, "tasks": size, "dynamic_shared_bytes": smem,
                           "blocks_per_sm": _active_blocks(kernel, threads, smem), "natural_blocks_per_sm": natural,
                           "median_us": st.median_ms * 1e3, "min_us": st.min_ms * 1e3, "max_us": st.max_ms * 1e3}
                    rows.append(row)
                    print(f"{name:9s} {params or 'defaults':8s} {kind:7s} smem {smem:6d} B  {row['blocks_per_sm']:2d} "
                          f"blocks/SM  {row['median_us']:8.1f} us")
            del wss
    write_result("l1_carveout.json", rows, "gpu.probes.l1_carveout", out_dir)


if __name__ == "__main__":
    main()
