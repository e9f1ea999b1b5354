"""Predicted vs measured plots from validation.csv alone (issue 4).

    python -m experiments.figures.plot_validation --out DIR [VALIDATION_CSV]

Writes DIR/validation_scatter.png (predicted vs measured, log-log, one colour per layer, the y = x line
and +-10% band) and DIR/validation_error_per_layer.png (signed error of every mapping per layer, MAPE
marked); VALIDATION_CSV defaults to experiments/results/nvidia-h200/validation.csv. --out has no
default, so the results folders are written only when named. Reads nothing else; seconds on a CPU.
A CSV that is missing or has no predicted and measured rows is one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


DEFAULT_CSV = Path("experiments/results/nvidia-h200/validation.csv")


def _fail(message: str) -> None:
    print(f"plot_validation: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> list[Path]:
    ap = argparse.ArgumentParser(description="Predicted vs measured plots from a validation.csv alone.")
    ap.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV,
                    help=f"a validation.csv of `megasim validate` (default {DEFAULT_CSV})")
    ap.add_argument("--out", type=Path, required=True, help="the folder to write the two PNGs into (it must exist)")
    args = ap.parse_args(argv)
    path = args.csv
    if not args.out.is_dir():
        _fail(f"--out {str(args.out)!r} is not allowed: it must be an existing folder")
    try:
        with path.open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("predicted_us") and r.get("measured_us")]
    except (OSError, UnicodeDecodeError) as err:
        _fail(f"validation CSV {str(path)!r} cannot be read: {getattr(err, 'strerror', None) or err}")
    if not rows:
        _fail(f"validation CSV {str(path)!r} has no row with predicted_us and measured_us (`megasim validate` writes them)")
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for i, layer in enumerate(layers):
        rs = [r for r in rows if r["layer"] == layer]
        ax.scatter([float(r["measured_us"]) / 1e3 for r in rs], [float(r["predicted_us"]) / 1e3 for r in rs],
                   s=14, color=cmap(i % 20), label=layer)
    lo = min(min(float(r["measured_us"]), float(r["predicted_us"])) for r in rows) / 1e3 * 0.8
    hi = max(max(float(r["measured_us"]), float(r["predicted_us"])) for r in rows) / 1e3 * 1.2
    x = np.array([lo, hi])
    ax.plot(x, x, "k-", lw=0.8)
    ax.fill_between(x, x * 0.9, x * 1.1, color="0.85", zorder=0, label="+-10%")
    ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="predicted (ms)",
           title=f"{len(rows)} mappings, {rows[0].get('device') or 'unknown device'}")
    ax.legend(fontsize=7, ncol=2)
    out1 = args.out / "validation_scatter.png"
    fig.tight_layout()
    fig.savefig(out1, dpi=130)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, layer in enumerate(layers):
        rs = [r for r in rows if r["layer"] == layer]
        err = [100 * (float(r["predicted_us"]) / float(r["measured_us"]) - 1) for r in rs]
        colors = ["C3" if r["schedule"] == "nonfused" else "C2" if r["schedule"] == "naive" else "C0" for r in rs]
        ax.scatter(np.full(len(err), i) + np.linspace(-0.25, 0.25, len(err)), err, s=10, c=colors)
        ax.plot([i - 0.3, i + 0.3], [np.mean(np.abs(err))] * 2, "k-", lw=1)
    ax.axhspan(-10, 10, color="0.9", zorder=0)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(range(len(layers)), layers, rotation=45, ha="right")
    ax.set_ylabel("predicted / measured - 1 (%)")
    ax.set_title("error per mapping (red: non-fused, green: naive, blue: Algorithm 1); bar: MAPE")
    out2 = args.out / "validation_error_per_layer.png"
    fig.tight_layout()
    fig.savefig(out2, dpi=130)
    plt.close(fig)
    print(f"wrote {out1} and {out2}")
    return [out1, out2]


if __name__ == "__main__":
    main()
