"""Which GPU count to use: the sweet spot depends on the intent (docs/metrics.md).

Per group of the scaling table, one row per intent:
- `fastest`: the shortest time, however many GPUs it takes;
- `efficient`: the most GPUs whose parallel efficiency is still >= a floor (analysis.efficiency_floor_pct). The
  largest such count is taken even when a count in between fell below the floor (measurement noise
  at one count should not hide a good larger one);
- `budget`: the shortest time among GPU counts whose run fits a GPU-hour budget (skipped with a
  note when no budget is given);
- `greenest`: the least GPU energy per epoch among GPU counts whose time is within a time bound
  (`greenest_time_bound_s`, in seconds of the group's time metric; no bound when None). Energy
  per epoch is `projected_energy_j` (the epoch budget's energy at the measured joules per image)
  where every candidate has it, else joules per image (the same order within a group).

"Time" follows the group's scaling basis (scaling.THROUGHPUT_BASIS). With the time basis (the
epochs protocol, the same work at every N) it is the measured time to solution (total_time_s)
when the group has it for every candidate, else the steady epoch time. With the throughput basis
(the steps protocol: a timed window is no training) it is the projected time of the epoch budget
at the measured throughput, `epoch_budget` x train_images / throughput (`projected_time_s`),
or, where the images of an epoch are unknown, the time per image. `time_metric` says which.

GPU-hours (`gpu_hours`, what the budget intent compares) are projected the same way for every
protocol where the images of an epoch are known: gpus x epoch_budget x train_images / throughput
/ 3600, the cost of that much training at the measured rate, start-up excluded. Elsewhere they
are what the measured run cost (`run_gpu_hours`: the run's wall time x GPUs, else its time to
solution, else steady epoch time x epochs). `gpu_hours_basis` says which.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalesweep.analysis.scaling import (
    SCALING_COLUMNS,
    THROUGHPUT_BASIS,
    basis_of_values,
    is_flagged,
    is_usable,
)
from scalesweep.plan.analysis_settings import DEFAULTS, AnalysisSettings
from scalesweep.tidy.table import group_records, table_group_keys

INTENTS = ("fastest", "efficient", "budget", "greenest")
SWEET_SPOT_COLUMNS = (
    "intent", "gpus", "time_metric", "time_s", "total_time_s", "projected_time_s",
    "efficiency_pct", "gpu_hours", "gpu_hours_basis", "run_gpu_hours",
    "joules_per_image", "projected_energy_j", "why", "note",
)


def gpu_hours(scaling: pd.DataFrame) -> pd.Series:
    """GPU-hours one measured run cost, per row: the scaling table's gpu_hours (wall time x
    GPUs), else gpus x total time, else gpus x epoch time x epochs."""
    per_epoch = scaling["time_s"] * scaling["epochs"]
    run_seconds = scaling["total_time_s"].where(scaling["total_time_s"].map(is_usable), per_epoch)
    measured = scaling["gpus"] * run_seconds / 3600.0
    if "gpu_hours" not in scaling:
        return measured
    return scaling["gpu_hours"].where(scaling["gpu_hours"].map(is_usable), measured)


def projected_time_s(scaling: pd.DataFrame, epoch_budget: float) -> pd.Series:
    """Seconds that `epoch_budget` epochs of train_images would take at the measured throughput
    (NaN where either is unknown)."""
    if "train_images" not in scaling:
        return pd.Series(math.nan, index=scaling.index)
    return epoch_budget * scaling["train_images"] / scaling["throughput_img_s"]


def chosen_time_metric(group: list[dict]) -> str:
    """Time basis: total_time_s when every GPU count with an epoch time also has a total time,
    else time_s. Throughput basis: projected_time_s when every GPU count with a throughput has
    it, else time_per_image_s. `group`: the group's rows (as dicts) of with_costs' table."""
    bases = [row["scaling_basis"] for row in group] if "scaling_basis" in group[0] else None
    if basis_of_values(bases) == THROUGHPUT_BASIS:
        measured = [row for row in group if is_usable(row["throughput_img_s"])]
        if measured and all(is_usable(row["projected_time_s"]) for row in measured):
            return "projected_time_s"
        return "time_per_image_s"
    measured = [row for row in group if is_usable(row["time_s"])]
    if measured and all(is_usable(row["total_time_s"]) for row in measured):
        return "total_time_s"
    return "time_s"


def _least(rows: list[dict], column: str) -> dict:
    """The row of the smallest `column` value, the first of equal ones (pandas' idxmin)."""
    return min(rows, key=lambda row: row[column])


def fastest(group: list[dict], metric: str) -> tuple[dict | None, str]:
    candidates = [row for row in group if is_usable(row[metric])]
    if not candidates:
        return None, "no GPU count with a usable time"
    best = _least(candidates, metric)
    return best, f"shortest {_describe(metric)}: {best[metric]:.4g} s at {int(best['gpus'])} GPUs"


def most_efficient(group: list[dict], floor: float) -> tuple[dict | None, str]:
    candidates = [row for row in group if not pd.isna(row["efficiency_pct"]) and row["efficiency_pct"] >= floor]
    if not candidates:
        return None, f"no GPU count keeps efficiency >= {floor:g}%"
    best = max(candidates, key=lambda row: row["gpus"])  # the first of the largest count
    return best, (f"most GPUs with efficiency >= {floor:g}%: {int(best['gpus'])} GPUs at "
                  f"{best['efficiency_pct']:.1f}%")


def within_budget(group: list[dict], metric: str, budget: float | None
                  ) -> tuple[dict | None, str]:
    if budget is None:
        return None, "no GPU-hour budget given: intent skipped"
    candidates = [row for row in group if is_usable(row[metric]) and row["gpu_hours"] <= budget]
    if not candidates:
        return None, f"no GPU count fits a budget of {budget:g} GPU-hours"
    best = _least(candidates, metric)
    return best, (f"shortest {_describe(metric)} within {budget:g} GPU-hours: {best[metric]:.4g} s "
                  f"at {int(best['gpus'])} GPUs using {best['gpu_hours']:.3g} GPU-hours")


def greenest(group: list[dict], metric: str, time_bound_s: float | None) -> tuple[dict | None, str]:
    """The least energy per epoch among GPU counts whose `metric` time is within the bound."""
    energy = [row for row in group if is_usable(row.get("joules_per_image"))]
    if not energy:
        return None, "no GPU count with a measured energy per image"
    within = [row for row in energy if is_usable(row[metric])]
    bound = "" if time_bound_s is None else f" within {time_bound_s:g} s"
    if time_bound_s is not None:
        within = [row for row in within if row[metric] <= time_bound_s]
    if not within:
        return None, f"no GPU count with a measured energy has a {_describe(metric)}{bound}"
    column = ("projected_energy_j" if all(is_usable(row["projected_energy_j"]) for row in within)
              else "joules_per_image")
    best = _least(within, column)
    unit = "J per image" if column == "joules_per_image" else "J projected"
    return best, (f"least GPU energy{bound} ({_describe(metric)}): {best[column]:.4g} {unit} "
                  f"at {int(best['gpus'])} GPUs ({best['joules_per_image']:.4g} J per image)")


def _describe(metric: str) -> str:
    return {"total_time_s": "time to solution", "time_s": "steady epoch time",
            "projected_time_s": "projected training time", "time_per_image_s": "time per image",
            }[metric]


def with_costs(scaling: pd.DataFrame, epoch_budget: float) -> pd.DataFrame:
    """The scaling table plus the columns the intents compare: projected_time_s,
    time_per_image_s, run_gpu_hours, gpu_hours (projected where possible) and gpu_hours_basis."""
    projected = projected_time_s(scaling, epoch_budget)
    run_hours = gpu_hours(scaling)
    projected_hours = scaling["gpus"] * projected / 3600.0
    can_project = projected_hours.map(is_usable)
    basis = np.where(can_project, f"projected: {epoch_budget:g} epoch(s) at the measured throughput",
                     "measured: what the run cost")
    return scaling.assign(
        projected_time_s=projected, time_per_image_s=1.0 / scaling["throughput_img_s"],
        run_gpu_hours=run_hours, gpu_hours=projected_hours.where(can_project, run_hours),
        gpu_hours_basis=basis,
    )


def sweet_spot_table(scaling: pd.DataFrame, settings: AnalysisSettings = DEFAULTS) -> pd.DataFrame:
    """One row per group x intent with the chosen GPU count and the numbers behind the choice.

    GPU counts the scaling table flags superlinear are no candidates (their efficiency says more
    about a slowed baseline than about them) unless `allow_superlinear`; the note names them.

    Columns: group keys, SWEET_SPOT_COLUMNS. An intent with no answer keeps its row with NaN
    numbers and the reason in `note`; `why` explains every choice made. `settings.epoch_budget`:
    the training epochs the projected times, GPU-hours and energy stand for;
    `settings.greenest_time_bound_s`: the time bound of the greenest intent (None: no bound).
    """
    keys = table_group_keys(scaling, SCALING_COLUMNS)
    table = with_costs(scaling, settings.epoch_budget)
    rows = []
    # A group's rows as dicts: a DataFrame per group and intent cost more than the choices.
    for values, group in group_records(table, keys):
        metric = chosen_time_metric(group)
        group, left_out = trusted(group, settings.allow_superlinear)
        choices = {
            "fastest": fastest(group, metric),
            "efficient": most_efficient(group, settings.efficiency_floor),
            "budget": within_budget(group, metric, settings.gpu_hour_budget),
            "greenest": greenest(group, metric, settings.greenest_time_bound_s),
        }
        for intent in INTENTS:
            best, why = choices[intent]
            row = _choice_row(intent, metric, best, why)
            row["note"] = "; ".join(filter(None, [row["note"], left_out]))
            rows.append({**values, **row})
    return pd.DataFrame(rows, columns=[*keys, *SWEET_SPOT_COLUMNS])


def trusted(group: list[dict], allow_superlinear: bool) -> tuple[list[dict], str]:
    """(the group's rows the intents may choose from, a note on those left out or "")."""
    flagged = [] if allow_superlinear else [row for row in group if is_flagged(row)]
    if not flagged:
        return group, ""
    counts = ", ".join(str(int(row["gpus"])) for row in flagged)
    return [row for row in group if not is_flagged(row)], (
        f"left out as superlinear: {counts} GPUs (analysis.allow_superlinear: true lets them be chosen)")


def _choice_row(intent: str, metric: str, best: dict | None, why: str) -> dict:
    if best is None:
        return {**{column: math.nan for column in SWEET_SPOT_COLUMNS},
                "intent": intent, "time_metric": metric, "gpu_hours_basis": "", "why": "",
                "note": why}
    return {
        "intent": intent, "gpus": int(best["gpus"]), "time_metric": metric,
        **{column: best[column] for column in (
            "time_s", "total_time_s", "projected_time_s", "efficiency_pct", "gpu_hours",
            "gpu_hours_basis", "run_gpu_hours", "joules_per_image", "projected_energy_j") if column in best},
        "why": why, "note": best["note"] if isinstance(best["note"], str) else "",
    }
