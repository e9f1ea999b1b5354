"""The model against the GPU on dispatch: ticket vs blockIdx at the same mapping, layer by layer.

``gpu.probes.dispatch`` times each layer's fused megakernel at one mapping with ticket dispatch (a block
takes the next map position from an atomic ticket) and with blockIdx dispatch (block b runs map
position b, as in the paper), with the non-fused pipeline beside them, round-robin. This script
predicts the same rows (same TaskGraph: the hash is checked) with a calibrated spec and compares the
blockIdx / ticket time ratio, predicted against measured. The model's only difference between the two
dispatches is the ticket: the spec's ``megakernel_ticket_ns`` (measured on single-kind runs; default one
``atomic_latency_ns``) off each task's calibrated claim (``megasim.sim.engine``); nothing here is fitted
to the probe.

Writes DIR/dispatch_model.csv (a row per layer and probe file: measured and predicted ticket and
blockIdx times and their ratios) and .json with provenance. No GPU; ~1 min per probe file on 2 cores.

    python -m experiments.studies.dispatch.dispatch_model \\
        --probe experiments/results/nvidia-h200/probe_dispatch/acquire/probe_dispatch_fp32_acquire_load.csv \\
        --spec megasim/hardware/calibrated/h200.json [--workers 2] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.provenance import provenance, write_results
from experiments.studies.dispatch.ready_dispatch import geomean
from experiments.sweeps import print_table, spec_meta
from megasim.errors import MegasimError
from megasim.hardware import load_spec
from megasim.calibration.validation import predict_rows, read_rows

OUT = "experiments/results/model/dispatch_model"
LABELS = ("fused_ticket", "fused_blockidx")


def probe_rows(path: str | Path) -> list[dict[str, str]]:
    """The probe's fused rows with a measured time, or a one-line error naming the file."""
    try:
        rows = read_rows(path)
    except (OSError, ValueError, KeyError) as err:
        raise MegasimError(f"--probe {str(path)!r} cannot be read as a probe_dispatch CSV: {err}") from None
    rows = [r for r in rows if r.get("label") in LABELS and r.get("measured_us") not in ("", None)]
    if not rows:
        raise MegasimError(f"--probe {str(path)!r} has no measured rows labelled {' or '.join(LABELS)} "
                           "(gpu.probes.dispatch's output)")
    return rows


def compare(rows: list[dict[str, Any]], probe: str) -> list[dict[str, Any]]:
    """A row per layer that has both dispatches measured and predicted."""
    by_layer: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_layer.setdefault(r["layer"], {})[r["label"]] = r
    out = []
    for layer, pair in by_layer.items():
        if set(pair) != set(LABELS) or any(pair[k].get("predicted_us") in ("", None) for k in LABELS):
            continue
        t, b = pair["fused_ticket"], pair["fused_blockidx"]
        mt, mb, pt, pb = (float(x) for x in (t["measured_us"], b["measured_us"], t["predicted_us"], b["predicted_us"]))
        out.append({"probe": probe, "layer": layer, "gemm_math": t.get("gemm_math", "fp32"), "params": t["params"],
                    "measured_ticket_us": mt, "measured_blockidx_us": mb, "measured_ratio": mb / mt,
                    "predicted_ticket_us": pt, "predicted_blockidx_us": pb, "predicted_ratio": pb / pt})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", nargs="+", required=True, help="gpu.probes.dispatch CSV file(s)")
    ap.add_argument("--spec", required=True, help="calibrated spec file (one for all probe files)")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        table = []
        for probe in args.probe:
            predicted = predict_rows(probe_rows(probe), args.spec, args.spec, workers=args.workers)
            bad = [r for r in predicted if r.get("predicted_us") in ("", None)]
            if bad:
                raise MegasimError(f"{probe}: {len(bad)} rows not predicted ({bad[0].get('status')})")
            table += compare(predicted, probe)
    except MegasimError as err:
        ap.exit(2, f"dispatch_model: {err}\n")
    print_table(table, ["layer", "gemm_math", "measured_ticket_us", "measured_blockidx_us", "measured_ratio",
                        "predicted_ticket_us", "predicted_blockidx_us", "predicted_ratio"])
    summary = {}
    for probe in args.probe:
        mine = [r for r in table if r["probe"] == probe]
        if mine:
            summary[probe] = {"layers": len(mine), "measured_ratio_geomean": geomean([r["measured_ratio"] for r in mine]),
                              "predicted_ratio_geomean": geomean([r["predicted_ratio"] for r in mine])}
            print(f"{probe}: blockIdx / ticket, geometric mean over {len(mine)} layers: "
                  f"measured {summary[probe]['measured_ratio_geomean']:.4f}, "
                  f"predicted {summary[probe]['predicted_ratio_geomean']:.4f}")
    meta = {**provenance(), "spec": args.spec, **spec_meta(spec), "probes": args.probe, "summary": summary}
    write_results(table, Path(args.out), "dispatch_model", meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
