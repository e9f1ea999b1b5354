"""`megasim validate`: predicted against measured runtimes of many mappings per layer.

Measures on the GPU (``gpu.calibrate.validate``) or reads a ``validation_measured.csv`` (--measured).
Inputs are checked before any GPU time or prediction: the layers, the spec, the counts, and each CSV
row's layer, schedule, --param string and measured time (file, row and column named). A run with no
points to compare exits with an error instead of printing a summary (no target is "met" on nothing).

``--gpus all`` or ``--gpus 0,1,2,3`` measures on those GPUs of this host, one Dask worker per GPU
(``megasim.sweep.gpus``): one layer per task by default, or ``--mappings-per-task N`` mappings of a
layer per task (balances the load when layers are few or unequal; a layer's mappings are then compared
across GPUs). The rows are those of a run on one GPU, each with the device that measured it in the
column ``cuda_device``; without --gpus the run is the one-process one, and writes no such column.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from megasim.cli.common import gpu_module, integer, layers_of, repo_relative
from megasim.errors import InputError, MegasimError, OutcomeError

REQUIRED_COLUMNS = ("layer", "schedule", "params", "measured_us")


def add_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("layers", nargs="+", help="layer names, or 'table2' for the 13 layers of the paper's Table 2")
    p.add_argument("--spec", required=True, help="the GPU spec file the predictions use")
    p.add_argument("--algo", default="winograd",
                   help="the algorithm whose validation plans are measured and predicted (default winograd)")
    p.add_argument("--mappings", type=integer(1, 10_000), default=16, help="mappings per layer (default 16)")
    p.add_argument("--repeats", type=integer(1, 10_000), default=10, help="timed runs per mapping and round (default 10)")
    p.add_argument("--rounds", type=integer(1, 1_000), default=6,
                   help="rounds over a layer's mappings, timed round-robin (default 6; the summary's "
                        "measurement repeatability needs >= 2)")
    p.add_argument("--out", help="results folder (when measuring, default experiments/results/<device>; "
                   "with --measured, required)")
    p.add_argument("--measured", help="reuse a validation_measured.csv instead of measuring (no GPU needed)")
    p.add_argument("--no-predict", action="store_true", help="measure only; write validation_measured.csv")
    p.add_argument("--workers", type=integer(1, 256), help="processes for the predictions (default: all cores)")
    p.add_argument("--gpus", type=device_list,
                   help="measure on these GPUs of this host, one worker each: 'all' or indices such as 0,1,2,3 "
                        "(default: this process's GPU alone); rows get a cuda_device column")
    p.add_argument("--mappings-per-task", type=integer(1, 10_000), dest="mappings_per_task",
                   help="with --gpus: a layer's mappings per GPU task (default: all of a layer's)")


def device_list(text: str):
    """An argparse type: --gpus's value, 'all' or device indices (megasim.sweep.gpus.parse_device_list)."""
    from megasim.sweep.gpus import parse_device_list
    try:
        return parse_device_list(text, source="")
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err).strip()) from None
device_list.__name__ = "device list"


def read_measured(path: str, layers: list[str], algorithm: str = "winograd") -> list[dict[str, str]]:
    """The rows of `path` (a validation_measured.csv) for `layers` and `algorithm`, each checked: its layer, schedule and
    params readable as a plan, its measured_us empty (a failed run) or a finite number > 0."""
    return [row for _, row in measured_rows(path, layers, algorithm)]


def measured_rows(path: str, layers: list[str], algorithm: str = "winograd") -> list[tuple[str, dict[str, str]]]:
    """(where, row) of each row ``read_measured`` keeps, where naming the file and the row's line (``--measured
    'm.csv' row 7``) for errors found later, when the row is predicted. Every row's layer is checked, also of
    rows for other layers (an unknown one, e.g. resnet-9, was dropped without a word)."""
    import csv
    from megasim.calibration.measurements import measured_time
    from megasim.calibration.validation import MAX_MEASURED_US
    from megasim.input_files import read_csv
    from megasim.plan import Plan
    from megasim.workloads import parse_layer
    try:
        header, rows = read_csv(path, f"--measured {path!r}")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"--measured {path!r} cannot be read: {getattr(err, 'strerror', None) or err}") from None
    except csv.Error as err:
        raise InputError(f"--measured {path!r} is not a CSV file: {err}") from None
    if rows:
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:      # csv.DictReader would keep the last of them without a word
            raise InputError(f"--measured {path!r} is not allowed: its header names column {twice[0]!r} more than once")
        missing = [c for c in REQUIRED_COLUMNS if c not in rows[0]]
        if missing:
            bom = " (the file starts with a byte-order mark: save it as UTF-8 without one)" \
                if header and header[0].startswith("\ufeff") else ""
            raise InputError(f"--measured {path!r} is not allowed: it has no column {missing[0]!r} "
                             f"(validation_measured.csv has {', '.join(REQUIRED_COLUMNS)}, device, ...){bom}")
    out = []
    for i, r in enumerate(rows, start=2):        # row 1 is the header
        where = f"--measured {path!r} row {i}"
        if None in r or any(v is None for v in r.values()):
            raise InputError(f"{where} is not allowed: it has {'more' if None in r else 'fewer'} fields than the header")
        parse_layer(r["layer"], source=f"{where} layer")
        if r["layer"] not in layers or (r.get("algorithm") or "winograd") != algorithm:
            continue
        try:
            Plan.parse(r["schedule"] or None, r["params"], algorithm=algorithm)
        except MegasimError as err:
            reason = " ".join(str(err).split()).removeprefix("--param ")   # the file's column, not the flag
            raise InputError(f"{where} schedule={r['schedule']!r} params={r['params']!r}: {reason}") from None
        try:
            time_us = measured_time(r["measured_us"])
            if time_us is not None and time_us > MAX_MEASURED_US:
                raise ValueError(r["measured_us"])
        except ValueError:
            raise InputError(f"{where} measured_us={r['measured_us'].strip()!r} is not allowed: it must be a finite "
                             f"number > 0 and at most {MAX_MEASURED_US:.0e} (1,000 s), or empty for a failed run") from None
        out.append((where, r))
    return out


def run_validate(args: argparse.Namespace) -> int:
    import re
    from pathlib import Path
    from megasim.calibration.validation import CSV_COLUMNS, predict_rows, run_meta, summarize, write_rows
    from megasim.algorithms import get_algorithm
    from megasim.hardware import load_spec
    layers = layers_of(args.layers, "layer")
    get_algorithm(args.algo)
    if args.measured is not None and not args.measured.strip():
        raise InputError(f"--measured {args.measured!r} is not allowed: give the path of a validation_measured.csv")
    if args.measured and args.no_predict:
        raise InputError(f"--no-predict is not allowed with --measured {args.measured!r}: the file's rows are measured "
                         f"already and --no-predict measures only; leave one of them out")
    if args.measured and not args.out:
        raise InputError(f"--measured {args.measured!r} needs --out DIR: predicting measured rows writes validation.csv "
                         f"and its summary, and the measuring runs' default folder, experiments/results/<device>, "
                         f"holds committed results")
    if not args.no_predict:
        load_spec(args.spec)                    # a broken spec fails before the GPU time is spent
    gpus = getattr(args, "gpus", None)
    if args.measured and (gpus is not None or args.mappings_per_task):
        flag = "--gpus" if gpus is not None else "--mappings-per-task"
        raise InputError(f"{flag} is not allowed with --measured {args.measured!r}: it reads times, it measures none")
    if args.mappings_per_task and gpus is None:
        raise InputError(f"--mappings-per-task {args.mappings_per_task} is not allowed without --gpus: "
                         f"a run on one GPU measures each layer's mappings together")
    if args.measured:
        measured = measured_rows(args.measured, layers, args.algo)
        origins = {id(row): where for where, row in measured}
        rows = [row for _, row in measured]
        if not rows:
            raise OutcomeError(f"--measured {args.measured!r} has no {args.algo} rows for {', '.join(layers)}: "
                               f"nothing to validate (its layers and algorithm must be those given)")
        device = rows[0].get("device") or "unknown"
    elif gpus is not None:
        rows, devices = measure_on_gpus(layers, args, gpus)
        names = sorted({str(r.get("device") or "") for r in rows} - {""})
        device = "+".join(names) if names else "unknown"
    else:
        validate = gpu_module("validate")
        device = validate.device_name()
        rows = validate.measure(layers, args.mappings, algorithm=args.algo, repeats=args.repeats, rounds=args.rounds)
    slug = re.sub(r"[^a-z0-9]+", "-", str(device).lower()).strip("-") or "unknown-device"
    out = Path(args.out or f"experiments/results/{slug}")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {str(out)!r} is not allowed: it is a file; give a folder")
    meta = run_meta({"device": device, "algorithm": args.algo, "layers": layers, "mappings": args.mappings, "spec": args.spec,
                     "measured_from": args.measured or "this run"})
    columns = CSV_COLUMNS
    if gpus is not None:
        meta.update({"cuda_devices": sorted({r["cuda_device"] for r in rows}), "gpus": list(devices),
                     "mappings_per_task": args.mappings_per_task})
        columns = (*CSV_COLUMNS, "cuda_device")
    if args.no_predict:
        write_rows(rows, out / "validation_measured.csv")
        (out / "validation_measured.json").write_text(json.dumps({"meta": meta}, indent=1) + "\n")
        print(f"wrote {out / 'validation_measured.csv'} ({len(rows)} measured rows; predict later with --measured)")
        return 0
    ok = [r for r in rows if r.get("measured_us") not in ("", None)]
    if not ok:
        raise OutcomeError(f"no measured times among the {len(rows)} rows for {', '.join(layers)} (every run "
                           f"failed): nothing to validate")
    rows = predict_rows(ok, args.spec, repo_relative(args.spec), workers=args.workers,
                        origins=[origins.get(id(r)) for r in ok] if args.measured else None)
    rows = [{c: r.get(c, "") for c in columns} for r in rows]
    summary = summarize([r for r in rows if r["predicted_us"] != ""])
    write_rows(rows, out / "validation.csv", columns)
    (out / "validation_summary.json").write_text(json.dumps({"meta": meta, **summary}, indent=1, default=str) + "\n")
    o = summary["overall"]
    if not o.get("points"):
        raise OutcomeError(f"no point could be predicted among {len(ok)} measured rows (see {out / 'validation.csv'}): "
                           f"nothing to compare, no target is met")
    print(f"{o['points']} points on {o['layers']} layers: MAPE {_metric(o, 'mape', '.1%')}, "
          f"Kendall tau {_metric(o, 'kendall_tau', '.3f')}, worst regret {_metric(o, 'regret_max', '.1%')}")
    for name, met in summary["targets_met"].items():
        print(f"  {'met    ' if met else 'NOT met'}  {name}")
    for name in summary.get("targets_not_applicable", []):
        print(f"  n/a      {name}")
    print(f"wrote {out / 'validation.csv'} and {out / 'validation_summary.json'}")
    if "outcome" in o:
        print(f"error: {o['outcome']}", file=sys.stderr)
        return 1
    return 0


def _metric(overall: dict, key: str, form: str) -> str:
    """A summary metric as printed: 'n/a' where it is undefined (Kendall tau of one point, or of times all
    equal, is NaN: printed as 'nan' before)."""
    value = overall.get(key)
    return format(value, form) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def measure_on_gpus(layers: list[str], args: argparse.Namespace, gpus) -> tuple[list[dict], tuple[str, ...]]:
    """The validation rows of `layers` measured on the GPUs of --gpus (``gpu.calibrate.validate.measure_on_gpus``
    on a ``megasim.sweep.gpus.gpu_client``), and the device ids; the devices are checked against those
    this process sees first."""
    import os
    from megasim.sweep.gpus import gpu_client, select_devices
    validate = gpu_module("validate")
    devices = select_devices(gpus, validate.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"), "--gpus")
    with gpu_client(devices) as client:
        rows = validate.measure_on_gpus(client, layers, args.mappings, per_task=args.mappings_per_task,
                                        algorithm=args.algo, repeats=args.repeats, rounds=args.rounds)
    return rows, devices
