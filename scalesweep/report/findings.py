"""The findings stage (rule `findings`): the tables in words -> results/findings.md.

Per group of the scaling table (framework, model, dataset and any other axis that varies), four
lines: how far it was measured to scale (the largest GPU count with a speedup, its speedup and
efficiency), where to stop (the sweet spot of every intent with its GPU-hours), why efficiency
fell (the points lost at that count split into the parts of the step that grew, the
`loss_*_pct` columns of scalesweep/analysis/breakdown.py), and what the Amdahl fit predicts at the next
two doublings with its interval, or a warning when it explains nothing (R² <= 0) or could not
be fitted. Every number is read from the tables and only formatted here. A group's rows are
plain dicts (tidy.table.group_records): a DataFrame per group cost more than its words.

The text is Markdown that is also reStructuredText (bold paragraphs and "- " lists): the
report's front page (workflow/report/workflow.rst) includes the same file.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.analysis.breakdown import PART_NAMES, PARTS
from scalesweep.analysis.fits import FEW_POINTS_NOTE, N_DOUBLINGS, predicted_speedup
from scalesweep.analysis.scaling import SCALING_COLUMNS, SUPERLINEAR_FLAG, format_value, is_flagged, is_usable, records_by_group
from scalesweep.contract import atomic
from scalesweep.tidy.table import group_records, table_group_keys
from scalesweep.report.prediction import has_step_model, prediction_lines

TITLE = "**Findings: how far each configuration scales, where to stop, and why**"
# The loss columns in words, the words of the step breakdown (docs/metrics.md).
LOSS_WORDS = {f"loss_{PART_NAMES[p].replace(' ', '_')}_pct": words for p, words in zip(
    PARTS, ("data", "compute", "waiting for the slowest rank", "exposed communication", "other"))}
Z95 = 1.959964  # two-sided 95 % normal quantile, for a fit's interval from its standard error


# ----------------------------------------------------------------------------- facts

def largest_count(group: list[dict]) -> dict | None:
    """The row of the largest GPU count above the baseline with a usable, unflagged speedup
    (None: no such scaling measured; the first such row of a count measured twice). A flagged
    point never heads a group."""
    measured = [row for row in group if is_usable(row["speedup"]) and is_usable(row["efficiency_pct"])
                and row["gpus"] > row["baseline_gpus"] and not is_flagged(row)]
    return max(measured, key=lambda row: row["gpus"]) if measured else None


def flagged_text(group: list[dict]) -> str:
    """' Left out as flagged (superlinear, likely a slowed baseline): 4 GPUs at 154 %.'"""
    rows = [row for row in group if is_flagged(row) and is_usable(row["efficiency_pct"])]
    if not rows:
        return ""
    points = ", ".join(f"{gpus_text(r['gpus'])} at {r['efficiency_pct']:.0f} %" for r in rows)
    return (f" Left out as flagged ({SUPERLINEAR_FLAG}, likely a slowed baseline or a busy node: "
            f"see node_load in runs.csv): {points}.")


def gpus_text(count) -> str:
    count = int(count)
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def lost_points(row: dict) -> tuple[float, list[tuple[str, float]]]:
    """Efficiency points lost at `row` (100 - step efficiency) and each part's share, largest
    first; an empty split when the row has no breakdown."""
    if not is_usable(row.get("step_efficiency_pct", math.nan)):
        return math.nan, []
    # A part that shrank has a negative loss: is_usable (> 0) would drop it.
    parts = [(words, float(row[column])) for column, words in LOSS_WORDS.items()
             if column in row and np.isfinite(pd.to_numeric(row[column], errors="coerce"))]
    return 100.0 - float(row["step_efficiency_pct"]), sorted(parts, key=lambda p: -p[1])


def speedup_interval(fit: dict, k: int) -> tuple[float, float]:
    """The predicted speedup at the k-th doubling for the ends of p's interval: the bootstrap's
    percentiles when there are repeats, else p +- 1.96 standard errors (clipped to [0, 1])."""
    low, high = fit.get("p_ci_low", math.nan), fit.get("p_ci_high", math.nan)
    if not (is_usable(low) and is_usable(high)):
        spread = Z95 * float(fit["p_stderr"]) if is_usable(fit.get("p_stderr")) else 0.0
        low, high = fit["p"] - spread, fit["p"] + spread
    ends = predicted_speedup("amdahl", np.clip([low, high], 0.0, 1.0),
                             float(fit[f"pred_gpus_{k}"]), float(fit["baseline_gpus"]))
    return float(np.min(ends)), float(np.max(ends))


def amdahl_speedup_fits(fits: pd.DataFrame | None) -> pd.DataFrame | None:
    """The Amdahl fits of the groups' speedup series (fits.csv): the fit the findings quote."""
    if fits is None or fits.empty:
        return None
    return fits[(fits["law"] == "amdahl") & (fits["target"] == "speedup")]


def first_row(rows: list[dict]) -> dict | None:
    return rows[0] if rows else None


# ----------------------------------------------------------------------------- words

def speedup_band(row: dict, group: list[dict]) -> str:
    """' (95 % 2.41–3.30)': the speedup's interval from the throughput intervals of its count and
    of the baseline (repeats' spread where there are repeats, else the runs' own timed steps):
    thr_low(N) / thr_high(N_min) to thr_high(N) / thr_low(N_min). Empty where either is unknown."""
    base = next((other for other in group if other["gpus"] == row["baseline_gpus"]), None)
    columns = ("throughput_ci_low_img_s", "throughput_ci_high_img_s")
    if base is None or not all(c in row and is_usable(row[c]) and is_usable(base[c]) for c in columns):
        return ""
    low = row[columns[0]] / base[columns[1]]
    high = row[columns[1]] / base[columns[0]]
    return f" (95 % {low:.2f}–{high:.2f})"


def busy_text(group: list[dict]) -> str:
    """' The node was busy (load above its CPUs) at the start of 12 of 12 runs: ...'."""
    busy = [pd.to_numeric(row.get("n_busy", math.nan), errors="coerce") for row in group]
    if not any(count > 0 for count in busy):  # NaN > 0 is False: no column, no count
        return ""
    busy, runs = int(np.nansum(busy)), int(np.nansum([row["n_ok"] for row in group]))
    return (f" The node was busy (load above its CPUs) at the start of {busy} of {runs} runs "
            "(node_load in runs.csv): their times carry that noise.")


def scale_line(row: dict | None, flagged_note: str = "", group: list[dict] | None = None) -> str:
    noise = "" if group is None else busy_text(group)
    if row is None:
        return ("Scaling: no two GPU counts with a usable, unflagged time, so no speedup to report."
                + flagged_note + noise)
    band = "" if group is None else speedup_band(row, group)
    return (f"Scaling: measured up to {gpus_text(row['gpus'])}, speedup {row['speedup']:.2f}×{band} "
            f"at {row['efficiency_pct']:.1f} % efficiency." + flagged_note + noise)


def energy_text(spot: dict) -> str:
    """', 2.57 J per image (GPU energy)' where the run measured its energy (an NVML counter)."""
    joules = spot.get("joules_per_image")
    return f", {joules:.3g} J per image (GPU energy)" if is_usable(joules) else ""


# What "fastest" minimised, by the sweet spot's time_metric (scalesweep/analysis/sweetspot.py).
TIME_METRIC_WORDS = {"total_time_s": "shortest time to solution", "projected_time_s": "shortest projected time to solution",
                     "time_s": "shortest steady epoch time", "time_per_image_s": "shortest time per image"}


def intent_words(spot: dict) -> str:
    """'fastest (shortest time to solution)': the intent, with what it minimised where that is a time."""
    if spot["intent"] != "fastest":
        return str(spot["intent"])
    words = TIME_METRIC_WORDS.get(str(spot.get("time_metric")), "shortest time")
    return f"fastest ({words})"


def spot_line(spots: list[dict]) -> str:
    if not spots:
        return "Where to stop: no sweet-spot row."
    parts = []
    for spot in spots:
        if is_usable(spot["gpus"]):
            hours = (f", {spot['gpu_hours']:.3g} GPU-hours" if is_usable(spot["gpu_hours"])
                     else "")
            parts.append(f"{intent_words(spot)} {gpus_text(spot['gpus'])}{hours}{energy_text(spot)}")
        else:
            parts.append(f"{intent_words(spot)}: {spot['note']}")
    return "Where to stop: " + "; ".join(parts) + "."


def loss_line(row: dict | None) -> str:
    if row is None:
        return "Why: no scaling measured."
    lost, parts = lost_points(row)
    if not parts:
        return (f"Why: no step breakdown at {gpus_text(row['gpus'])} (reference or older logs), "
                "so the loss cannot be split.")
    if lost <= 0:
        return f"Why: at {gpus_text(row['gpus'])} no efficiency is lost to the step's parts."
    grew = [f"{points:.1f} to {words}" for words, points in parts if points > 0]
    shrank = [f"{-points:.1f} regained by {words}" for words, points in parts if points < 0]
    return (f"Why: at {gpus_text(row['gpus'])} {lost:.1f} points of efficiency are lost: "
            + ", ".join(grew + shrank) + ".")


def fit_line(fit: dict | None) -> str:
    if fit is None:
        return "Prediction: no fit in the fits table."
    if not is_usable(fit["p"]):
        note = fit.get("note") if isinstance(fit.get("note"), str) else ""
        return ("Prediction: warning, Amdahl's law could not be fitted"
                + (f" ({note})" if note else "") + ": no prediction.")
    r2 = pd.to_numeric(fit.get("r2"), errors="coerce")  # may be negative: not is_usable
    if np.isfinite(r2) and r2 <= 0:
        return (f"Prediction: warning, the Amdahl fit explains nothing (R² = {r2:.2f}): "
                "no prediction.")
    predictions = []
    for k in (k for k in range(1, N_DOUBLINGS + 1) if is_usable(fit.get(f"pred_gpus_{k}"))):
        low, high = speedup_interval(fit, k)
        predictions.append(f"{gpus_text(fit[f'pred_gpus_{k}'])} {fit[f'pred_speedup_{k}']:.2f}× "
                           f"(95 % {low:.2f}–{high:.2f}), "
                           f"{fit[f'pred_efficiency_pct_{k}']:.1f} % efficiency")
    shown = f", R² = {r2:.2f}" if np.isfinite(r2) else ""
    if not predictions:
        limits = [part for part in str(fit.get("note") or "").split("; ") if part.startswith("no prediction")]
        predictions = limits or ["no prediction"]
    caveat = f" Warning: {FEW_POINTS_NOTE}." if FEW_POINTS_NOTE in str(fit.get("note") or "") else ""
    return (f"Prediction (Amdahl, p = {fit['p']:.3f}{shown}): " + "; ".join(predictions) + "." + caveat)


def group_title(values: dict) -> str:
    plain = ("framework", "model", "dataset")
    parts = [format_value(values[k]) for k in plain if k in values]
    # A key a group does not have (NaN: e.g. the batch of a reference log) is no part of its name.
    parts += [f"{k}={format_value(v)}" for k, v in values.items() if k not in plain and not pd.isna(v)]
    return ", ".join(parts) or "all runs"


def findings_text(scaling: pd.DataFrame, fits: pd.DataFrame | None = None,
                  sweet: pd.DataFrame | None = None, predictions: pd.DataFrame | None = None) -> str:
    """The findings of the tables as Markdown (also valid reStructuredText)."""
    lines = [TITLE, ""]
    if scaling.empty:
        return "\n".join([*lines, "No GPU runs in the scaling table: nothing to report.", ""])
    keys = table_group_keys(scaling, SCALING_COLUMNS)
    fit_of = records_by_group(amdahl_speedup_fits(fits), keys)
    spots_in = records_by_group(sweet, keys)
    predictions_of = records_by_group(predictions, keys)
    for values, group in group_records(scaling, keys):
        row = largest_count(group)
        lines += [f"**{group_title(values)}**", "",
                  f"- {scale_line(row, flagged_text(group), group)}",
                  f"- {spot_line(spots_in(values))}",
                  f"- {loss_line(row)}",
                  *([] if has_step_model(predictions_of(values)) else [f"- {fit_line(first_row(fit_of(values)))}"]),
                  *(f"- {line}" for line in prediction_lines(predictions_of(values))), ""]
    return "\n".join(lines)


def write_findings(scaling_csv, fits_csv, sweet_spot_csv, predictions_csv, output) -> str:
    """The findings stage: the four tables -> `output` (Markdown); the log line."""
    text = findings_text(pd.read_csv(scaling_csv), pd.read_csv(fits_csv),
                         pd.read_csv(sweet_spot_csv), pd.read_csv(predictions_csv))
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(text, output)
    return f"findings for {text.count('- Scaling:')} group(s) in {output}"
