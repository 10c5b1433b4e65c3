"""The prediction (results/tables/predictions.csv, scalesweep/analysis/predict.py) drawn beside the
measured points of the speedup and efficiency figures: open diamonds on a dotted line from the
last measured count, a vertical bar for the band, labelled "predicted" in the figure's note, so a
reader never takes it for a measurement. Only counts beyond the measured ones are drawn (a
held-out prediction at a measured count is a number in the table, not a point to confuse with it).
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection

from scalesweep.analysis.scaling import format_value
from scalesweep.report.plotkit import PLOT_VALUE_COLUMNS, PlotFigure, axes_by_panel, colouring, log2_gpu_axes, palette_of, plot_text
from scalesweep.tidy.table import group_records, key_tuple, table_group_keys

PREDICTED_LABEL = ("open diamonds, dotted: predicted, not measured\n"
                   "(predictions.csv; bar: its band)")
# What each figure's y is, from a prediction's efficiency (%) at `gpus` over the baseline count.
METRICS = {
    "efficiency_pct": lambda eff, gpus, base: eff,
    "speedup": lambda eff, gpus, base: eff / 100.0 * gpus / base,
}


def predicted_points(data: pd.DataFrame, predictions: pd.DataFrame, y: str) -> pd.DataFrame:
    """Per plotted group, its predicted counts beyond the measured ones: model, series, label,
    gpus, y, y_low, y_high, and the last measured (gpus, y) the dotted line starts from."""
    columns = ["model", "series", "label", "gpus", "y", "y_low", "y_high", "from_gpus", "from_y"]
    if predictions is None or predictions.empty or y not in METRICS:
        return pd.DataFrame(columns=columns)
    keys = [k for k in table_group_keys(data, PLOT_VALUE_COLUMNS) if k in predictions.columns and k != "gpus"]
    drawable = predictions[pd.to_numeric(predictions["efficiency_pct"], errors="coerce").notna()].copy()
    if "model" in drawable:
        drawable["model"] = drawable["model"].map(format_value).map(plot_text)
    # A group's rows as dicts (group_records), its predictions found by key once: a DataFrame per
    # group, filtered and iterated, was most of the figures' time at 264 groups.
    ahead_of = {key_tuple(values, keys): rows for values, rows in group_records(drawable, keys)}
    plotted = data[list(dict.fromkeys([*keys, "gpus", "model", "series", "label", y]))]
    rows, convert = [], METRICS[y]
    for values, measured in group_records(plotted, keys):
        top = max(row["gpus"] for row in measured)
        mine = [row for row in ahead_of.get(key_tuple(values, keys), ()) if row["gpus"] > top]
        if not mine:
            continue
        last = max(measured, key=lambda row: row["gpus"])  # the first row of the largest count
        base = min(row["gpus"] for row in measured)
        for row in mine:
            rows.append({"model": last["model"], "series": last["series"], "label": last["label"],
                         "gpus": row["gpus"], "y": convert(row["efficiency_pct"], row["gpus"], base),
                         "y_low": convert(row["efficiency_low_pct"], row["gpus"], base),
                         "y_high": convert(row["efficiency_high_pct"], row["gpus"], base),
                         "from_gpus": last["gpus"], "from_y": last[y]})
    return pd.DataFrame(rows, columns=columns)


def draw_predictions(result: PlotFigure, data: pd.DataFrame, predictions: pd.DataFrame | None, y: str,
                     by_model: bool) -> pd.DataFrame:
    """Draw the predicted points of `y` on `result`'s panels; returns what it drew. Each panel
    takes three artists whatever its number of series (the dotted lines, the diamonds, the
    bands): one each per series was most of the figures' time at 2,000 logs."""
    points = predicted_points(data, predictions, y)
    if points.empty or result.grid is None or result.data.empty:
        return points
    colour = colouring(data, by_model)
    colors = palette_of(colour.labels)
    colour_of = dict(zip(data[colour.units], colour.labels))
    units_of = {}  # {panel: [(unit, its points as dicts)]}, units sorted as a groupby would
    for values, part in group_records(points, [*(["model"] if by_model else []), colour.units]):
        units_of.setdefault(values["model"] if by_model else None, []).append((values[colour.units], part))
    for panel, ax in axes_by_panel(result.grid, by_model).items():
        lines, line_colours, diamonds, diamond_colours = [], [], [], []
        for unit, part in units_of.get(panel, ()):
            color = colors[colour_of[unit]]
            part = sorted(part, key=lambda point: point["gpus"])
            x = [part[0]["from_gpus"], *(point["gpus"] for point in part)]
            values = [part[0]["from_y"], *(point["y"] for point in part)]
            lines.append(np.column_stack([x, values]).astype(float))
            line_colours.append(color)
            diamonds.append(np.array([[point[c] for c in ("gpus", "y", "y_low", "y_high")] for point in part], float))
            diamond_colours.extend([color] * len(part))
        ax.text(0.99, 0.01, PREDICTED_LABEL, transform=ax.transAxes, ha="right", va="bottom", fontsize=7)
        if lines:
            diamonds = np.concatenate(diamonds)
            ax.add_collection(LineCollection(lines, colors=line_colours, linestyles=":", linewidths=1))
            ax.scatter(diamonds[:, 0], diamonds[:, 1], marker="D", facecolors="none", edgecolors=diamond_colours,
                       s=matplotlib.rcParams["lines.markersize"] ** 2,
                       linewidths=matplotlib.rcParams["lines.markeredgewidth"])
            ax.vlines(diamonds[:, 0], diamonds[:, 2], diamonds[:, 3], colors=diamond_colours, lw=2, alpha=0.4)
            ax.autoscale_view()
    log2_gpu_axes(result.grid.axes.flat, [*data["gpus"], *points["gpus"]])
    return points


# ---------------------------------------------------------------------------------------------
# In words (findings.md)


def has_step_model(rows: list[dict]) -> bool:
    """Whether a group's predictions beyond its counts (its predictions.csv rows, as dicts) are the
    step model's: findings.md then tells that one prediction and leaves the Amdahl extrapolation
    to fits.csv."""
    return any(pd.isna(row["measured_efficiency_pct"]) and _is_number(row["efficiency_pct"])
               and str(row.get("method")).startswith("step model") for row in rows)


def _is_number(value) -> bool:
    return not pd.isna(pd.to_numeric(value, errors="coerce"))


def prediction_lines(rows: list[dict]) -> list[str]:
    """findings.md's lines of one group's predictions (its predictions.csv rows, as dicts): the
    counts not measured, "predicted, not measured", with the band and what they rest on; then the
    held-out check at measured counts."""
    lines = []
    ahead = [row for row in rows if pd.isna(row["measured_efficiency_pct"])]
    told = [row for row in ahead if pd.notna(row["efficiency_pct"])]
    if told:
        points = [f"{row['gpus']:.0f} GPUs {row['efficiency_pct']:.1f} % efficiency (band "
                  f"{row['efficiency_low_pct']:.1f}–{row['efficiency_high_pct']:.1f} %), "
                  f"{row['throughput_img_s']:,.0f} img/s" for row in told]
        first = told[0]
        limit = first.get("limited_by")
        limit = f" Limited by {limit}." if isinstance(limit, str) and limit else ""
        lines.append(f"Predicted, not measured: {'; '.join(points)}.{limit} Method: {first['method']}; it rests on "
                     f"{first['inputs']} (docs/prediction.md).")
    refused = [row for row in ahead if pd.isna(row["efficiency_pct"])]
    if refused:
        counts = ", ".join(f"{row['gpus']:.0f}" for row in refused)
        lines.append(f"No prediction at {counts} GPUs: {refused[0]['inputs']}.")
    checked = [row for row in rows if pd.notna(row["measured_efficiency_pct"])]
    if checked:
        parts = [f"{row['gpus']:.0f} GPUs from {row['measured_gpus']}: {row['efficiency_pct']:.1f} % predicted, "
                 f"{row['measured_efficiency_pct']:.1f} % measured ({row['error_pts']:+.1f} points)" for row in checked]
        lines.append("Prediction checked against measurement: " + "; ".join(parts) + ".")
    return lines
