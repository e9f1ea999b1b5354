"""Choosing among algorithms on the im2win layers where Winograd applies too: the model's ranking per layer
of im2win, Winograd fused and Winograd non-fused, with the measured im2win times beside it.

Layers: the catalogue's im2win layers with a 3 x 3 filter and stride 1 (``winograd_layers``:
``im2win/conv6`` ... ``conv12``, all with padding 0, which the Winograd lowering takes as a problem
parameter), at batch 128 and 64. Spec: ``megasim/hardware/calibrated/h100_from_h200.json`` for all three
(the H100's measured peak, bandwidth and L2 with the H200's fitted Winograd costs, and the im2win kinds
fitted there from the im2win kernels timed alone, ``megasim.algorithms.im2win.calibration``).

- ``im2win``: the plug-in's default tile (the rule of ``tiling.default_m_b``: what the bench's ``im2win``
  row ran), ``megasim.plan.predict``.
- ``winograd_fused`` / ``winograd_nonfused``: the fastest predicted candidate of that schedule among
  ``megasim.algorithms.winograd.choice.candidates`` (layout NHWC, which offers both schedules: the
  non-fused pipeline at each tile F(2..7), the fused megakernel at Algorithm 1's recommended mapping
  with 2 or 4 pairs per transform thread; tiles within the default error bar of 5e-5).

A layer whose tasks exceed ``--max-tasks`` is simulated at the largest batch that fits and its time
scaled by the batch ratio (``simulated_batch`` says which; Winograd's candidates use ``choice``'s own
rule and bound, ``CHOICE_MAX_TASKS`` = 1,000,000). Measured (from ``--bench``, default
``experiments/results/nvidia-h100/im2win_bench.csv``): ``im2win`` (default tile), ``winograd_fused`` and
``winograd_nonfused`` (our kernels, prepared, at the plan the bench names in ``detail``), ``im2win_tuned``
and cuDNN's best FP32 (its algorithm named). Per (layer, batch): ``measured_fastest`` of the three
measured algorithms, ``choice_regret`` (the measured time of the model's choice over the fastest's, minus
1) and ``choice_ok`` (regret <= ``CHOICE_TOLERANCE``, the issue's 5%).

The bench's Winograd rows need not be the plans the model ranked: a bench run whose ``detail`` gives no
D_IG, D_GO and M ran the fused schedule at ``megasim.plan.build``'s tightest mapping (before
``prepare_conv2d`` took Algorithm 1's recommended one). So each Winograd row also carries
``measured_params`` (the plan that ran) and ``predicted_measured_plan_ms`` (the model's time for exactly
that plan, at the same simulated batch), and ``choice_on_measured`` / ``regret_on_measured`` /
``ok_on_measured`` are the model's choice among the three plans that were measured, judged the same way.

Produces ``experiments/results/model/algorithm_choice/algorithm_choice.csv`` + ``.json`` (one row per
layer, batch and algorithm: predicted time, rank, the measured references; provenance) and
``algorithm_choice.png`` / ``.pdf`` beside them, drawn from that CSV alone. About 3 minutes on 2 shared
cores; ``--plot-only``: 2 s.

    python -m experiments.figures.algorithm_choice [--bench CSV] [--spec FILE] [--batch 128 64] [--out DIR]
    python -m experiments.figures.algorithm_choice --plot-only [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path("experiments/results/model/algorithm_choice")
DEFAULT_BENCH = Path("experiments/results/nvidia-h100/im2win_bench.csv")
DEFAULT_SPEC = Path("megasim/hardware/calibrated/h100_from_h200.json")
NAME = "algorithm_choice"
ALGORITHMS = ("im2win", "winograd_fused", "winograd_nonfused")
MAX_TASKS = 500_000
MEASURED = ("im2win", "im2win_tuned", "cudnn_best_fp32", "winograd_fused", "winograd_nonfused")
CHOICE_TOLERANCE = 0.05     # the bar: the model's choice measured within 5% of the measured fastest


def winograd_layers(problems) -> list:
    """The problems Winograd F(m x m, 3 x 3) applies to: a 3 x 3 filter at stride 1 (any padding)."""
    return [p for p in problems if (p.r, p.s) == (3, 3) and p.stride == 1]


def rank(times: dict[str, float]) -> dict[str, int]:
    """name -> 1-based rank by time (fastest 1); equal times keep the order of ``times``."""
    order = sorted(times, key=lambda name: (times[name], list(times).index(name)))
    return {name: i + 1 for i, name in enumerate(order)}


def best_by_schedule(candidates) -> dict[str, object]:
    """schedule -> the fastest candidate (``.plan.schedule``, ``.predicted_us``) of that schedule; the
    first of equal times."""
    best: dict[str, object] = {}
    for c in candidates:
        s = c.plan.schedule
        if s not in best or c.predicted_us < best[s].predicted_us:
            best[s] = c
    return best


def fitting_batch(tasks_at_batch_1: int, batch: int, max_tasks: int) -> int:
    """The largest batch <= ``batch`` whose estimated tasks (``tasks_at_batch_1`` per image) fit ``max_tasks``
    (at least 1)."""
    return max(1, min(batch, max_tasks // max(1, tasks_at_batch_1)))


def _predict_im2win(problem, spec, max_tasks: int):
    """(predicted ms at the problem's batch, simulated batch, params) of im2win at its default tile."""
    from megasim.plan import Plan, estimate_tasks, predict
    plan = Plan(algorithm="im2win")
    batch = fitting_batch(estimate_tasks(problem.with_batch(1), plan) or 1, problem.n, max_tasks)
    result, resolved = predict(problem.with_batch(batch), spec, plan, max_tasks=max_tasks)
    return resolved.algo.time_us(result) * problem.n / batch / 1e3, batch, resolved.param_string()


def measured_plan(detail: str):
    """The Plan a bench Winograd row ran: its ``detail`` is "SCHEDULE PARAMS (prepared, NHWC)"."""
    from megasim.plan import Plan
    schedule, params = detail.split(" ", 2)[:2]
    return Plan.parse(schedule, params, algorithm="winograd")


def _predict_plan_ms(problem, spec, plan, batch: int) -> float:
    """The model's time of ``plan`` on ``problem`` (ms), simulated at ``batch`` and scaled to the problem's."""
    from megasim.plan import predict, predicted_time_us
    result, resolved = predict(problem.with_batch(batch), spec, plan)
    return predicted_time_us(result, resolved) * problem.n / batch / 1e3


def bench_device(bench_csv: Path) -> str:
    """The device the bench ran on (its JSON's meta), short ("H200"), or "GPU" where the JSON does not say."""
    import json
    try:
        meta = json.loads(bench_csv.with_suffix(".json").read_text()).get("meta", {})
    except (OSError, ValueError):
        return "GPU"
    name = str(meta.get("device") or "GPU")
    return name.removeprefix("NVIDIA ").split()[0] if name != "GPU" else name


def choice_rows(bench_csv: Path, spec_path: Path, batches: list[int], max_tasks: int) -> list[dict]:
    from experiments.provenance import read_rows
    from megasim.algorithms.winograd.choice import choose
    from megasim.hardware.files import load_spec
    from megasim.workloads import parse_layer
    from megasim.workloads.catalogue import network_layers
    spec = load_spec(spec_path)
    device = bench_device(bench_csv)
    bench = {(r["layer"], int(r["batch"]), r["impl"]): r for r in read_rows(bench_csv) if r["impl"] in MEASURED}
    layers = [p.name for p in winograd_layers(network_layers("im2win"))]
    rows = []
    for name in layers:
        short = name.split("/", 1)[1]
        for batch in batches:
            problem = parse_layer(name, batch=batch)
            predicted, sim_batch, params = {}, {}, {}
            predicted["im2win"], sim_batch["im2win"], params["im2win"] = _predict_im2win(problem, spec, max_tasks)
            choice = choose(problem, spec, layout="NHWC", spec_reason=f"calibrated spec {spec_path}")
            for schedule, c in best_by_schedule(choice.candidates).items():
                if schedule in ("fused", "nonfused"):
                    key = f"winograd_{schedule}"
                    predicted[key], sim_batch[key] = c.predicted_us / 1e3, choice.simulated_batch
                    params[key] = f"{schedule} {c.plan.param_string()}"
            ranks = rank({a: predicted[a] for a in ALGORITHMS})
            best = min(predicted[a] for a in ALGORITHMS)

            def measured(impl, field="median_ms"):
                r = bench.get((short, batch, impl))
                return r[field] if r is not None and r.get("status", "ok") == "ok" else ""
            meas = {a: measured(a) for a in ALGORITHMS}
            known = {a: float(t) for a, t in meas.items() if t != ""}
            choice = min(ranks, key=ranks.get)
            fastest = min(known, key=known.get) if len(known) == len(ALGORITHMS) else ""
            regret = known[choice] / known[fastest] - 1 if fastest else ""
            ran = {a: measured(a, "detail") for a in ALGORITHMS if a != "im2win"}
            on_measured = {"im2win": predicted["im2win"]}
            for a, detail in ran.items():
                if detail:
                    on_measured[a] = _predict_plan_ms(problem, spec, measured_plan(detail), sim_batch[a])
            pick = min(on_measured, key=on_measured.get) if len(on_measured) == len(ALGORITHMS) else ""
            regret_measured = known[pick] / known[fastest] - 1 if pick and fastest else ""
            for algo in ALGORITHMS:
                rows.append({"layer": short, "batch": batch, "algorithm": algo, "params": params[algo],
                             "predicted_ms": predicted[algo], "simulated_batch": sim_batch[algo],
                             "rank": ranks[algo], "predicted_over_fastest": predicted[algo] / best,
                             "model_choice": choice, "measured_ms": meas[algo],
                             "measured_note": f"im2win bench, {device}: the default tile" if algo == "im2win" else
                             f"im2win bench, {device}: our kernels, prepared, NHWC, at measured_params",
                             "measured_params": "" if algo == "im2win" else ran.get(algo, "").replace(" (prepared, NHWC)", ""),
                             "predicted_measured_plan_ms": on_measured.get(algo, ""),
                             "measured_fastest": fastest, "choice_regret": regret,
                             "choice_ok": (regret <= CHOICE_TOLERANCE) if fastest else "",
                             "choice_on_measured": pick, "regret_on_measured": regret_measured,
                             "ok_on_measured": (regret_measured <= CHOICE_TOLERANCE) if regret_measured != "" else "",
                             "measured_im2win_tuned_ms": measured("im2win_tuned"),
                             "measured_cudnn_best_ms": measured("cudnn_best_fp32"),
                             "cudnn_best_algo": measured("cudnn_best_fp32", "detail")})
    return rows


def plot(csv_path: Path, out_dir: Path) -> Path:
    from experiments.figures import style
    from experiments.provenance import read_rows
    rows = read_rows(csv_path)
    device = rows[0]["measured_note"].split(",")[0].removeprefix("im2win bench").strip() or "GPU" if rows else "GPU"
    batches = sorted({int(r["batch"]) for r in rows}, reverse=True)
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    style.apply()
    fig, axes = style.plt.subplots(len(batches), 1, figsize=(8.0, 3.2 * len(batches)), squeeze=False)
    x = np.arange(len(layers))
    series = [("predicted", a) for a in ALGORITHMS] + [("measured", a) for a in ALGORITHMS] + \
        [("measured", "cudnn_best_fp32")]
    width = 0.85 / len(series)
    for ax, batch in zip(axes[:, 0], batches):
        cell = {(r["layer"], r["algorithm"]): r for r in rows if int(r["batch"]) == batch}

        def value(layer, kind, name):
            if kind == "predicted":
                r = cell.get((layer, name))
                return float(r["predicted_ms"]) if r else np.nan
            if name == "cudnn_best_fp32":
                r, field = cell.get((layer, "im2win")), "measured_cudnn_best_ms"
            else:
                r, field = cell.get((layer, name)), "measured_ms"
            return float(r[field]) if r and r[field] != "" else np.nan
        for j, (kind, name) in enumerate(series):
            xs = x - 0.425 + (j + 0.5) * width
            colour = style.OKABE_ITO[(j % 3) if kind == "predicted" else (j % 3 if name != "cudnn_best_fp32" else 5)]
            ax.bar(xs, [value(lay, kind, name) for lay in layers], width, color=colour,
                   hatch="//" if kind == "predicted" else None, edgecolor="white" if kind == "predicted" else None,
                   label=f"{name}, {kind}" + (" (model)" if kind == "predicted" else f" ({device})"))
        for i, layer in enumerate(layers):
            choice = cell[(layer, ALGORITHMS[0])]["model_choice"]
            scaled: dict[int, list[str]] = {}     # simulated batch -> who (Winograd's two schedules share one)
            for a in ALGORITHMS:
                sb = int(cell[(layer, a)]["simulated_batch"])
                who = "W" if a.startswith("winograd") else a
                if sb != batch and who not in scaled.setdefault(sb, []):
                    scaled[sb].append(who)
            ok = cell[(layer, ALGORITHMS[0])].get("choice_ok", "")
            mark = {"True": " ok", "False": " MISS"}.get(str(ok), "")
            note = choice.replace("winograd_", "W-") + mark + "".join(f"\n{'+'.join(w)} sim. b={sb}"
                                                                      for sb, w in scaled.items())
            ax.annotate(note, (x[i], 1.0), xycoords=("data", "axes fraction"), ha="center", va="top", fontsize=5)
        ax.set_yscale("log")
        ax.set_xticks(x, layers)
        ax.set_ylabel("time per convolution (ms)")
        ax.set_title(f"batch {batch}: 3x3 stride-1 im2win layers (padding 0); top: the model's choice", fontsize=9)
        ax.set_ylim(top=ax.get_ylim()[1] * 6)
        ax.legend(fontsize=6, ncol=3, loc="upper left", bbox_to_anchor=(0.0, 0.9))
    fig.text(0.01, 0.0, "Hatched: predicted (megasim, the calibrated spec the JSON names, im2win kinds calibrated from kernels "
             "timed alone; Winograd: the best candidate per schedule). "
             f"Solid: measured on {device} (im2win bench; our Winograd at the plans in measured_params)."
             "\nTop: the model's choice, 'ok' when measured within 5% of the fastest of the "
             "three measured. 'W sim. b=25': Winograd (W) simulated at batch 25, its time scaled to the panel's batch.",
             fontsize=6, va="top")
    fig.tight_layout()
    png, _ = style.save_figure(fig, out_dir, NAME)
    return png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=DEFAULT_BENCH)
    ap.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    ap.add_argument("--batch", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--max-tasks", type=int, default=MAX_TASKS,
                    help="im2win: a layer with more tasks is simulated at a smaller batch")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args(argv)
    csv_path = args.out / f"{NAME}.csv"
    if not args.plot_only:
        from experiments.provenance import provenance, write_results
        rows = choice_rows(args.bench, args.spec, args.batch, args.max_tasks)
        csv_path, _ = write_results(rows, args.out, NAME, provenance({
            "bench": str(args.bench), "gpu_spec": str(args.spec), "batches": args.batch, "max_tasks_im2win": args.max_tasks,
            "winograd": "megasim.algorithms.winograd.choice.choose, layout NHWC, max_rel_err 5e-5",
            "measured_winograd": "im2win bench rows winograd_fused / winograd_nonfused (the plans in their detail)"}))
        for r in rows:
            print(f"{r['layer']:>7} b{r['batch']:<4} {r['algorithm']:<18} predicted {r['predicted_ms']:8.3f} ms "
                  f"(sim. batch {r['simulated_batch']}) rank {r['rank']}  measured {r['measured_ms'] or '-'}  "
                  f"choice {r['model_choice']} regret {r['choice_regret']}; among the measured plans "
                  f"{r['choice_on_measured']} regret {r['regret_on_measured']}")
    png = plot(csv_path, args.out)
    print(f"wrote {csv_path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
