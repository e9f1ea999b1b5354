"""The model against the GPU on ECR/PECR: predicted vs measured times and crossover sparsities.

Reads ``sparse_bench.csv`` (measured on the GPU by ``experiments.benchmarks.sparse_bench``), predicts every row of
our kernels (ecr, direct, pecr, direct_fused, unfused_ecr, unfused_direct) with megasim on a
calibrated spec (``--spec``; its sparse kinds were fitted by ``megasim calibrate-sparse`` on
calibration cases that are not VGG-19), from the same seeded input map the GPU ran on, and writes:

- ``sparse_validation.csv``: each row with ``predicted_us`` and ``measured_us``;
- ``sparse_crossover.csv``: per layer, batch and pattern, the sparsity at which ECR becomes faster than
  our dense kernel (``vs=direct``) and than cuDNN (``vs=cudnn``), measured and predicted. A crossover
  is where the time difference changes sign, interpolated linearly between the swept sparsities; the
  first swept sparsity when ECR is faster already there, empty when it never is. The cuDNN time is measured (megasim
  does not model cuDNN's kernels): the predicted crossover against cuDNN is where the *predicted* ECR
  time crosses the *measured* cuDNN time. PECR against the unfused chains the same way
  (``op=pecr``, ``vs=unfused_ecr`` / ``unfused_direct`` / ``cudnn_chain``);
- ``sparse_summary.json``: MAPE per op, and how many crossovers the model places within 10% (relative)
  and within 0.05 (absolute sparsity) of the measured one;
- figures ``sparse_speedup`` (speedup of ECR over direct and cuDNN against sparsity, measured and
  predicted, per layer) and ``sparse_pred_vs_measured``.

    python -m experiments.studies.sparse_model.sparse_validate --measured experiments/results/nvidia-h200/sparse/sparse_bench.csv \
        --spec megasim/hardware/calibrated/h200_sparse.json [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from megasim.hardware import get_gpu, load_spec
from megasim.algorithms.sparse.lowering import lower_sparse
from megasim.algorithms.sparse.tiling import PoolSpec
from megasim.sim import simulate
from megasim.algorithms.sparse.predict import kernel_us
from megasim.workloads import parse_layer
from megasim.workloads.sparse import SparsitySpec, sparse_feature_map

OUR_OPS = ("ecr", "direct", "pecr", "direct_fused", "unfused_ecr", "unfused_direct")
POOL_OPS = ("pecr", "direct_fused", "unfused_ecr", "unfused_direct")
PAIRS = (("ecr", "direct"), ("ecr", "cudnn"), ("pecr", "unfused_ecr"), ("pecr", "unfused_direct"),
         ("pecr", "cudnn_chain"), ("pecr", "direct_fused"))


def crossover(sparsities, a, b) -> float | None:
    """The smallest sparsity at which time a <= time b (linear interpolation of a - b); the first
    swept sparsity if a <= b there already (0 for the uniform sweep, 0.5 for the clustered one: "at
    or below"), None if never."""
    s = np.asarray(sparsities, float)
    d = np.asarray(a, float) - np.asarray(b, float)
    if d[0] <= 0:
        return float(s[0])
    for i in range(1, len(s)):
        if d[i] <= 0:
            return float(s[i - 1] + (s[i] - s[i - 1]) * d[i - 1] / (d[i - 1] - d[i]))
    return None


def sustained_crossover(sparsities, a, b) -> float | None:
    """The sparsity from which time a <= time b at every swept sparsity above it (linear interpolation
    across the last sign change of a - b): where a overtakes b for good. The same as ``crossover``
    when the difference changes sign once; later when a is faster at low sparsity, slower again in
    the middle and faster at the end (curves within noise of each other at low sparsity). None if a is
    slower at the highest swept sparsity."""
    s = np.asarray(sparsities, float)
    d = np.asarray(a, float) - np.asarray(b, float)
    slower = np.flatnonzero(d > 0)
    if slower.size == 0:
        return float(s[0])
    i = int(slower[-1])
    if i == len(s) - 1:
        return None
    return float(s[i] + (s[i + 1] - s[i]) * d[i] / (d[i] - d[i + 1]))


def _predict_group(job) -> list[dict]:
    """The rows of one (layer, batch, sparsity, pattern, seed): one map, every op predicted."""
    (layer, batch, s, pattern, seed), rs, spec = job
    p = parse_layer(layer, batch=batch)
    x = sparse_feature_map((p.n, p.c, p.h, p.w), SparsitySpec(s, pattern, seed=seed))
    out = []
    for r in rs:
        pool = PoolSpec(2, 2) if r["op"] in POOL_OPS else None
        k_tile = int(r["k_tile"]) if r.get("k_tile") not in (None, "") else None
        graph, schedule, _ = lower_sparse(p, r["op"], spec.sm_count, x=x, pool=pool, k_tile=k_tile)
        out.append(dict(r, predicted_us=kernel_us(simulate(graph, schedule, spec)),
                        measured_us=float(r["median_ms"]) * 1e3))
    return out


def predict_rows(rows: list[dict], spec, workers: int | None = None) -> list[dict]:
    """Adds predicted_us to the rows of our ops (one map per (layer, batch, sparsity, pattern, seed)),
    the groups spread over a Dask LocalCluster of `workers` processes (default: every core); deterministic
    either way."""
    import os

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["op"] in OUR_OPS and r.get("status", "ok") == "ok":
            groups[(r["layer"], int(r["batch"]), float(r["sparsity"]), r["pattern"], int(r["seed"]))].append(r)
    jobs = [(key, rs, spec) for key, rs in groups.items()]
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(jobs) <= 1:
        return [row for job in jobs for row in _predict_group(job)]
    from megasim.sweep.cluster import client_map, open_client
    with open_client(workers=workers) as client:
        return [row for part in client_map(client)(_predict_group, jobs) for row in part]


def case_times(rows: list[dict], column: str, scale: float = 1.0) -> dict[tuple, float]:
    """{(layer, batch, pattern, op, sparsity): float(row[column]) * scale} over the rows whose status
    (if any) is ok."""
    return {(r["layer"], int(r["batch"]), r["pattern"], r["op"], float(r["sparsity"])): float(r[column]) * scale
            for r in rows if r.get("status", "ok") == "ok"}


def crossovers(measured: list[dict], predicted: list[dict]) -> list[dict]:
    meas = case_times(measured, "median_ms", 1e3)
    pred = case_times(predicted, "predicted_us")
    keys = sorted({k[:3] for k in meas})
    out = []
    for layer, batch, pattern in keys:
        for op, vs in PAIRS:
            ss = sorted(k[4] for k in meas if k[:4] == (layer, batch, pattern, op) and (layer, batch, pattern, vs, k[4]) in meas)
            if len(ss) < 2:
                continue
            m_op = [meas[(layer, batch, pattern, op, s)] for s in ss]
            m_vs = [meas[(layer, batch, pattern, vs, s)] for s in ss]
            p_op = [pred.get((layer, batch, pattern, op, s), math.nan) for s in ss]
            # Our dense kernels are predicted; cuDNN is not modelled, so its measured time stands in.
            p_vs = [pred.get((layer, batch, pattern, vs, s), math.nan) if vs in OUR_OPS
                    else meas[(layer, batch, pattern, vs, s)] for s in ss]
            m_x = crossover(ss, m_op, m_vs)
            p_x = crossover(ss, p_op, p_vs) if not any(map(math.isnan, p_op + p_vs)) else None
            m_sx = sustained_crossover(ss, m_op, m_vs)
            p_sx = sustained_crossover(ss, p_op, p_vs) if not any(map(math.isnan, p_op + p_vs)) else None
            row = {"layer": layer, "batch": batch, "pattern": pattern, "op": op, "vs": vs,
                   "measured_crossover": m_x, "predicted_crossover": p_x,
                   "measured_sustained": m_sx, "predicted_sustained": p_sx,
                   "measured_speedup_at_max": m_vs[-1] / m_op[-1], "predicted_speedup_at_max": p_vs[-1] / p_op[-1],
                   "max_sparsity": ss[-1]}
            if m_x is not None and p_x is not None:
                row["abs_error"] = abs(p_x - m_x)
                row["rel_error"] = abs(p_x - m_x) / m_x if m_x > 0 else (0.0 if p_x == 0 else math.inf)
            if m_sx is not None and p_sx is not None:
                row["sustained_rel_error"] = (abs(p_sx - m_sx) / m_sx if m_sx > 0
                                              else (0.0 if p_sx == 0 else math.inf))
            out.append(row)
    return out


def summary(predicted: list[dict], cross: list[dict]) -> dict:
    by_op: dict[str, list[float]] = defaultdict(list)
    for r in predicted:
        by_op[r["op"]].append(abs(r["predicted_us"] / r["measured_us"] - 1.0))
    out = {"mape_percent": {op: 100 * float(np.mean(v)) for op, v in by_op.items()},
           "mape_percent_all": 100 * float(np.mean([x for v in by_op.values() for x in v])) if by_op else math.nan,
           "crossovers": {}}
    for op, vs in PAIRS:
        rows = [c for c in cross if c["op"] == op and c["vs"] == vs]
        both = [c for c in rows if c["measured_crossover"] is not None and c["predicted_crossover"] is not None]
        agree_none = [c for c in rows if c["measured_crossover"] is None and c["predicted_crossover"] is None]
        sustained = [c for c in rows if c["measured_sustained"] is not None and c["predicted_sustained"] is not None]
        out["crossovers"][f"{op}_vs_{vs}"] = {
            "cases": len(rows),
            "both_found": len(both),
            "neither_found": len(agree_none),
            "one_only": len(rows) - len(both) - len(agree_none),
            "within_10pct": sum(1 for c in both if c["rel_error"] <= 0.10),
            "within_0.05": sum(1 for c in both if c["abs_error"] <= 0.05),
            "median_abs_error": float(np.median([c["abs_error"] for c in both])) if both else None,
            # The same for where op overtakes vs for good (sustained_crossover), a second reading.
            "sustained_both_found": len(sustained),
            "sustained_within_10pct": sum(1 for c in sustained if c["sustained_rel_error"] <= 0.10),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from experiments.provenance import provenance, read_rows, write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", required=True)
    ap.add_argument("--spec", default="megasim/hardware/calibrated/h200_sparse.json")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="batch 1 rows only")
    ap.add_argument("--reuse-predictions", action="store_true",
                    help="read the predictions from DIR/sparse_validation.csv instead of simulating again")
    args = ap.parse_args(argv)
    spec = load_spec(args.spec) if args.spec.endswith(".json") else get_gpu(args.spec)
    measured = read_rows(args.measured)
    if args.quick:
        measured = [r for r in measured if int(r["batch"]) == 1]
    out_dir = Path(args.out or Path(args.measured).parent)
    if args.reuse_predictions:
        predicted = [dict(r, predicted_us=float(r["predicted_us"]), measured_us=float(r["measured_us"]))
                     for r in read_rows(out_dir / "sparse_validation.csv")]
    else:
        predicted = predict_rows(measured, spec)
    cross = crossovers(measured, predicted)
    summ = summary(predicted, cross)
    meta = provenance({"measured": str(args.measured), "spec": args.spec, "gpu": spec.name})
    if not args.reuse_predictions:
        write_results(predicted, out_dir, "sparse_validation", meta)
    write_results(cross, out_dir, "sparse_crossover", meta)
    (out_dir / "sparse_summary.json").write_text(json.dumps({"meta": meta, **summ}, indent=1) + "\n")
    print(json.dumps(summ, indent=1))
    from experiments.figures.plot_sparse import plot_all
    plot_all(out_dir, args.measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
