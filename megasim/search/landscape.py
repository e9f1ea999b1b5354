"""The landscape of a search: every evaluated point as a CSV row, and a plot drawn from the CSV alone.

Columns: the space's parameters, ``fidelity``, ``time_us`` (empty if the point cannot run),
``reason``, and the absolute plan (``D_IG``, ``D_GO``, ``param``). The plot shows the full-fidelity
time against the two most influential parameters (those whose mean time varies most across their
values): one panel per value of the second, the first on the x axis, a strip of points per value.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable

from megasim.search.record import Record

_EXTRA_COLUMNS = ("D_IG", "D_GO", "batch", "cached", "sim_wall_s", "param")


def write_landscape(records: Iterable[Record], names: Iterable[str], path: str | Path) -> Path:
    names = list(names)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*names, "fidelity", "time_us", "reason", *_EXTRA_COLUMNS])
        for r in records:
            w.writerow([*(r.params[n] for n in names), r.extras.get("fidelity", "full"),
                        "" if r.time_us is None else f"{r.time_us:.4f}", r.reason or "",
                        *(r.extras.get(c, "") for c in _EXTRA_COLUMNS)])
    return path


def read_landscape(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    """(parameter names, rows) of a landscape CSV."""
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        fields = reader.fieldnames or []
    names = fields[:fields.index("fidelity")] if "fidelity" in fields else []
    return names, rows


def influence(names: list[str], rows: list[dict[str, str]]) -> list[tuple[str, float]]:
    """Parameters by the spread (max - min) of the mean time over their values, largest first."""
    out = []
    for n in names:
        groups: dict[str, list[float]] = {}
        for r in rows:
            groups.setdefault(r[n], []).append(float(r["time_us"]))
        means = [sum(v) / len(v) for v in groups.values()]
        out.append((n, (max(means) - min(means)) if len(means) > 1 else 0.0))
    return sorted(out, key=lambda x: -x[1])


def plot_landscape(csv_path: str | Path, out_path: str | Path, title: str = "") -> Path:
    """Time vs the two most influential parameters, from the CSV alone (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, rows = read_landscape(csv_path)
    rows = [r for r in rows if r["time_us"] and r["fidelity"] == "full"] or [r for r in rows if r["time_us"]]
    ranked = influence(names, rows)
    first = ranked[0][0] if ranked else names[0]
    second = ranked[1][0] if len(ranked) > 1 else None
    panels = sorted({r[second] for r in rows}, key=_num) if second else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), sharey=True, squeeze=False)
    xs = sorted({r[first] for r in rows}, key=_num)
    best = min(float(r["time_us"]) for r in rows) if rows else 0.0
    for ax, pv in zip(axes[0], panels):
        sel = [r for r in rows if second is None or r[second] == pv]
        for i, xv in enumerate(xs):
            ys = [float(r["time_us"]) for r in sel if r[first] == xv]
            jitter = [i + 0.25 * ((k % 5) - 2) / 2 for k in range(len(ys))]
            ax.scatter(jitter, ys, s=10, alpha=0.7, color="tab:blue")
        ax.axhline(best, color="tab:red", lw=0.8, ls="--")
        ax.set_xticks(range(len(xs)), xs)
        ax.set_xlabel(first)
        ax.set_title(f"{second}={pv}" if second else "", fontsize=9)
    axes[0][0].set_ylabel("predicted time (us)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(out_path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _num(v: str):
    try:
        return (0, float(v))
    except ValueError:
        return (1, v)
