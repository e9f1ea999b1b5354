"""Mixed-kind runs (two kinds' non-fused tasks interleaved in one per-task megakernel launch, counters zeroed;
``gpu.calibrate.occupancy.time_mixed_kinds``) at the calibration shapes and at smaller batches whose operands fit
in the L2, as the fused megakernel's do: does the slowdown of mixing kinds depend on where the operands live?

    bash gpu/on_device.sh python -m experiments.studies.calibration.mixed_l2 --out $OUT/mixed_l2.json
"""
from __future__ import annotations

import argparse
import datetime
import json

LAYERS = ("resnet-1", "N=4,C=64,K=64,H=56,W=56", "N=8,C=64,K=64,H=56,W=56",
          "N=32,C=16,K=64,H=96,W=96", "N=4,C=16,K=64,H=96,W=96", "N=8,C=16,K=64,H=96,W=96",
          "N=8,C=128,K=128,H=28,W=28", "N=64,C=128,K=128,H=28,W=28")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--layers", nargs="+", default=list(LAYERS))
    args = p.parse_args()
    from gpu.calibrate.occupancy import fused_transform_params, time_mixed_kinds
    from megasim.provenance import git_sha
    rows = time_mixed_kinds(tuple(args.layers), fused_transform_params("") or "")
    with open(args.out, "w") as fh:
        json.dump({"meta": {"git_sha": git_sha(), "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                            "what": __doc__.splitlines()[0]}, "rows": rows}, fh, indent=1)
    for r in rows:
        print(f"{r['layer']:32s} {r['kind']:12s} mixed {r['median_ms']*1e3:9.1f} us  single-kind sum {r['single_kind_sum_us']:9.1f} us"
              f"  ratio {r['median_ms']*1e3 / r['single_kind_sum_us']:.3f}")


if __name__ == "__main__":
    main()
