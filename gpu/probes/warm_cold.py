"""Each kind's own kernel alone, its inputs cold (flushed from L2) or warm (left in L2 by the same
launch just before): does a kind's time depend on where its inputs come from? (a diagnostic;
not fitted).

    bash gpu/on_device.sh python -m gpu.probes.warm_cold       # writes $OUT/warm_cold.json

Each kind's own kernel on three problems (two whose products fit in L2, and resnet-1), at the
default and the fused transform size (pairs=4): cold = a 400 MiB buffer written just before, warm =
the same launch run just before; a one-thread spin kernel ahead of the timed launch hides the host.
Median of 20 runs (two rounds of 10 after 2 warm-ups), CUDA events."""

from __future__ import annotations

import numpy as np
from numba import cuda

from gpu.diagnostics.output import out_dir_arg, write_result

PROBLEMS = ("N=8,C=256,K=256,H=28,W=28", "N=16,C=128,K=128,H=28,W=28", "resnet-1")


@cuda.jit
def _fill(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = 1.0


def main(argv: list[str] | None = None) -> None:
    out_dir = out_dir_arg(argv, __doc__.splitlines()[0])
    from gpu.runtime import executor as ex
    from gpu.calibrate.runs import nonfused_workspaces, spin_kernel
    from gpu.calibrate.occupancy import per_kind_launcher
    big = cuda.device_array(400 * 2 ** 20 // 4, np.float32)
    spin_out = cuda.to_device(np.ones(1, np.float32))
    spin_kernel[1, 1](spin_out, 10)
    rows = []
    for name in PROBLEMS:
        for params in ("", "pairs=4"):
            graph, schedule, wplan, wss = nonfused_workspaces(name, params, np.random.default_rng(3))
            d_prm = cuda.to_device(wplan.params)
            for launch in schedule.launches:
                kind_id = int(graph.kind[int(launch.order[0])])
                kind = graph.kind_names[kind_id]
                size = len(launch.order)
                d_table = cuda.to_device(ex.task_table(graph, np.asarray(launch.order, np.int64)))
                smem = wplan.shared_bytes if kind == "gemm" else 0
                fn, _, _ = per_kind_launcher(wplan, kind_id, d_table, size, d_prm, smem)
                times: dict[str, list[float]] = {"cold": [], "warm": []}
                for state in ("cold", "warm", "cold", "warm"):
                    ts = []
                    for _ in range(12):
                        if state == "cold":
                            _fill[(big.size + 255) // 256, 256](big)
                        else:
                            fn(wss[0])
                        spin_kernel[1, 1](spin_out, 40000)    # ~80 us on one thread: the host's issue of fn hides behind it
                        e0, e1 = cuda.event(), cuda.event()
                        e0.record()
                        fn(wss[0])
                        e1.record()
                        e1.synchronize()
                        ts.append(cuda.event_elapsed_time(e0, e1) * 1000.0)
                    times[state].extend(ts[2:])
                row = {"problem": name, "params": params, "kind": kind, "tasks": size,
                       "cold_us": float(np.median(times["cold"])), "warm_us": float(np.median(times["warm"]))}
                rows.append(row)
                print(f"{name:28s} {params:8s} {kind:7s} cold {row['cold_us']:8.1f} us  warm {row['warm_us']:8.1f} us  "
                      f"warm/cold {row['warm_us'] / row['cold_us']:.3f}")
            del wss
    write_result("warm_cold.json", rows, "gpu.probes.warm_cold", out_dir)


if __name__ == "__main__":
    main()
