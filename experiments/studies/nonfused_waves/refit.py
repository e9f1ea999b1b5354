"""The GEMM refitted with the study's non-validation shapes among its single-kind runs, and what the validation sets
say of it (issue 42; not adopted: docs/findings.md, "Few-wave GEMM grids").

``merge``: the calibration's measurements (``megasim/hardware/calibrated/h200.measurements.json``) with the rows of
``experiments/results/nvidia-h200/nonfused_waves/nonfused_waves_measured.json`` on the five ``STUDY_SHAPES`` (none of
them a validation layer; the validation layers' rows are never added) as second-round single-kind rows at the
default parameters (the validation's non-fused parameters give the same TaskGraph).

    python -m experiments.studies.nonfused_waves.refit merge --out merged.measurements.json

Variant B0, the model as it is (the GEMM's second-round fields refitted from the committed values):

    megasim update-spec --spec megasim/hardware/calibrated/h200.json --measurements merged.measurements.json \\
        --refit memory_overlap@gemm block_dram_bw_gbps@gemm compute_efficiency@gemm fixed_ns@gemm \\
                block_sm_ready@gemm further_block_sm_ready@gemm megakernel_fixed_ns@gemm --out spec_B0.json --json

(an update needs rows only of the cost names whose fields it refits: ``gemm@t32`` has none on the new shapes.)
The same merged file fitted from scratch: ``megasim calibrate --from-measurements merged.measurements.json --out
spec_scratch.json``. Variant B1, with
``experiments/studies/nonfused_waves/stage_overlap.patch`` applied (``git apply`` in a worktree): a new
``TaskCost.stage_memory_overlap`` s_o, a GEMM task overlapping ``s_o * (1 - 1/stages)`` of its memory work with
its compute (stages = ceil(C / gemm_k_step), its cp.async ring's slices), started from ``memory_overlap`` 0 and
s_o 0.5 (and 0.9: B1h) and refitted with the same fields plus ``stage_memory_overlap@gemm``.

``oracle VALIDATION_CSV``: each layer's pairwise accuracy with the non-fused pipeline's prediction replaced by its
measured time (how much any fix of the non-fused prediction alone could gain).
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import sys
from pathlib import Path

from experiments.studies.nonfused_waves.measure import STUDY_SHAPES

CALIBRATION = "megasim/hardware/calibrated/h200.measurements.json"
MEASURED = "experiments/results/nvidia-h200/nonfused_waves/nonfused_waves_measured.json"


def merge(calibration: str = CALIBRATION, measured: str = MEASURED) -> dict:
    """The calibration's measurements with the study shapes' single-kind rows added (see the module docstring)."""
    cal = json.loads(Path(calibration).read_text())
    study = json.loads(Path(measured).read_text())
    added = [{**{k: v for k, v in r.items() if k != "what"}, "plan_params": "", "round": 2}
             for r in study["rows"]
             if r["what"] == "kind" and r["layer"] in STUDY_SHAPES and "median_ms" in r]
    cal["kind_times"] = cal["kind_times"] + added
    cal.setdefault("extra", {})["nonfused_waves_rows"] = f"{len(added)} rows of {measured} added"
    return cal


def oracle(validation_csv: str) -> dict[str, tuple[float, int]]:
    """Per layer: (pairwise accuracy, mis-ordered pairs) with the non-fused prediction set to its measured time."""
    rows = list(csv.DictReader(open(validation_csv, newline="")))
    out = {}
    for layer in dict.fromkeys(r["layer"] for r in rows):
        pts = [r for r in rows if r["layer"] == layer]

        def pred(r):
            return float(r["measured_us"]) if r["schedule"] == "nonfused" else float(r["predicted_us"])
        mis = sum((pred(a) - pred(b)) * (float(a["measured_us"]) - float(b["measured_us"])) < 0
                  for a, b in itertools.combinations(pts, 2))
        n = len(pts) * (len(pts) - 1) // 2
        out[layer] = (1 - mis / n, mis)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge")
    m.add_argument("--out", required=True)
    o = sub.add_parser("oracle")
    o.add_argument("validation_csv")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "merge":
            Path(args.out).write_text(json.dumps(merge(), indent=1))
        else:
            for layer, (acc, mis) in oracle(args.validation_csv).items():
                print(f"{layer:12s} {acc:.3f} ({mis} mis-ordered)")
    except (OSError, ValueError, KeyError) as err:
        sys.exit(f"refit: {err}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
