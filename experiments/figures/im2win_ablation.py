"""The im2win paper's Fig. 4 on our GPU: per layer, the time of each ablation variant relative to im2win
(Alg. 3 at its default tile), measured, with the model's predicted ratio marked.

From: a bench result (``experiments.benchmarks.im2win_bench``'s CSV, default
``experiments/results/nvidia-h200/im2win_bench.csv``: ``im2win`` and ``im2win_basic``,
``im2win_no_microkernel``, ``im2win_no_vector``, ``im2win_no_prefetch``) and the model
(``megasim.plan.predict`` of the ``im2win`` plug-in under each ``variant``, the plans of its
``validation_plans``: the default tile, and for ``no_microkernel`` the bench's 32 x 32 tile with 1 x 1
register tiles) on a spec (default ``experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json``:
``megasim/hardware/calibrated/h200.json`` with the im2win kinds fitted on the H200 from each kernel timed
alone on calibration problems that are not these layers: ``im2win_transform``, ``im2win_conv``,
``im2win_conv@m64`` and one ``im2win_conv@VARIANT`` per variant). No GPU is used. The rows are also the model's validation: every
(layer, batch, variant) point's ``time_error`` (predicted / measured - 1; ``time_errors`` summarises).

Produces ``DIR/im2win_ablation.csv`` + ``.json`` (per layer, batch and variant: measured and predicted
time and time / im2win's, with provenance) and ``DIR/im2win_ablation.png`` / ``.pdf`` (one panel per
batch, log scale: bars measured ratios, black markers the model's), drawn from that CSV alone. About
15 s on 2 shared cores (conv4's basic variant at batch 128 is 437,120 tasks); ``--plot-only``: 2 s.

    python -m experiments.figures.im2win_ablation [--bench CSV] [--spec FILE] [--out DIR]
    python -m experiments.figures.im2win_ablation --plot-only [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

DEFAULT_DIR = Path("experiments/results/nvidia-h200")
DEFAULT_SPEC = Path("experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json")
NAME = "im2win_ablation"
BASE = "im2win"
VARIANTS = {"im2win_basic": "basic", "im2win_no_microkernel": "no_microkernel", "im2win_no_vector": "no_vector",
            "im2win_no_prefetch": "no_prefetch"}      # bench impl -> the plug-in's variant


def relative_times(times_ms: dict[tuple[str, int, str], float], base: str = BASE) -> dict[tuple[str, int, str], float]:
    """(layer, batch, impl) -> time / the base impl's time at the same (layer, batch); points without a
    positive base time are left out, and so is the base itself."""
    out = {}
    for (layer, batch, impl), t in times_ms.items():
        ref = times_ms.get((layer, batch, base))
        if impl != base and ref and ref > 0 and t is not None and math.isfinite(t):
            out[(layer, batch, impl)] = t / ref
    return out


def geomean(values) -> float:
    """Geometric mean of positive numbers (nan for none)."""
    vals = [float(v) for v in values]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")


def ablation_rows(bench_csv: Path, spec_path: Path) -> list[dict]:
    """Measured and predicted times of im2win and its variants at every (layer, batch) of the bench."""
    from experiments.provenance import read_rows
    from megasim.algorithms.registry import get_algorithm
    from megasim.hardware.files import load_spec
    from megasim.plan import predict
    from megasim.workloads import parse_layer
    spec = load_spec(spec_path)
    algo = get_algorithm("im2win")
    impls = {BASE: "optimized", **VARIANTS}
    bench = {(r["layer"], int(r["batch"]), r["impl"]): r for r in read_rows(bench_csv) if r["impl"] in impls}
    measured = {k: float(r["median_ms"]) for k, r in bench.items() if r.get("status", "ok") == "ok"}
    predicted, params = {}, {}
    for layer, batch in sorted({(k[0], k[1]) for k in bench}):
        problem = parse_layer(f"im2win/{layer}", batch=batch)
        plans = dict(algo.validation_plans(problem, len(impls)))      # variant -> Plan
        for impl, variant in impls.items():
            result, plan = predict(problem, spec, plans[variant])
            predicted[(layer, batch, impl)] = plan.algo.time_us(result) / 1e3
            params[(layer, batch, impl)] = plan.param_string()
    meas_ratio, pred_ratio = relative_times(measured), relative_times(predicted)
    rows = []
    for key in sorted(predicted, key=lambda k: (int(k[0][4:]), -k[1], list(impls).index(k[2]))):
        layer, batch, impl = key
        rows.append({"layer": layer, "batch": batch, "impl": impl, "variant": impls[impl], "params": params[key],
                     "measured_ms": measured.get(key, ""), "predicted_ms": predicted[key],
                     "time_error": predicted[key] / measured[key] - 1 if measured.get(key) else "",
                     "measured_over_im2win": meas_ratio.get(key, 1.0 if impl == BASE else ""),
                     "predicted_over_im2win": pred_ratio.get(key, 1.0 if impl == BASE else "")})
    return rows


def summary(rows: list[dict]) -> dict[tuple[int, str], tuple[float, float]]:
    """(batch, impl) -> (geometric mean over layers of the measured ratio, of the predicted ratio)."""
    out = {}
    for batch in sorted({int(r["batch"]) for r in rows}, reverse=True):
        for impl in VARIANTS:
            sel = [r for r in rows if int(r["batch"]) == batch and r["impl"] == impl
                   and r["measured_over_im2win"] not in ("", None)]
            if sel:
                out[(batch, impl)] = (geomean(float(r["measured_over_im2win"]) for r in sel),
                                      geomean(float(r["predicted_over_im2win"]) for r in sel))
    return out


def time_errors(rows: list[dict]) -> dict[str, tuple[float, float, int]]:
    """Per variant and over all: (mean abs relative time error, max abs, points) of predicted against
    measured time, over every (layer, batch) with a measurement."""
    out = {}
    groups = {"all": rows, **{r["variant"]: [q for q in rows if q["variant"] == r["variant"]] for r in rows}}
    for name, sel in groups.items():
        errs = [abs(float(r["time_error"])) for r in sel if r.get("time_error") not in ("", None)]
        if errs:
            out[name] = (sum(errs) / len(errs), max(errs), len(errs))
    return out


def plot(csv_path: Path, out_dir: Path) -> Path:
    from experiments.figures import style
    from experiments.provenance import read_rows
    rows = read_rows(csv_path)
    batches = sorted({int(r["batch"]) for r in rows}, reverse=True)
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    style.apply()
    fig, axes = style.plt.subplots(len(batches), 1, figsize=(9.0, 3.0 * len(batches)), squeeze=False)
    x = np.arange(len(layers))
    width = 0.85 / len(VARIANTS)
    for ax, batch in zip(axes[:, 0], batches):
        cell = {(r["layer"], r["impl"]): r for r in rows if int(r["batch"]) == batch}

        def col(impl, name):
            return [float(cell[(lay, impl)][name]) if (lay, impl) in cell and cell[(lay, impl)][name] != "" else np.nan
                    for lay in layers]
        for j, impl in enumerate(VARIANTS):
            xs = x - 0.425 + (j + 0.5) * width
            ax.bar(xs, col(impl, "measured_over_im2win"), width, color=style.OKABE_ITO[j % len(style.OKABE_ITO)],
                   label=f"{impl.removeprefix('im2win_')}, measured")
            ax.scatter(xs, col(impl, "predicted_over_im2win"), marker="_", s=60, color="black", zorder=3,
                       label="model (calibrated variant costs)" if j == 0 else None)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylim(0.25, 200)
        ax.set_xticks(x, layers)
        ax.set_ylabel("time / im2win's")
        ax.set_title(f"batch {batch}: ablation, time relative to im2win (bars: measured; markers: model)")
        ax.legend(fontsize=6, ncol=5, loc="upper left")
    fig.text(0.01, 0.0, "Model: each variant priced by its own im2win_conv@VARIANT cost, fitted on the variant's kernel timed "
             "alone on 14 calibration problems that are not these layers\n(megasim.algorithms.im2win.calibration); "
             "the transform by im2win_transform's.", fontsize=6, va="top")
    fig.tight_layout()
    png, _ = style.save_figure(fig, out_dir, NAME)
    return png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=DEFAULT_DIR / "im2win_bench.csv")
    ap.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args(argv)
    from experiments.provenance import read_rows
    csv_path = args.out / f"{NAME}.csv"
    if not args.plot_only:
        from experiments.provenance import provenance, write_results
        rows = ablation_rows(args.bench, args.spec)
        csv_path, _ = write_results(rows, args.out, NAME, provenance({"bench": str(args.bench), "gpu_spec": str(args.spec)}))
    for (batch, impl), (meas, pred) in summary(read_rows(csv_path)).items():
        print(f"batch {batch} {impl}: measured {meas:.2f}x, predicted {pred:.2f}x im2win's time (geomean)")
    for name, (mean, worst, n) in time_errors(read_rows(csv_path)).items():
        print(f"time error, {name}: mean abs {100 * mean:.1f}%, max {100 * worst:.1f}% over {n} points")
    png = plot(csv_path, args.out)
    print(f"wrote {csv_path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
