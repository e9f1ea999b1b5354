"""`megasim layers`, `megasim gpus`, `megasim algorithms`: what the toolkit knows, as a table or JSON.

`layers` reads only the layer catalogue and `gpus` only the preset files, so both start fast (no
NumPy engine, no SciPy); `algorithms` imports the algorithm plug-ins.
"""

from __future__ import annotations

import argparse
import json


def add_layers(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON list")


def run_layers(args: argparse.Namespace) -> int:
    from megasim.workloads import CATALOGUE
    rows = [{"name": p.name, "N": p.n, "C": p.c, "K": p.k, "H": p.h, "W": p.w, "R": p.r, "S": p.s,
             "stride": p.stride, "padding": p.padding, "gflop": p.direct_flops / 1e9}
            for p in CATALOGUE.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'layer':24s} {'N':>4s} {'C':>5s} {'K':>5s} {'HxW':>9s} {'RxS':>5s} {'str':>3s} {'pad':>3s} {'GFLOP':>8s}")
    for r in rows:
        print(f"{r['name']:24s} {r['N']:4d} {r['C']:5d} {r['K']:5d} {str(r['H']) + 'x' + str(r['W']):>9s} "
              f"{str(r['R']) + 'x' + str(r['S']):>5s} {r['stride']:3d} {r['padding']:3d} {r['gflop']:8.2f}")
    print("\nOr a free spec: N=64,C=64,K=64,H=56,W=56[,R=3,S=3,stride=1,padding=1]")
    return 0


def add_gpus(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON list")


def run_gpus(args: argparse.Namespace) -> int:
    from megasim.hardware import get_gpu, preset_names
    specs = [get_gpu(n) for n in preset_names()]
    if args.json:
        print(json.dumps([{"name": s.name, "description": s.description, "sm_count": s.sm_count,
                           "fp32_peak_gflops": s.fp32_peak_gflops, "dram_bw_gbps": s.dram_bw_gbps,
                           "l2_bytes": s.l2_bytes, "shared_mem_per_sm_bytes": s.shared_mem_per_sm_bytes}
                          for s in specs], indent=1))
        return 0
    print(f"{'gpu':8s} {'SMs':>4s} {'FP32 TFLOP/s':>12s} {'DRAM GB/s':>9s} {'L2 MB':>6s} {'smem/SM KB':>10s}  description")
    for s in specs:
        print(f"{s.name:8s} {s.sm_count:4d} {s.fp32_peak_gflops / 1e3:12.1f} {s.dram_bw_gbps:9.0f} "
              f"{s.l2_bytes / 2**20:6.1f} {s.shared_mem_per_sm_bytes / 1024:10.0f}  {s.description}")
    print("\nOr --spec FILE: a JSON spec (see megasim/hardware/presets/*.json for the format).")
    return 0


def add_algorithms(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON list")


def run_algorithms(args: argparse.Namespace) -> int:
    from megasim.algorithms import ALGORITHMS
    rows = [{"name": a.name, "summary": a.summary, "schedules": list(a.schedules), "kinds": list(a.kinds),
             "params": list(a.params_type.KEYS) + list(getattr(a.params_type, "PARSERS", {})),
             "spaces": list(a.spaces)} for a in ALGORITHMS.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['name']:13s} {r['summary']}")
        print(f"{'':13s} schedules {', '.join(r['schedules'])}; --param {', '.join(r['params']) or '(none)'}")
    return 0
