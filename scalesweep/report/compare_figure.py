"""The comparison's figure, compare.png: one row per configuration, the throughput ratio with its
intervals, coloured by verdict (scalesweep/history/compare.py computes them into compare.csv).

The verdict words and a configuration's label are named here, where the figure colours and labels
them; the comparison decides which verdict a configuration gets and writes the same words.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.report.figure_box import tight_bbox

# compare.csv's verdicts (history/compare.py: verdict).
FASTER, SLOWER, SAME, UNKNOWN = "faster", "slower", "no detectable difference", "unknown"
UNKNOWN_NO_REPEATS = "unknown (no repeats)"


def config_label(row, keys: list[str]) -> str:
    """'pytorch vit_tiny synth-folder gpus=2': axis values, the GPU count named."""
    parts = [str(row[key]) for key in keys[:-1] if str(row[key])]
    return " ".join([*parts, f"gpus={row[keys[-1]]}"])


def level_text(level: float) -> str:
    """A confidence level as the summary and the figure print it: 0.95 -> '95 %'."""
    return f"{level * 100:.4g} %"


VERDICT_COLOURS = {SLOWER: "#c0392b", FASTER: "#1e8449", SAME: "#555555", UNKNOWN: "#aaaaaa"}


def verdict_colour(verdict: str) -> str:
    """The colour of a verdict; every `unknown (...)` verdict is unknown's."""
    return VERDICT_COLOURS.get(verdict, VERDICT_COLOURS[UNKNOWN])


DPI = 110
MAX_PLOTTED = 40  # rows a figure can label legibly; the table keeps every configuration


def plot_ratios(table: pd.DataFrame, facts: dict, path) -> None:
    """One row per configuration: the ratio (dot), its 95 % interval (thick) and family-wise
    interval (thin), coloured by verdict, on a log axis with 1.0 marked and labelled ticks across
    the range. More than MAX_PLOTTED configurations: the most changed ones, the title says so."""
    # A bare Figure renders with Agg and skips pyplot's import and global state.
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    finite = table[np.isfinite(table["ratio"])]
    rows = most_changed(finite, MAX_PLOTTED)
    height = 2.0 + 0.3 * max(len(rows), 1)
    figure = Figure(figsize=(8.0, height))
    axis = figure.subplots()
    for position, row in rows.iterrows():
        colour = verdict_colour(row["verdict"])
        y = len(rows) - 1 - position
        axis.plot([row["ratio_ci_adj_low"], row["ratio_ci_adj_high"]], [y, y], color=colour, lw=1)
        axis.plot([row["ratio_ci_low"], row["ratio_ci_high"]], [y, y], color=colour, lw=4, alpha=0.6)
        axis.plot(row["ratio"], y, "o", color=colour, ms=6)
    axis.axvline(1.0, color="black", ls="--", lw=1)
    _log_ratio_axis(axis, rows)
    axis.set_yticks(range(len(rows)), [config_label(r, facts["keys"]) for _, r in rows[::-1].iterrows()],
                    fontsize=8)
    axis.set_xlabel("Throughput ratio, candidate / baseline (log; 1 = no change)")
    shown = (f"{len(rows)} configurations" if len(rows) == len(finite) else
             f"the {len(rows)} most changed of {len(finite)} configurations (all in compare.csv)")
    axis.set_title(f"{shown}\ndot = ratio, thick = {level_text(facts['confidence'])} interval, "
                   "thin = family-wise", fontsize=9)
    verdicts = rows["verdict"].astype(str)
    handles = [Line2D([], [], color=c, marker="o", lw=2, label=v) for v, c in VERDICT_COLOURS.items()
               if verdicts.str.startswith(v).any()]
    if handles:  # beside the panel: inside, it would sit on some configuration's interval
        axis.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                    title="verdict", frameon=False)
    if rows.empty:
        axis.text(0.5, 0.5, "no configuration with a ratio", ha="center", transform=axis.transAxes)
    # No tight_layout: the tight box saves whatever reaches past the figure (long configuration
    # labels on the left, the legend on the right), measured once (savefig's "tight" draws twice).
    figure.savefig(path, dpi=DPI, bbox_inches=tight_bbox(figure, DPI))


def most_changed(rows: pd.DataFrame, limit: int) -> pd.DataFrame:
    """At most `limit` rows, those furthest from a ratio of 1 on the log scale, in table order."""
    if len(rows) <= limit:
        return rows.reset_index(drop=True)
    distance = np.abs(np.log(rows["ratio"].to_numpy(float)))
    keep = np.sort(np.argsort(-distance, kind="stable")[:limit])
    return rows.iloc[keep].reset_index(drop=True)


def _log_ratio_axis(axis, rows: pd.DataFrame) -> None:
    """A log axis with about five plainly labelled ticks across the plotted range and 1 among
    them (a range within one decade would otherwise show only the tick at 1)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    axis.set_xscale("log")
    bounds = rows[["ratio_ci_adj_low", "ratio_ci_adj_high", "ratio"]].to_numpy(float)
    bounds = bounds[np.isfinite(bounds) & (bounds > 0)]
    low, high = (min(bounds.min(), 1.0), max(bounds.max(), 1.0)) if len(bounds) else (0.5, 2.0)
    # 1 first, then the others at least a sixth of the range apart (their labels must not touch).
    gap = max(np.log(high / low), 1e-6) / 6.0
    ticks = [1.0]
    for tick in (float(f"{t:.2g}") for t in np.geomspace(low, high, 5)):
        if all(abs(np.log(tick / kept)) >= gap for kept in ticks):
            ticks.append(tick)
    ticks.sort()
    axis.xaxis.set_major_locator(FixedLocator(ticks))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_minor_formatter(NullFormatter())
