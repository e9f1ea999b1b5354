"""Times each sparse/dense kernel alone on the calibration cases (the GPU half of the sparse calibration).

The cases are ``megasim.calibration.sparse.calibration_cases()``: problems that are not VGG-19
layers, ECR and PECR at sparsities 0 to 0.95, their dense twins, and ReLU and max-pool alone. Each
case's input is the seeded map the model regenerates (``SparsitySpec(sparsity, pattern, seed)``),
weights are fresh normal values; every case is checked against a float64 reference before it is
timed: kernel only, CUDA events around ``INNER`` back-to-back launches (so Numba's ~20 us host launch
cost is hidden behind the device work), median of ``--repeats``; ``single_launch_ms`` is one launch
between two events (host launch cost included), for reference. Writes ``sparse_calibration.json``
(meta + rows) to ``--out`` (default ``$OUT`` or ``experiments/results/<device>/calibration``); the fit
runs on any machine:

    bash gpu/on_device.sh python -m gpu.calibrate.sparse
    megasim calibrate-sparse --measured .../sparse_calibration.json --spec megasim/hardware/calibrated/h200_sparse.json

Only some problems, merged into an earlier run's measurements (``--problems round3`` = the round-3
problems, ``TAIL_PROBLEMS``): the run's own rows go to ``sparse_calibration.json`` as always, and
``sparse_measurements_merged.json`` holds the earlier file's meta and rows unchanged plus this run's
rows, each naming its run (``merge_measurements``); a case the earlier file already holds is refused
before anything is timed:

    bash gpu/on_device.sh python -m gpu.calibrate.sparse --problems round3 \
        --merge megasim/hardware/calibrated/h200.sparse_measurements.json --out $OUT/cal
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from pathlib import Path

import numpy as np

from megasim.calibration.sparse import merge_measurements, select_cases
from megasim.errors import MegasimError
from megasim.workloads import parse_layer
from megasim.workloads.sparse import SparsitySpec, sparse_feature_map

INNER = 10


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / scale)


def measure(repeats: int = 20, warmup: int = 3, cases: list[tuple[int, dict]] | None = None) -> tuple[list[dict], dict]:
    """Times `cases` ((index in calibration_cases(), case) pairs; default all): each case's weights
    are seeded by its index, so a case timed alone gets the weights of a full run."""
    import torch
    from numba import cuda

    from experiments.provenance import provenance
    from experiments.benchmarks.winograd_bench import device_meta
    from gpu import sparse
    from gpu.runtime.timing import time_cuda, time_cuda_queued

    rows = []
    meta = {**provenance(), **device_meta(torch, cuda), "repeats": repeats, "warmup": warmup,
            "method": f"each kernel alone, CUDA events around {INNER} back-to-back launches, median; inputs as megasim regenerates them"}
    for i, case in (select_cases() if cases is None else cases):
        p = parse_layer(case["problem"])
        x = sparse_feature_map((p.n, p.c, p.h, p.w), SparsitySpec(case["sparsity"], case["pattern"], seed=case["seed"]))
        w = np.random.default_rng(1000 + i).standard_normal((p.k, p.c, p.r, p.s)).astype(np.float32)
        pool = case["pool"]
        kw = {} if pool is None else {"pool": pool[0], "pool_stride": pool[1]}
        launch = sparse.prepare(case["op"], cuda.to_device(x), cuda.to_device(w), p.stride, p.padding, **kw,
                                k_tile=case.get("force_k_tile"))
        launch.run()
        cuda.synchronize()
        got = launch.output.copy_to_host()
        xt, wt = torch.from_numpy(x).double().cuda(), torch.from_numpy(w).double().cuda()
        ref = torch.nn.functional.conv2d(xt, wt, stride=p.stride, padding=p.padding)
        if pool is not None:
            ref = torch.nn.functional.max_pool2d(torch.relu(ref), pool[0], pool[1])
        err = _rel_err(got, ref.cpu().numpy())
        steps = launch.steps
        if case["kind"] == "relu":
            steps = steps[1:2]
        elif case["kind"] == "maxpool":
            steps = steps[2:3]
        else:
            steps = steps[:1]

        def run(_i, steps=steps):
            for fn, args in steps:
                fn(*args)

        stats = time_cuda_queued(run, inner=INNER, warmup=warmup, repeats=repeats)
        single = time_cuda(run, warmup=1, repeats=repeats)
        row = {**case, "k_tile": launch.tiling.k_tile, "median_ms": stats.median_ms, "min_ms": stats.min_ms,
               "max_ms": stats.max_ms, "single_launch_ms": single.median_ms, "rel_err": err,
               "regs": launch.regs_per_thread}
        rows.append(row)
        print(f"{case['kind']:13s} {case['problem']:28s} s={case['sparsity']:.2f} {case['pattern']:9s} "
              f"pool={pool} kt={row['k_tile']:2d} {stats.median_ms * 1e3:9.1f} us  err {err:.1e}", flush=True)
    return rows, meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--problems", nargs="+", default=None, metavar="PROBLEM",
                    help="time only the cases of these calibration problems (spec strings such as "
                         "N=1,C=264,K=496,H=40,W=40; 'round3' = the round-3 problems); default: every case")
    ap.add_argument("--merge", default=None, metavar="FILE",
                    help="an earlier run's measurements (e.g. megasim/hardware/calibrated/h200.sparse_measurements.json): "
                         "also write them with this run's rows appended to OUT/sparse_measurements_merged.json")
    args = ap.parse_args(argv)
    # Bad input fails here, in one line, before any GPU work.
    try:
        cases = select_cases(args.problems)
        base = None
        if args.merge:
            try:
                base = json.loads(Path(args.merge).read_text())
            except (OSError, json.JSONDecodeError) as err:
                raise MegasimError(f"--merge {args.merge!r} cannot be read: {err}") from None
            # Refuse now (no timing) if the earlier file already holds one of the cases.
            merge_measurements(base, {"meta": {}, "rows": [c for _, c in cases]})
    except MegasimError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows, meta = measure(args.repeats, cases=cases)
    out = Path(args.out or "experiments/results/calibration")
    out.mkdir(parents=True, exist_ok=True)
    meta["date_utc"] = meta.get("date_utc") or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if args.problems:
        meta["problems"] = args.problems
    path = out / "sparse_calibration.json"
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n")
    bad = [r for r in rows if not (r["rel_err"] <= 1e-5) or not math.isfinite(r["median_ms"])]
    print(f"wrote {path}; {len(rows)} cases, {len(bad)} failed the 1e-5 check")
    if base is not None and not bad:
        merged = out / "sparse_measurements_merged.json"
        merged.write_text(json.dumps(merge_measurements(base, {"meta": meta, "rows": rows}), indent=1, default=str) + "\n")
        print(f"wrote {merged}: {len(base['rows'])} rows of {args.merge} and this run's {len(rows)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
