"""The model's choice among the GPU bench's own sweep points, and what it costs (regret).

``experiments.benchmarks.winograd_bench`` measures the fused megakernel at the points of an Algorithm 1 sweep
(``sweep_candidates``: small, wide, or the optimiser's default space at the bench's t) and reports the
fastest. This script predicts the same points with a calibrated spec (nothing fitted here), each
layer's non-fused pipeline too, and names the model's choice per layer. Given the bench's JSON
(``--measured``), it looks each layer's choice up among the measured points: regret = the choice's
measured median / the best measured median - 1, so the model's pick is judged on exactly the
measurements the bench reports. Predictions are made before the measurements they are judged against
exist (the command is run first and its CSV committed), and are never fitted to them.

Writes DIR/bench_sweep_model.csv (a row per layer: non-fused and best predicted, the choice's
parameters; with ``--measured`` its measured time, the best measured and the regret) and
DIR/bench_sweep_model_points.csv (every point), with provenance. No GPU.

    python -m experiments.benchmarks.bench_sweep_model --spec megasim/hardware/calibrated/h200_3xtf32.json \\
        --gemm-math 3xtf32 [--size space] [--layers ...] [--workers 2] [--out DIR]      # ~10 min, 2 cores
    python -m experiments.benchmarks.bench_sweep_model ... --measured experiments/results/<device>/.../winograd_bench.json
    python -m experiments.benchmarks.bench_sweep_model ... --points DIR/bench_sweep_model_points.csv --measured FILE
        # no model run: judge committed predictions against another measured sweep (seconds)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr

from experiments.provenance import provenance, write_results
from experiments.sweeps import measure, parallel_map, print_table, spec_meta
from experiments.benchmarks.winograd_bench import read_bench_json, recorded_tile, sweep_candidates
from megasim.errors import MegasimError
from megasim.hardware import load_spec
from megasim.algorithms.winograd.lowering import GEMM_MATHS
from megasim.algorithms.winograd import WinogradParams
from megasim.plan import Plan, build
from megasim.workloads import TABLE2_NAMES, parse_layer

SPEC = "megasim/hardware/calibrated/h200_3xtf32.json"
OUT = "experiments/results/model/bench_sweep_model"


def _predict(job: tuple) -> dict[str, Any]:
    """One prediction: job = (spec_path, layer, plan)."""
    spec_path, layer, plan = job
    return {"layer": layer, **measure(parse_layer(layer), load_spec(spec_path), plan)}


def predict_layers(spec_path: str, layers: list[str], size: str, gemm_math: str, workers: int,
                   impls: dict[str, tuple[int, int | None]] | None = None) -> list[dict[str, Any]]:
    """Every layer's non-fused plan and its bench sweep points, predicted at ``impls[layer]`` = (tile, the fused
    schedule's pairs per transform thread; None: its default), default (4, None). The sweep's points are the
    bench's own: ``sweep_candidates`` of the graph at that tile and pairs."""
    jobs = []
    for layer in layers:
        tile, pairs = (impls or {}).get(layer, (4, None))
        fused = WinogradParams(gemm_math=gemm_math, tile=tile, transform_pairs_per_thread=pairs)
        graph = build(parse_layer(layer), Plan("fused", fused))[0]
        jobs.append((spec_path, layer, Plan("nonfused", WinogradParams(gemm_math=gemm_math, tile=tile))))
        jobs += [(spec_path, layer, Plan("fused", dataclasses.replace(fused, d_ig=p.d_ig, d_go=p.d_go, m=p.m)))
                 for p in sweep_candidates(graph, size)]
    return parallel_map(_predict, jobs, workers)


def bench_implementations(path: str | Path) -> dict[str, tuple[int, int | None]]:
    """Per layer: (the Winograd tile a winograd_bench run used, 4 where it recorded none; its fused schedule's pairs
    per transform thread, None where it recorded no config: the default then)."""
    meta = read_bench_json(path)["meta"]
    return {layer: (recorded_tile(info), info.get("winograd_config", {}).get("transform_pairs_per_thread"))
            for layer, info in meta["per_layer"].items()}


def measured_sweeps(path: str | Path) -> dict[str, dict[tuple[int, int, int], float]]:
    """Per layer: (D_IG, D_GO, M) -> measured median ms of the bench's ticket-dispatch sweep."""
    meta = read_bench_json(path)["meta"]
    out: dict[str, dict[tuple[int, int, int], float]] = {}
    for layer, info in meta["per_layer"].items():
        out[layer] = {(p["D_IG"], p["D_GO"], p["M"]): float(p["median_ms"]) for p in info.get("fused_sweep", [])
                      if p.get("status") == "ok"}
    return out


def summarise(points: list[dict[str, Any]], measured: dict | None) -> list[dict[str, Any]]:
    """A row per layer: the model's choice among the valid fused points; with measurements, its regret."""
    rows = []
    for layer in dict.fromkeys(p["layer"] for p in points):
        mine = [p for p in points if p["layer"] == layer and p["valid"]]
        nonfused = next(p for p in mine if p["schedule"] == "nonfused")
        fused = [p for p in mine if p["schedule"] == "fused"]
        choice = min(fused, key=lambda p: p["predicted_us"])
        row: dict[str, Any] = {
            "layer": layer, "points": len(fused), "nonfused_predicted_us": nonfused["predicted_us"],
            "choice": f"D_IG={choice['D_IG']} D_GO={choice['D_GO']} M={choice['M']}",
            "choice_predicted_us": choice["predicted_us"],
            "speedup_predicted": round(nonfused["predicted_us"] / choice["predicted_us"], 4)}
        meas = (measured or {}).get(layer)
        if meas:
            key = (choice["D_IG"], choice["D_GO"], choice["M"])
            best_key = min(meas, key=meas.get)
            pairs = [(p["predicted_us"], meas[k]) for p in fused if (k := (p["D_IG"], p["D_GO"], p["M"])) in meas]
            if len(pairs) > 2:   # how well the model orders all the measured points, and how far off it is
                pred, got = zip(*pairs)      # all equal on either side: no rank correlation (nan, not a warning)
                constant = len(set(pred)) == 1 or len(set(got)) == 1
                row["spearman"] = math.nan if constant else round(float(spearmanr(pred, got).correlation), 4)
                row["points_mape"] = round(sum(abs(u / (1e3 * ms) - 1.0) for u, ms in pairs) / len(pairs), 4)
            row.update(choice_measured_us=round(meas[key] * 1e3, 2) if key in meas else math.nan,
                       best_measured=f"D_IG={best_key[0]} D_GO={best_key[1]} M={best_key[2]}",
                       best_measured_us=round(meas[best_key] * 1e3, 2),
                       regret=round(meas[key] / meas[best_key] - 1.0, 4) if key in meas else math.nan)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--gemm-math", choices=GEMM_MATHS, default="3xtf32",
                    help="the GEMM's footprint in the model (as the bench's --config gemm_math)")
    ap.add_argument("--size", choices=("space", "deep", "small", "wide"), default="space", help="the bench's sweep")
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--measured", default=None, help="a winograd_bench JSON whose fused sweep used --size")
    ap.add_argument("--bench-tiles", action="store_true",
                    help="predict each layer at the tile and fused pairs per thread the --measured bench ran it at "
                         "(at conv2d's defaults: each layer's default_tile; with --model-pairs / --model-tiles: the "
                         "model's choice), not F(4x4) "
                         "at 4 pairs")
    ap.add_argument("--points", default=None, help="reuse a bench_sweep_model_points.csv instead of predicting")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    try:
        for layer in args.layers:
            parse_layer(layer)          # a bad name is a one-line error before any work
    except MegasimError as exc:
        raise SystemExit(f"--layers: {exc}")
    for flag, path in (("--measured", args.measured), ("--points", args.points)):
        if path and not Path(path).is_file():
            raise SystemExit(f"{flag} {path!r}: no such file")
    if args.bench_tiles and not args.measured:
        raise SystemExit("--bench-tiles needs --measured (the bench whose tiles to predict at)")
    impls = bench_implementations(args.measured) if args.bench_tiles else None
    if args.points:
        from experiments.provenance import read_rows
        def typed(p: dict) -> dict:
            ints = {k: int(p[k]) for k in ("D_IG", "D_GO", "M") if p[k] not in ("", None)}
            return {**p, **ints, "valid": p["valid"] == "True", "predicted_us": float(p["predicted_us"] or "nan")}
        points = [typed(p) for p in read_rows(args.points) if p["layer"] in args.layers]
    else:
        points = predict_layers(args.spec, args.layers, args.size, args.gemm_math, args.workers, impls)
    measured = measured_sweeps(args.measured) if args.measured else None
    rows = summarise(points, measured)
    print_table(rows, [c for c in ("layer", "points", "nonfused_predicted_us", "choice", "choice_predicted_us",
                                   "speedup_predicted", "choice_measured_us", "best_measured_us", "regret",
                                   "spearman", "points_mape")
                       if c in rows[0]])
    meta = provenance({"script": "bench_sweep_model", "spec": args.spec, **spec_meta(load_spec(args.spec)),
                       "gemm_math": args.gemm_math, "size": args.size, "measured": args.measured, "implementations": impls})
    if measured:
        regrets = [r["regret"] for r in rows if isinstance(r.get("regret"), float) and not math.isnan(r["regret"])]
        meta["regret_max"] = max(regrets) if regrets else None
        meta["regret_mean"] = sum(regrets) / len(regrets) if regrets else None
        print(f"regret: max {meta['regret_max']:.3f}, mean {meta['regret_mean']:.3f} over {len(regrets)} layers")
        # a layer whose predictions (or measurements) are all equal has no rank correlation (nan): left out
        rhos = [r["spearman"] for r in rows if "spearman" in r and not math.isnan(r["spearman"])]
        mapes = [r["points_mape"] for r in rows if "points_mape" in r]
        if mapes:
            meta["spearman_mean"] = sum(rhos) / len(rhos) if rhos else None
            meta["spearman_layers"] = len(rhos)
            meta["points_mape_mean"] = sum(mapes) / len(mapes)
            rho = f"{meta['spearman_mean']:.3f}" if rhos else "-"
            print(f"rank correlation with the measured points (Spearman): mean {rho} over {len(rhos)} layers; "
                  f"mean |error| of the points {meta['points_mape_mean']:.1%} over {len(mapes)}")
    write_results(rows, args.out, "bench_sweep_model", meta)
    if not args.points:
        write_results(points, args.out, "bench_sweep_model_points", meta)
    return rows


if __name__ == "__main__":
    main()
