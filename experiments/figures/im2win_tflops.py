"""The im2win paper's Fig. 2 on our GPU: TFLOPS per layer and implementation, with the model's predictions.

From: a bench result (``experiments.benchmarks.im2win_bench``'s CSV; default
``experiments/results/nvidia-h200/im2win_bench.csv``) and the model (``megasim.plan.predict`` on a spec
file, default ``experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json``, whose im2win kinds
are fitted from the kernels timed alone on the H200; or a preset with ``--gpu``) for ``im2win`` at its default
tile (and with ``math=3xtf32``, the bench's ``im2win_3xtf32``), ``im2col_gemm`` (the bench's ``im2col_cublas``)
and ``naive_direct`` (the bench's ``direct``), each kind fitted from its kernel timed alone on the calibration
problems, at every (layer, batch) of the bench, for the implementations the bench ran (a failed row: no
``measured_ms``). No GPU is used. Produces ``DIR/im2win_predictions.csv`` + ``.json`` (predicted time per
point, with provenance) and ``DIR/im2win_tflops.png`` / ``.pdf``, drawn from the two CSVs alone: bars
of measured TFLOPS (direct-convolution FLOPs / time) at one batch, predictions as black markers.
About 30 s on 2 shared cores (``--plot-only``: 2 s).

    python -m experiments.figures.im2win_tflops [--bench CSV] [--spec FILE | --gpu H100] [--batch 128] [--out DIR]
    python -m experiments.figures.im2win_tflops --plot-only [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

DEFAULT_DIR = Path("experiments/results/nvidia-h200")
DEFAULT_SPEC = Path("experiments/results/nvidia-h200/im2win_calibration/h200_im2win.json")
NAME, PRED = "im2win_tflops", "im2win_predictions"
SHOWN = ("im2win", "im2win_3xtf32", "im2win_tuned", "im2win_no_prefetch", "im2win_no_microkernel", "im2win_basic", "direct",
         "im2col_cublas", "cudnn_best_fp32")
# bench impl -> (the model's algorithm, its --param string)
MODELLED = {"im2win": ("im2win", None), "im2win_3xtf32": ("im2win", "math=3xtf32"),
            "im2col_cublas": ("im2col_gemm", None), "direct": ("naive_direct", None)}


def predict_points(bench_csv: Path, gpu: str | None, out_dir: Path, spec_path: Path = DEFAULT_SPEC) -> Path:
    from experiments.provenance import provenance, read_rows, write_results
    from megasim.hardware import get_gpu
    from megasim.hardware.files import load_spec
    from megasim.plan import Plan, predict
    from megasim.workloads import parse_layer
    spec = get_gpu(gpu) if gpu else load_spec(spec_path)
    bench = read_rows(bench_csv)
    points = sorted({(r["layer"], int(r["batch"])) for r in bench})
    impls = [i for i in MODELLED if any(r["impl"] == i for r in bench)]       # those the bench ran
    rows = []
    for layer, batch in points:
        problem = parse_layer(layer, batch=batch)
        for impl in impls:
            algo, param = MODELLED[impl]
            result, plan = predict(problem, spec, Plan.parse(None, param, algorithm=algo))
            rows.append({"layer": layer, "batch": batch, "impl": impl, "algorithm": algo,
                         "params": plan.param_string(), "predicted_ms": plan.algo.time_us(result) / 1e3,
                         "predicted_tflops": problem.direct_flops / (plan.algo.time_us(result) * 1e6),
                         "taskgraph_hash": result.taskgraph_hash})
    measured = {(r["layer"], int(r["batch"]), r["impl"]): float(r["median_ms"]) for r in bench
                if r.get("status", "ok") == "ok" and r["impl"] in MODELLED}
    for r in rows:
        m = measured.get((r["layer"], r["batch"], r["impl"]))
        r["measured_ms"] = m if m else ""
        r["time_error"] = r["predicted_ms"] / m - 1 if m else ""
    csv_path, _ = write_results(rows, out_dir, PRED, provenance({"gpu_spec": spec.name, "gpu_spec_file": None if gpu
                                                                 else str(spec_path), "bench": str(bench_csv)}))
    return csv_path


def plot(bench_csv: Path, pred_csv: Path, out_dir: Path, batch: int) -> Path:
    from experiments.figures import style
    from experiments.provenance import read_rows
    bench = [r for r in read_rows(bench_csv) if int(r["batch"]) == batch]
    pred = {(r["layer"], r["impl"]): float(r["predicted_tflops"]) for r in read_rows(pred_csv)
            if int(r["batch"]) == batch}
    layers = list(dict.fromkeys(r["layer"] for r in bench))
    impls = [i for i in SHOWN if any(r["impl"] == i for r in bench)]
    fig, ax = style.new_figure(9.0, 3.6)
    x = np.arange(len(layers))
    width = 0.85 / len(impls)
    for j, impl in enumerate(impls):
        vals = []
        for layer in layers:
            row = next((r for r in bench if r["layer"] == layer and r["impl"] == impl), None)
            ok = row is not None and row.get("status", "ok") == "ok"
            vals.append(float(row["tflops"]) if ok else np.nan)
        xs = x - 0.425 + (j + 0.5) * width
        ax.bar(xs, vals, width, label=impl, color=style.OKABE_ITO[j % len(style.OKABE_ITO)])
        if impl in MODELLED:
            ax.scatter(xs, [pred.get((layer, impl), np.nan) for layer in layers], marker="_", s=60, color="black",
                       zorder=3, label=f"model: {impl}")
    ax.set_yscale("log")
    ax.set_xticks(x, layers)
    ax.set_ylabel("TFLOP/s (direct-conv FLOPs / time)")
    ax.set_title(f"im2win and baselines, batch {batch} (measured bars; model markers)")
    ax.set_ylim(top=ax.get_ylim()[1] * 8)       # room for the legend above the bars
    ax.legend(fontsize=6, ncol=5, loc="upper left")
    png, _ = style.save_figure(fig, out_dir, NAME)
    return png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=DEFAULT_DIR / "im2win_bench.csv")
    ap.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    ap.add_argument("--gpu", default=None, help="a preset instead of --spec")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args(argv)
    pred_csv = args.out / f"{PRED}.csv"
    if not args.plot_only:
        pred_csv = predict_points(args.bench, args.gpu, args.out, args.spec)
    png = plot(args.bench, pred_csv, args.out, args.batch)
    print(f"wrote {pred_csv} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
