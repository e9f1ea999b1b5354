"""Where a GPU sweep worker's first unit spends its time (issue 45: the fixed cost that bounds the 4-GPU speed-up).

In a GPU validation sweep (``megasim validate --gpus``) each worker's first unit costs 5-7 s of host time against
0.1-0.8 s for the first unit of every later layer (experiments/results/nvidia-h200/validate_scaling/two_gpus/
validate_scaling_timeline.csv): a per-process cost paid in parallel by every worker, so it does not shrink with
more GPUs. This study times, in a fresh process with the kernel cache filled (as a sweep's workers see it), each
step of that first unit: the imports, the CUDA context (Numba's and torch's), and ``measure_unit`` itself under
cProfile, then a second unit of the same layer. On the GPU machine:

    bash gpu/on_device.sh python3 -m experiments.studies.worker_start.first_unit --out $OUT/first_unit.json

(first fills the kernel cache for the unit in a subprocess, then profiles a second, fresh subprocess).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import time

UNIT = ("vgg-1", 0, 4)
N_MAPPINGS = 32


def profile_fresh(top: int) -> dict:
    """This process is fresh: time each step of a sweep worker's first unit."""
    steps = {}
    t = time.perf_counter()
    import numpy  # noqa: F401
    steps["import_numpy_s"] = time.perf_counter() - t
    t = time.perf_counter()
    from numba import cuda
    steps["import_numba_cuda_s"] = time.perf_counter() - t
    t = time.perf_counter()
    import gpu.calibrate.validate as validate
    steps["import_validate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    import torch
    steps["import_torch_s"] = time.perf_counter() - t
    t = time.perf_counter()
    cuda.current_context()
    steps["numba_context_s"] = time.perf_counter() - t
    t = time.perf_counter()
    torch.cuda.init()
    torch.cuda.current_stream().synchronize()
    steps["torch_cuda_init_s"] = time.perf_counter() - t
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    validate.measure_unit(UNIT, N_MAPPINGS, repeats=30, rounds=6)
    prof.disable()
    steps["first_unit_s"] = time.perf_counter() - t
    t = time.perf_counter()
    validate.measure_unit((UNIT[0], UNIT[2], UNIT[2] + 4), N_MAPPINGS, repeats=30, rounds=6)
    steps["second_unit_s"] = time.perf_counter() - t
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return {"steps": {k: round(v, 3) for k, v in steps.items()}, "profile": out.getvalue()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="first_unit.json")
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--fresh", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fill", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.fill:
        import gpu.calibrate.validate as validate
        for start in (0, 4):
            validate.measure_unit((UNIT[0], start, start + 4), N_MAPPINGS, repeats=1, rounds=1)
        return
    if args.fresh:
        print(json.dumps(profile_fresh(args.top)))
        return
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", __spec__.name, "--fill"], check=True, capture_output=True)
    fill_s = time.perf_counter() - t
    res = subprocess.run([sys.executable, "-m", __spec__.name, "--fresh", "--top", str(args.top)], check=True,
                         capture_output=True, text=True)
    result = json.loads(res.stdout.strip().splitlines()[-1])
    result["cache_fill_s"] = round(fill_s, 3)
    from experiments.provenance import provenance
    from gpu.calibrate.validate import device_info
    result = {"meta": provenance({"device": device_info()}), **result}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result["steps"]), "cache fill", result["cache_fill_s"])
    print(result["profile"])


if __name__ == "__main__":
    main()
