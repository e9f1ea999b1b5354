"""How a prediction moves with one bandwidth of the spec alone: a model check, no GPU.

More DRAM (or L2) bandwidth, everything else held, should make a convolution as fast or faster. The
memory system is one server: a task's memory work is ``max(dram_bytes / dram_bw, l2_bytes / l2_bw)`` ns
(``megasim.sim.phases``), and a block moves its bytes no faster than its kind's per-block rate b on its
misses and ``b * block_l2_bw_ratio`` on all its bytes (``megasim.sim.resources.block_rates``). A spec
keeps its ratio when one bandwidth is changed, so a block's floor does not move with the DRAM's. (Before
the ratio was a field, a block's cap was ``b / dram_bw`` of the server whatever its bytes: an L2-bound
block alone took ``l2_bytes * dram_bw / (l2_bw * b)``, and raising dram_bw slowed it; the table in git
at 0b6a1d8 has those numbers.) What can still move the other way is the schedule's dynamics: blocks
that start together can stay in lock-step, all moving data and then all computing, at one bandwidth
and drift apart at another (docs/model.md, Known limits).

This script predicts layers on a spec at multiples of its DRAM and of its L2 bandwidth (fused and
non-fused) and writes the table.

    python -m experiments.studies.bandwidth_scaling.dram_bw_sweep --out DIR     # ~2 min on one core
"""
from __future__ import annotations

import argparse
import dataclasses

from experiments.provenance import provenance, write_results
from megasim.hardware import get_gpu, load_spec
from megasim.plan import Plan, predict
from megasim.workloads import parse_layer

LAYERS = ("resnet-1", "vgg-3")
BATCHES = (1, 64)
FACTORS = (0.5, 1.0, 2.0, 4.0)
FIELDS = ("dram_bw_gbps", "l2_bw_gbps")


def rows(gpu: str) -> list[dict]:
    base = load_spec(gpu) if gpu.endswith(".json") else get_gpu(gpu)
    out = []
    for field in FIELDS:
        for layer in LAYERS:
            for batch in BATCHES:
                problem = parse_layer(layer, batch=batch)
                for schedule in ("fused", "nonfused"):
                    reference = None
                    for factor in FACTORS:
                        spec = dataclasses.replace(base, **{field: getattr(base, field) * factor})
                        result, _ = predict(problem, spec, Plan.parse(schedule, ""))
                        if factor == 1.0:
                            reference = result.predicted_us
                        out.append({"gpu": base.name, "layer": layer, "batch": batch, "schedule": schedule,
                                    "field": field, "factor": factor, "dram_bw_gbps": spec.dram_bw_gbps,
                                    "l2_bw_gbps": spec.l2_bw_gbps, "tb_max_dram_bw_gbps": spec.tb_max_dram_bw_gbps,
                                    "block_l2_bw_ratio": round(spec.block_l2_bw_ratio, 6),
                                    "predicted_us": round(result.predicted_us, 3)})
                    for row in out[-len(FACTORS):]:
                        row["over_spec"] = round(row["predicted_us"] / reference, 4)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="H100", help="a preset's name or a spec file")
    ap.add_argument("--out", default="experiments/results/model/bandwidth_scaling")
    args = ap.parse_args(argv)
    table = rows(args.gpu)
    for r in table:
        print(f"{r['field']:12s} x{r['factor']:<4} {r['layer']:10s} N={r['batch']:<3d} {r['schedule']:9s} "
              f"{r['predicted_us']:10.1f} us  ({r['over_spec']:.3f}x the spec's)")
    write_results(table, args.out, "dram_bw_sweep", provenance({"script": "bandwidth_scaling.dram_bw_sweep",
                                                                 "gpu": args.gpu, "factors": FACTORS}))


if __name__ == "__main__":
    main()
