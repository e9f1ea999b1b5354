"""The sparse model against a grid's last partial wave: one kind's grid at 0.5 to 2 waves.

The cases (``megasim.calibration.sparse.wave_tail_cases``) give every block the same work (one filter
tile, one row of 128 pixels each) and change only the number of blocks: the dense twin (4 blocks per
SM, a wave of 528) and ECR at sparsity 0.5 (3 per SM, 396) at 0.5, 1, 1.25, 1.5, 1.75 and 2 waves.
What the tail costs depends on where its blocks land. If an SM's blocks progress alike they end
together, their slots free together, and the tail stacks on the SMs that freed first (1.25 waves
then take about as long as 2). If the warp schedulers favour older blocks (``GPUSpec.
younger_block_weight``, measured on the H200's GEMM blocks, c9bd757) an SM's blocks end one by one
and the tail spreads over all SMs (1.25 waves take about 1.25 waves' time, or less: a lone block runs
faster than a quarter of a shared SM). The model predicts each case as the calibration simulates one
(the kind's launch alone, launch cost excluded) with ``--spec``; ``--measured`` joins the GPU's times
(``gpu.probes.conv_map_shape --tail``). Prints a table, each time relative to the same kind at one
wave; writes DIR/wave_tail.csv and .json (provenance).

    python -m experiments.studies.dispatch.wave_tail --spec S --out DIR                       # predictions only (~1 min)
    python -m experiments.studies.dispatch.wave_tail --spec S --measured M.csv --out DIR      # joined with the GPU's times
"""

from __future__ import annotations

from experiments.studies.sparse_model.conv_occupancy import probe_main, relative_to_base
from megasim.calibration.sparse import case_graph, launch_us, wave_tail_cases
from megasim.sim import simulate

NAME = "wave_tail"


def predict(spec) -> list[dict]:
    """One row per probe case with the model's time (us)."""
    rows = []
    for case in wave_tail_cases():
        graph, schedule = case_graph(case, spec.sm_count)
        rows.append({"kind": case["kind"], "variant": case["variant"], "problem": case["problem"],
                     "wave_fraction": case["wave_fraction"], "sparsity": case["sparsity"], "seed": case["seed"],
                     "blocks": graph.num_tasks, "predicted_us": launch_us(simulate(graph, schedule, spec), schedule)})
    return rows


def add_relative(rows: list[dict]) -> None:
    """``*_rel_wave``: time / the same kind's at one whole wave."""
    relative_to_base(rows, lambda r: r["kind"], lambda r: r["wave_fraction"] == 1.0, "wave")


def main(argv: list[str] | None = None) -> list[dict]:
    return probe_main(argv, description=__doc__.splitlines()[0], measured_help="a gpu.probes.conv_map_shape --tail CSV",
                      default_out="experiments/results/model/wave_tail", name=NAME, predict=predict,
                      add_relative=add_relative, head=f"{'kind':7s} {'waves':>5s} {'blocks':>6s}",
                      label=lambda r: f"{r['kind']:7s} {r['wave_fraction']:5.2f} {r['blocks']:6d}", rel="wave")


if __name__ == "__main__":
    main()
