"""What a user's convolution costs: the PyTorch drop-in's forward on NCHW torch tensors against the
benchmark harness's timing of the same implementation and mapping, and against torch's cuDNN.

Per layer (default: the 13 Table-2 layers, batch 64, FP32):
- the implementation is the model's choice for this GPU (``gpu.prepared_conv.choose_plan``, NCHW; the
  cache ``--choices`` may hold it already: ``experiments.benchmarks.precompute_choices``);
- ``user_ms``: ``gpu.torch_conv.WinogradConv2d`` (bias off) called on contiguous NCHW CUDA tensors under
  ``torch.no_grad()``, output allocated by the call, timed by CUDA events per call (median of
  ``--repeats`` >= 20 after ``--warmup``), inputs rotated over up to 3 sets;
- ``harness_ms``: the same plan (schedule, tile, mapping) run as ``experiments.benchmarks.winograd_bench``
  times its implementations: ``gpu.runtime.execute.PreparedRun`` on NHWC input already in place, output in
  a preallocated workspace (no layout change, no allocation, no module);
- ``torch_cudnn_ms``: ``torch.nn.functional.conv2d``, cuDNN, benchmark mode on, TF32 off;
- ``rel_err``: normwise error of the user path's output against float64 (torch on float64, cuDNN off).

Also measured: each launch of both paths alone (CUDA events around it, the same rotated inputs: columns
``harness_<launch>_ms`` and ``user_<launch>_ms``, e.g. ``user_itrans_ms``; the user path's filter
transform is skipped, as in its timing); the host cost of one call on a tiny layer (N=1, C=K=8, 8x8;
bursts of 100 calls enqueued back to back, the host time per call, median of 20 bursts), for the module,
the prepared convolution and torch's conv2d, and its parts (the launcher's call, one ``cuGraphLaunch``, one
``cuLaunchKernel``, four ways to allocate the output); the module and the launcher again with the
prepared convolution's CUDA graphs off (the kernels launched one by one), and whether the graph's output
equals the direct launches'; and whether the module's forward can be captured in a CUDA graph of the
caller's (replayed output equal to the eager one).

Writes ``DIR/conv2d_user_path.csv`` (layer, harness_ms, user_ms, torch_cudnn_ms, rel_err, then schedule,
tile, predicted_ms, user_over_harness, cudnn_over_user, the per-launch times) and ``DIR/conv2d_user_path.json`` (rows, host
costs, the CUDA graph check, the choices, device and versions, git SHA, date). DIR defaults to
``experiments/results/<device>/`` (``nvidia-h100``, ``nvidia-h200``).

    bash gpu/on_device.sh python3 -m experiments.benchmarks.conv2d_user_path --choices CHOICES.json [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import zlib
from pathlib import Path

from experiments.provenance import provenance, write_results

NAME = "conv2d_user_path"
REPO = Path(__file__).resolve().parents[2]


def device_dir(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100' (the results folder of that GPU)."""
    words = name.lower().replace("-", " ").split()
    return "-".join(words[:2]) if len(words) >= 2 else (words[0] if words else "unknown-device")


def fp32_flags(torch) -> dict:
    """Strict FP32 (``gpu.baselines.fp32_torch_flags``: no TF32 in cuDNN or cuBLAS) with cuDNN's benchmark mode
    on, as a user who tunes torch would run it; returns the flags as set, for the metadata."""
    from gpu.baselines import fp32_torch_flags
    flags = fp32_torch_flags()
    torch.backends.cudnn.benchmark = True
    return {**flags, "cudnn.benchmark": True}


def rel_err(torch, y, ref) -> float:
    return float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))


def host_cost_us(torch, fn, bursts: int = 20, calls: int = 100) -> float:
    """Median host time of one ``fn()`` call in bursts of ``calls`` enqueued back to back."""
    fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def launch_times(torch, steps_for, sets: int, warmup: int, repeats: int) -> list[float]:
    """Per launch of one run, the median ms between CUDA events recorded around it: ``steps_for(i)`` gives
    the launches (callables on the legacy default stream) of a run on input set i; runs rotate over sets,
    back to back (one synchronisation at the end, so the device does not wait for the host)."""
    stream = torch.cuda.current_stream()
    runs = []
    for r in range(warmup + repeats):
        steps = steps_for(r % sets)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)]
        events[0].record(stream)
        for step, event in zip(steps, events[1:]):
            step()
            event.record(stream)
        if r >= warmup:
            runs.append(events)
    stream.synchronize()
    return [round(statistics.median(ev[k].elapsed_time(ev[k + 1]) for ev in runs), 4)
            for k in range(len(runs[0]) - 1)]


def bench_layer(torch, name: str, batch: int, args) -> dict:
    from gpu.runtime.execute import PreparedRun
    from gpu.runtime.timing import rotation_sets, time_cuda
    from gpu.torch_conv import WinogradConv2d
    from megasim.plan import build
    from megasim.workloads.catalogue import parse_layer

    p = parse_layer(name, batch=batch)
    per_set = 4 * (p.n * p.c * p.h * p.w * 2 + p.n * p.k * p.out_h * p.out_w * 2)
    free, _ = torch.cuda.mem_get_info()
    sets = rotation_sets(per_set, free, wanted=3)
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(name.encode()))
    xs = [torch.randn(p.n, p.c, p.h, p.w, device="cuda", generator=gen) for _ in range(sets)]
    conv = WinogradConv2d(p.c, p.k, 3, padding=p.padding, bias=False, cache_path=args.choices).cuda()
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, device="cuda", generator=gen))
    run = conv.prepared(xs[0])
    choice = run.choice
    with torch.no_grad():
        y = conv(xs[0])
        with torch.backends.cudnn.flags(enabled=False):
            ref = torch.nn.functional.conv2d(xs[0].double(), conv.weight.double(), padding=p.padding)
        err = rel_err(torch, y, ref)
        del ref, y
        user = time_cuda(lambda i: conv(xs[i]), warmup=args.warmup, repeats=args.repeats, rotate=sets)
        # the harness: the same plan on NHWC input in place, output in the workspace
        graph, schedule, plan = build(p, run.plan)
        prepared = PreparedRun(p, plan, graph, schedule)
        from numba import cuda
        x_nhwc = [x.permute(0, 2, 3, 1).contiguous() for x in xs]
        w_dev = cuda.as_cuda_array(conv.weight.detach())
        wss = [prepared.workspace(cuda.as_cuda_array(x), w_dev) for x in x_nhwc]
        harness = time_cuda(lambda i: prepared.run(wss[i]), warmup=args.warmup, repeats=args.repeats, rotate=sets)
        # per launch: the user path's (filter transform skipped, as in its timing) and the harness's
        ys = [run.new_output(x) for x in xs]
        run(xs[0], conv.weight.detach(), ys[0])
        user_steps = [fn for fn, f in zip(run._launches, run._filter_only) if not f]

        def user_at(i):
            for k, fn, a in run._slots:
                if k != 1:
                    fn.rebind(a, (xs[i] if k == 0 else ys[i]).data_ptr())
            return user_steps
        names = [l.name for l in run._run.schedule.launches]
        user_names = [n for n, f in zip(names, run._filter_only) if not f] if len(names) == len(run._launches) else []
        user_launch = launch_times(torch, user_at, sets, args.warmup, args.repeats)
        harness_launch = launch_times(torch, lambda i: [fn for fn, _ in prepared.steps(wss[i])], sets, args.warmup,
                                      args.repeats)
        del ys
        y_h = torch.as_tensor(prepared.output(wss[0]), device="cuda").permute(0, 3, 1, 2)
        harness_agrees = bool(torch.equal(y_h, conv(xs[0])))
        del wss, x_nhwc, y_h
        w = conv.weight.detach()
        cudnn = time_cuda(lambda i: torch.nn.functional.conv2d(xs[i], w, padding=p.padding),
                          warmup=args.warmup, repeats=args.repeats, rotate=sets)
    row = {"layer": name, "harness_ms": round(harness.median_ms, 4), "user_ms": round(user.median_ms, 4),
           "torch_cudnn_ms": round(cudnn.median_ms, 4), "rel_err": f"{err:.3g}",
           "schedule": run.plan.schedule, "tile": run.plan.params.tile,
           "predicted_ms": round(choice.predicted_us / 1e3, 4) if choice else math.nan,
           "user_over_harness": round(user.median_ms / harness.median_ms, 4),
           "cudnn_over_user": round(cudnn.median_ms / user.median_ms, 4),
           "harness_output_equal": harness_agrees, "sets": sets, "repeats": args.repeats}
    h_names = names if len(names) == len(harness_launch) else [f"launch{k}" for k in range(len(harness_launch))]
    u_names = user_names if len(user_names) == len(user_launch) else [f"launch{k}" for k in range(len(user_launch))]
    for label, launch_names, times in (("harness", h_names, harness_launch), ("user", u_names, user_launch)):
        for launch_name, ms in zip(launch_names, times):
            row[f"{label}_{launch_name}_ms"] = ms
    del xs, conv
    torch.cuda.empty_cache()
    return row


def host_costs(torch, args) -> dict:
    from gpu.prepared_conv import prepare_conv2d
    from gpu.torch_conv import WinogradConv2d
    from megasim.workloads.problem import ConvProblem
    conv = WinogradConv2d(8, 8, 3, padding=1, bias=False, cache_path=args.choices).cuda()
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = conv.weight.detach()
    run = prepare_conv2d(ConvProblem(1, 8, 8, 8, 8), cache_path=args.choices)
    out = torch.empty(1, 8, 8, 8, device="cuda")
    with torch.no_grad():
        costs = {"module_forward_us": host_cost_us(torch, lambda: conv(x)),
                 "prepared_call_us": host_cost_us(torch, lambda: run(x, w, out)),
                 "prepared_call_new_output_us": host_cost_us(torch, lambda: run(x, w)),
                 "torch_conv2d_us": host_cost_us(torch, lambda: torch.nn.functional.conv2d(x, w, padding=1))}
        # a CUDA graph of the module's forward, replayed on new input
        static_x = x.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            conv(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = conv(static_x)
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.cuda.synchronize()
        costs["cuda_graph_replay_equal"] = bool(torch.equal(static_y, conv(static_x)))
    costs["launches_per_call"] = sum(1 for f in run._filter_only if not f)      # the filter unchanged
    costs["launches_per_call_new_filter"] = len(run._launches)
    costs["plan"] = f"{run.plan.schedule} {run.plan.param_string()}"
    # where the module's time goes: its launches alone (pointers patched, filter transform skipped: one CUDA
    # graph, or the launches one by one with graphs off), one launch, and torch's allocation of the output
    xp, wp, yp = x.data_ptr(), w.data_ptr(), out.data_ptr()
    launcher = run.launcher
    raw = run._launches[-1].raw()
    graphs = [g for g in (run._graphs or ()) if g is not None]
    stream = torch.cuda.current_stream().cuda_stream
    with torch.no_grad():
        costs["launches_only_us"] = host_cost_us(torch, lambda: launcher(xp, wp, yp, w, 0)) if launcher else None
        costs["one_launch_us"] = host_cost_us(torch, lambda: raw[0](0)) if raw else None
        alloc = {"torch.empty(shape, dtype, device, memory_format)":
                 lambda: torch.empty((1, 8, 8, 8), dtype=torch.float32, device=x.device,
                                     memory_format=torch.contiguous_format),
                 "torch.empty(shape, dtype, device)":
                 lambda: torch.empty((1, 8, 8, 8), dtype=torch.float32, device=x.device),
                 "x.new_empty(shape)": lambda: x.new_empty((1, 8, 8, 8)),
                 "torch.empty_like(x)": lambda: torch.empty_like(x)}
        costs["alloc_us"] = {k: round(host_cost_us(torch, fn), 3) for k, fn in alloc.items()}
        costs["torch_empty_us"] = costs["alloc_us"]["torch.empty(shape, dtype, device)"]
        costs["graphs"] = [{"captures": g.captures, "kept": len(g.graphs), "enabled": g.enabled} for g in graphs]
        y_graph = conv(x)
        if graphs and graphs[-1].graphs:
            key = next(iter(graphs[-1].graphs))
            costs["one_graph_launch_us"] = host_cost_us(torch, lambda: graphs[-1].launch(key, stream))
        # the same calls with the CUDA graphs off: the launches one by one
        for g in graphs:
            g.enabled = False
            g.clear()
        y_direct = conv(x)
        costs["graph_output_equal_direct"] = bool(torch.equal(y_graph, y_direct))
        costs["module_forward_no_graph_us"] = host_cost_us(torch, lambda: conv(x))
        costs["launches_only_no_graph_us"] = host_cost_us(torch, lambda: launcher(xp, wp, yp, w, 0)) if launcher else None
        for g in graphs:
            g.enabled = True
    return costs


def format_table(rows: list[dict]) -> str:
    head = f"{'layer':<11} {'sched':<9} {'m':>2} {'harness':>9} {'user':>9} {'cuDNN':>9} {'user/h':>7} {'cuDNN/user':>10} {'rel_err':>8}"
    lines = [head]
    for r in rows:
        lines.append(f"{r['layer']:<11} {r['schedule']:<9} {r['tile']:>2} {r['harness_ms']:>9.4f} {r['user_ms']:>9.4f} "
                     f"{r['torch_cudnn_ms']:>9.4f} {r['user_over_harness']:>7.3f} {r['cudnn_over_user']:>10.3f} {r['rel_err']:>8}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from megasim.workloads.catalogue import TABLE2_NAMES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--choices", default=None, help="choice cache (JSON) to read and extend")
    ap.add_argument("--out", default=None, help="results folder (default experiments/results/<device>/)")
    args = ap.parse_args(argv)
    if args.repeats < 20:
        ap.error(f"--repeats {args.repeats}: at least 20")
    from megasim.workloads.catalogue import parse_layer
    for name in args.layers:
        parse_layer(name, batch=args.batch)          # a bad name fails here, before any GPU work
    import torch
    from numba import cuda

    from experiments.benchmarks.winograd_bench import device_meta
    flags = fp32_flags(torch)
    dmeta = device_meta(torch, cuda)
    out = Path(args.out) if args.out else REPO / "experiments" / "results" / device_dir(dmeta["device"])
    rows = []
    for name in args.layers:
        rows.append(bench_layer(torch, name, args.batch, args))
        print(format_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    costs = host_costs(torch, args)
    gm = lambda key: math.exp(statistics.fmean(math.log(r[key]) for r in rows))  # noqa: E731
    summary = {"geomean_cudnn_over_user": round(gm("cudnn_over_user"), 4),
               "geomean_user_over_harness": round(gm("user_over_harness"), 4),
               "max_user_over_harness": max(r["user_over_harness"] for r in rows),
               "max_rel_err": max(float(r["rel_err"]) for r in rows)}
    meta = provenance({"device": dmeta, "torch_flags": flags, "batch": args.batch, "layers": args.layers,
                       "host_costs": costs,
                       "summary": summary, "choices_file": args.choices})
    write_results(rows, out, NAME, meta)
    print(format_table(rows))
    print(f"host cost per call (tiny layer): {costs}")
    print(f"summary: {summary}")
    print(f"wrote {out / (NAME + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
