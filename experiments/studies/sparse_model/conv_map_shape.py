"""The sparse model against the shape of the map: one grid of 396 blocks on maps of different widths.

The cases (``megasim.calibration.sparse.map_shape_cases``) keep the grid (396 blocks, 3 per SM, k_tile
32, one filter tile, every block the same multiply-adds) and change only the map's width, so a block's
128 pixels lie on one row (width 128), several rows (narrower) or part of a row (wider); plus VGG-19
conv2_1 and conv2_2 at batch 1. The model (the committed sparse spec, none of these cases in its
calibration) predicts each as the calibration simulates a case: the kind's launch alone, launch cost
excluded; the dense twin's ``preload`` probe build is predicted as the dense twin. ``--measured`` joins
the GPU's times (``gpu.probes.conv_map_shape``). Prints a table, with each time relative to the same
kernel on rows of 128; writes DIR/conv_map_shape.csv and .json (provenance).

    python -m experiments.studies.sparse_model.conv_map_shape --out DIR                       # predictions only (~1 min)
    python -m experiments.studies.sparse_model.conv_map_shape --measured M.csv --out DIR      # joined with the GPU's times
"""

from __future__ import annotations

from experiments.studies.sparse_model.conv_occupancy import probe_main, relative_to_base
from megasim.calibration.sparse import case_graph, launch_us, map_shape_cases
from megasim.sim import simulate
from megasim.workloads import parse_layer

NAME = "conv_map_shape"
REFERENCE_WIDTH = 128


def predict(spec) -> list[dict]:
    """One row per probe case with the model's time (us); one simulation per (kind, problem)."""
    rows, cache = [], {}
    for case in map_shape_cases():
        key = (case["kind"], case["problem"])
        if key not in cache:
            graph, schedule = case_graph(case, spec.sm_count)
            cache[key] = (graph.num_tasks, launch_us(simulate(graph, schedule, spec), schedule))
        blocks, us = cache[key]
        p = parse_layer(case["problem"])
        rows.append({"kind": case["kind"], "variant": case["variant"], "problem": case["problem"], "width": p.w,
                     "sparsity": case["sparsity"], "seed": case["seed"], "blocks": blocks, "predicted_us": us})
    return rows


def add_relative(rows: list[dict]) -> None:
    """``*_rel_w128``: time / the same kind and variant on the probe's map of rows of 128 (K = 32)."""
    relative_to_base(rows, lambda r: (r["kind"], r["variant"]),
                     lambda r: r["width"] == REFERENCE_WIDTH and "K=32," in r["problem"], "w128")


def main(argv: list[str] | None = None) -> list[dict]:
    return probe_main(argv, description=__doc__.splitlines()[0], measured_help="a gpu.probes.conv_map_shape CSV",
                      default_out="experiments/results/model/conv_map_shape", name=NAME, predict=predict,
                      add_relative=add_relative, head=f"{'kind':7s} {'variant':8s} {'problem':30s}",
                      label=lambda r: f"{r['kind']:7s} {r['variant']:8s} {r['problem']:30s}", rel="w128")


if __name__ == "__main__":
    main()
