"""How a prediction moves with the spec's DRAM bandwidth alone: a model check, no GPU.

More DRAM bandwidth, everything else held, can only make a convolution as fast or faster. The memory
system is one server whose work unit is a nanosecond at the full DRAM bandwidth: a task's memory work
is ``max(dram_bytes / dram_bw, l2_bytes / l2_bw)`` (``megasim.sim.phases``), and a block's share of the
server is capped at ``tb_max_dram_bw_gbps / dram_bw_gbps`` (``megasim.sim.resources.kind_caps``). A block
alone therefore takes ``dram_bytes / tb_max`` where its DRAM term dominates (independent of dram_bw, as
meant), but ``l2_bytes * dram_bw / (l2_bw * tb_max)`` where its L2 term does: the cap, a fraction of the
DRAM bandwidth, is applied to L2-denominated work, so raising dram_bw slows every L2-bound block. This
script predicts layers on a preset at multiples of its DRAM bandwidth (fused and non-fused) and writes
the table, so the defect and, once fixed, its fix are on record.

    python -m experiments.studies.bandwidth_scaling.dram_bw_sweep --out DIR     # ~1 min on one core
"""
from __future__ import annotations

import argparse
import dataclasses

from experiments.provenance import provenance, write_results
from megasim.hardware import get_gpu
from megasim.plan import Plan, predict
from megasim.workloads import parse_layer

LAYERS = ("resnet-1", "vgg-3")
BATCHES = (1, 64)
FACTORS = (0.5, 1.0, 2.0, 4.0)


def rows(gpu: str) -> list[dict]:
    base = get_gpu(gpu)
    out = []
    for layer in LAYERS:
        for batch in BATCHES:
            problem = parse_layer(layer, batch=batch)
            for schedule in ("fused", "nonfused"):
                reference = None
                for factor in FACTORS:
                    spec = dataclasses.replace(base, dram_bw_gbps=base.dram_bw_gbps * factor)
                    result, _ = predict(problem, spec, Plan.parse(schedule, ""))
                    if factor == 1.0:
                        reference = result.predicted_us
                    out.append({"gpu": gpu, "layer": layer, "batch": batch, "schedule": schedule,
                                "dram_bw_factor": factor, "dram_bw_gbps": spec.dram_bw_gbps,
                                "l2_bw_gbps": spec.l2_bw_gbps, "tb_max_dram_bw_gbps": spec.tb_max_dram_bw_gbps,
                                "predicted_us": round(result.predicted_us, 3)})
                for row in out[-len(FACTORS):]:
                    row["over_preset"] = round(row["predicted_us"] / reference, 4)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--out", default="experiments/results/model/bandwidth_scaling")
    args = ap.parse_args(argv)
    table = rows(args.gpu)
    for r in table:
        print(f"{r['layer']:10s} N={r['batch']:<3d} {r['schedule']:9s} dram x{r['dram_bw_factor']:<4} "
              f"{r['predicted_us']:10.1f} us  ({r['over_preset']:.3f}x the preset's)")
    write_results(table, args.out, "dram_bw_sweep", provenance({"script": "bandwidth_scaling.dram_bw_sweep",
                                                                 "factors": FACTORS}))


if __name__ == "__main__":
    main()
