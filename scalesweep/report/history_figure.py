"""History at a glance: each configuration's throughput across the archived sweeps (rule
`history` writes it after archiving this sweep; scalesweep/history/query.py builds the table
drawn here from the archive).

One panel per group (labelled as in the scaling figures), the sweep dates on the x axis, one
colour per GPU count, the median throughput of each sweep with its 95 % interval as error bars
(scaling.cell_throughput_interval: repeats, else the run's own timed steps). With one sweep in the
history there is nothing to follow over time: the figure says so instead.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.dates as mdates
import numpy as np
import pandas as pd

from scalesweep.report.findings import gpus_text
from scalesweep.report.plotkit import (
    STYLE,
    PanelGeometry,
    PanelGrid,
    PlotFigure,
    add_legend,
    add_note,
    cycle_colours,
    panel_wrap,
    placeholder,
    plot_table,
    plt,
    save_png,
)

NAME = "throughput_history"
DATE_LABEL = "Sweep date (UTC)"
MANY_DATES = 6  # more sweeps than this: matplotlib's own date ticks, not one per sweep
TITLE_SIZE = 9
DATE_TICK_LINES = 2  # a sweep's date over its time


def history_figure(table: pd.DataFrame) -> PlotFigure:
    with plt.rc_context(STYLE):
        return _history_figure(table)


def _history_figure(table: pd.DataFrame) -> PlotFigure:
    sweeps = table["sweep_id"].nunique() if len(table) else 0
    if sweeps < 2:
        return placeholder(NAME, f"{sweeps} sweep(s) in the history: throughput over time "
                                  "needs two or more")
    data, _ = plot_table(table.drop(columns=["sweep_id", "sweep_date"]))
    data = data.assign(sweep_id=table["sweep_id"].to_numpy(),
                       sweep_date=table["sweep_date"].dt.tz_localize(None).to_numpy(),
                       panel=lambda d: d["label"], count=lambda d: d["gpus"].map(gpus_text))
    data = data.dropna(subset=["throughput_img_s"])
    if data.empty:
        return placeholder(NAME, "no throughput in the archived sweeps")
    # Colours and legend in GPU order (a sorted palette would put 16 GPUs before 2).
    counts = data.drop_duplicates("gpus").sort_values("gpus")["count"]
    colors = dict(zip(counts, cycle_colours(len(counts))))
    panels = list(pd.unique(data["panel"]))
    grid = PanelGrid(panels, panel_wrap(data.rename(columns={"model": "_", "panel": "model"})),
                     aspect=1.3, titles=panels, title_size=TITLE_SIZE,
                     geometry=PanelGeometry.of(title_size=TITLE_SIZE, tick_lines=DATE_TICK_LINES))
    dates = sorted(data["sweep_date"].unique())
    for panel, ax in grid.axes_dict.items():
        _throughput_over_time(ax, data[data["panel"] == panel], colors)
        _date_axis(ax, dates)
        ax.set_xlabel(DATE_LABEL)
        ax.set_ylabel("Throughput (images/s)")
        ax.set_ylim(bottom=0)
    add_legend(grid, colors, data["count"], "GPU count")
    add_note(grid.figure, f"{sweeps} sweeps; error bars: 95 % throughput interval of each sweep")
    return PlotFigure(NAME, grid.figure, data.reset_index(drop=True), grid=grid)


def _throughput_over_time(ax, data: pd.DataFrame, colors: dict) -> None:
    for count, rows in data.sort_values("sweep_date").groupby("count"):
        y = rows["throughput_img_s"].to_numpy(float)
        low = (y - rows["throughput_ci_low_img_s"].to_numpy(float))
        high = (rows["throughput_ci_high_img_s"].to_numpy(float) - y)
        errors = np.nan_to_num(np.vstack([low, high]), nan=0.0)
        ax.errorbar(rows["sweep_date"], y, yerr=errors, color=colors[count], marker="o",
                    capsize=3, lw=1)


def _date_axis(ax, dates) -> None:
    """A tick per sweep while they are few (their dates are what a reader looks for), else
    matplotlib's concise date ticks; labels slanted so that neighbouring dates do not touch."""
    if len(dates) <= MANY_DATES:
        ax.set_xticks(dates, [pd.Timestamp(d).strftime("%Y-%m-%d\n%H:%M") for d in dates])
        span = (dates[-1] - dates[0]) or np.timedelta64(1, "D")
        ax.set_xlim(dates[0] - span * 0.15, dates[-1] + span * 0.15)
    else:
        locator = mdates.AutoDateLocator(maxticks=5)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.tick_params(axis="x", labelsize=8)


def write_history_figure(table: pd.DataFrame, output) -> str:
    """The scaling table of every archived sweep (query.history_table) -> `output` (PNG); the
    log line."""
    figure = history_figure(table)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    save_png(figure, output, 120)
    return f"{NAME}: {table['sweep_id'].nunique()} sweeps in {output}"
