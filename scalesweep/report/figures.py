"""Scaling figures: one tidy DataFrame in, one seaborn figure-level call per figure, PNGs out.

`build_figures(scaling, fits)` makes every figure and returns them with the exact data each one
plots (tests compare it with the table); `plot_scaling(scaling, outdir, fits)` writes them as PNG.
Figures per metric come twice: `<metric>_by_model.png` (one panel per model, colour = the other
varying configuration axes) and `<metric>_all.png` (every group in one panel). GPU counts sit on a
log2 axis with the measured counts as ticks. A figure without data (e.g. no doubling for the
marginal gain) is still written, with the reason in it, so a workflow's outputs always exist.

When a figure would need more than MAX_COLOURS colours (a sweep of hundreds of groups), it colours
by fewer axes (`colouring`) and draws, per colour, the median over its series with their range as
a band: hundreds of lines and legend entries can neither be read nor drawn in reasonable time.
The figure's data keeps every series.

Names from the data (models, datasets, axis values) reach every label, title and legend through
`plot_text`: shown verbatim (a `$` escaped, or matplotlib would typeset `$x^2$` as math and fail
on `$\\frac{$`, losing every figure) and cut to LABEL_LIMIT characters (a 100 kB name would
size a legend, and the PNG, beyond any memory).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on clusters or here; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import NullFormatter, NullLocator  # noqa: E402

from scalesweep import atomic, breakdown  # noqa: E402
from scalesweep.fits import N_DOUBLINGS, predicted_speedup  # noqa: E402
from scalesweep.scaling import (  # noqa: E402
    NO_BASELINE_NOTE,
    SCALING_COLUMNS,
    SINGLE_COUNT_NOTE,
    format_value,
    table_group_keys,
)

GPUS_LABEL = "GPUs"
# One look for every figure: white panels with a light grid, the paper context's font sizes.
STYLE = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.9)}
INTERVAL_NOTE = "error bars: 95 % throughput interval (repeats, else the run's own timed steps)"
STEP_TIME_LABEL = "Time per step (s)"
EPOCH_TIME_LABEL = "Steady epoch time (s)"
PLAIN_KEYS = ("model", "framework", "dataset")  # shown as their value; other keys as key=value
MEASURED, IDEAL = "measured", "ideal"
DASHES = {MEASURED: "", IDEAL: (4, 2)}
HEIGHT = 3.2
COL_WRAP = 3
GROUP_NOTE_MARKERS = (SINGLE_COUNT_NOTE, NO_BASELINE_NOTE, "baseline is N=", "mixed protocols")
MAX_COLOURS = 12
DEFAULT_PALETTE_SIZE = 10  # seaborn's default palette repeats its colours after this many
# Text from the data (names, labels, panel titles) is cut to this many characters: a 100 kB dataset
# name would size a legend, and with it the PNG, of gigapixels.
LABEL_LIMIT = 60
LABEL_DIGEST_CHARS = 6  # hex digits that keep two long names with one start apart
# plot_table adds series and label, with_step_times the step times.
PLOT_VALUE_COLUMNS = (*SCALING_COLUMNS, "series", "label", "step_time_s", "step_time_s_min",
                      "step_time_s_max")


@dataclass
class PlotFigure:
    """One figure, with the tidy data it plots (`data`) and any fitted curves drawn on it."""

    name: str
    figure: matplotlib.figure.Figure
    data: pd.DataFrame
    grid: sns.FacetGrid | None = None
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    note: str = ""


# ----------------------------------------------------------------------------- data

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
    keys = table_group_keys(scaling)
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


def _palette(labels) -> dict:
    ordered = sorted(pd.unique(pd.Series(labels, dtype=str)))
    palette = None if len(ordered) <= DEFAULT_PALETTE_SIZE else "husl"
    return dict(zip(ordered, sns.color_palette(palette, n_colors=max(1, len(ordered)))))


def _legend(grid: sns.FacetGrid, colors: dict, shown, title: str, kinds: bool = False) -> None:
    """The legend right of the panels (savefig's tight bounding box keeps it in the file): the
    colours of the labels in `shown`, and with `kinds` the measured/ideal line styles. Not
    seaborn's add_legend: it renders the whole figure twice to size the legend, the costliest
    step of a figure with hundreds of lines."""
    present = set(shown)
    labels = [label for label in colors if label in present]
    handles = [plt.Line2D([], [], color=colors[label], marker="o") for label in labels]
    if kinds:
        handles += [plt.Line2D([], [], color="none"),
                    plt.Line2D([], [], color="0.3", marker="o"),
                    plt.Line2D([], [], color="0.3", marker="X", dashes=DASHES[IDEAL])]
        labels += ["kind", MEASURED, IDEAL]
    title = "configuration" if title in ("series", "label") else plot_text(title)  # not a column name
    grid.figure.legend(handles, labels, title=title, loc="center left",
                       bbox_to_anchor=(1.0, 0.5), frameon=False)


def _join_notes(*notes: str) -> str:
    return "\n".join(note for note in notes if note)


def _group_notes(data: pd.DataFrame) -> str:
    """Group-level caveats (no scaling, baseline not 1) to print under a figure."""
    lines = []
    for label, notes in data.groupby("label", sort=True)["note"]:
        for note in notes.dropna().astype(str):
            for part in note.split("; "):
                if part.startswith(GROUP_NOTE_MARKERS) and f"{label}: {part}" not in lines:
                    lines.append(f"{label}: {part}")
    if len(lines) > 4:
        lines = lines[:4] + [f"... and {len(lines) - 4} more (see the note column)"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- axes

def _log2_gpus(axes, ticks) -> None:
    """Log2 GPU axis with exactly `ticks` labelled. Scales first, ticks after: setting the scale
    of one shared axis resets the locators of the others."""
    axes = list(axes)
    ticks = sorted({int(t) for t in ticks if t > 0})
    for ax in axes:
        ax.set_xscale("log", base=2)
    for ax in axes:
        if ticks:
            ax.set_xticks(ticks, [str(t) for t in ticks])
            if len(ticks) == 1:
                ax.set_xlim(ticks[0] / 1.5, ticks[0] * 1.5)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        # Every panel labels its own GPU counts: in a wrapped grid the panel below may be empty.
        ax.tick_params(labelbottom=True)


def _finish(grid: sns.FacetGrid, ylabel: str, ticks, note: str, log2: bool = True) -> None:
    if log2:
        _log2_gpus(grid.axes.flat, ticks)
    grid.set_axis_labels(GPUS_LABEL, ylabel)
    for ax in grid.axes.flat:
        ax.set_xlabel(GPUS_LABEL)  # seaborn shows it on the bottom row; every panel has ticks
    _note(grid.figure, note)


def _note(figure, note: str) -> None:
    """Notes under the panels, left-aligned (the tight bounding box keeps them in the file)."""
    if note:
        figure.text(0.01, 0.0, math_free(note), fontsize=7, va="top", ha="left")


def _error_bars(ax, rows: pd.DataFrame, y: str, low: str, high: str, colors: dict,
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


def _col_wrap(data: pd.DataFrame) -> int | None:
    """Wrap model panels into rows only when there are more than fit in one."""
    return COL_WRAP if data["model"].nunique() > COL_WRAP else None


def _axes_by_panel(grid: sns.FacetGrid, by_model: bool) -> dict:
    return dict(grid.axes_dict) if by_model else {None: grid.ax}


def _panel_rows(data: pd.DataFrame, panel, by_model: bool) -> pd.DataFrame:
    return data[data["model"] == panel] if by_model else data


def _placeholder(name: str, message: str) -> PlotFigure:
    figure, ax = plt.subplots(figsize=(5, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    return PlotFigure(name, figure, pd.DataFrame(), note=message)


# ----------------------------------------------------------------------------- figures

def line_figure(data: pd.DataFrame, name: str, y: str, ylabel: str, by_model: bool,
                error: tuple[str, str] | None = None, ideal: str | None = None,
                reference_y: float | None = None, note: str = "", interval: bool = False,
                from_zero: bool = False, joined: bool = True) -> PlotFigure:
    """One metric against GPUs: per model (col=model, hue=series) or all groups (hue=label).

    With `ideal`, that column is drawn dashed beside the measured one (long form: `kind`).
    `error`: the (low, high) columns of a min-max over repeats, or with `interval` of an
    interval every row may have. `from_zero`: the y axis starts at 0 (a throughput or time
    axis cut at 305 makes 4 % look like a cliff). `joined=False`: points only, for a metric
    whose neighbouring GPU counts are no trend (a probe's ratio at two counts).
    """
    colour = colouring(data, by_model)
    hue = colour.column
    columns = ["model", "series", "label", "gpus", "n_ok", y] + (list(error) if error else [])
    rows = data[columns + ([ideal] if ideal else [])].dropna(subset=[y])
    if rows.empty:
        return _placeholder(name, f"no {ylabel} to plot (see the note column of the scaling table)")
    rows = rows.assign(**{hue: colour.labels})
    long = rows.rename(columns={y: "value"}).assign(kind=MEASURED)
    if ideal:
        long = pd.concat([long, rows.drop(columns=[y]).rename(columns={ideal: "value"})
                         .assign(kind=IDEAL)], ignore_index=True)
    long = long[list(dict.fromkeys(["model", "series", "label", hue, "gpus", "n_ok", "kind",
                                    "value", *(error or ())]))]
    colors = _palette(colour.labels)
    styles = {"style": "kind", "dashes": DASHES, "markers": {MEASURED: "o", IDEAL: "X"}}
    if not joined:
        styles = {"kind": "scatter", "s": 40}
    elif ideal:
        styles = {"kind": "line", **styles, **_estimator(colour)}
    else:
        styles = {"kind": "line", "marker": "o", **_estimator(colour)}
    grid = sns.relplot(
        data=long, x="gpus", y="value", hue=hue, palette=colors, **styles,
        col="model" if by_model else None, col_wrap=_col_wrap(data) if by_model else None,
        height=HEIGHT, aspect=1.2, facet_kws={"sharey": False}, legend=False,
    )
    _legend(grid, colors, long[hue], hue, kinds=bool(ideal))
    for panel, ax in _axes_by_panel(grid, by_model).items():
        panel_rows = _panel_rows(rows, panel, by_model)
        if error and not colour.coarse:  # coarse: the band is the spread between series
            _error_bars(ax, panel_rows, y, error[0], error[1], colors, hue,
                        repeats_only=not interval)
        if reference_y is not None:
            ax.axhline(reference_y, color="grey", lw=0.8, ls=":")
        if from_zero:
            ax.set_ylim(bottom=0)
    _finish(grid, ylabel, data["gpus"], _join_notes(colour.note(BANDS), note))
    measured = long[long["kind"] == MEASURED].drop(columns="kind").reset_index(drop=True)
    return PlotFigure(name, grid.figure, measured, grid=grid)


def time_metric(data: pd.DataFrame) -> tuple[str, str]:
    """The time a figure may plot: the steady epoch time under the epochs protocol; under the
    steps protocol the timed window's length depends on how many steps were timed (auto stops
    when the interval is tight enough), so the time per step, global batch / throughput."""
    protocols = set(data.get("protocol", pd.Series(dtype=str)).dropna())
    if protocols <= {"epochs"}:
        return "time_s", EPOCH_TIME_LABEL
    return "step_time_s", STEP_TIME_LABEL


def with_step_times(data: pd.DataFrame) -> pd.DataFrame:
    """`step_time_s` (and its _min/_max over the repeats) = global batch / throughput."""
    if "global_batch" not in data:
        return data.assign(step_time_s=np.nan, step_time_s_min=np.nan, step_time_s_max=np.nan)
    batch = data["global_batch"]
    return data.assign(step_time_s=batch / data["throughput_img_s"],
                       step_time_s_min=batch / data["throughput_img_s_max"],
                       step_time_s_max=batch / data["throughput_img_s_min"])


def _estimator(colour: Colouring) -> dict:
    """seaborn line options: every row as it is, or (coarse) the median over the series of each
    colour with their min-max range as a band."""
    if colour.coarse:
        return {"estimator": "median", "errorbar": ("pi", 100)}
    return {"estimator": None}


def speedup_figure(data: pd.DataFrame, name: str, y: str, ylabel: str, by_model: bool,
                   fits: pd.DataFrame | None, target: str, note: str) -> PlotFigure:
    """Speedup with the ideal N/N_min and, when fits are given, the fitted Amdahl curve of
    `target` drawn out to the fit's predicted GPU counts (not where the fit explains nothing:
    a flat curve at 1 beside points falling to 0.4 would read as a prediction)."""
    curves = amdahl_curves(data, fits, target) if fits is not None else pd.DataFrame()
    fit_note = ""
    if len(curves):
        fit_note = (f"dash-dot: Amdahl fit on the {target.replace('_', ' ')} series drawn; "
                    "open circles: its predictions at the next two doublings")
    if fits is not None and _unexplained(fits, target):
        fit_note = _join_notes(fit_note, "no Amdahl curve where the fit explains nothing "
                               "(R² ≤ 0, see fits.csv)")
    result = line_figure(data, name, y, ylabel, by_model, ideal="scale_factor",
                         note=_join_notes(fit_note, note))
    if curves.empty or result.data.empty:
        return result
    colour = colouring(data, by_model)
    colors = _palette(colour.labels)
    colour_of = dict(zip(data[colour.units], colour.labels))
    draw = _draw_curves_together if colour.coarse else _draw_curves
    for panel, ax in _axes_by_panel(result.grid, by_model).items():
        panel_curves = _panel_rows(curves, panel, by_model)
        draw(ax, panel_curves, colour.units, {u: colors[colour_of[u]] for u in colour_of})
    predicted_gpus = curves.loc[curves["kind"] == "prediction", "gpus"]
    _log2_gpus(result.grid.axes.flat, [*data["gpus"], *predicted_gpus])
    result.curves = curves
    return result


def _draw_curves(ax, curves: pd.DataFrame, units: str, colors: dict) -> None:
    for unit, curve in curves.groupby(units):
        line = curve[curve["kind"] == "curve"]
        ax.plot(line["gpus"], line["speedup"], color=colors[unit], lw=1, ls="-.")
        points = curve[curve["kind"] == "prediction"]
        ax.plot(points["gpus"], points["speedup"], "o", mfc="none", color=colors[unit])


def _draw_curves_together(ax, curves: pd.DataFrame, units: str, colors: dict) -> None:
    """Hundreds of fitted curves as one collection and one scatter per panel: a line artist each
    would cost more than the rest of the figure."""
    lines = curves[curves["kind"] == "curve"]
    segments, segment_colors = [], []
    for unit, line in lines.groupby(units):
        segments.append(line[["gpus", "speedup"]].to_numpy(float))
        segment_colors.append(colors[unit])
    if not segments:
        return
    # Limits from the points themselves: a collection's own data limits reach x = 0, which a
    # log axis cannot show.
    ax.add_collection(LineCollection(segments, colors=segment_colors, lw=0.6, ls="-.",
                                     alpha=0.5), autolim=False)
    ax.update_datalim(np.concatenate(segments))
    points = curves[curves["kind"] == "prediction"]
    ax.scatter(points["gpus"], points["speedup"], s=12, facecolors="none", linewidths=0.6,
               edgecolors=[colors[unit] for unit in points[units]])
    ax.autoscale_view()


def _explains_nothing(fits: pd.DataFrame) -> pd.Series:
    """Fits whose R² is at most 0: no better than the mean of the points."""
    if "r2" not in fits:
        return pd.Series(False, index=fits.index)
    return pd.to_numeric(fits["r2"], errors="coerce").le(0.0)


def _unexplained(fits: pd.DataFrame, target: str) -> bool:
    amdahl = (fits["law"] == "amdahl") & (fits["target"] == target) & fits["p"].notna()
    return bool((amdahl & _explains_nothing(fits)).any())


CURVE_COLUMNS = ("model", "series", "label", "kind", "gpus", "speedup")
CURVE_POINTS = 60


def amdahl_curves(data: pd.DataFrame, fits: pd.DataFrame, target: str) -> pd.DataFrame:
    """Fitted Amdahl speedups of `target` per group: a dense `curve` from the baseline to the
    last predicted GPU count, and the fit table's own `prediction` points, with the plot's
    labels. Fits are matched to the plotted groups on the group keys both tables share."""
    keys = [k for k in table_group_keys(data, PLOT_VALUE_COLUMNS) if k in fits.columns]
    chosen = fits[(fits["law"] == "amdahl") & (fits["target"] == target) & fits["p"].notna()
                  & ~_explains_nothing(fits)]
    labels = data[list(dict.fromkeys([*keys, "model", "series", "label"]))]
    labels = labels.drop_duplicates(subset=keys or None)
    if "model" in fits:  # as plot_table shows it
        chosen = chosen.assign(model=chosen["model"].map(format_value).map(plot_text))
    if keys:
        chosen = chosen.merge(labels, on=keys, how="inner", suffixes=("_fit", ""))
    elif len(chosen):
        chosen = chosen.assign(**labels.iloc[0][["model", "series", "label"]].to_dict())
    if chosen.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    # Every fit at once (a sweep has hundreds): fits x points arrays, then one long table.
    base = chosen["baseline_gpus"].to_numpy(float)[:, None]
    predicted = chosen[[f"pred_gpus_{k}" for k in range(1, N_DOUBLINGS + 1)]].to_numpy(float)
    p = chosen["p"].to_numpy(float)[:, None]
    pieces = []
    for kind, gpus in (("curve", np.geomspace(base[:, 0], predicted.max(axis=1), CURVE_POINTS,
                                              axis=1)),
                       ("prediction", predicted)):
        per_fit = gpus.shape[1]
        pieces.append(pd.DataFrame({
            **{column: np.repeat(chosen[column].to_numpy(), per_fit)
               for column in ("model", "series", "label")},
            "kind": kind, "gpus": gpus.ravel(),
            "speedup": predicted_speedup("amdahl", p, gpus, base).ravel(),
            "fit": np.repeat(np.arange(len(chosen)), per_fit),
        }))
    # Each fit's curve, then its predictions, fit after fit.
    curves = pd.concat(pieces, ignore_index=True).sort_values("fit", kind="stable")
    return curves.drop(columns="fit").reset_index(drop=True)


def marginal_gain_figure(data: pd.DataFrame, note: str) -> PlotFigure:
    """Bars (points per series when colours are shared): throughput gained by each doubling, in
    % of the throughput before it."""
    name = "marginal_gain"
    colour = colouring(data, by_model=True)
    rows = data[["model", "series", "gpus", "marginal_gain_pct", "marginal_gain_img_s"]].dropna()
    if rows.empty:
        return _placeholder(name, "no doubling of the GPU count with throughput on both sides: "
                                  "no marginal gain")
    rows = rows.assign(**{colour.column: colour.labels})
    # Shared colours: one bar per colour would average series; points show every one of them.
    kind = {"kind": "strip", "dodge": True} if colour.coarse else {"kind": "bar", "errorbar": None}
    colors = _palette(colour.labels)
    grid = sns.catplot(data=rows, x="gpus", y="marginal_gain_pct", hue=colour.column, col="model",
                       col_wrap=_col_wrap(data), palette=colors, height=HEIGHT, aspect=1.2,
                       sharey=False, legend=False, **kind)
    _legend(grid, colors, rows[colour.column], colour.column)
    for ax in grid.axes.flat:
        ax.axhline(100.0, color="grey", lw=0.8, ls=":")  # a perfect doubling gains 100 %
        ax.axhline(0.0, color="black", lw=0.6)
    grid.set_axis_labels(f"{GPUS_LABEL} (after doubling)", "Marginal gain per doubling (%)")
    for ax in grid.axes.flat:
        ax.tick_params(labelbottom=True)
        ax.set_xlabel(f"{GPUS_LABEL} (after doubling)")
    _note(grid.figure, _join_notes(colour.note(POINTS), note))
    return PlotFigure(name, grid.figure, rows.reset_index(drop=True), grid=grid)


def karp_flatt_figure(data: pd.DataFrame, note: str) -> PlotFigure:
    name = "karp_flatt"
    colour = colouring(data, by_model=True)
    rows = data[["model", "series", "label", "gpus", "n_ok", "karp_flatt"]].dropna()
    if rows.empty:
        return _placeholder(name, "Karp-Flatt needs at least two GPU counts with a usable time")
    rows = rows.assign(**{colour.column: colour.labels})
    colors = _palette(colour.labels)
    grid = sns.relplot(data=rows, x="gpus", y="karp_flatt", hue=colour.column, palette=colors,
                       col="model", col_wrap=_col_wrap(data), kind="line", marker="o",
                       **_estimator(colour), height=HEIGHT, aspect=1.2,
                       facet_kws={"sharey": False}, legend=False)
    _legend(grid, colors, rows[colour.column], colour.column)
    for ax in grid.axes.flat:
        ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    _finish(grid, "Karp-Flatt serial fraction (0-1)", data["gpus"],
            _join_notes(colour.note(BANDS), note))
    return PlotFigure(name, grid.figure, rows.reset_index(drop=True), grid=grid)


def throughput_efficiency_figure(data: pd.DataFrame, note: str) -> PlotFigure:
    """Throughput (left axis, solid) and efficiency (right axis, dashed) per model panel."""
    name = "throughput_efficiency"
    colour = colouring(data, by_model=True)
    rows = data[["model", "series", "gpus", "n_ok", "throughput_img_s", "efficiency_pct",
                 "throughput_ci_low_img_s", "throughput_ci_high_img_s"]]
    rows = rows.dropna(subset=["throughput_img_s", "efficiency_pct"], how="all")
    if rows.empty:
        return _placeholder(name, "no throughput or efficiency to plot")
    rows = rows.assign(**{colour.column: colour.labels})
    colors = _palette(colour.labels)
    grid = sns.FacetGrid(rows, col="model", col_wrap=_col_wrap(data), height=HEIGHT, aspect=1.3,
                         sharey=False)
    # Coarse: the median per colour (no band: two of them on twin axes could not be told apart).
    lines = colour.column if colour.coarse else "series"
    for panel, ax in grid.axes_dict.items():
        right = ax.twinx()
        for label, part in rows[rows["model"] == panel].groupby(lines):
            color = colors[part[colour.column].iloc[0]]
            part = part.groupby("gpus", as_index=False)[["throughput_img_s", "efficiency_pct"]]
            part = part.median()
            ax.plot(part["gpus"], part["throughput_img_s"], "o-", color=color, label=label)
            right.plot(part["gpus"], part["efficiency_pct"], "s--", color=color)
        if not colour.coarse:
            _error_bars(ax, rows[rows["model"] == panel], "throughput_img_s",
                        "throughput_ci_low_img_s", "throughput_ci_high_img_s", colors,
                        colour.column, repeats_only=False)
        ax.set_ylim(bottom=0)
        right.grid(False)  # the left axis' grid is the one to read
        right.set_ylabel("Efficiency (%, dashed)")
        right.set_ylim(0, max(110.0, np.nanmax(rows["efficiency_pct"].to_numpy(float),
                                               initial=0.0) * 1.05))
    _log2_gpus(grid.axes.flat, data["gpus"])
    grid.set_axis_labels(GPUS_LABEL, "Throughput (images/s, solid)")
    for ax in grid.axes.flat:
        ax.set_xlabel(GPUS_LABEL)
        ax.set_ylabel("Throughput (images/s, solid)")
    grid.figure.tight_layout()  # after twinx: make room for each right-hand axis label
    # Outside the last twin axis (FacetGrid.add_legend would sit on its label).
    _legend(grid, colors, rows[colour.column], colour.column)
    _note(grid.figure, _join_notes(colour.note(MEDIANS), INTERVAL_NOTE, note))
    return PlotFigure(name, grid.figure, rows.reset_index(drop=True), grid=grid)


SPEEDUP_LABELS = {"throughput": "Speedup thr(N)/thr(N_min) (×)",
                  "time": "Speedup T(N_min)/T(N) (×)"}


def speedup_label(data: pd.DataFrame) -> str:
    """The speedup axis label for the bases the plotted groups use (scaling.THROUGHPUT_BASIS)."""
    bases = set(data.get("scaling_basis", pd.Series(["time"])).dropna()) - {""}
    if len(bases) == 1:
        return SPEEDUP_LABELS.get(bases.pop(), "Speedup")
    return "Speedup, per group's basis (×)"


def build_figures(scaling: pd.DataFrame, fits: pd.DataFrame | None = None
                  ) -> dict[str, PlotFigure]:
    """Every figure of the scaling table (and fit table), keyed by file stem."""
    if scaling.empty:
        message = "no GPU runs in the scaling table"
        return {name: _placeholder(name, message) for name in FIGURE_NAMES}
    with plt.rc_context(STYLE):
        return _build_figures(scaling, fits)


def _build_figures(scaling: pd.DataFrame, fits: pd.DataFrame | None) -> dict[str, PlotFigure]:
    data, _ = plot_table(scaling)
    note = _group_notes(data)
    time_column, time_label = time_metric(data)
    data = with_step_times(data)
    figures = []
    for by_model, suffix in ((True, "by_model"), (False, "all")):
        figures += [
            line_figure(data, f"time_{suffix}", time_column, time_label, by_model,
                        error=(f"{time_column}_min", f"{time_column}_max"), note=note,
                        from_zero=True),
            line_figure(data, f"throughput_{suffix}", "throughput_img_s",
                        "Throughput (images/s)", by_model,
                        error=("throughput_ci_low_img_s", "throughput_ci_high_img_s"),
                        interval=True, ideal="ideal_throughput_img_s",
                        note=_join_notes(INTERVAL_NOTE, note), from_zero=True),
            speedup_figure(data, f"speedup_{suffix}", "speedup", speedup_label(data), by_model,
                           fits, "speedup", note),
            speedup_figure(data, f"tts_speedup_{suffix}", "tts_speedup",
                           "Time-to-solution speedup (×)", by_model, fits,
                           "time_to_solution", note),
            line_figure(data, f"efficiency_{suffix}", "efficiency_pct", "Efficiency (%)",
                        by_model, reference_y=100.0, note=note, from_zero=True),
        ]
    figures += [marginal_gain_figure(data, note), karp_flatt_figure(data, note),
                throughput_efficiency_figure(data, note), step_breakdown_figure(data),
                line_figure(data, "comm_compute_ratio", "comm_compute_ratio",
                            "All-reduce / compute time (ratio)", by_model=True,
                            note=note, joined=False),
                bus_bandwidth_figure(data, note),
                line_figure(data, "energy_per_image", "joules_per_image", "GPU energy per image (J)",
                            by_model=True, note=note)]
    return {figure.name: figure for figure in figures}


FIGURE_NAMES = tuple(
    f"{metric}_{suffix}" for suffix in ("by_model", "all")
    for metric in ("time", "throughput", "speedup", "tts_speedup", "efficiency")
) + ("marginal_gain", "karp_flatt", "throughput_efficiency", "step_breakdown",
     "comm_compute_ratio", "bus_bandwidth", "energy_per_image")
PART_COLOURS = dict(zip(breakdown.PART_NAMES.values(), sns.color_palette("colorblind", len(breakdown.PARTS))))


NET_MARKER = "net total where a part is < 0"
NEGLIGIBLE_SHARE = 0.005


def step_breakdown_figure(data: pd.DataFrame) -> PlotFigure:
    """Stacked bars per panel (a model, or a model and series when several share a model): where
    one image's GPU time goes at each GPU count (scalesweep/breakdown.py: N x part / images per
    step, in ms), GPU counts as the ticks. A negative part (the probe windows ran slower than the
    full steps) is no bar under the axis: the positive parts stack, and a marker shows the net
    total they add up to."""
    name = "step_breakdown"
    keys = [k for k in ("series",) if data.groupby("model")["series"].nunique().max() > 1]
    long = breakdown.long_parts(data, ["model", *keys])
    if long.empty or long["ms_per_image"].isna().all():
        return _placeholder(name, breakdown.NO_BREAKDOWN_NOTE)
    panel = long["model"].astype(str)
    note = ""
    if keys and long[["model", "series"]].drop_duplicates().shape[0] <= MAX_COLOURS:
        # One panel per series: its GPU counts, not "framework, dataset | N", as ticks.
        panel = panel + "\n" + long["series"].astype(str)
    elif keys:
        note = (f"{long['series'].nunique()} series: bars are the median per model over them; "
                "every series is in tables/scaling.csv")
    long = long.assign(panel=panel).sort_values(["panel", "gpus"])
    grid = sns.FacetGrid(long, col="panel", col_wrap=_col_wrap(long.rename(
        columns={"model": "_", "panel": "model"})), height=HEIGHT, aspect=1.1, sharex=False,
        sharey=False)
    grid.map_dataframe(_stacked_parts)
    grid.set_titles("{col_name}", size=9)
    for ax in grid.axes.flat:
        ax.set_xlabel(GPUS_LABEL)
        ax.set_ylabel("GPU time per image (ms)")
        ax.tick_params(labelbottom=True, labelleft=True)
    grid.tight_layout()  # after the labels every panel now has
    handles = [Patch(color=colour, label=part)
               for part, colour in PART_COLOURS.items()]
    if (long["ms_per_image"] < 0).any():
        handles.append(plt.Line2D([], [], color="black", marker="v", ls="", label=NET_MARKER))
    grid.figure.legend(handles=handles, title="part", loc="center left",
                       bbox_to_anchor=(1.0, 0.5), frameon=False)
    _note(grid.figure, _join_notes(
        "bar height = N x step time / images per step; growth above the N_min bar is lost "
        "efficiency, by part", note))
    return PlotFigure(name, grid.figure, long.drop(columns="panel").reset_index(drop=True),
                      grid=grid)


def _stacked_parts(data: pd.DataFrame, **_) -> None:
    """One panel's stacked bars: positive parts stacked per GPU count (evenly spaced, labelled
    with the count), a marker at the net total where a part is negative."""
    ax = plt.gca()
    counts = sorted(data["gpus"].astype(int).unique())
    position = {gpus: i for i, gpus in enumerate(counts)}
    # One value per GPU count and part, or (many series in one panel) their median.
    table = data.pivot_table(index="gpus", columns="part", values="ms_per_image",
                             aggfunc="median")
    x = np.array([position[int(g)] for g in table.index], float)
    bottom = np.zeros(len(table))
    for part, colour in PART_COLOURS.items():
        if part not in table:
            continue
        height = np.clip(table[part].fillna(0.0).to_numpy(float), 0.0, None)
        drawn = height > 0  # an empty bar's bottom is a sticky edge: the axis would end there
        ax.bar(x[drawn], height[drawn], bottom=bottom[drawn], width=0.7, color=colour,
               label=part)
        bottom = bottom + height
    net = table.sum(axis=1, min_count=1).to_numpy(float)
    # Negative beyond rounding: 0.5 % of the bar (a part computed as a difference of medians).
    negative = (table.lt(-NEGLIGIBLE_SHARE * np.abs(net)[:, None])).any(axis=1).to_numpy()
    ax.plot(x[negative], net[negative], "v", color="black", ms=7, ls="")
    ax.set_xticks(range(len(counts)), [str(g) for g in counts])
    ax.set_xlim(-0.6, len(counts) - 0.4)
    ax.margins(y=0.08)
    ax.set_ylim(bottom=0)
    ax.grid(axis="x", visible=False)  # categories: a vertical grid line would split the bars


def bus_bandwidth_figure(data: pd.DataFrame, note: str) -> PlotFigure:
    """All-reduce bus bandwidth against GPUs; a dotted line where the runs start to span nodes
    (NVLink inside a node, the network between nodes)."""
    figure = line_figure(data, "bus_bandwidth", "busbw_gb_s", "All-reduce bus bandwidth (GB/s)",
                         by_model=True, note=note)
    if figure.grid is None:
        return figure
    multinode = data.loc[data["nodes"].fillna(1) > 1, "gpus"]
    single = data.loc[data["nodes"].fillna(1) <= 1, "gpus"]
    if len(multinode) and len(single):
        boundary = float(np.sqrt(single.max() * multinode.min()))  # midway on the log2 axis
        for ax in figure.grid.axes.flat:
            ax.axvline(boundary, color="grey", lw=0.8, ls=":")
            ax.text(boundary, 1.0, " more than one node", transform=ax.get_xaxis_transform(),
                    fontsize=7, va="top")
    return figure


def plot_scaling(scaling: pd.DataFrame, outdir, fits: pd.DataFrame | None = None,
                 dpi: int = 120) -> list[Path]:
    """Write every figure of `build_figures` as `<outdir>/<name>.png`; returns the paths."""
    return save_figures(build_figures(scaling, fits), outdir, dpi)


def save_figures(figures: dict[str, PlotFigure], outdir, dpi: int = 120) -> list[Path]:
    """PNG per figure, then close it (pyplot keeps every open figure alive)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, figure in figures.items():
        path = outdir / f"{name}.png"
        save_png(figure.figure, path, dpi)
        paths.append(path)
    return paths


def save_png(figure, path, dpi: int) -> None:
    """`figure` as a PNG replaced whole (a full disk keeps the figure there was), then closed."""
    try:
        with atomic.replaced_whole(path) as temporary:
            figure.savefig(temporary, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(figure)


def write_figures(scaling_csv, fits_csv, outdir) -> str:
    """The figures stage (rule `figures`): scaling.csv (+ fits.csv for the fitted curves) ->
    outdir/*.png; the log line."""
    written = plot_scaling(pd.read_csv(scaling_csv), outdir, fits=pd.read_csv(fits_csv))
    return f"{len(written)} figures: " + " ".join(Path(path).name for path in written)
