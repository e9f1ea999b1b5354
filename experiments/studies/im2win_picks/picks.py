"""Does the model's optimiser pick good im2win builds? Its picks, measured against the default builds.

Per im2win bench layer (``im2win/conv1`` ... ``conv12``) at ``--batch``: ``megasim.search.optimize`` over the
im2win plug-in's default space (tile m_b, n_b, k_b, register tile m_t x n_t, and the micro-kernel's math: the
FP32 pipe or the 3xTF32 tensor-core build) on the H200's im2win spec (``SPEC``: every im2win kind fitted on its
kernel timed alone on calibration problems, never on these layers), ``--budget`` simulations, one process.
Then, on the GPU, the pick and the two default builds (FP32 and 3xTF32 at the 64 x 128 x 16 tile) are each
timed as the bench times im2win (transform + convolution, ``time_cuda_queued``, median of ``--repeats``) and
checked against torch's float64 convolution. Per layer the rows say the predicted and measured time and the
pick's measured speed-up over each default; the summary, the geometric means and the regret of the pick
against the faster default.

    python -m experiments.studies.im2win_picks.picks --predict-only --out DIR        # the picks, CPU only
    bash gpu/on_device.sh python3 -m experiments.studies.im2win_picks.picks --out $OUT # picks + measurements
    bash gpu/on_device.sh python3 -m experiments.studies.im2win_picks.picks --picks DIR/im2win_picks.csv --out $OUT

Writes DIR/im2win_picks.csv and DIR/im2win_picks.json (provenance, the summary).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

SPEC = "experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json"
LAYERS = tuple(f"im2win/conv{i}" for i in range(1, 13))
DEFAULTS = {"default_fp32": "math=fp32", "default_3xtf32": "math=3xtf32"}
TILE_KEYS = ("m_b", "n_b", "k_b", "m_t", "n_t")


def picks(batch: int, budget: int, log) -> list[dict]:
    """Per layer: the optimiser's pick and both defaults, each with its predicted time (ms)."""
    from megasim.algorithms import ALGORITHMS
    from megasim.hardware.files import load_spec
    from megasim.plan import Plan, predict
    from megasim.search import optimize
    from megasim.workloads import parse_layer
    spec = load_spec(SPEC)
    rows = []
    for layer in LAYERS:
        problem = parse_layer(layer, batch=batch)
        result = optimize(problem, spec, budget=budget, workers=1, base=Plan(algorithm="im2win"),
                          space=ALGORITHMS["im2win"].spaces["default"]())
        builds = {"pick": result.best.extras["param"], **DEFAULTS}
        for build, param in builds.items():
            res, plan = predict(problem, spec, Plan.parse(None, param, algorithm="im2win"))
            rows.append({"layer": layer.split("/")[1], "batch": batch, "build": build, "params": plan.param_string(),
                         "predicted_ms": plan.algo.time_us(res) / 1e3})
        log(f"{layer}: pick {builds['pick']}")
    return rows


def measure(rows: list[dict], repeats: int, inner: int, log) -> None:
    """Each row's build timed on the GPU (transform + conv) and checked against float64, in place."""
    import numpy as np
    import torch
    from numba import cuda

    from gpu import im2win
    from gpu.runtime.timing import time_cuda_queued
    from megasim.workloads import parse_layer
    torch.backends.cudnn.allow_tf32 = False
    for layer in dict.fromkeys(r["layer"] for r in rows):
        mine = [r for r in rows if r["layer"] == layer]
        p = parse_layer(f"im2win/{layer}", batch=mine[0]["batch"])
        rng = np.random.default_rng([7, p.n, p.c, p.k])
        xt = torch.from_numpy(rng.standard_normal((p.n, p.c, p.h, p.w), dtype=np.float32)).cuda()
        wt = torch.from_numpy(rng.standard_normal((p.k, p.c, p.r, p.s), dtype=np.float32)
                              * np.float32(math.sqrt(2 / (p.c * p.r * p.s)))).cuda()
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), stride=p.stride, padding=p.padding)
        for r in mine:
            fields = dict(kv.split("=") for kv in r["params"].split(","))
            tiles = {k: int(fields[k]) for k in TILE_KEYS}
            launch = im2win.prepare(cuda.as_cuda_array(xt), cuda.as_cuda_array(wt), p.stride, p.padding,
                                    math=fields.get("math", "fp32"), **tiles)
            launch.run()
            torch.cuda.synchronize()
            y = torch.as_tensor(launch.output, device="cuda").double()
            r["rel_err"] = float(torch.linalg.vector_norm(y - ref) / torch.linalg.vector_norm(ref))
            r["measured_ms"] = time_cuda_queued(lambda _i: launch.run(), inner=inner, warmup=1,
                                                repeats=repeats).median_ms
            r["regs"] = launch.regs_per_thread or ""
            log(f"{layer} {r['build']:15s} {r['params']:60s} predicted {r['predicted_ms']:8.3f} measured "
                f"{r['measured_ms']:8.3f} ms err {r['rel_err']:.1e}")
            del launch, y
        del xt, wt, ref
        torch.cuda.empty_cache()


def summary(rows: list[dict]) -> dict:
    """Geometric means of the pick over each default, measured and predicted, and the pick's regret against
    the faster measured default (0 where the pick is faster)."""
    out: dict = {}
    for key in ("measured_ms", "predicted_ms"):
        if not all(key in r for r in rows):
            continue
        for default in DEFAULTS:
            logs = []
            for layer in dict.fromkeys(r["layer"] for r in rows):
                t = {r["build"]: r[key] for r in rows if r["layer"] == layer}
                logs.append(math.log(t[default] / t["pick"]))
            out[f"{key.split('_')[0]}_pick_over_{default}"] = math.exp(sum(logs) / len(logs))
    if all("measured_ms" in r for r in rows):
        regrets = []
        for layer in dict.fromkeys(r["layer"] for r in rows):
            t = {r["build"]: r["measured_ms"] for r in rows if r["layer"] == layer}
            regrets.append(max(0.0, t["pick"] / min(t[d] for d in DEFAULTS) - 1))
        out["pick_regret_max"] = max(regrets)
        out["pick_regret_mean"] = sum(regrets) / len(regrets)
        out["max_rel_err"] = max(r["rel_err"] for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--inner", type=int, default=2)
    ap.add_argument("--predict-only", action="store_true")
    ap.add_argument("--picks", default=None, help="a CSV of a --predict-only run: measure its rows, no search")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from experiments.provenance import provenance, write_results
    out_dir = Path(args.out or os.environ.get("OUT") or ".")
    started = time.time()

    def log(text):
        print(f"{time.time() - started:7.1f}s {text}", flush=True)

    if args.picks:
        from experiments.provenance import read_rows
        rows = [{**r, "batch": int(r["batch"]), "predicted_ms": float(r["predicted_ms"])} for r in read_rows(args.picks)]
    else:
        rows = picks(args.batch, args.budget, log)
    meta = {**provenance(), "spec": SPEC, "batch": args.batch, "budget": args.budget, "picks_from": args.picks}
    if not args.predict_only:
        from numba import cuda

        import torch
        from experiments.benchmarks.winograd_bench import device_meta
        meta.update(device_meta(torch, cuda), repeats=args.repeats, inner=args.inner)
        measure(rows, args.repeats, args.inner, log)
    meta["summary"] = summary(rows)
    write_results(rows, out_dir, "im2win_picks", meta)
    for k, v in meta["summary"].items():
        log(f"{k}: {v:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
