"""The plot kit every figure of the package is drawn with: one look (STYLE), data values as safe
labels, colours for any number of series, legends, notes, GPU axes, placeholders and PNG files.

`plot_table` turns a scaling-shaped table into the rows a figure plots, with `series` (the label
within a model panel) and `label` (among all groups) naming only the keys that tell the groups
apart. When a figure would need more than MAX_COLOURS colours (a sweep of hundreds of groups), it
colours by fewer axes (`colouring`) and draws, per colour, the median over its series with their
range as a band: hundreds of lines and legend entries can neither be read nor drawn in reasonable
time. The figure's data keeps every series.

Names from the data (models, datasets, axis values) reach every label, title and legend through
`plot_text`: shown verbatim (a `$` escaped, or matplotlib would typeset `$x^2$` as math and fail
on `$\\frac{$`, losing every figure) and cut to LABEL_LIMIT characters (a 100 kB name would
size a legend, and the PNG, beyond any memory).
"""

from __future__ import annotations

import colorsys
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on clusters or here; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.ticker import NullFormatter, NullLocator  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from scalesweep.analysis.scaling import SCALING_COLUMNS, format_value  # noqa: E402
from scalesweep.contract import atomic, layout  # noqa: E402
from scalesweep.report.figure_box import tight_bbox  # noqa: E402
from scalesweep.tidy.table import table_group_keys  # noqa: E402

GPUS_LABEL = "GPUs"
# One look for every figure: white panels with a light grid, the paper context's font sizes.
# Titles sit at the top of their panel (axes.titley 1.0, where matplotlib's automatic placement
# put every one of ours: no panel has x ticks on top). Left automatic, every draw and layout
# measured each titled panel's y tick labels once more to place it: a fifth of the figures' time.
#
# The look is seaborn's "whitegrid" style and "notebook" context at font_scale 0.9 (seaborn 0.13.2:
# axes_style, plotting_context), its values written out: importing seaborn, and scipy.stats with
# it, cost a small sweep's analyze a fifth of its time for these numbers alone.
# tests/test_plotkit_look.py checks every value against seaborn's own. Left out: its image.cmap
# "rocket", a colormap only seaborn's import registers (no figure of ours draws an image).
SEABORN_WHITEGRID_NOTEBOOK = {
    "figure.facecolor": "white", "axes.labelcolor": ".15", "xtick.direction": "out",
    "ytick.direction": "out", "xtick.color": ".15", "ytick.color": ".15", "axes.axisbelow": True,
    "grid.linestyle": "-", "text.color": ".15", "font.family": ["sans-serif"],
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "lines.solid_capstyle": "round", "patch.edgecolor": "w", "patch.force_edgecolor": True,
    "xtick.top": False, "ytick.right": False, "axes.grid": True, "axes.facecolor": "white",
    "axes.edgecolor": ".8", "grid.color": ".8", "axes.spines.left": True, "axes.spines.bottom": True,
    "axes.spines.right": True, "axes.spines.top": True, "xtick.bottom": False, "ytick.left": False,
    "axes.linewidth": 1.25, "grid.linewidth": 1, "lines.linewidth": 1.5, "lines.markersize": 6,
    "patch.linewidth": 1, "xtick.major.width": 1.25, "ytick.major.width": 1.25,
    "xtick.minor.width": 1, "ytick.minor.width": 1, "xtick.major.size": 6, "ytick.major.size": 6,
    "xtick.minor.size": 4, "ytick.minor.size": 4, "font.size": 10.8, "axes.labelsize": 10.8,
    "axes.titlesize": 10.8, "xtick.labelsize": 9.9, "ytick.labelsize": 9.9, "legend.fontsize": 9.9,
    "legend.title_fontsize": 10.8,
}
# A patch's default face colour is "C0", which matplotlib looks up in the colour cycle again for
# every patch it makes (each panel's four spines and background, each band): 0.4 ms each, a third
# of a CPU-second for 10,000 logs' figures. The same colour, looked up once.
DEFAULT_PATCH_FACE = matplotlib.rcParams["axes.prop_cycle"].by_key().get("color", ["k"])[0]
STYLE = {**SEABORN_WHITEGRID_NOTEBOOK, "axes.titley": 1.0, "patch.facecolor": DEFAULT_PATCH_FACE}
# seaborn's "colorblind" palette (seaborn.palettes.SEABORN_PALETTES), for the step breakdown's parts.
COLORBLIND = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4",
              "#949494", "#ece133", "#56b4e9")
PLAIN_KEYS = ("model", "framework", "dataset")  # shown as their value; other keys as key=value
MEASURED, IDEAL = "measured", "ideal"
DASHES = {MEASURED: "", IDEAL: (4, 2)}
COL_WRAP = 3
MAX_COLOURS = 12
DEFAULT_PALETTE_SIZE = 10  # seaborn's default palette repeats its colours after this many
# Text from the data (names, labels, panel titles) is cut to this many characters: a 100 kB dataset
# name would size a legend, and with it the PNG, of gigapixels.
LABEL_LIMIT = 60
LABEL_DIGEST_CHARS = 6  # hex digits that keep two long names with one start apart
# plot_table adds series and label, figures.with_step_times the step times.
PLOT_VALUE_COLUMNS = (*SCALING_COLUMNS, "series", "label", "step_time_s", "step_time_s_min",
                      "step_time_s_max")


@dataclass
class PlotFigure:
    """One figure, with the tidy data it plots (`data`) and any fitted curves drawn on it."""

    name: str
    figure: matplotlib.figure.Figure
    data: pd.DataFrame
    grid: PanelGrid | None = None
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    note: str = ""
    flagged: pd.DataFrame = field(default_factory=pd.DataFrame)  # the points ringed as flagged


# The panel grid's fixed geometry, in inches, or in points of the text it makes room for. A panel's
# box is about as large as seaborn's FacetGrid left it after tight_layout at a height of 3.2 inches;
# its margins hold what each side of a panel shows, from the style's font sizes, so that nothing
# is measured.
PANEL_HEIGHT = 2.45
Y_TICK_LABEL_CHARS = 7  # "1000000", "0.00125": wider ones push the axis label outwards, still clear
CHAR_WIDTH_EM = 0.62  # DejaVu Sans digits, in ems
LINE_SPACING = 1.2  # matplotlib's own, between the lines of one text
MARGIN_PAD = 6.0  # points kept clear around each panel's texts
RIGHT_PAD = 0.2  # a panel's last x tick label reaches this far past its box
OFFSET_TEXT_PAD = 3.0  # points between a panel's top and its y axis' offset text ("1e6")


def _points(key: str) -> float:
    return FontProperties(size=matplotlib.rcParams[key]).get_size_in_points()


@dataclass(frozen=True)
class PanelGeometry:
    """Where a panel's texts go around its box, in inches: `left` (y tick labels and label),
    `bottom` (x tick labels in `tick_lines` lines and the axis label), `top` (a title of
    `title_lines` lines at `title_size` points), `right` (a twin axis' ticks and label)."""

    left: float
    right: float
    top: float
    bottom: float

    @classmethod
    def of(cls, title_lines: int = 1, title_size: float | None = None, tick_lines: int = 1,
           twin: bool = False) -> PanelGeometry:
        tick_offset = _points("xtick.major.pad") + _points("xtick.major.size")
        tick_text = _points("xtick.labelsize") * LINE_SPACING
        label = _points("axes.labelpad") + _points("axes.labelsize") * LINE_SPACING
        tick_width = tick_offset + Y_TICK_LABEL_CHARS * CHAR_WIDTH_EM * _points("ytick.labelsize")
        title_points = title_size or _points("axes.titlesize")
        title = (_points("axes.titlepad") + title_lines * title_points * LINE_SPACING) if title_lines else 0.0
        offset_text = OFFSET_TEXT_PAD + _points("ytick.labelsize") * LINE_SPACING
        return cls(left=(tick_width + label + MARGIN_PAD) / 72,
                   right=(tick_width + label + MARGIN_PAD) / 72 if twin else RIGHT_PAD,
                   top=(max(title, offset_text) + MARGIN_PAD) / 72,
                   bottom=(tick_offset + tick_lines * tick_text + label + MARGIN_PAD) / 72)


class PanelGrid:
    """Panels in rows of at most `wrap`, laid out arithmetically from a PanelGeometry (no
    tight_layout, which measures every text of the figure again each time): `figure`, `axes`
    (the panels in order), `axes_dict` (panel name -> axes), `ax` (the first panel). A panel has
    its title; the x axis label sits under the panels with none below, the y axis label left of
    the first column (set_axis_labels), as seaborn's FacetGrid placed them."""

    def __init__(self, panels, wrap: int | None = None, aspect: float = 1.2, sharex: bool = True,
                 geometry: PanelGeometry | None = None, titles=None, title_size: float | None = None):
        self.names = list(panels) or [None]
        self.columns = min(len(self.names), wrap or len(self.names))
        self.rows = -(-len(self.names) // self.columns)
        self.geometry = geometry or PanelGeometry.of(title_lines=1 if titles else 0)
        self.panel_size = (PANEL_HEIGHT * aspect, PANEL_HEIGHT)
        self.figure = plt.figure(figsize=self._size())
        shared = None
        axes = []
        for index in range(len(self.names)):
            ax = self.figure.add_axes(self._box(index), sharex=shared)
            shared = shared or (ax if sharex else None)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)  # as FacetGrid's despine
            axes.append(ax)
        self.axes = np.empty(len(axes), dtype=object)
        self.axes[:] = axes
        self.axes_dict = dict(zip(self.names, axes))
        self.ax = axes[0]
        self._twins: dict[int, list] = {}
        for ax, title in zip(axes, titles or ()):
            ax.set_title(title, size=title_size)

    def _cell(self) -> tuple[float, float]:
        g = self.geometry
        return g.left + self.panel_size[0] + g.right, g.top + self.panel_size[1] + g.bottom

    def _size(self, min_height: float = 0.0) -> tuple[float, float]:
        width, height = self._cell()
        self.extra_height = max(0.0, min_height - self.rows * height)
        return self.columns * width, self.rows * height + self.extra_height

    def _box(self, index: int) -> list[float]:
        """The panel's box in figure fractions; any extra height split above and below."""
        width, height = self._cell()
        total_width, total_height = self.figure.get_size_inches()
        row, column = divmod(index, self.columns)
        x = column * width + self.geometry.left
        y = self.extra_height / 2 + (self.rows - 1 - row) * height + self.geometry.bottom
        return [x / total_width, y / total_height, self.panel_size[0] / total_width,
                self.panel_size[1] / total_height]

    def has_panel_below(self, index: int) -> bool:
        return index + self.columns < len(self.names)

    def set_axis_labels(self, xlabel: str, ylabel: str) -> None:
        for index, ax in enumerate(self.axes):
            ax.set_xlabel("" if self.has_panel_below(index) else xlabel)
            if index % self.columns == 0:
                ax.set_ylabel(ylabel)

    def make_height(self, inches: float) -> None:
        """At least `inches` tall (a legend's height), the panels keeping their size."""
        self.figure.set_size_inches(self._size(inches), forward=False)
        for index, ax in enumerate(self.axes):
            for placed in (ax, *self._twins.get(index, ())):
                placed.set_position(self._box(index))

    def twinx(self, index: int):
        """A right-hand axis over panel `index` (kept over it when the figure grows)."""
        right = self.axes[index].twinx()
        self._twins.setdefault(index, []).append(right)
        return right

    def legend(self, handles, labels, title: str) -> None:
        """A legend right of the panels, the figure made as tall as it (legend_height)."""
        self.make_height(legend_height(len(labels), bool(title)))
        self.figure.legend(handles, labels, title=title, loc="center left",
                           bbox_to_anchor=(1.0, 0.5), frameon=False)


def legend_height(entries: int, titled: bool) -> float:
    """A figure legend's height in inches, from the style's sizes (a line of text each entry)."""
    size = _points("legend.fontsize")
    rc = matplotlib.rcParams
    lines = entries * size * (LINE_SPACING + rc["legend.labelspacing"])
    title = _points("legend.title_fontsize") * LINE_SPACING if titled else 0.0
    return (lines + title + 2 * (rc["legend.borderpad"] + rc["legend.borderaxespad"]) * size) / 72


def math_free(text) -> str:
    """`text` as matplotlib shows it verbatim: every `$` escaped, since an even number of them
    makes a text mathtext (a model `$x^2$` typeset; `$\\frac{$` a parse error that loses the
    figure). Idempotent: an escaped `\\$` stays one (so a name holding `\\$` shows as `$`)."""
    return _unescaped(str(text)).replace("$", r"\$")


def plot_text(value, limit: int = LABEL_LIMIT) -> str:
    """A data value as a label, title or legend entry: math_free and at most `limit` characters,
    a longer one cut with an ellipsis and a digest of the whole (distinct names stay distinct
    series). Idempotent, so a label built from labels is not escaped twice."""
    plain = _unescaped(str(value))
    if len(plain) > limit:
        digest = hashlib.blake2b(plain.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        keep = limit - LABEL_DIGEST_CHARS - 2
        plain = plain[:keep] + "…#" + digest[:LABEL_DIGEST_CHARS]
    return plain.replace("$", r"\$")


def _unescaped(text: str) -> str:
    return text.replace(r"\$", "$")


def series_labels(table: pd.DataFrame, keys: list[str], fallback: str = "model") -> pd.Series:
    """Legend label per row from the given keys, e.g. "resnet50v2, per_gpu_batch=64"; the
    `fallback` column's value when `keys` is empty."""
    if not keys:
        if fallback in table:
            return table[fallback].map(format_value).map(plot_text)
        return pd.Series("all", table.index)
    parts = [table[k].map(format_value).astype(str) for k in keys]
    parts = [part if k in PLAIN_KEYS else f"{k}=" + part for k, part in zip(keys, parts)]
    labels = parts[0]
    for part in parts[1:]:
        labels = labels + ", " + part
    return labels.map(plot_text)


def telling_keys(table: pd.DataFrame, keys: list[str]) -> list[str]:
    """`keys` without those the others determine (the laptop sweep's dataset follows from its
    framework): a label of "cnn_small" tells as much as "tensorflow, cnn_small, synth-cifar" and
    keeps the legend short. Later keys are dropped first, the model last (the name a reader
    knows a series by)."""
    keys = list(dict.fromkeys(keys))
    kept = list(keys)
    for key in sorted(reversed(keys), key=lambda k: k == "model"):
        others = [k for k in kept if k != key]
        if others and (table.groupby(others, dropna=False)[key]
                       .nunique(dropna=False) <= 1).all():
            kept = others
    return kept


def plot_table(scaling: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The scaling table with `model`, `series` (label within a model panel) and `label` (label
    among all groups) columns, and the varying group keys the labels were built from. Labels
    name only the keys that tell the groups apart (telling_keys)."""
    keys = table_group_keys(scaling, SCALING_COLUMNS)
    varying = [k for k in keys if scaling[k].nunique(dropna=False) > 1]
    data = scaling.copy()
    if "model" not in data:
        data["model"] = "all"
    data["model"] = data["model"].map(format_value).map(plot_text)  # the panels' titles
    # Within a model panel the model is known: keys it determines need no place in the label.
    within = [k for k in telling_keys(data, ["model", *varying]) if k not in ("model",)]
    data["series"] = series_labels(data, [k for k in varying if k in within and k != "model"])
    data["label"] = series_labels(data, telling_keys(data, varying))
    data["gpus"] = data["gpus"].astype(int)
    return data, varying


@dataclass(frozen=True)
class Colouring:
    """How a figure colours its rows: by `column` (the legend title; `labels` holds its value per
    row of the plot table). Fine: one colour and line per value of `units` ("series" or "label").
    Coarse (column != units): several series per colour, drawn as their median and range."""

    column: str
    units: str
    labels: pd.Series
    n_series: int = 0
    apart: str = ""  # coarse: the keys that tell the series of one colour apart

    @property
    def coarse(self) -> bool:
        return self.column != self.units

    def note(self, drawn: str) -> str:
        """What a coarse figure shows (`drawn`: BANDS, MEDIANS or POINTS); empty when fine."""
        if not self.coarse:
            return ""
        per_model = " per model" if self.units == "series" else ""
        return (f"{self.n_series} series{per_model}, coloured by {self.column} (series of one "
                f"colour differ in {self.apart}): {drawn}; every series is in tables/scaling.csv")


BANDS = "a line is the median over the series of its colour, its band their range"
MEDIANS = "a line is the median over the series of its colour"
POINTS = "a point per series"


def colouring(data: pd.DataFrame, by_model: bool) -> Colouring:
    """A colour per series (by_model) or label, unless that takes more than MAX_COLOURS colours;
    then a colour per value of the longest run of the varying keys (in column order) that fits,
    at least one key, with a note saying what the lines and bands show."""
    units = "series" if by_model else "label"
    n_series = data[units].nunique()
    keys = [k for k in table_group_keys(data, PLOT_VALUE_COLUMNS)
            if data[k].nunique(dropna=False) > 1 and not (by_model and k == "model")]
    if n_series <= MAX_COLOURS or not keys:  # no keys: the series are the models themselves
        return Colouring(units, units, data[units])
    chosen = next((keys[:end] for end in range(len(keys), 1, -1)
                   if len(data[keys[:end]].drop_duplicates()) <= MAX_COLOURS), keys[:1])
    apart = " x ".join(k for k in keys if k not in chosen)
    return Colouring(", ".join(chosen), units, series_labels(data, chosen), n_series, apart)


def palette_of(labels) -> dict:
    """A colour per label, in sorted order: seaborn's default palette (matplotlib's colour
    cycle) up to its DEFAULT_PALETTE_SIZE colours, seaborn's "husl" beyond (drawn only for sweeps
    large enough that seaborn's import is a small part of their figures)."""
    ordered = sorted(pd.unique(pd.Series(labels, dtype=str)))
    if len(ordered) <= DEFAULT_PALETTE_SIZE:
        return dict(zip(ordered, cycle_colours(len(ordered))))
    import seaborn as sns

    return dict(zip(ordered, sns.color_palette("husl", n_colors=len(ordered))))


def cycle_colours(n: int) -> list:
    """`n` colours of matplotlib's colour cycle as RGB, repeated past its end: what seaborn's
    color_palette(n_colors=n) gives when no seaborn palette was set."""
    cycle = [to_rgb(colour) for colour in plt.rcParams["axes.prop_cycle"].by_key()["color"]]
    return [cycle[index % len(cycle)] for index in range(max(1, n))]


def desaturate(colour, proportion: float) -> tuple:
    """`colour` with its HLS saturation times `proportion` (seaborn.desaturate, as catplot's bars
    were drawn)."""
    hue, lightness, saturation = colorsys.rgb_to_hls(*to_rgb(colour))
    return colorsys.hls_to_rgb(hue, lightness, saturation * proportion)


# A flagged point (the scaling table's `flags`, e.g. superlinear) is ringed, and the legend says
# what the ring means: it is drawn, but no fit or finding rests on it.
FLAGGED_STYLE = {"marker": "o", "ms": 13, "mfc": "none", "mec": "red", "mew": 1.6, "ls": ""}
FLAGGED_LABEL = "flagged (see flags, note): left out of fits and findings"


def add_legend(grid: PanelGrid, colors: dict, shown, title: str, kinds: bool = False,
               flagged: bool = False) -> None:
    """The legend right of the panels (the saved box, crop_box, keeps it in the file): the
    colours of the labels in `shown`, and with `kinds` the measured/ideal line styles. The figure
    is made as tall as the legend, so that the notes under the panels never run into it."""
    present = set(shown)
    labels = [label for label in colors if label in present]
    handles = [plt.Line2D([], [], color=colors[label], marker="o") for label in labels]
    if kinds:
        handles += [plt.Line2D([], [], color="none"),
                    plt.Line2D([], [], color="0.3", marker="o"),
                    plt.Line2D([], [], color="0.3", marker="X", dashes=DASHES[IDEAL])]
        labels += ["kind", MEASURED, IDEAL]
    if flagged:
        handles += [plt.Line2D([], [], **FLAGGED_STYLE)]
        labels += [FLAGGED_LABEL]
    title = "configuration" if title in ("series", "label") else plot_text(title)  # not a column name
    grid.legend(handles, labels, title=title)


def join_notes(*notes: str) -> str:
    return "\n".join(note for note in notes if note)


def log2_gpu_axes(axes, ticks) -> None:
    """Log2 GPU axis with exactly `ticks` labelled. Axes sharing x share its scale, locators and
    formatters: each group is set once through its first axes (set on each, a grid of n panels
    did the work n times over). Scales first, ticks after: setting the scale of one shared axis
    resets the locators of the others."""
    leaders = []
    for ax in axes:
        if not any(ax.get_shared_x_axes().joined(ax, leader) for leader in leaders):
            leaders.append(ax)
    ticks = sorted({int(t) for t in ticks if t > 0})
    for ax in leaders:
        ax.set_xscale("log", base=2)
    for ax in leaders:
        if ticks:
            ax.set_xticks(ticks, [str(t) for t in ticks])
            if len(ticks) == 1:
                ax.set_xlim(ticks[0] / 1.5, ticks[0] * 1.5)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())


def finish_panels(grid: PanelGrid, ylabel: str, ticks, note: str, log2: bool = True) -> None:
    if log2:
        log2_gpu_axes(grid.axes.flat, ticks)
    grid.set_axis_labels(GPUS_LABEL, ylabel)
    add_note(grid.figure, note)


def add_note(figure, note: str) -> None:
    """Notes under the panels, left-aligned (the saved box, crop_box or tight_bbox, keeps them in
    the file)."""
    if note:
        figure.text(0.01, 0.0, math_free(note), fontsize=7, va="top", ha="left")


def draw_error_bars(ax, rows: pd.DataFrame, y: str, low: str, high: str, colors: dict,
                    hue: str, repeats_only: bool = True) -> None:
    """Bars from `low` to `high`: a min-max over the repeats is drawn only where a GPU count had
    more than one ok run (`repeats_only`); an interval (a single run has its own) wherever the
    table has one."""
    rows = rows[(rows["n_ok"] > 1 if repeats_only else True)
                & rows[[y, low, high]].notna().all(axis=1)]
    for label, part in rows.groupby(hue):
        values = part[y].to_numpy(float)
        below = values - part[low].to_numpy(float)
        above = part[high].to_numpy(float) - values
        ax.errorbar(part["gpus"].to_numpy(float), values, yerr=np.vstack([below, above]),
                    fmt="none", ecolor=colors[label], capsize=3, lw=1)


def panel_wrap(data: pd.DataFrame) -> int | None:
    """Wrap model panels into rows only when there are more than fit in one."""
    return COL_WRAP if data["model"].nunique() > COL_WRAP else None


def axes_by_panel(grid: PanelGrid, by_model: bool) -> dict:
    return dict(grid.axes_dict) if by_model else {None: grid.ax}


def rows_of_panel(data: pd.DataFrame, panel, by_model: bool) -> pd.DataFrame:
    return data[data["model"] == panel] if by_model else data


def placeholder(name: str, message: str) -> PlotFigure:
    figure, ax = plt.subplots(figsize=(5, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    return PlotFigure(name, figure, pd.DataFrame(), note=message)


def save_figures(figures: dict[str, PlotFigure], outdir, dpi: int = 120,
                 formats=layout.FIGURE_FORMATS) -> list[Path]:
    """Every figure in each of `formats` (layout.figure_names), then closed (pyplot keeps every
    open figure alive); the paths written, figure by figure."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, figure in figures.items():
        files = [outdir / file_name for file_name in layout.figure_names(name, formats)]
        save_each_format(figure.figure, files, dpi, laid_out=figure.grid is not None)
        paths.extend(files)
    return paths


def save_png(figure: PlotFigure, path, dpi: int) -> None:
    """`figure` as a PNG replaced whole (a full disk keeps the figure there was), then closed."""
    save_each_format(figure.figure, [Path(path)], dpi, laid_out=figure.grid is not None)


def save_each_format(figure, paths: list[Path], dpi: int, laid_out: bool = False) -> None:
    """`figure` into each of `paths`, in the format its suffix names, each replaced whole; then
    closed. The SVG's text stays text (svg.fonttype none): searchable, and the same strings as the
    PNG's. `laid_out`: a PanelGrid's figure, cropped by crop_box instead of tight_bbox."""
    try:
        bbox = crop_box(figure, dpi) if laid_out else tight_bbox(figure, dpi)
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            for path in paths:
                with atomic.replaced_whole(path) as temporary:
                    figure.savefig(temporary, format=path.suffix[1:], dpi=dpi, bbox_inches=bbox)
    finally:
        plt.close(figure)


def crop_box(figure, dpi: int):
    """The box a PanelGrid's figure is saved in, in inches: the figure itself, whose margins hold
    every panel's tick labels, axis labels and titles (PanelGeometry), joined with the texts that
    may reach past it: the legend right of the panels, the notes under them, a panel's title or
    text longer than the panel. Measuring those few is a fraction of tight_bbox's measure of every
    tick label (a third of a small sweep's saving time)."""
    figure.set_dpi(dpi)
    renderer = figure.canvas.get_renderer()
    texts = [*figure.legends, *figure.texts]
    for ax in figure.axes:
        texts += [ax.title, *ax.texts] if ax.get_title() else ax.texts
    boxes = [figure.bbox, *(text.get_window_extent(renderer) for text in texts if text.get_visible())]
    box = Bbox.union(boxes).transformed(figure.dpi_scale_trans.inverted())
    return box.padded(matplotlib.rcParams["savefig.pad_inches"])
