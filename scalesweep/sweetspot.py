"""Which GPU count to use: the sweet spot depends on the intent (REFERENCE.md §3).

Per group of the scaling table, one row per intent:
- `fastest`: the shortest time, however many GPUs it takes;
- `efficient`: the most GPUs whose parallel efficiency is still >= a floor (default 80 %). The
  largest such count is taken even when a count in between fell below the floor (measurement noise
  at one count should not hide a good larger one);
- `budget`: the shortest time among GPU counts whose run fits a GPU-hour budget (skipped with a
  note when no budget is given).

"Time" is time to solution (total_time_s) when the group has it for every candidate, else the
steady epoch time; `time_metric` says which. GPU-hours of a run = gpus x total time / 3600, or
gpus x steady epoch time x epochs / 3600 without a total time.
"""

from __future__ import annotations

import math

import pandas as pd

from scalesweep.scaling import is_usable, iter_groups, table_group_keys

INTENTS = ("fastest", "efficient", "budget")
SWEET_SPOT_COLUMNS = (
    "intent", "gpus", "time_metric", "time_s", "total_time_s", "efficiency_pct", "gpu_hours",
    "why", "note",
)


def gpu_hours(scaling: pd.DataFrame) -> pd.Series:
    """GPU-hours of one run per row: gpus x total time, else gpus x epoch time x epochs."""
    per_epoch = scaling["time_s"] * scaling["epochs"]
    run_seconds = scaling["total_time_s"].where(scaling["total_time_s"].map(is_usable), per_epoch)
    return scaling["gpus"] * run_seconds / 3600.0


def chosen_time_metric(group: pd.DataFrame) -> str:
    """total_time_s when every GPU count with an epoch time also has a total time."""
    measured = group[group["time_s"].map(is_usable)]
    if len(measured) and measured["total_time_s"].map(is_usable).all():
        return "total_time_s"
    return "time_s"


def fastest(group: pd.DataFrame, metric: str) -> tuple[pd.Series | None, str]:
    candidates = group[group[metric].map(is_usable)]
    if candidates.empty:
        return None, "no GPU count with a usable time"
    best = candidates.loc[candidates[metric].idxmin()]
    return best, f"shortest {_describe(metric)}: {best[metric]:.4g} s at {int(best['gpus'])} GPUs"


def most_efficient(group: pd.DataFrame, floor: float) -> tuple[pd.Series | None, str]:
    candidates = group[group["efficiency_pct"].notna() & (group["efficiency_pct"] >= floor)]
    if candidates.empty:
        return None, f"no GPU count keeps efficiency >= {floor:g}%"
    best = candidates.loc[candidates["gpus"].idxmax()]
    return best, (f"most GPUs with efficiency >= {floor:g}%: {int(best['gpus'])} GPUs at "
                  f"{best['efficiency_pct']:.1f}%")


def within_budget(group: pd.DataFrame, metric: str, budget: float | None
                  ) -> tuple[pd.Series | None, str]:
    if budget is None:
        return None, "no GPU-hour budget given: intent skipped"
    candidates = group[group[metric].map(is_usable) & (group["gpu_hours"] <= budget)]
    if candidates.empty:
        return None, f"no GPU count fits a budget of {budget:g} GPU-hours"
    best = candidates.loc[candidates[metric].idxmin()]
    return best, (f"shortest {_describe(metric)} within {budget:g} GPU-hours: {best[metric]:.4g} s "
                  f"at {int(best['gpus'])} GPUs using {best['gpu_hours']:.3g} GPU-hours")


def _describe(metric: str) -> str:
    return "time to solution" if metric == "total_time_s" else "steady epoch time"


def sweet_spot_table(scaling: pd.DataFrame, efficiency_floor: float = 80.0,
                     gpu_hour_budget: float | None = None) -> pd.DataFrame:
    """One row per group x intent with the chosen GPU count and the numbers behind the choice.

    Columns: group keys, SWEET_SPOT_COLUMNS. An intent with no answer keeps its row with NaN
    numbers and the reason in `note`; `why` explains every choice made.
    """
    if gpu_hour_budget is not None and not gpu_hour_budget > 0:
        raise ValueError(f"gpu_hour_budget must be > 0 GPU-hours or None, got {gpu_hour_budget!r}")
    keys = table_group_keys(scaling)
    table = scaling.assign(gpu_hours=gpu_hours(scaling))
    rows = []
    for values, group in iter_groups(table, keys):
        metric = chosen_time_metric(group)
        choices = {
            "fastest": fastest(group, metric),
            "efficient": most_efficient(group, efficiency_floor),
            "budget": within_budget(group, metric, gpu_hour_budget),
        }
        for intent in INTENTS:
            best, why = choices[intent]
            rows.append({**values, **_choice_row(intent, metric, best, why)})
    return pd.DataFrame(rows, columns=[*keys, *SWEET_SPOT_COLUMNS])


def _choice_row(intent: str, metric: str, best: pd.Series | None, why: str) -> dict:
    if best is None:
        return {"intent": intent, "gpus": math.nan, "time_metric": metric, "time_s": math.nan,
                "total_time_s": math.nan, "efficiency_pct": math.nan, "gpu_hours": math.nan,
                "why": "", "note": why}
    return {
        "intent": intent, "gpus": int(best["gpus"]), "time_metric": metric,
        "time_s": best["time_s"], "total_time_s": best["total_time_s"],
        "efficiency_pct": best["efficiency_pct"], "gpu_hours": best["gpu_hours"],
        "why": why, "note": best["note"] if isinstance(best["note"], str) else "",
    }
