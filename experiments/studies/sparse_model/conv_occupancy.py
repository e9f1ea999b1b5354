"""The sparse model's SM-sharing rule tested alone: convolution time against blocks per SM, predicted then measured.

The cases (``megasim.calibration.sparse.occupancy_cases``) give the ECR and direct kernels, per filter
tile, grids of exactly b blocks per SM in one wave (every block doing the same multiply-adds) and two
waves. The model (the committed sparse spec, fitted on the calibration cases, none of which is one of
these) predicts each case as the calibration simulates a case: the kind's launch alone, launch cost
excluded. ``--measured`` joins the GPU's times (``gpu.probes.conv_occupancy``) and reports, per kind and
filter tile, the time of b blocks per SM relative to one (how the SM's throughput grows with resident
blocks), measured and predicted. Prints a table; writes DIR/conv_occupancy.csv and .json (provenance).

    python -m experiments.studies.sparse_model.conv_occupancy --out DIR                       # predictions only (~1 min)
    python -m experiments.studies.sparse_model.conv_occupancy --measured M.csv --out DIR      # joined with the GPU's times
"""

from __future__ import annotations

import argparse

from experiments.provenance import provenance, read_rows, write_results
from megasim.calibration.sparse import launch_us, case_graph, occupancy_cases
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
    matched by seed, unique per case; gpu.probes.conv_occupancy and gpu.probes.conv_map_shape)."""
    meas = {int(r["seed"]): r for r in read_rows(path)}
    for row in rows:
        m = meas.get(row["seed"])
        if m is not None:
            row["measured_us"] = float(m["measured_us"])
            row["regs"] = int(m["regs"])
            row["error"] = row["predicted_us"] / row["measured_us"] - 1.0


def relative_to_base(rows: list[dict], key, is_base, rel: str) -> None:
    """Fill ``predicted_rel_<rel>`` and ``measured_rel_<rel>``: each row's time over that of the base row
    (``is_base(row)``) with the same ``key(row)``, where both times exist."""
    base = {key(r): r for r in rows if is_base(r)}
    for row in rows:
        one = base[key(row)]
        for col in ("predicted_us", "measured_us"):
            if col in row and col in one:
                row[col.replace("_us", f"_rel_{rel}")] = row[col] / one[col]


def add_relative(rows: list[dict]) -> None:
    """``*_rel_b1``: time / the same kind, tile and sparsity at one block per SM."""
    relative_to_base(rows, lambda r: (r["kind"], r["k_tile"], r["sparsity"]), lambda r: r["blocks_per_sm"] == 1, "b1")


def probe_main(argv, *, description: str, measured_help: str, default_out: str, name: str, predict,
               add_relative, head: str, label, rel: str) -> list[dict]:
    """The probe scripts' shared driver (conv_occupancy, conv_map_shape, wave_tail): every case predicted
    with ``--spec``, ``--measured`` joined (``join_measured``), ``add_relative`` filling
    ``predicted_rel_<rel>`` and ``measured_rel_<rel>``; a table (``head``: the leading columns' header,
    ``label(row)``: a row's), and DIR/NAME.csv and .json with provenance."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--measured", default=None, help=measured_help)
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args(argv)
    spec = load_spec(args.spec)
    rows = predict(spec)
    if args.measured:
        join_measured(rows, args.measured)
    add_relative(rows)
    print(f"{head} {'pred us':>8s} {'meas us':>8s} {'err':>7s} {'pred/' + rel:>9s} {'meas/' + rel:>9s}")
    for r in rows:
        meas = r.get("measured_us")
        print(f"{label(r)} {r['predicted_us']:8.1f} "
              + (f"{meas:8.1f} {r['error']:+7.1%} " if meas is not None else f"{'-':>8s} {'-':>7s} ")
              + f"{r['predicted_rel_' + rel]:9.3f} " + (f"{r['measured_rel_' + rel]:9.3f}" if meas is not None else ""))
    write_model_rows(rows, args, spec, name)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    return probe_main(argv, description=__doc__.splitlines()[0], measured_help="a gpu.probes.conv_occupancy CSV",
                      default_out="experiments/results/model/conv_occupancy", name=NAME, predict=predict,
                      add_relative=add_relative, head=f"{'kind':7s} {'kt':>3s} {'s':>4s} {'b/SM':>4s}",
                      label=lambda r: f"{r['kind']:7s} {r['k_tile']:3d} {r['sparsity']:4.2f} {r['blocks_per_sm']:4d}",
                      rel="b1")


def write_model_rows(rows: list[dict], args, spec, name: str) -> None:
    """DIR/NAME.csv and .json of a probe's predicted (and joined) rows, with provenance."""
    meta = {**provenance(), "spec": args.spec, "spec_name": spec.name, "measured": args.measured,
            "method": "each case's launch simulated alone as the sparse calibration does (launch cost excluded)"}
    write_results(rows, args.out, name, meta)


if __name__ == "__main__":
    main()
