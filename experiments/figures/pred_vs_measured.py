"""The model's predictions against GPU measurements: scatter (log-log, y = x, +-10 % band) and error per layer.

Produces ``DIR/pred_vs_measured.csv`` (one row per measured point of the validation CSV: layer,
schedule, params, predicted and measured time, predicted/measured ratio, relative error), its JSON
(provenance, the source file and its SHA-256, and the source's own ``meta`` when a JSON of the same
name lies beside it) and ``DIR/pred_vs_measured.png``/``.pdf``, drawn from the CSV alone.

From: a validation CSV written by the GPU validation harness (``--measured``, default
``experiments/results/nvidia-h200/validation.csv``) with at least the columns ``layer``, ``schedule``,
``params``, ``predicted_us``, ``measured_us`` (others, such as ``device``, are carried along; rows whose
``status`` column, if any, is not ``ok`` or whose times are missing are left out and listed in the
JSON). Nothing is simulated or measured here. If the file does not exist the script prints one line and exits with
status 2. Relative error = (predicted - measured) / measured.

Run time: ~2 s (no ``--quick`` or ``--gpu``: there is nothing to shorten and no GPU spec to use).

    python -m experiments.figures.pred_vs_measured [--measured FILE] [--out DIR]
    python -m experiments.figures.pred_vs_measured --plot-only --out DIR
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiments.figures import style
from experiments.provenance import provenance, read_rows, write_results
from experiments.sweeps import run_script

NAME = "pred_vs_measured"
DEFAULT_MEASURED = Path("experiments/results/nvidia-h200/validation.csv")
REQUIRED = ("layer", "schedule", "params", "predicted_us", "measured_us")
BAND = 0.10


def _extra_args(ap) -> None:
    ap.add_argument("--measured", type=Path, default=DEFAULT_MEASURED,
                    help=f"validation CSV ({', '.join(REQUIRED)}, ...; default {DEFAULT_MEASURED})")


def _fail(message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def prepare(args) -> None:
    """Refuse, in one line and with status 2, a validation CSV that is missing or lacks columns."""
    if args.plot_only:
        return
    if not args.measured.exists():
        _fail(f"{NAME}: validation CSV {args.measured} does not exist yet (the GPU validation harness writes "
              f"it; columns {', '.join(REQUIRED)})")
    rows = read_rows(args.measured)
    missing = [c for c in REQUIRED if not rows or c not in rows[0]]
    if not rows or missing:
        _fail(f"{NAME}: {args.measured} " + (f"lacks columns {', '.join(missing)}" if rows else "has no rows"))


def compute(args, _spec) -> Path:
    source = read_rows(args.measured)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for r in source:
        pred, meas = _positive(r["predicted_us"]), _positive(r["measured_us"])
        if r.get("status", "ok") not in ("", "ok") or pred is None or meas is None:
            skipped.append(f"{r['layer']} {r['schedule']} {r['params']}: status {r.get('status', '')!r}, "
                           f"predicted {r['predicted_us']!r}, measured {r['measured_us']!r}")
            continue
        out = {c: r[c] for c in REQUIRED}
        out.update({k: v for k, v in r.items() if k not in REQUIRED})
        out.update(predicted_us=pred, measured_us=meas, ratio=round(pred / meas, 4),
                   rel_error=round((pred - meas) / meas, 4))
        rows.append(out)
    source_meta_path = args.measured.with_suffix(".json")
    try:
        source_meta = json.loads(source_meta_path.read_text()).get("meta") if source_meta_path.exists() else None
    except ValueError:
        source_meta = None
    meta = provenance({"script": f"experiments.{NAME}", "device": "none (reads a validation CSV)",
                       "parameters": {"source": str(args.measured),
                                      "source_sha256": hashlib.sha256(args.measured.read_bytes()).hexdigest(),
                                      "band": BAND,
                                      "skipped_rows": skipped},
                       "source_meta": source_meta})
    if not rows:
        _fail(f"{NAME}: {args.measured} has no row with a status of ok and positive times ({len(skipped)} skipped)")
    csv_path, _ = write_results(rows, args.out, NAME, meta)
    if skipped:
        print(f"  skipped {len(skipped)} rows (status not ok, or no time); listed in the JSON's parameters")
    for line in error_summary(rows):
        print("  " + line)
    return csv_path


def _positive(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if np.isfinite(value) and value > 0 else None


def error_summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per schedule and one for all: points, mean |error|, share within the band, worst."""
    lines = []
    groups = {s: [r for r in rows if r["schedule"] == s] for s in dict.fromkeys(r["schedule"] for r in rows)}
    for name, mine in [*groups.items(), ("all", list(rows))]:
        err = np.array([float(r["rel_error"]) for r in mine])
        worst = mine[int(np.argmax(np.abs(err)))]
        lines.append(f"{name}: {len(mine)} points, mean |error| {np.mean(np.abs(err)) * 100:.1f} %, "
                     f"{np.mean(np.abs(err) <= BAND) * 100:.0f} % within +-{BAND * 100:.0f} %, worst "
                     f"{float(worst['rel_error']) * 100:+.1f} % ({worst['layer']}, {worst['schedule']})")
    return lines


def plot(csv_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Left: predicted vs measured (log-log), y = x and the +-10 % band. Right: relative error per layer."""
    rows = read_rows(csv_path)
    schedules = list(dict.fromkeys(r["schedule"] for r in rows))
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    style.apply()
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.0), width_ratios=(1, 1.4))
    meas = np.array([float(r["measured_us"]) for r in rows])
    pred = np.array([float(r["predicted_us"]) for r in rows])
    lo, hi = min(meas.min(), pred.min()) / 1.3, max(meas.max(), pred.max()) * 1.3
    line = np.geomspace(lo, hi, 50)
    left.fill_between(line, line * (1 - BAND), line * (1 + BAND), color="#DDDDDD", label=f"+-{BAND * 100:.0f} %")
    left.plot(line, line, color="black", lw=0.8, label="predicted = measured")
    offsets = np.linspace(-0.25, 0.25, len(schedules)) if len(schedules) > 1 else [0.0]
    for i, s in enumerate(schedules):
        mine = [r for r in rows if r["schedule"] == s]
        colour, marker = style.OKABE_ITO[i % len(style.OKABE_ITO)], style.MARKERS[i % len(style.MARKERS)]
        err = np.array([float(r["rel_error"]) for r in mine])
        left.plot([float(r["measured_us"]) for r in mine], [float(r["predicted_us"]) for r in mine], ls="none",
                  marker=marker, color=colour, mfc="none",
                  label=f"{s} ({len(mine)}; mean |err| {np.mean(np.abs(err)) * 100:.0f} %)")
        right.plot([layers.index(r["layer"]) + offsets[i] for r in mine], err * 100, ls="none", marker=marker,
                   color=colour, mfc="none", label=s)
    left.set_xscale("log")
    left.set_yscale("log")
    from matplotlib.ticker import NullFormatter

    for axis in (left.xaxis, left.yaxis):
        axis.set_minor_formatter(NullFormatter())     # decade labels only: minor labels collide
    left.set_xlim(lo, hi)
    left.set_ylim(lo, hi)
    left.set_aspect("equal")
    left.set_xlabel("measured (us)")
    left.set_ylabel("predicted by the model (us)")
    left.legend(frameon=False, fontsize=7, loc="upper left")
    right.axhspan(-BAND * 100, BAND * 100, color="#DDDDDD")
    right.axhline(0, color="black", lw=0.8)
    right.set_xticks(range(len(layers)), layers, rotation=45, ha="right")
    right.set_ylabel("(predicted - measured) / measured (%)")
    right.legend(frameon=False, fontsize=7)
    err = np.array([float(r["rel_error"]) for r in rows])
    gpu = rows[0].get("gpu") or rows[0].get("device") or "GPU"
    fig.suptitle(f"Model vs measured on {gpu}: {len(rows)} points, mean |error| {np.mean(np.abs(err)) * 100:.1f} %, "
                 f"{np.mean(np.abs(err) <= BAND) * 100:.0f} % within +-{BAND * 100:.0f} %", fontsize=9)
    fig.tight_layout()
    return style.save_figure(fig, out_dir, NAME)


def main(argv: Sequence[str] | None = None) -> int:
    return run_script(NAME, __doc__, argv, compute, plot, extra_args=_extra_args, prepare=prepare,
                      uses_gpu_option=False, options=())


if __name__ == "__main__":
    sys.exit(main())
