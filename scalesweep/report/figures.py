"""Scaling figures: one tidy DataFrame in, one figure per metric on a plot kit panel grid, files out.

`build_figures(scaling, fits)` makes every figure and returns them with the exact data each one
plots (tests compare it with the table); `plot_scaling(scaling, outdir, fits)` writes them as PNG.
Figures per metric come twice: `<metric>_by_model.png` (one panel per model, colour = the other
varying configuration axes) and `<metric>_all.png` (every group in one panel). GPU counts sit on a
log2 axis with the measured counts as ticks. A figure without data (e.g. no doubling for the
marginal gain) is still written, with the reason in it, so a workflow's outputs always exist.
Labels, colours, legends and notes come from the plot kit (scalesweep/report/plotkit.py).
The tables are already aggregated: each line, point and bar is drawn from its rows with plain
matplotlib (seaborn's look, written out in the plot kit; none of its statistics or layout), and
only a figure with more series than colours aggregates, the median and range of each colour in
one groupby.
"""

from __future__ import annotations

import functools
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from scalesweep.analysis import breakdown
from scalesweep.analysis.fits import N_DOUBLINGS, predicted_speedup
from scalesweep.analysis.scaling import NO_BASELINE_NOTE, SINGLE_COUNT_NOTE, format_value
from scalesweep.contract import layout
from scalesweep.report.prediction import draw_predictions
from scalesweep.report.plotkit import (
    BANDS,
    COLORBLIND,
    DASHES,
    FLAGGED_STYLE,
    GPUS_LABEL,
    IDEAL,
    MAX_COLOURS,
    MEASURED,
    MEDIANS,
    PLOT_VALUE_COLUMNS,
    POINTS,
    STYLE,
    PanelGeometry,
    PanelGrid,
    PlotFigure,
    add_legend,
    add_note,
    axes_by_panel,
    colouring,
    desaturate,
    draw_error_bars,
    finish_panels,
    join_notes,
    log2_gpu_axes,
    palette_of,
    panel_wrap,
    placeholder,
    plot_table,
    plot_text,
    plt,
    rows_of_panel,
    save_figures,
)
from scalesweep.tidy.table import table_group_keys

INTERVAL_NOTE = "error bars: 95 % throughput interval (repeats, else the run's own timed steps)"
STEP_TIME_LABEL = "Time per step (s)"
EPOCH_TIME_LABEL = "Steady epoch time (s)"
GROUP_NOTE_MARKERS = (SINGLE_COUNT_NOTE, NO_BASELINE_NOTE, "baseline is N=", "mixed protocols")



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


# ----------------------------------------------------------------------------- figures

def line_figure(data: pd.DataFrame, name: str, y: str, ylabel: str, by_model: bool,
                error: tuple[str, str] | None = None, ideal: str | None = None,
                reference_y: float | None = None, note: str = "", interval: bool = False,
                from_zero: bool = False, joined: bool = True,
                missing: str = "see the note column of the scaling table") -> PlotFigure:
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
    flagged = rows[flagged_rows(data).reindex(rows.index, fill_value=False)]
    if rows.empty:
        return placeholder(name, f"no {ylabel} to plot ({missing})")
    rows = rows.assign(**{hue: colour.labels})
    long = rows.rename(columns={y: "value"}).assign(kind=MEASURED)
    if ideal:
        long = pd.concat([long, rows.drop(columns=[y]).rename(columns={ideal: "value"})
                         .assign(kind=IDEAL)], ignore_index=True)
    long = long[list(dict.fromkeys(["model", "series", "label", hue, "gpus", "n_ok", "kind",
                                    "value", *(error or ())]))]
    colors = palette_of(colour.labels)
    grid = model_grid(long, by_model, panel_wrap(data) if by_model else None)
    if joined:
        draw_lines(grid, long, hue, colors, by_model, colour.coarse)
    else:
        draw_points(grid, long, hue, colors, by_model)
    add_legend(grid, colors, long[hue], hue, kinds=bool(ideal), flagged=not flagged.empty)
    for panel, ax in axes_by_panel(grid, by_model).items():
        panel_rows = rows_of_panel(rows, panel, by_model)
        ringed = rows_of_panel(flagged, panel, by_model)
        ax.plot(ringed["gpus"], ringed[y], **FLAGGED_STYLE)
        if error and not colour.coarse:  # coarse: the band is the spread between series
            draw_error_bars(ax, panel_rows, y, error[0], error[1], colors, hue,
                            repeats_only=not interval)
        if reference_y is not None:
            ax.axhline(reference_y, color="grey", lw=0.8, ls=":")
        if from_zero:
            ax.set_ylim(bottom=0)
    finish_panels(grid, ylabel, data["gpus"], join_notes(colour.note(BANDS), note))
    measured = long[long["kind"] == MEASURED].drop(columns="kind").reset_index(drop=True)
    return PlotFigure(name, grid.figure, measured, grid=grid,
                      flagged=flagged[["model", "label", "gpus", y]].reset_index(drop=True))


def flagged_rows(data: pd.DataFrame) -> pd.Series:
    """Rows of the plot table whose point the scaling table flags."""
    if "flags" not in data:
        return pd.Series(False, index=data.index)
    return data["flags"].fillna("").astype(str).ne("")


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


def model_grid(rows: pd.DataFrame, by_model: bool, wrap: int | None, aspect: float = 1.2,
               geometry: PanelGeometry | None = None) -> PanelGrid:
    """A panel per model of `rows` in the order they come (seaborn's column order), titled as
    FacetGrid titled them; one untitled panel for all groups when not `by_model`."""
    if not by_model:
        return PanelGrid([None], aspect=aspect, geometry=geometry)
    models = list(pd.unique(rows["model"]))
    return PanelGrid(models, wrap, aspect=aspect, geometry=geometry,
                     titles=[f"model = {model}" for model in models])


# seaborn's lineplot marks: a white edge round each marker.
MARKER_EDGE = {"markeredgewidth": 0.75, "markeredgecolor": "w"}
LINE_MARKS = {MEASURED: {"marker": "o", "ls": "-"},
              IDEAL: {"marker": "X", "dashes": DASHES[IDEAL]}}
BAND_ALPHA = 0.2


def draw_lines(grid: PanelGrid, long: pd.DataFrame, hue: str, colors: dict, by_model: bool,
               coarse: bool) -> None:
    """One line per `hue` value and kind (measured, ideal) in each panel, ordered by GPUs. Coarse:
    the median over the rows of each hue, kind and GPU count, their range as a band; the
    aggregate is one groupby over the whole figure."""
    keys = ["model", hue, "kind", "gpus"] if by_model else [hue, "kind", "gpus"]
    if coarse:
        lines = (long.groupby(keys, sort=False)["value"].agg(["median", "min", "max"])
                 .reset_index().sort_values("gpus", kind="stable"))
        lines = lines.rename(columns={"median": "value"})
    else:
        lines = long.sort_values(["gpus", "value"], kind="stable")
    lines = lines.dropna(subset=["value"])
    levels = list(pd.unique(long[hue]))
    # Each line's points as arrays, found by (panel, hue, kind): a DataFrame per line, grouped
    # per panel, cost more than drawing the line at hundreds of series.
    line_keys = [*(["model"] if by_model else []), hue, "kind"]
    columns = {column: lines[column].to_numpy(float) for column in ("gpus", "value", *(("min", "max") if coarse else ()))}
    drawn = {key: {column: values[positions] for column, values in columns.items()}
             for key, positions in lines.groupby(line_keys, sort=False).indices.items()}
    for panel, ax in axes_by_panel(grid, by_model).items():
        for level in levels:
            for kind in (MEASURED, IDEAL):
                line = drawn.get((panel, level, kind) if by_model else (level, kind))
                if line is None:
                    continue
                ax.plot(line["gpus"], line["value"], color=colors[level], **LINE_MARKS[kind], **MARKER_EDGE)
                if coarse:
                    ax.fill_between(line["gpus"], line["min"], line["max"],
                                    color=colors[level], alpha=BAND_ALPHA, linewidth=0)


POINT_SIZE = 40


def draw_points(grid: PanelGrid, long: pd.DataFrame, hue: str, colors: dict, by_model: bool) -> None:
    """Every row a point in its hue's colour, one scatter per panel (seaborn's scatterplot marks)."""
    for panel, ax in axes_by_panel(grid, by_model).items():
        rows = rows_of_panel(long, panel, by_model).dropna(subset=["value"])
        ax.scatter(rows["gpus"].to_numpy(float), rows["value"].to_numpy(float), s=POINT_SIZE,
                   c=[colors[level] for level in rows[hue]], edgecolors="w",
                   linewidths=0.08 * np.sqrt(POINT_SIZE))


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
        fit_note = join_notes(fit_note, "no Amdahl curve where the fit explains nothing "
                              "(R² ≤ 0, see fits.csv)")
    result = line_figure(data, name, y, ylabel, by_model, ideal="scale_factor",
                         note=join_notes(fit_note, note))
    if curves.empty or result.data.empty:
        return result
    colour = colouring(data, by_model)
    colors = palette_of(colour.labels)
    colour_of = dict(zip(data[colour.units], colour.labels))
    draw = _draw_curves_together if colour.coarse else _draw_curves
    for panel, ax in axes_by_panel(result.grid, by_model).items():
        panel_curves = rows_of_panel(curves, panel, by_model)
        draw(ax, panel_curves, colour.units, {u: colors[colour_of[u]] for u in colour_of})
    predicted_gpus = curves.loc[curves["kind"] == "prediction", "gpus"]
    log2_gpu_axes(result.grid.axes.flat, [*data["gpus"], *predicted_gpus])
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
    # A fit without predictions (a framework held to one node) is drawn to its largest fitted count.
    fitted = chosen["gpus_fitted"].astype(str).map(lambda counts: max(map(float, counts.split(","))))
    end = np.fmax(predicted.max(axis=1), fitted.to_numpy(float))
    for kind, gpus in (("curve", np.geomspace(base[:, 0], end, CURVE_POINTS, axis=1)),
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
    curves = pd.concat(pieces, ignore_index=True).sort_values("fit", kind="stable").dropna(subset=["gpus"])
    return curves.drop(columns="fit").reset_index(drop=True)


def marginal_gain_figure(data: pd.DataFrame, note: str) -> PlotFigure:
    """Bars (points per series when colours are shared): throughput gained by each doubling, in
    % of the throughput before it."""
    name = "marginal_gain"
    colour = colouring(data, by_model=True)
    rows = data[["model", "series", "gpus", "marginal_gain_pct", "marginal_gain_img_s"]].dropna()
    if rows.empty:
        return placeholder(name, "no doubling of the GPU count with throughput on both sides: "
                           "no marginal gain")
    rows = rows.assign(**{colour.column: colour.labels})
    # Shared colours: one bar per colour would average series; points show every one of them,
    # without jitter (random, it would make the same tables a different file on every run).
    colors = palette_of(colour.labels)
    grid = model_grid(rows, by_model=True, wrap=panel_wrap(data))
    draw_gains(grid, rows, colour.column, colors, points=colour.coarse)
    add_legend(grid, colors, rows[colour.column], colour.column)
    for ax in grid.axes.flat:
        ax.axhline(100.0, color="grey", lw=0.8, ls=":")  # a perfect doubling gains 100 %
        ax.axhline(0.0, color="black", lw=0.6)
    grid.set_axis_labels(f"{GPUS_LABEL} (after doubling)", "Marginal gain per doubling (%)")
    add_note(grid.figure, join_notes(colour.note(POINTS), note))
    return PlotFigure(name, grid.figure, rows.reset_index(drop=True), grid=grid)


CATEGORY_WIDTH = 0.8  # of a GPU count's slot, shared by its hues side by side
BAR_SATURATION = 0.75  # seaborn's bars: their colours a little greyer than the lines'
STRIP_POINT_SIZE = 25


def draw_gains(grid: PanelGrid, rows: pd.DataFrame, hue: str, colors: dict, points: bool) -> None:
    """The marginal gains as seaborn's catplot drew them: the GPU counts as categories, each hue
    in its own slot of a count when any count of a panel has several hues (always for points);
    a bar per hue and count (its mean: one row each), or with `points` a point per row."""
    counts = sorted(rows["gpus"].unique())
    levels = list(pd.unique(rows[hue]))
    dodge = points or bool(rows.groupby(["model", "gpus"])[hue].nunique().gt(1).any())
    width = CATEGORY_WIDTH / len(levels) if dodge else CATEGORY_WIDTH
    offset = {level: (index + 0.5) * width - CATEGORY_WIDTH / 2 if dodge else 0.0
              for index, level in enumerate(levels)}
    slot = rows["gpus"].map({gpus: index for index, gpus in enumerate(counts)}).astype(float)
    rows = rows.assign(_x=slot + rows[hue].map(offset))
    if not points:
        rows = rows.groupby(["model", hue, "_x"], sort=False, as_index=False)["marginal_gain_pct"].mean()
    for panel, ax in grid.axes_dict.items():
        drawn = dict(tuple(rows[rows["model"] == panel].groupby(hue, sort=False)))
        for level in (level for level in levels if level in drawn):
            x, y = drawn[level]["_x"].to_numpy(float), drawn[level]["marginal_gain_pct"].to_numpy(float)
            if points:
                ax.scatter(x, y, s=STRIP_POINT_SIZE, color=colors[level], linewidths=0)
            else:
                ax.bar(x, y, width=width, color=desaturate(colors[level], BAR_SATURATION))
        ax.set_xticks(range(len(counts)), [str(int(gpus)) for gpus in counts])
        ax.set_xlim(-0.5, len(counts) - 0.5)
        ax.xaxis.grid(False)  # categories: a vertical grid line would split the bars


def karp_flatt_figure(data: pd.DataFrame, note: str) -> PlotFigure:
    name = "karp_flatt"
    colour = colouring(data, by_model=True)
    rows = data[["model", "series", "label", "gpus", "n_ok", "karp_flatt"]].dropna()
    if rows.empty:
        return placeholder(name, "Karp-Flatt needs at least two GPU counts with a usable time")
    rows = rows.assign(**{colour.column: colour.labels})
    colors = palette_of(colour.labels)
    grid = model_grid(rows, by_model=True, wrap=panel_wrap(data))
    draw_lines(grid, rows.rename(columns={"karp_flatt": "value"}).assign(kind=MEASURED),
               colour.column, colors, by_model=True, coarse=colour.coarse)
    add_legend(grid, colors, rows[colour.column], colour.column)
    for ax in grid.axes.flat:
        ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    # e lies in 0-1 only when 1 <= S <= N: below 0 is a superlinear point, above 1 a slowdown.
    finish_panels(grid, "Karp-Flatt serial fraction e", data["gpus"],
                  join_notes(colour.note(BANDS), "e < 0: superlinear; e > 1: slower than at N_min", note))
    return PlotFigure(name, grid.figure, rows.reset_index(drop=True), grid=grid)


def throughput_efficiency_figure(data: pd.DataFrame, note: str) -> PlotFigure:
    """Throughput (left axis, solid) and efficiency (right axis, dashed) per model panel."""
    name = "throughput_efficiency"
    colour = colouring(data, by_model=True)
    rows = data[["model", "series", "gpus", "n_ok", "throughput_img_s", "efficiency_pct",
                 "throughput_ci_low_img_s", "throughput_ci_high_img_s"]]
    rows = rows.dropna(subset=["throughput_img_s", "efficiency_pct"], how="all")
    if rows.empty:
        return placeholder(name, "no throughput or efficiency to plot")
    rows = rows.assign(**{colour.column: colour.labels})
    colors = palette_of(colour.labels)
    grid = model_grid(rows, by_model=True, wrap=panel_wrap(data), aspect=1.3,
                      geometry=PanelGeometry.of(twin=True))
    # Coarse: the median per colour (no band: two of them on twin axes could not be told apart).
    lines = colour.column if colour.coarse else "series"
    for index, (panel, ax) in enumerate(grid.axes_dict.items()):
        right = grid.twinx(index)
        for label, part in rows[rows["model"] == panel].groupby(lines):
            color = colors[part[colour.column].iloc[0]]
            part = part.groupby("gpus", as_index=False)[["throughput_img_s", "efficiency_pct"]]
            part = part.median()
            ax.plot(part["gpus"], part["throughput_img_s"], "o-", color=color, label=label)
            right.plot(part["gpus"], part["efficiency_pct"], "s--", color=color)
        if not colour.coarse:
            draw_error_bars(ax, rows[rows["model"] == panel], "throughput_img_s",
                            "throughput_ci_low_img_s", "throughput_ci_high_img_s", colors,
                            colour.column, repeats_only=False)
        ax.set_ylim(bottom=0)
        right.grid(False)  # the left axis' grid is the one to read
        right.set_ylabel("Efficiency (%, dashed)")
        right.set_ylim(0, max(110.0, np.nanmax(rows["efficiency_pct"].to_numpy(float),
                                               initial=0.0) * 1.05))
    log2_gpu_axes(grid.axes.flat, data["gpus"])
    grid.set_axis_labels(GPUS_LABEL, "Throughput (images/s, solid)")
    for ax in grid.axes.flat:
        ax.set_ylabel("Throughput (images/s, solid)")  # each panel has its own twin beside it
    # Outside the last twin axis (its right margin holds the twin's ticks and label).
    add_legend(grid, colors, rows[colour.column], colour.column)
    add_note(grid.figure, join_notes(colour.note(MEDIANS), INTERVAL_NOTE, note))
    return PlotFigure(name, grid.figure, rows.reset_index(drop=True), grid=grid)


SPEEDUP_LABELS = {"throughput": "Speedup thr(N)/thr(N_min) (×)",
                  "time": "Speedup T(N_min)/T(N) (×)"}


def speedup_label(data: pd.DataFrame) -> str:
    """The speedup axis label for the bases the plotted groups use (scaling.THROUGHPUT_BASIS)."""
    bases = set(data.get("scaling_basis", pd.Series(["time"])).dropna()) - {""}
    if len(bases) == 1:
        return SPEEDUP_LABELS.get(bases.pop(), "Speedup")
    return "Speedup, per group's basis (×)"


def build_figures(scaling: pd.DataFrame, fits: pd.DataFrame | None = None,
                  predictions: pd.DataFrame | None = None) -> dict[str, PlotFigure]:
    """Every figure of the scaling table (and fit table; the predictions drawn on the speedup
    and efficiency figures), keyed by file stem."""
    return {name: build_figure(maker) for name, maker in figure_makers(scaling, fits, predictions).items()}


def build_figure(maker: Callable[[], PlotFigure]) -> PlotFigure:
    with plt.rc_context(STYLE):
        return maker()


def figure_makers(scaling: pd.DataFrame, fits: pd.DataFrame | None = None,
                  predictions: pd.DataFrame | None = None) -> dict[str, Callable[[], PlotFigure]]:
    """What draws each figure, by file stem in FIGURE_NAMES' order: one figure is built from its
    maker alone, so the figures stage can build them in separate processes."""
    if scaling.empty:
        message = "no GPU runs in the scaling table"
        return {name: functools.partial(placeholder, name, message) for name in FIGURE_NAMES}
    data, _ = plot_table(scaling)
    note = _group_notes(data)
    time_column, time_label = time_metric(data)
    data = with_step_times(data)
    makers = {}
    for by_model, suffix in ((True, "by_model"), (False, "all")):
        makers.update({
            f"time_{suffix}": functools.partial(
                line_figure, data, f"time_{suffix}", time_column, time_label, by_model,
                error=(f"{time_column}_min", f"{time_column}_max"), note=note, from_zero=True),
            f"throughput_{suffix}": functools.partial(
                line_figure, data, f"throughput_{suffix}", "throughput_img_s", "Throughput (images/s)",
                by_model, error=("throughput_ci_low_img_s", "throughput_ci_high_img_s"), interval=True,
                ideal="ideal_throughput_img_s", note=join_notes(INTERVAL_NOTE, note), from_zero=True),
            f"speedup_{suffix}": functools.partial(
                speedup_figure, data, f"speedup_{suffix}", "speedup", speedup_label(data), by_model,
                fits, "speedup", note),
            f"tts_speedup_{suffix}": functools.partial(
                speedup_figure, data, f"tts_speedup_{suffix}", "tts_speedup",
                "Time-to-solution speedup (×)", by_model, fits, "time_to_solution", note),
            f"efficiency_{suffix}": functools.partial(
                line_figure, data, f"efficiency_{suffix}", "efficiency_pct", "Efficiency (%)",
                by_model, reference_y=100.0, note=note, from_zero=True),
        })
        for name, y in (("speedup", "speedup"), ("efficiency", "efficiency_pct")):
            makers[f"{name}_{suffix}"] = functools.partial(
                with_predictions, makers[f"{name}_{suffix}"], data, predictions, y, by_model)
    makers.update({
        "marginal_gain": functools.partial(marginal_gain_figure, data, note),
        "karp_flatt": functools.partial(karp_flatt_figure, data, note),
        "throughput_efficiency": functools.partial(throughput_efficiency_figure, data, note),
        "step_breakdown": functools.partial(step_breakdown_figure, data),
        "comm_compute_ratio": functools.partial(
            line_figure, data, "comm_compute_ratio", "comm_compute_ratio",
            "All-reduce / compute time (ratio)", by_model=True, note=note, joined=False),
        "bus_bandwidth": functools.partial(bus_bandwidth_figure, data, note),
        "energy_per_image": functools.partial(
            line_figure, data, "energy_per_image", "joules_per_image", "GPU energy per image (J)",
            by_model=True, note=note, missing="why: the energy_note column of tidy/runs.csv"),
    })
    return {name: makers[name] for name in FIGURE_NAMES}


def with_predictions(maker: Callable[[], PlotFigure], data: pd.DataFrame,
                     predictions: pd.DataFrame | None, y: str, by_model: bool) -> PlotFigure:
    """The figure `maker` draws, with the predictions of `y` drawn beyond its measured points
    (and kept in its curves, kind "predicted")."""
    figure = maker()
    drawn = draw_predictions(figure, data, predictions, y, by_model)
    if len(drawn):
        figure.curves = pd.concat([figure.curves, drawn.assign(kind="predicted")])
    return figure


FIGURE_NAMES = tuple(
    f"{metric}_{suffix}" for suffix in ("by_model", "all")
    for metric in ("time", "throughput", "speedup", "tts_speedup", "efficiency")
) + ("marginal_gain", "karp_flatt", "throughput_efficiency", "step_breakdown",
     "comm_compute_ratio", "bus_bandwidth", "energy_per_image")
PART_COLOURS = dict(zip(breakdown.PART_NAMES.values(), map(to_rgb, COLORBLIND[:len(breakdown.PARTS)])))


NET_MARKER = "net total where a part is < 0"
TITLE_SIZE = 9  # a panel named by its model and series: two lines of smaller type
NEGLIGIBLE_SHARE = 0.005


def step_breakdown_figure(data: pd.DataFrame) -> PlotFigure:
    """Stacked bars per panel (a model, or a model and series when several share a model): where
    one image's GPU time goes at each GPU count (scalesweep/analysis/breakdown.py: N x part / images per
    step, in ms), GPU counts as the ticks. A negative part (the probe windows ran slower than the
    full steps) is no bar under the axis: the positive parts stack, and a marker shows the net
    total they add up to."""
    name = "step_breakdown"
    keys = [k for k in ("series",) if data.groupby("model")["series"].nunique().max() > 1]
    long = breakdown.long_parts(data, ["model", *keys])
    if long.empty or long["ms_per_image"].isna().all():
        return placeholder(name, breakdown.NO_BREAKDOWN_NOTE)
    panel = long["model"].astype(str)
    note = ""
    if keys and long[["model", "series"]].drop_duplicates().shape[0] <= MAX_COLOURS:
        # One panel per series: its GPU counts, not "framework, dataset | N", as ticks.
        panel = panel + "\n" + long["series"].astype(str)
    elif keys:
        note = (f"{long['series'].nunique()} series: bars are the median per model over them; "
                "every series is in tables/scaling.csv")
    long = long.assign(panel=panel).sort_values(["panel", "gpus"])
    panels = list(pd.unique(long["panel"]))
    title_lines = max(str(title).count("\n") + 1 for title in panels)
    grid = PanelGrid(panels, panel_wrap(long.rename(columns={"model": "_", "panel": "model"})),
                     aspect=1.1, sharex=False, titles=panels, title_size=TITLE_SIZE,
                     geometry=PanelGeometry.of(title_lines=title_lines, title_size=TITLE_SIZE))
    for panel, ax in grid.axes_dict.items():
        _stacked_parts(ax, long[long["panel"] == panel])
        ax.set_xlabel(GPUS_LABEL)
        ax.set_ylabel("GPU time per image (ms)")
    handles = [Patch(color=colour, label=part)
               for part, colour in PART_COLOURS.items()]
    if (long["ms_per_image"] < 0).any():
        handles.append(plt.Line2D([], [], color="black", marker="v", ls="", label=NET_MARKER))
    grid.legend(handles, [handle.get_label() for handle in handles], title="part")
    add_note(grid.figure, join_notes(
        "bar height = N x step time / images per step; growth above the N_min bar is lost "
        "efficiency, by part", note))
    return PlotFigure(name, grid.figure, long.drop(columns="panel").reset_index(drop=True),
                      grid=grid)


def _stacked_parts(ax, data: pd.DataFrame) -> None:
    """One panel's stacked bars: positive parts stacked per GPU count (evenly spaced, labelled
    with the count), a marker at the net total where a part is negative."""
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
                 dpi: int = 120, predictions: pd.DataFrame | None = None) -> list[Path]:
    """Write every figure of `build_figures` as `<outdir>/<name>.png` and `.svg`
    (layout.figure_names); returns the paths."""
    return save_figures(build_figures(scaling, fits, predictions), outdir, dpi)


def write_figures(scaling_csv, fits_csv, predictions_csv, outdir, processes: int = 1,
                  formats=layout.FIGURE_FORMATS) -> str:
    """The figures stage (rule `figures`): scaling.csv (+ fits.csv for the fitted curves,
    predictions.csv for the predicted points) -> outdir/*.png and *.svg (`formats`); the log line.

    Drawing is most of an analysis' time at scale (text layout, twice per file), and one figure
    needs nothing of another: with `processes` > 1 each figure is drawn in one of that many
    processes (FigureProcesses)."""
    paths = (scaling_csv, fits_csv, predictions_csv)
    tables = figure_tables(paths)  # a missing table is refused before any process starts
    if processes <= 1:
        written = save_figures(build_figures(*tables), outdir, formats=formats)
    else:
        with FigureProcesses(paths, outdir, processes, formats=formats) as drawing:
            for table in FIGURE_TABLES:
                drawing.table_written(table)
            written = drawing.written()
    return figures_line(written)


def figures_line(written) -> str:
    return f"{len(written)} figure files: " + " ".join(Path(path).name for path in written)


def figure_tables(paths) -> tuple:
    """The scaling, fits and predictions tables the figures are drawn from (None: a table not
    given)."""
    return tuple(None if path is None else pd.read_csv(path) for path in paths)


# The tables figures are drawn from, in the order of figure_tables' arguments (pipeline's
# FIGURE_TABLES too). All but six figures are drawn alike without the fits and predictions
# (figure_makers passes those to these six only), so they can be drawn while those are computed.
FIGURE_TABLES = ("scaling", "fits", "predictions")
FROM_EVERY_TABLE = frozenset(f"{metric}_{suffix}" for metric in ("speedup", "tts_speedup", "efficiency")
                             for suffix in ("by_model", "all"))


def tables_of(figure_name: str) -> tuple[str, ...]:
    """The FIGURE_TABLES `figure_name` is drawn from."""
    return FIGURE_TABLES if figure_name in FROM_EVERY_TABLE else FIGURE_TABLES[:1]


class FigureProcesses:
    """The figures stage in `processes` fresh processes, each figure handed to one as soon as the
    tables it is drawn from are written (table_written): the tables stage computes the fits and
    predictions in this process while the others draw the figures of the scaling table.

    The processes are started fresh ("spawn") unless told to fork: the Snakemake head that runs
    the stage has threads of its own, and a fork copies whatever lock one of them holds. A
    process with no other thread (`python -m scalesweep analyze`, hardware.may_fork_helpers)
    forks them: they start with its imports, in milliseconds instead of seconds, so even a small
    sweep's figures are drawn on every core. Leaving the block with an error cancels the figures
    not yet started and waits for the others."""

    def __init__(self, table_paths, outdir, processes: int, start_method: str = "spawn",
                 formats=layout.FIGURE_FORMATS):
        self._paths = dict(zip(FIGURE_TABLES, table_paths))
        self._outdir = outdir
        self._formats = tuple(formats)
        self._pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(start_method))
        self._tables: set[str] = set()
        self._futures: dict = {}

    def __enter__(self) -> FigureProcesses:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        self._pool.shutdown(wait=True, cancel_futures=error_type is not None)

    def table_written(self, name: str) -> None:
        """`name` (any table; those figures are not drawn from are ignored) is written: draw every
        figure whose tables now all are."""
        self._tables.add(name)
        for figure_name in FIGURE_NAMES:
            needs = tables_of(figure_name)
            if figure_name in self._futures or not self._tables.issuperset(needs):
                continue
            paths = tuple(self._paths[table] if table in needs else None for table in FIGURE_TABLES)
            self._futures[figure_name] = self._pool.submit(_write_figure, figure_name, paths, self._outdir,
                                                          self._formats)

    def written(self) -> list[Path]:
        """Every figure's files, in FIGURE_NAMES' order, once all are drawn; a figure that failed
        raises its error here."""
        missing = [name for name in FIGURE_NAMES if name not in self._futures]
        if missing:
            raise RuntimeError(f"figures never drawn, their tables not written: {', '.join(missing)}")
        return [path for name in FIGURE_NAMES for path in self._futures[name].result()]


# A drawing process's figure makers, by the table paths they were made from, made once.
_PROCESS_MAKERS: dict = {}


def _write_figure(name: str, table_paths: tuple, outdir, formats) -> list[Path]:
    if table_paths not in _PROCESS_MAKERS:
        _PROCESS_MAKERS[table_paths] = figure_makers(*figure_tables(table_paths))
    return save_figures({name: build_figure(_PROCESS_MAKERS[table_paths][name])}, outdir,
                        formats=formats)
