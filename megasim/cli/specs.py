"""`megasim transfer-spec` and `megasim update-spec`: derive a spec file from a calibrated one and new
measurements (no GPU needed).

Both read the measurements through ``Measurements.from_dict`` (every field checked), load the base
spec, and check the output path, the --keep / --refit fields and the layers before any fitting, so a
mistake is reported in a second rather than after a refit of minutes.
"""

from __future__ import annotations

import argparse
import json

from megasim.cli.common import Progress, check_out_path, layers_of, read_measurements, text


def add_transfer_spec(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", required=True, help="the calibrated spec whose task costs are kept")
    p.add_argument("--measurements", required=True,
                   help="FILE.measurements.json of the other GPU (gpu.calibrate.measure.measure); only its values are used")
    p.add_argument("--out", required=True, help="the spec file to write")
    p.add_argument("--name", type=text("a spec name"), help="the new spec's name (default: the measured device's)")
    p.add_argument("--keep", nargs="+", metavar="FIELD",
                   help="measured fields to keep from --spec (e.g. l2_bw_gbps, where the probe changed between "
                        "the two measurements)")


def run_transfer_spec(args: argparse.Namespace) -> int:
    from megasim.calibration.transfer import transferred_spec, transferred_values
    from megasim.hardware import dump_spec, load_spec
    m = read_measurements(args.measurements, "--measurements")
    base = load_spec(args.spec)
    check_out_path(args.out, "--out")
    keep = tuple(args.keep or ())
    spec = transferred_spec(base, m, name=args.name, keep=keep)
    dump_spec(spec, args.out)
    moved = [f for f in transferred_values(m) if f not in keep]
    changed = [f for f in moved if getattr(spec, f) != getattr(base, f)]
    print(f"wrote {args.out}: {base.name}'s task costs with {len(moved)} values measured on {m.device} "
          f"({len(changed)} differ{', ' + str(len(set(keep))) + ' kept' if keep else ''})")
    for f in changed:
        print(f"  {f:24s} {getattr(base, f)!s:>22} -> {getattr(spec, f)!s}")
    return 0


def add_update_spec(p: argparse.ArgumentParser) -> None:
    from megasim.calibration.update import REFITTABLE
    p.add_argument("--spec", required=True, help="the calibrated spec to update")
    p.add_argument("--measurements", required=True,
                   help="FILE.measurements.json of the changed kernels (gpu.calibrate.measure.measure)")
    p.add_argument("--refit", nargs="*", default=["megakernel_fixed_ns"], metavar="FIELD[@KIND]",
                   help=f"task-cost fields to refit on the single-kind runs, from the spec's values, for every kind "
                        f"or (FIELD@KIND) one (default megakernel_fixed_ns; none: the claims only; allowed fields: "
                        f"{', '.join(REFITTABLE)})")
    p.add_argument("--layers", nargs="+", help="calibration layers (default: those the measurements time)")
    p.add_argument("--out", required=True, help="the spec file to write")
    p.add_argument("--json", action="store_true")


def run_update_spec(args: argparse.Namespace) -> int:
    from megasim.calibration.update import check_refit, updated_spec
    from megasim.hardware import dump_spec, load_spec
    m = read_measurements(args.measurements, "--measurements")
    base = load_spec(args.spec)
    check_out_path(args.out, "--out")
    check_refit(base, tuple(args.refit))
    layers = tuple(layers_of(args.layers, "--layers")) if args.layers else None
    with Progress() as progress:
        progress(f"refitting {', '.join(args.refit) or 'the claims'} of {base.name} (minutes)")
        spec, report = updated_spec(base, m, tuple(args.refit), layers)
    dump_spec(spec, args.out)
    report["out"] = args.out
    if args.json:
        print(json.dumps(report, default=str))
        return 0
    print(f"wrote {args.out}: {base.name} with megakernel_claim_ns{''.join(', ' + f for f in args.refit)} "
          f"updated from {m.device}'s runs of {m.date}")
    for kind, entry in report["kinds"].items():
        changes = "  ".join(f"{f} {v['before']:.4g} -> {v['after']:.4g}" for f, v in entry.items()
                            if isinstance(v, dict) and v["before"] is not None)
        rms = f"  (rms log error {entry['rms_log_error']:.3f})" if "rms_log_error" in entry else ""
        print(f"  {kind:10s} {changes}{rms}")
    return 0
