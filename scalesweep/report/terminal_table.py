"""`scalesweep show`: the scaling table and the sweet spot of a results folder, for a terminal
(within 100 columns), or as CSV or Markdown (docs/outputs.md, "In the terminal").

What it shows is scaling.csv's and sweet_spot.csv's, nothing recomputed, with one addition: the
efficiency's interval, from the 95 % intervals of the throughput at N and at the baseline, their
ends combined (the lower end divides the lowest throughput at N by the highest at the baseline),
so it is a conservative bound, wider than a 95 % interval of the ratio. The baseline's own row
has none: its efficiency is 100 % by definition.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from scalesweep.analysis.breakdown import LOSS_COLUMNS
from scalesweep.analysis.scaling import SCALING_COLUMNS
from scalesweep.analysis.sweetspot import SWEET_SPOT_COLUMNS
from scalesweep.contract import layout
from scalesweep.tidy.table import iter_groups, table_group_keys

WIDTH = 100
FORMATS = ("text", "csv", "markdown")

CAUSE_COLUMNS = LOSS_COLUMNS[1:]  # loss_data_pct ... loss_other_pct: step_efficiency_pct is no cause
INTERVAL_COLUMNS = ("efficiency_ci_low_pct", "efficiency_ci_high_pct")
SHOWN_COLUMNS = ("gpus", "throughput_img_s", "throughput_ci_low_img_s", "throughput_ci_high_img_s", "speedup",
                 "efficiency_pct", *INTERVAL_COLUMNS, *CAUSE_COLUMNS, "flags", "note", "sweet_spot")

# The text form's columns: (header, the shown column, how its value is written).
_CAUSE_HEADERS = {"loss_data_pct": "data", "loss_compute_pct": "comp", "loss_sync_wait_pct": "wait",
                  "loss_sync_comm_pct": "comm", "loss_other_pct": "other"}
LEGEND = ("lost points of efficiency by cause: data loading, compute, sync wait (waiting for the "
          "slowest rank), sync comm (communication not hidden), other; eff 95%: conservative "
          "interval from the throughputs' 95 % intervals")


class ResultsMissing(ValueError):
    """The folder has no scaling table to show."""


def results_tables(results_dir) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """scaling.csv and sweet_spot.csv (None when absent) of a results folder (a sweep's results/,
    or `analyze --out`'s folder); ResultsMissing naming the file that is not there."""
    scaling_csv = Path(layout.results_table(str(results_dir), "scaling"))
    if not scaling_csv.is_file():
        raise ResultsMissing(f"{scaling_csv}: no scaling table here; give the results folder of a "
                             "finished sweep (its results folder, or analyze's --out folder)")
    sweet_csv = Path(layout.results_table(str(results_dir), "sweet_spot"))
    scaling = _with_columns(scaling_csv, READ_SCALING_COLUMNS)
    return scaling, _with_columns(sweet_csv, SWEET_SPOT_COLUMNS) if sweet_csv.is_file() else None


# What show reads of scaling.csv: the columns it prints but derives (the efficiency's interval,
# the marks, flags and note, which may be absent) left out, the baseline it derives them from in.
READ_SCALING_COLUMNS = ("baseline_gpus", *(column for column in SHOWN_COLUMNS
                                          if column not in (*INTERVAL_COLUMNS, "flags", "note", "sweet_spot")))


def _with_columns(path: Path, columns) -> pd.DataFrame:
    """The table at `path`; ResultsMissing naming the file and the columns show prints that it
    lacks (a table of an older scalesweep, or edited by hand), instead of a KeyError."""
    table = pd.read_csv(path)
    missing = [column for column in columns if column not in table.columns]
    if missing:
        raise ResultsMissing(f"{path}: has no column {', '.join(map(repr, missing))}, which show prints: "
                             "write the tables again (scalesweep analyze, or the workflow's tables rule)")
    return table


def efficiency_interval(group: pd.DataFrame) -> pd.DataFrame:
    """efficiency_ci_low_pct and efficiency_ci_high_pct of one group's rows (module docstring)."""
    empty = pd.DataFrame({column: np.nan for column in INTERVAL_COLUMNS}, index=group.index)
    base = group[group["gpus"] == group["baseline_gpus"]]
    if base.empty:
        return empty
    base = base.iloc[0]
    low_at_n = group["throughput_ci_low_img_s"] / group["throughput_img_s"]
    high_at_n = group["throughput_ci_high_img_s"] / group["throughput_img_s"]
    base_low = base["throughput_ci_low_img_s"] / base["throughput_img_s"]
    base_high = base["throughput_ci_high_img_s"] / base["throughput_img_s"]
    interval = pd.DataFrame({"efficiency_ci_low_pct": group["efficiency_pct"] * low_at_n / base_high,
                             "efficiency_ci_high_pct": group["efficiency_pct"] * high_at_n / base_low})
    return interval.where(group["gpus"] != group["baseline_gpus"])


def sweet_spot_marks(scaling: pd.DataFrame, sweet_spot: pd.DataFrame | None, keys: list) -> pd.Series:
    """Per scaling row, the intents whose sweet spot is its GPU count ("fastest, efficient")."""
    marks = pd.Series("", index=scaling.index, dtype=object)
    if sweet_spot is None or sweet_spot.empty:
        return marks
    chosen = sweet_spot.dropna(subset=["gpus"])
    for position, row in scaling.iterrows():
        same = chosen["gpus"] == row["gpus"]
        for key in keys:
            same &= (chosen[key] == row[key]) | (chosen[key].isna() & pd.isna(row[key]))
        marks[position] = ", ".join(chosen.loc[same, "intent"])
    return marks


def show_table(scaling: pd.DataFrame, sweet_spot: pd.DataFrame | None) -> tuple[pd.DataFrame, list]:
    """(the table `show` prints, its group keys): scaling.csv's rows with SHOWN_COLUMNS after the keys."""
    keys = table_group_keys(scaling, SCALING_COLUMNS)
    intervals = [efficiency_interval(rows) for _, rows in iter_groups(scaling, keys)]
    table = scaling.join(pd.concat(intervals) if intervals else pd.DataFrame(columns=INTERVAL_COLUMNS))
    table["sweet_spot"] = sweet_spot_marks(scaling, sweet_spot, keys)
    for column in ("flags", "note"):
        table[column] = table[column].fillna("") if column in table else ""
    return table[[*keys, *SHOWN_COLUMNS]], keys


def render(table: pd.DataFrame, keys: list, fmt: str, sweet_spot: pd.DataFrame | None = None,
           width: int = WIDTH) -> str:
    """The table as `fmt` (FORMATS); text lines fit `width` columns."""
    if fmt == "csv":
        return table.to_csv(index=False)
    if fmt == "markdown":
        return markdown_cells(table).to_markdown(index=False, floatfmt=".6g", missingval="") + "\n"
    blocks = [textwrap.fill(LEGEND, width)]
    for values, rows in iter_groups(table, keys):
        blocks.append(group_text(values, rows, _group_rows(sweet_spot, values), width))
    return "\n\n".join(blocks) + "\n"


def markdown_cells(table: pd.DataFrame) -> pd.DataFrame:
    """The text cells as a Markdown table cell must hold them (GitHub Flavored Markdown, tables):
    a `|` escaped (a dataset named `a|b` split its row into one cell more, shifting every number
    after it under the wrong header), a line break as <br> (a newline ended the row)."""
    def escaped(value):
        if not isinstance(value, str):
            return value
        return value.replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")

    return table.map(escaped)


def group_text(values: dict, rows: pd.DataFrame, choices: pd.DataFrame | None, width: int) -> str:
    """One group: its keys, its rows as a table within `width`, its notes and its sweet spot."""
    title = textwrap.fill("  ".join(f"{key}={_plain(value)}" for key, value in values.items()) or "all runs",
                          width)
    cells = [[_count(row["gpus"]), _rate(row["throughput_img_s"]), _fixed(row["speedup"], 2),
              _fixed(row["efficiency_pct"], 1), _span(row["efficiency_ci_low_pct"], row["efficiency_ci_high_pct"]),
              *(_fixed(row[column], 1) for column in CAUSE_COLUMNS)] for _, row in rows.iterrows()]
    headers = ["GPUs", "img/s", "speedup", "eff %", "eff 95%", *(f"lost\n{_CAUSE_HEADERS[c]}" for c in CAUSE_COLUMNS)]
    body = tabulate(cells, headers, tablefmt="simple", disable_numparse=True, stralign="right")
    lines = [title, body]
    # Flags and notes are sentences: under the table, wrapped, where a column would break them mid-word.
    for gpus, flags, note in zip(rows["gpus"], rows["flags"], rows["note"]):
        for kind, text in (("flags", flags), ("note", note)):
            if text:
                lines.append(textwrap.fill(f"{kind} at {_count(gpus)} GPUs: {text}", width, subsequent_indent="  "))
    if choices is not None:
        lines.append(textwrap.fill("sweet spot: " + "; ".join(_choice(row) for _, row in choices.iterrows()),
                                   width, subsequent_indent="  "))
    return "\n".join(lines)


def _group_rows(sweet_spot: pd.DataFrame | None, values: dict) -> pd.DataFrame | None:
    if sweet_spot is None:
        return None
    same = pd.Series(True, index=sweet_spot.index)
    for key, value in values.items():
        if key in sweet_spot:
            same &= (sweet_spot[key] == value) | (sweet_spot[key].isna() & pd.isna(value))
    return sweet_spot[same][list(SWEET_SPOT_COLUMNS)]


def _choice(row) -> str:
    if pd.isna(row["gpus"]):
        return f"{row['intent']} none ({_plain(row['note'])})"
    gpus = _count(row["gpus"])
    return f"{row['intent']} {gpus} GPU{'' if gpus == '1' else 's'}"


def _plain(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else (
        _count(value) if isinstance(value, float) and value.is_integer() else str(value))


def _count(value) -> str:
    return "–" if pd.isna(value) else str(int(value))


def _fixed(value, digits: int) -> str:
    return "–" if pd.isna(value) else f"{value:.{digits}f}"


def _rate(value) -> str:
    if pd.isna(value):
        return "–"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _span(low, high) -> str:
    return "–" if pd.isna(low) or pd.isna(high) else f"{low:.1f}–{high:.1f}"
