"""Overlapping text in a matplotlib figure: the window boxes of its titles, axis labels and tick labels, as drawn."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np


def drawn_tick_labels(axis) -> list:
    """The tick labels an axis draws: those of the ticks matplotlib's draw updates (inside the view limits; the
    public get_ticklabels also gives ticks beyond them, and ticks left over from an earlier draw)."""
    return [label for tick in axis._update_ticks() for label in (tick.label1, tick.label2) if label.get_visible()]


def outline(text, renderer):
    """The text's drawn rectangle as a polygon in display pixels, turned by its rotation (matplotlib rotates the
    text, then aligns the rotated rectangle's bounding box)."""
    from shapely import Polygon

    box = text.get_window_extent(renderer)
    rotation = text.get_rotation()
    text.set_rotation(0)
    w, h = text.get_window_extent(renderer).size
    text.set_rotation(rotation)
    angle = np.deg2rad(rotation % 180)
    s = abs(np.sin(angle))
    (x0, y0), (x1, y1) = box.get_points()
    if angle <= np.pi / 2:   # its lowest, rightmost, highest and leftmost corners
        return Polygon([(x0 + h * s, y0), (x1, y0 + w * s), (x1 - h * s, y1), (x0, y1 - w * s)])
    return Polygon([(x1 - h * s, y0), (x1, y1 - w * s), (x0 + h * s, y1), (x0, y0 + w * s)])


def text_outlines(fig) -> list[tuple[str, object]]:
    """(what, outline) of every visible, non-empty title, axis label and tick label, as drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = [("suptitle", fig._suptitle)] if fig._suptitle is not None else []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        found += [(f"axes {i} title", t) for t in (ax.title, ax._left_title, ax._right_title)]
        found += [(f"axes {i} x label", ax.xaxis.label), (f"axes {i} y label", ax.yaxis.label)]
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            found += [(f"axes {i} {name} tick", label) for label in drawn_tick_labels(axis)]
    return [(f"{what} {t.get_text()!r}", outline(t, renderer)) for what, t in found
            if t.get_visible() and t.get_text().strip()]


def overlaps(fig, tolerance_px2: float = 2.0) -> list[str]:
    """'A / B' for every two texts whose drawn rectangles share more than tolerance_px2 square pixels."""
    outlines = text_outlines(fig)
    return [f"{a} / {b}" for i, (a, shape_a) in enumerate(outlines) for b, shape_b in outlines[i + 1:]
            if shape_a.intersection(shape_b).area > tolerance_px2]


@contextmanager
def checked_figures():
    """Within it, every Figure.savefig records {file name: overlaps} in the yielded dict before it saves."""
    from matplotlib.figure import Figure

    found: dict[str, list[str]] = {}
    original = Figure.savefig

    def savefig(fig, path, *args, **kwargs):
        found[getattr(path, "name", str(path))] = overlaps(fig)
        return original(fig, path, *args, **kwargs)

    Figure.savefig = savefig
    try:
        yield found
    finally:
        Figure.savefig = original
