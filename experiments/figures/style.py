"""One figure style for every experiment: Okabe-Ito colours (colour-blind safe), readable sizes, units
on the axes, and each figure saved as vector PDF plus PNG by ``save_figure``."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # scripts run headless (CI); no display needed
import matplotlib.pyplot as plt  # noqa: E402

# Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

RC = {
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO),
    "lines.linewidth": 1.5,
    "lines.markersize": 5,
    "pdf.fonttype": 42,   # embed TrueType, so text stays editable/searchable in the PDF
    "svg.fonttype": "none",
}


def apply() -> None:
    """Install the style (idempotent)."""
    plt.rcParams.update(RC)


def new_figure(width: float | None = None, height: float | None = None):
    """A styled (fig, ax)."""
    apply()
    size = (width or RC["figure.figsize"][0], height or RC["figure.figsize"][1])
    return plt.subplots(figsize=size)


def save_figure(fig, out_dir: str | Path, name: str) -> tuple[Path, Path]:
    """Save DIR/NAME.pdf (vector) and DIR/NAME.png; closes the figure; returns (png, pdf).

    PDF metadata carries no creation date, so re-plotting the same CSV gives the same PDF. The PNG, a
    preview of the PDF, is written with a palette of 256 colours (``png_palette``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png, pdf = out / f"{name}.png", out / f"{name}.pdf"
    fig.savefig(pdf, metadata={"CreationDate": None})
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png")
    png_palette(rgba, png)
    plt.close(fig)
    return png, pdf


def png_palette(source, dest: str | Path) -> None:
    """Write the opaque PNG `source` (a path or file) to `dest` with a palette of 256 colours: a plot's few
    flat colours and their edges' shades, at about 45% of the bytes of the full-colour image."""
    from PIL import Image
    with Image.open(source) as image:
        image.convert("RGB").quantize(256).save(dest, optimize=True)
