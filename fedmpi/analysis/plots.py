"""The analysis tools' figures: matplotlib without a display, panel grids, grouped bars, saving PNG (and PDF)."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from fedmpi.analysis.methods import method_legend

# ------------------------------------------------------------------ figures


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def panel_grid(n: int, max_cols: int = 3, size=(5.2, 3.8)):
    """A figure with n panels in rows of up to max_cols; returns (figure, list of n axes)."""
    plt = pyplot()
    cols = max(1, min(max_cols, n))
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def save_figure(fig, path: str | Path, pdf: bool = False) -> list[Path]:
    """Write the figure as PNG (and PDF beside it); returns the files written."""
    png = Path(path)
    pdf = pdf or png.suffix.lower() == ".pdf"
    if png.suffix.lower() != ".png":
        png = png.with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    written = [png]
    fig.savefig(png, dpi=150, bbox_inches="tight")
    if pdf:
        written.append(png.with_suffix(".pdf"))
        fig.savefig(written[-1], bbox_inches="tight")
    pyplot().close(fig)
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    return written


def grouped_bars(ax, categories: list[str], series: dict[str, list[float]], colors: dict | None = None,
                 value_fmt: str = "{:+.2f}") -> None:
    """Bars grouped by category (x), one bar per series in each group, each labelled with its value."""
    n = max(1, len(series))
    width = 0.8 / n
    x = np.arange(len(categories))
    for i, (name, values) in enumerate(series.items()):
        heights = np.array([np.nan if v is None else v for v in values], dtype=float)
        bars = ax.bar(x - 0.4 + width * (i + 0.5), np.nan_to_num(heights), width,
                      label=method_legend(name), color=(colors or {}).get(name))
        for bar, h in zip(bars, heights):
            if np.isnan(h):
                bar.set_visible(False)
            elif n <= 4:
                ax.annotate(value_fmt.format(h), (bar.get_x() + bar.get_width() / 2, h),
                            ha="center", va="bottom" if h >= 0 else "top", fontsize=7,
                            xytext=(0, 2 if h >= 0 else -2), textcoords="offset points")
    ax.set_xticks(x, categories)


def figure_legend(fig, axes, title: str) -> None:
    """One legend for all panels, below them (entries in first-seen order). The panels are laid out first
    (tight_layout), so no panel's title runs into the x-axis labels of the panel above it."""
    fig.tight_layout()
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries.keys()), title=title, loc="upper center",
                   bbox_to_anchor=(0.5, 0.0), ncol=min(len(entries), 4), frameon=False)



def add_figure_args(parser: argparse.ArgumentParser, default: str, name: str = "--fig",
                    what: str = "the figure") -> None:
    parser.add_argument(name, default=None, metavar="PNG",
                        help=f"where {what} goes (PNG; default: {default} beside the first run or sweep given: "
                             "in the sweep or run folder)")


def beside_input(path: str | None, inputs: list[str], default: str) -> Path:
    """The figure's path: as given, else `default` in the folder of the first input (a sweep or run folder,
    or the folder holding a log file)."""
    if path:
        return Path(path)
    first = Path(inputs[0])
    return (first if first.is_dir() else first.parent) / default


def add_pdf_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pdf", action="store_true", help="also write each figure as PDF beside the PNG")
