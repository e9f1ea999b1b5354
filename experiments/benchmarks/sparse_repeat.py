"""Are the measured ECR/dense crossovers reproducible? The same sweep timed more than once, side by side.

Reads several ``experiments.benchmarks.sparse_bench`` CSVs of the same sweep (same seeded maps and weights: a repeat
on one GPU, or the same sweep on another GPU) and, per layer, batch and zero pattern, computes the
measured ECR-over-dense crossover in each (first crossing and sustained, ``experiments.studies.sparse_model.sparse_validate``),
the largest run-to-run difference of the kernel times, and the model's crossover from a
``sparse_validation.csv`` (its ``predicted_us``). And how well conditioned the sustained crossover is:
``tolerance_ecr_slower`` / ``_faster``, the smallest error of ECR's time relative to the dense twin's
(one factor 1 + e or 1 - e at every sparsity) that moves the first run's sustained crossover by more
than 10% (or removes it); a model must predict the ratio of the two times that well, in that direction,
for its crossover to land within 10%. Prints a table;
writes DIR/sparse_repeat.csv and .json.

    python -m experiments.benchmarks.sparse_repeat --runs H200=a.csv H100a=b.csv H100b=c.csv \
        --predicted experiments/results/nvidia-h200/sparse/sparse_validation.csv --out DIR
"""

from __future__ import annotations

import argparse

from experiments.provenance import provenance, write_results
from experiments.provenance import read_rows
from experiments.studies.sparse_model.sparse_validate import case_times, crossover, sustained_crossover

NAME = "sparse_repeat"
TOLERANCE_SHIFT = 0.10      # the crossover's relative shift the tolerance is computed for


def tolerance(sparsities, ecr, direct, sign: float, shift: float = TOLERANCE_SHIFT) -> float | None:
    """The smallest e >= 0 such that ECR's times scaled by 1 + sign * e (sign +1: ECR slower, -1: faster)
    move the sustained crossover by more than `shift` (relative) or remove it; found on a 0.1% grid up
    to 50% (None: no crossover, or it holds up to 50%)."""
    x0 = sustained_crossover(sparsities, ecr, direct)
    if x0 is None or x0 <= 0:
        return None
    for step in range(1, 501):
        e = step / 1000.0
        x = sustained_crossover(sparsities, [t * (1.0 + sign * e) for t in ecr], direct)
        if x is None or abs(x - x0) > shift * x0:
            return e
    return None


def compare(runs: dict[str, dict], predicted: dict | None) -> list[dict]:
    """One row per (layer, batch, pattern) present in every run."""
    names = list(runs)
    first = runs[names[0]]
    keys = sorted({k[:3] for k in first if k[3] == "ecr"})
    rows = []
    for layer, batch, pattern in keys:
        ss = sorted(k[4] for k in first if k[:4] == (layer, batch, pattern, "ecr"))
        if any((layer, batch, pattern, op, s) not in m for m in runs.values() for op in ("ecr", "direct") for s in ss):
            continue
        row = {"layer": layer, "batch": batch, "pattern": pattern}
        for name, m in runs.items():
            ecr = [m[(layer, batch, pattern, "ecr", s)] for s in ss]
            direct = [m[(layer, batch, pattern, "direct", s)] for s in ss]
            row[f"first_{name}"] = crossover(ss, ecr, direct)
            row[f"sustained_{name}"] = sustained_crossover(ss, ecr, direct)
            if name == names[0]:
                row["tolerance_ecr_slower"] = tolerance(ss, ecr, direct, +1.0)
                row["tolerance_ecr_faster"] = tolerance(ss, ecr, direct, -1.0)
        if predicted is not None and all((layer, batch, pattern, op, s) in predicted for op in ("ecr", "direct") for s in ss):
            ecr = [predicted[(layer, batch, pattern, "ecr", s)] for s in ss]
            direct = [predicted[(layer, batch, pattern, "direct", s)] for s in ss]
            row["first_predicted"] = crossover(ss, ecr, direct)
            row["sustained_predicted"] = sustained_crossover(ss, ecr, direct)
        for op in ("ecr", "direct"):
            spread = 0.0
            for s in ss:
                values = [m[(layer, batch, pattern, op, s)] for m in runs.values()]
                spread = max(spread, max(values) / min(values) - 1.0)
            row[f"max_spread_{op}"] = spread
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", required=True, metavar="NAME=CSV", help="sparse_bench CSVs, two or more")
    ap.add_argument("--predicted", default=None, help="a sparse_validation.csv (predicted_us)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    runs = {}
    for item in args.runs:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            ap.error(f"--runs item {item!r} is not allowed: write NAME=CSV")
        runs[name] = case_times(read_rows(path), "median_ms", 1e3)
    if len(runs) < 2:
        ap.error("--runs needs at least two runs")
    predicted = case_times(read_rows(args.predicted), "predicted_us") if args.predicted else None
    rows = compare(runs, predicted)
    cols = [*runs, *(["predicted"] if predicted is not None else [])]

    def fmt(v):
        return "  -  " if v is None else f"{v:5.2f}"
    print(f"{'layer':15s} {'b':>2s} {'pattern':9s} | first: {' '.join(f'{c:>5s}' for c in cols)} | "
          f"sustained: {' '.join(f'{c:>5s}' for c in cols)} | spread ecr / direct | tolerance slower / faster")
    for r in rows:
        print(f"{r['layer']:15s} {r['batch']:2d} {r['pattern']:9s} | {' '.join(fmt(r.get('first_' + c)) for c in cols)} | "
              f"{' '.join(fmt(r.get('sustained_' + c)) for c in cols)} | "
              f"{r['max_spread_ecr']:.1%} / {r['max_spread_direct']:.1%} | "
              + " / ".join("  -" if r[k] is None else f"{r[k]:.1%}" for k in ("tolerance_ecr_slower", "tolerance_ecr_faster")))
    write_results(rows, args.out, NAME, {**provenance(), "runs": dict(item.partition("=")[::2] for item in args.runs),
                                         "predicted": args.predicted})
    return rows


if __name__ == "__main__":
    main()
