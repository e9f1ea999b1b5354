"""Probe: kernel-only times below the host's launch cost, through a CUDA graph (GPU only).

The sweep (``experiments.benchmarks.sparse_bench``) times 10 launches queued back to back. A kernel shorter than
Numba's launch cost (~30 us) stays host-bound there: the sample times the host. This probe captures
``INNER`` launches of one kernel in a CUDA graph (torch's, the Numba kernels launched on its capture
stream through ``cuda.external_stream``) and times graph replays between CUDA events. A replay
launches every kernel from the device's side, so the per-kernel time is the device's. Each output is
checked against a float64 reference first. The layers, maps, seeds and weights are the sweep's
(``experiments.benchmarks.sparse_bench.cases`` and ``layer_weights``; the committed run of d2fd870 drew the same
seeded weights without the sweep's He scale, which changes no kernel's work).

    bash gpu/on_device.sh python -m gpu.probes.graph_timing [--layers vgg19/conv1_1 vgg19/conv2_1] [--out DIR]

Writes DIR/graph_timing.csv + .json (device, driver, versions, git SHA, date): the sweep's columns
(layer, batch, sparsity, pattern, seed, op, median_ms, ...) plus ``method`` = "cuda_graph".
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

NAME = "graph_timing"
INNER = 20
TOL = 1e-5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=["vgg19/conv1_1", "vgg19/conv2_1"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import torch
    from numba import cuda

    from experiments.provenance import provenance, write_results
    from experiments.benchmarks.sparse_bench import cases, layer_weights
    from experiments.benchmarks.winograd_bench import device_meta
    from gpu import sparse
    from megasim.workloads.sparse import SparsitySpec, sparse_feature_map

    dmeta = device_meta(torch, cuda)
    rows = []
    stream = torch.cuda.Stream()
    nstream = cuda.external_stream(stream.cuda_stream)
    for li, p, s, pattern, seed in cases([args.batch], quick=False):
        if p.name not in args.layers:
            continue
        w = layer_weights(li, p)
        x = sparse_feature_map((p.n, p.c, p.h, p.w), SparsitySpec(s, pattern, seed=seed))
        ref = torch.nn.functional.conv2d(torch.from_numpy(x).double().cuda(), torch.from_numpy(w).double().cuda(),
                                         stride=p.stride, padding=p.padding).cpu().numpy()
        for op in ("ecr", "direct"):
            launch = sparse.prepare(op, x, w, p.stride, p.padding)
            (_, conv_args), = launch.steps
            configured = launch.kernel[launch.grid, launch.block, nstream]
            for _ in range(3):                      # compile and warm up outside the capture
                configured(*conv_args)
            stream.synchronize()
            err = float(np.abs(launch.output.copy_to_host() - ref).max() / np.abs(ref).max())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(INNER):
                    configured(*conv_args)
            samples = []
            for i in range(args.repeats + 2):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    start.record()
                    graph.replay()
                    end.record()
                end.synchronize()
                if i >= 2:
                    samples.append(start.elapsed_time(end) / INNER)
            med = float(np.median(samples))
            rows.append({"layer": p.name, "batch": args.batch, "C": p.c, "K": p.k, "HW": p.h, "sparsity": s,
                         "measured_sparsity": float((x == 0).mean()), "pattern": pattern, "seed": seed, "op": op,
                         "k_tile": launch.tiling.k_tile, "regs": launch.regs_per_thread, "median_ms": med,
                         "min_ms": float(min(samples)), "max_ms": float(max(samples)), "rel_err": err,
                         "status": "ok" if err <= TOL and math.isfinite(med) else "failed", "method": "cuda_graph"})
            print(f"{p.name:14s} N={args.batch:2d} s={s:4.2f} {pattern:9s} {op:7s} {med * 1e3:8.1f} us  err {err:.1e}",
                  flush=True)
    bad = [r for r in rows if r["status"] != "ok"]
    meta = {**provenance(), **dmeta, "script": "gpu.probes.graph_timing", "inner": INNER, "repeats": args.repeats,
            "tolerance": TOL, "method": f"kernel only: {INNER} launches captured in a CUDA graph (torch), replays "
                                        "between CUDA events, per-launch median"}
    out = args.out or "experiments/results/graph_timing"
    csv_path, _ = write_results(rows, out, NAME, meta)
    print(f"wrote {csv_path}; {len(rows)} rows, {len(bad)} failed the {TOL:g} check")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
