"""The sparse model's SM-sharing rule tested alone: convolution time against blocks per SM, predicted then measured.

The cases (``megasim.calibration_sparse.occupancy_cases``) give the ECR and direct kernels, per filter
tile, grids of exactly b blocks per SM in one wave (every block doing the same multiply-adds) and two
waves. The model (the committed sparse spec, fitted on the calibration cases, none of which is one of
these) predicts each case as the calibration simulates a case: the kind's launch alone, launch cost
excluded. ``--measured`` joins the GPU's times (``gpu.probe_conv_occupancy``) and reports, per kind and
filter tile, the time of b blocks per SM relative to one (how the SM's throughput grows with resident
blocks), measured and predicted. Prints a table; writes DIR/conv_occupancy.csv and .json (provenance).

    python -m experiments.conv_occupancy --out DIR                       # predictions only (~1 min)
    python -m experiments.conv_occupancy --measured M.csv --out DIR      # joined with the GPU's times
"""

from __future__ import annotations

import argparse

from experiments.provenance import provenance, read_rows, write_results
from megasim.calibration_sparse import launch_us, case_graph, occupancy_cases
from megasim.hardware import load_spec
from megasim.sim import simulate

SPEC = "megasim/hardware/calibrated/h200_sparse.json"
NAME = "conv_occupancy"


def predict(spec) -> list[dict]:
    """One row per probe case with the model's time (us)."""
    rows = []
    for case in occupancy_cases():
        graph, schedule = case_graph(case, spec.sm_count)
        rows.append({"kind": case["kind"], "k_tile": case["force_k_tile"], "blocks_per_sm": case["blocks_per_sm"],
                     "sparsity": case["sparsity"], "problem": case["problem"], "seed": case["seed"],
                     "blocks": graph.num_tasks, "predicted_us": launch_us(simulate(graph, schedule, spec), schedule)})
    return rows


def join_measured(rows: list[dict], path: str) -> None:
    """Adds ``measured_us``, the kernel's registers and the error from a probe's measured CSV (rows
    matched by seed, unique per case; gpu.probe_conv_occupancy and gpu.probe_conv_map_shape)."""
    meas = {int(r["seed"]): r for r in read_rows(path)}
    for row in rows:
        m = meas.get(row["seed"])
        if m is not None:
            row["measured_us"] = float(m["measured_us"])
            row["regs"] = int(m["regs"])
            row["error"] = row["predicted_us"] / row["measured_us"] - 1.0


def add_relative(rows: list[dict]) -> None:
    """``*_rel_b1``: time / the same kind, tile and sparsity at one block per SM."""
    base = {(r["kind"], r["k_tile"], r["sparsity"]): r for r in rows if r["blocks_per_sm"] == 1}
    for row in rows:
        one = base[(row["kind"], row["k_tile"], row["sparsity"])]
        for col in ("predicted_us", "measured_us"):
            if col in row and col in one:
                row[col.replace("_us", "_rel_b1")] = row[col] / one[col]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--measured", default=None, help="a gpu.probe_conv_occupancy CSV")
    ap.add_argument("--out", default="experiments/results/model/conv_occupancy")
    args = ap.parse_args(argv)
    spec = load_spec(args.spec)
    rows = predict(spec)
    if args.measured:
        join_measured(rows, args.measured)
    add_relative(rows)
    print(f"{'kind':7s} {'kt':>3s} {'s':>4s} {'b/SM':>4s} {'pred us':>8s} {'meas us':>8s} {'err':>6s} "
          f"{'pred/b1':>7s} {'meas/b1':>7s}")
    for r in rows:
        meas = r.get("measured_us")
        print(f"{r['kind']:7s} {r['k_tile']:3d} {r['sparsity']:4.2f} {r['blocks_per_sm']:4d} {r['predicted_us']:8.1f} "
              + (f"{meas:8.1f} {r['error']:+6.1%} " if meas is not None else f"{'-':>8s} {'-':>6s} ")
              + f"{r['predicted_rel_b1']:7.2f} " + (f"{r['measured_rel_b1']:7.2f}" if meas is not None else ""))
    write_model_rows(rows, args, spec, NAME)
    return rows


def write_model_rows(rows: list[dict], args, spec, name: str) -> None:
    """DIR/NAME.csv and .json of a probe's predicted (and joined) rows, with provenance."""
    meta = {**provenance(), "spec": args.spec, "spec_name": spec.name, "measured": args.measured,
            "method": "each case's launch simulated alone as the sparse calibration does (launch cost excluded)"}
    write_results(rows, args.out, name, meta)


if __name__ == "__main__":
    main()
