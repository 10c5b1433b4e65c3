"""A machine check of a drawn matplotlib figure's layout: what a reader would call unreadable.

`layout_problems(figure, bbox_inches)` draws the figure as savefig would and returns one line per
problem (empty: the figure passes):

- clipped: a text's rendered extent leaves the saved canvas (with bbox_inches="tight" the canvas
  is the tight box savefig writes, else the figure itself);
- overlap: two texts overlap (tick labels of one axis, titles, axis labels, legend entries, notes);
- legend: a legend's box covers a drawn data point (line vertices, scatter points);
- ticks: a panel with data shows no tick labels on one of its axes (a reader of a wrapped grid
  should not have to look for them in another panel; a twinx axis is labelled by its parent), or
  fewer than two on an axis whose data take more than one value (a log axis labelled only at 1).

`checking_savefig(monkeypatch)` wraps `Figure.savefig` so every figure any code saves is checked on
its real artist tree before it is written; the problems collect per file name.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.patches import Rectangle
from matplotlib.collections import PathCollection
from matplotlib.text import Text
from matplotlib.transforms import Bbox

TOLERANCE_PX = 1.0  # anti-aliasing: extents that touch within a pixel do not count


def drawn_texts(figure: Figure, renderer) -> list[tuple[str, Bbox]]:
    """(name, display extent) of every text the figure draws: visible, non-empty, and for a tick
    label, its tick within the view interval (matplotlib keeps labels of ticks it does not draw)."""
    tick_labels, drawn_labels = {}, set()
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            for tick in (*axis.majorTicks, *axis.minorTicks):
                for label in (tick.label1, tick.label2):
                    tick_labels[id(label)] = axes
            if axes.get_visible() and axes.axison and axis.get_visible():
                for tick in axis._update_ticks():  # the ticks a draw draws
                    if tick.get_visible():
                        drawn_labels.update((id(tick.label1), id(tick.label2)))
    texts = []
    for text in figure.findobj(Text):
        if not text.get_visible() or not text.get_text().strip():
            continue
        if id(text) in tick_labels and id(text) not in drawn_labels:
            continue
        axes = text.axes or tick_labels.get(id(text))
        if axes is not None and not axes.get_visible():
            continue
        extent = text.get_window_extent(renderer)
        if extent.width <= 0 or extent.height <= 0:
            continue
        texts.append((_describe(text, axes), extent))
    return texts


def _describe(text: Text, axes) -> str:
    where = ""
    if axes is not None:
        where = f" in panel '{axes.get_title() or axes.get_ylabel() or 'axes'}'"
    return f"'{text.get_text()[:40]}'{where}"


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > TOLERANCE_PX
            and min(a.y1, b.y1) - max(a.y0, b.y0) > TOLERANCE_PX)


def saved_canvas(figure: Figure, renderer, bbox_inches=None) -> Bbox:
    """The part of the figure savefig writes, in display pixels."""
    if isinstance(bbox_inches, Bbox):  # inches, measured once for every format (figure_box.tight_bbox)
        return Bbox(bbox_inches.get_points() * figure.dpi)
    if bbox_inches == "tight":
        tight = figure.get_tightbbox(renderer)  # inches
        return Bbox(tight.get_points() * figure.dpi).padded(0.1 * figure.dpi)
    return figure.bbox


def clipped_texts(texts, canvas: Bbox) -> list[str]:
    return [f"clipped: {name} leaves the canvas" for name, box in texts
            if box.x0 < canvas.x0 - TOLERANCE_PX or box.x1 > canvas.x1 + TOLERANCE_PX
            or box.y0 < canvas.y0 - TOLERANCE_PX or box.y1 > canvas.y1 + TOLERANCE_PX]


def overlapping_texts(texts) -> list[str]:
    problems = []
    boxes = np.array([[b.x0, b.y0, b.x1, b.y1] for _, b in texts]).reshape(-1, 4)
    for i, j in itertools.combinations(range(len(texts)), 2):
        a, b = boxes[i], boxes[j]
        if (min(a[2], b[2]) - max(a[0], b[0]) > TOLERANCE_PX
                and min(a[3], b[3]) - max(a[1], b[1]) > TOLERANCE_PX):
            problems.append(f"overlap: {texts[i][0]} and {texts[j][0]}")
    return problems


def data_points(axes) -> np.ndarray:
    """Display coordinates of the data points an axes draws (line vertices, scatter offsets)."""
    points = []
    for line in axes.get_lines():
        if line.get_visible() and len(line.get_xdata()):
            xy = np.asarray(line.get_xydata(), float)  # unit-converted (dates are numbers)
            xy = xy[np.isfinite(xy).all(axis=1)]
            if len(xy):
                points.append(line.get_transform().transform(xy))
    for collection in axes.collections:
        if isinstance(collection, PathCollection) and collection.get_visible():
            offsets = np.asarray(collection.get_offsets(), float).reshape(-1, 2)
            offsets = offsets[np.isfinite(offsets).all(axis=1)]
            if len(offsets):
                points.append(collection.get_offset_transform().transform(offsets))
    if not points:
        return np.empty((0, 2))
    xy = np.concatenate(points)
    inside = axes.bbox  # points outside the panel are not drawn
    keep = ((xy[:, 0] >= inside.x0) & (xy[:, 0] <= inside.x1)
            & (xy[:, 1] >= inside.y0) & (xy[:, 1] <= inside.y1))
    return xy[keep]


def legends(figure: Figure) -> list[Legend]:
    found = [legend for legend in figure.legends if legend.get_visible()]
    for axes in figure.axes:
        legend = axes.get_legend()
        if legend is not None and legend.get_visible():
            found.append(legend)
    return found


def legends_on_data(figure: Figure, renderer) -> list[str]:
    problems = []
    for legend in legends(figure):
        box = legend.get_window_extent(renderer)
        for axes in figure.axes:
            if not axes.get_visible() or not axes.axison:
                continue
            xy = data_points(axes)
            covered = ((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1)
                       & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1))
            if covered.any():
                title = legend.get_title().get_text() or "legend"
                problems.append(f"legend: '{title}' covers {int(covered.sum())} data point(s) of "
                                f"panel '{axes.get_title() or axes.get_ylabel()}'")
    return problems


def labelled_ticks(axis) -> list[float]:
    """Locations of the ticks of `axis` drawn with a visible, non-empty label."""
    if not axis.get_visible():
        return []
    low, high = sorted(axis.get_view_interval())
    span = abs(high - low) * 1e-9
    shown = []
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        location = tick.get_loc()
        if location is None or not (low - span <= location <= high + span):
            continue
        labels = (tick.label1, tick.label2)  # label2: a right (twinx) or top axis
        if tick.get_visible() and any(label.get_visible() and label.get_text().strip()
                                      for label in labels):
            shown.append(location)
    return shown


def _has_data(axes) -> bool:
    return axes.axison and axes.get_visible() and bool(
        axes.get_lines() or axes.collections or axes.patches or axes.containers)


def _data_span(axes, which: str) -> int:
    """How many distinct values (at most 2 counted) the axes' data take on one axis: lines in data
    coordinates (not reference lines such as axhline), scatter points and bars (their centre and
    top)."""
    values = set()
    for line in axes.get_lines():
        if line.get_transform() != axes.transData:
            continue
        data = np.asarray(line.get_xydata(), float)[:, 0 if which == "x" else 1]
        values.update(np.round(data[np.isfinite(data)], 9))
    for collection in axes.collections:
        if isinstance(collection, PathCollection) and collection.get_transform() is not None:
            offsets = np.asarray(collection.get_offsets(), float).reshape(-1, 2)
            data = offsets[:, 0 if which == "x" else 1]
            values.update(np.round(data[np.isfinite(data)], 9))
    for patch in axes.patches:
        if isinstance(patch, Rectangle) and patch.get_height():
            values.add(round(patch.get_x() + patch.get_width() / 2 if which == "x"
                             else patch.get_y() + patch.get_height(), 9))
    return min(len(values), 2) if values else 2


def _shares(axes, other, which: str) -> bool:
    group = axes.get_shared_x_axes() if which == "x" else axes.get_shared_y_axes()
    return group.joined(axes, other)


def hidden_ticks(figure: Figure) -> list[str]:
    problems = []
    panels = [axes for axes in figure.axes if _has_data(axes)]
    for axes in panels:
        name = axes.get_title() or axes.get_ylabel() or "axes"
        for which, axis in (("x", axes.xaxis), ("y", axes.yaxis)):
            shown = labelled_ticks(axis)
            if not shown:
                if not _labelled_by_twin(figure, axes, which):
                    problems.append(f"ticks: panel '{name}' shows no {which} tick labels")
            elif len(shown) < 2 and _data_span(axes, which) > 1:
                problems.append(f"ticks: panel '{name}' labels only {len(shown)} {which} tick")
    return problems


def _labelled_by_twin(figure: Figure, axes, which: str) -> bool:
    """A twin (twinx) hides its own x axis: its parent, sharing x at the same place, labels it."""
    box = axes.get_position()
    for other in figure.axes:
        if other is axes or not other.get_visible() or not _shares(axes, other, which):
            continue
        if np.allclose(other.get_position().bounds, box.bounds):
            if labelled_ticks(other.xaxis if which == "x" else other.yaxis):
                return True
    return False


def layout_problems(figure: Figure, bbox_inches=None) -> list[str]:
    """Every layout problem of a figure as it would be saved (see the module docstring)."""
    if not hasattr(figure.canvas, "get_renderer"):  # a bare Figure: give it the PNG canvas
        FigureCanvasAgg(figure)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = drawn_texts(figure, renderer)
    return [
        *clipped_texts(texts, saved_canvas(figure, renderer, bbox_inches)),
        *overlapping_texts(texts),
        *legends_on_data(figure, renderer),
        *hidden_ticks(figure),
    ]


def saved_name(fname) -> str:
    """The name of the file a figure is saved as: a figure written atomically goes to a temporary
    `.<name>.<random>.tmp` beside it first (scalesweep/contract/atomic.py)."""
    name = Path(str(fname)).name
    temporary = re.fullmatch(r"\.(.+)\.[^.]+\.tmp", name)
    return temporary.group(1) if temporary else name


def checking_savefig(monkeypatch, write: bool = True) -> dict[str, list[str]]:
    """Wrap Figure.savefig: each saved figure's problems under its file name (the dict returned,
    filled as figures are saved). `write=False` checks without writing the file: the check's own
    draw is the costly part of a save, and a test of the layout needs no PNG."""
    problems: dict[str, list[str]] = {}
    original = Figure.savefig

    def checked(figure, fname, *args, **kwargs):
        problems[saved_name(fname)] = layout_problems(figure, kwargs.get("bbox_inches"))
        if write:
            return original(figure, fname, *args, **kwargs)
        return None

    monkeypatch.setattr(Figure, "savefig", checked)
    return problems
