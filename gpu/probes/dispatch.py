"""What the megakernel's claim costs at the best mappings: ticket against blockIdx dispatch, beside our
non-fused pipeline (issue 3; a diagnostic, not fitted).

At the best Algorithm 1 mappings of the bench's sweep the megakernel's blocks are busy ~96% of the
time, and 12-29% of that is claiming, waiting and signalling (``gpu.diagnostics.record_timeline``: a transform's
claim ~1.3 us with no parent, a GEMM's ~2.5 us, a signal ~0.9 us). This times, per layer, the bench's
best mapping (``fused_sweep_best`` of a ``winograd_bench`` JSON) with ticket dispatch (one
``atomic.add`` per claim) and with blockIdx dispatch (the block's index is its map position, as in the
paper: no atomic; safe here because a block waits only on earlier positions and the bounded waits turn
a stall into an error), and the non-fused pipeline, round-robin (``gpu.calibrate.validate.measure_plans``).
(At commit 970b425 it also timed where a block reads its task's row, re-read by every thread or broadcast by
thread 0: broadcast won, ``nvidia-h200/probe_dispatch/probe_dispatch_*_{reload,broadcast}.csv`` (in git at 871d7d7),
and is the only path now.)

    bash gpu/on_device.sh python -m gpu.probes.dispatch [--bench FILE] [--layers ...] [--tag T]

Writes ``$OUT/probe_dispatch[_T].json`` and ``.csv`` (provenance: device, driver, versions, git SHA,
date, ``gemm_math``); prints a table. ``--bench`` defaults to the committed bench of
this device and GEMM math (``experiments/results/<device>/[gemm_3xtf32/]winograd_bench.json``).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from numba import cuda

from megasim.errors import MegasimError
from megasim.algorithms.winograd.lowering import GEMM_MATHS, DEFAULT_GEMM_MATH
from megasim.plan import Plan
from megasim.workloads import TABLE2_NAMES, parse_layer

DISPATCH_LABELS = (("ticket", "fused_ticket"), ("blockidx", "fused_blockidx"))


def best_params(bench_json: str | Path) -> dict[str, str]:
    """Per layer: the --param string of the bench's fused_sweep_best (D_IG, D_GO, M)."""
    from experiments.benchmarks.winograd_bench import read_bench_json
    meta = read_bench_json(bench_json)["meta"]      # (plain or an archived .json.gz)
    out = {}
    for layer, info in meta["per_layer"].items():
        best = info.get("fused_sweep_best")
        if best:
            out[layer] = f"D_IG={best['D_IG']},D_GO={best['D_GO']},M={best['M']}"
    return out


def plans_for(param: str, gemm_math: str, persistent_blocks: int = 0) -> list[tuple[str, Plan]]:
    """(label, Plan): the mapping under each dispatch, with ``persistent_blocks`` > 0 also as a persistent
    grid of that many blocks per SM (ticket), then the non-fused pipeline. Every plan names ``gemm_math``"""
    math_param = f",gemm_math={gemm_math}"
    plans = [(label, Plan.parse("fused", f"{param},dispatch={d}{math_param}")) for d, label in DISPATCH_LABELS]
    if persistent_blocks:
        plans.append(("fused_persistent", Plan.parse(
            "fused", f"{param},style=persistent,blocks_per_sm={persistent_blocks}{math_param}")))
    return plans + [("nonfused", Plan.parse("nonfused", math_param.lstrip(",") or None))]


def main(argv: list[str] | None = None) -> list[dict]:
    from gpu.kernels.winograd import megakernel
    from gpu.calibrate.validate import device_name, measure_plans
    from experiments.benchmarks.winograd_bench import device_slug
    from megasim.calibration.validation import run_meta
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=None, help="a winograd_bench JSON whose fused_sweep_best to time")
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", default=".", help="output folder (on the GPU machine: --out $OUT)")
    ap.add_argument("--gemm-math", choices=GEMM_MATHS, default=None,
                    help="the GEMM math of every plan (default: fp32)")
    ap.add_argument("--persistent", type=int, default=0,
                    help="also time the mapping as a persistent grid of this many blocks per SM (0: no)")
    args = ap.parse_args(argv)
    try:
        for layer in args.layers:
            parse_layer(layer)
    except MegasimError as exc:
        raise SystemExit(f"--layers: {exc}")
    gemm_math = args.gemm_math or DEFAULT_GEMM_MATH
    bench = args.bench or (f"experiments/results/{device_slug(device_name())}/"
                           f"{'gemm_3xtf32/' if gemm_math != 'fp32' else ''}winograd_bench.json")
    if not (Path(bench).exists() or Path(bench + ".gz").exists()):
        raise SystemExit(f"--bench {bench!r}: no such file (a winograd_bench JSON of this device and GEMM math)")
    params = best_params(bench)
    rows = []
    for layer in args.layers:
        if layer not in params:
            raise SystemExit(f"layer {layer!r} has no fused_sweep_best in {bench}")
        got = measure_plans(parse_layer(layer), plans_for(params[layer], gemm_math, args.persistent), layer=layer,
                            repeats=args.repeats, rounds=args.rounds)
        by = {r["label"]: r for r in got}
        for r in got:
            r["gemm_math"] = gemm_math
        rows += got
        t, b, n = (by[k].get("measured_us") or float("nan") for k in ("fused_ticket", "fused_blockidx", "nonfused"))
        p = by["fused_persistent"].get("measured_us") or float("nan") if "fused_persistent" in by else None
        print(f"{layer:11s} ticket {t:9.1f} us  blockidx {b:9.1f} us ({t / b:5.3f}x)  "
              + (f"persistent {p:9.1f} us ({t / p:5.3f}x)  " if p is not None else "")
              + f"non-fused {n:9.1f} us  best fused / non-fused {n / min(t, b):5.3f}x", flush=True)
    meta = run_meta({"device": str(cuda.get_current_device().name), "bench": bench, "gemm_math": gemm_math,
                     "persistent_blocks_per_sm": args.persistent,
                     "persistent_max_registers": megakernel.PERSISTENT_MAX_REGISTERS, "rounds": args.rounds, "repeats": args.repeats,
                     "command": "bash gpu/on_device.sh python -m gpu.probes.dispatch "
                     + " ".join(sys.argv[1:] if argv is None else argv)})
    stem = Path(args.out) / (f"probe_dispatch_{args.tag}" if args.tag else "probe_dispatch")
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {stem}.json, {stem}.csv")
    return rows


if __name__ == "__main__":
    main()
