"""Scaling tables from the tidy runs table (runs.csv): speedup, efficiency and the extras.

Metric definitions: docs/metrics.md. Every group of runs that share a configuration (the
GROUP KEYS: every column of runs.csv that is not in tidy/table.py's NON_KEY_COLUMNS) gets one row per GPU count
(gpus >= 1) with the repeats aggregated by their median. The baseline of a group is its smallest
GPU count with a usable ok run; when that is not 1 GPU, speedups are relative to it and the note
says so. Broken inputs (failed/oom/timeout runs, zero or missing times, one GPU count) keep their
row with NaN metrics and a note, never a crash and never a number that looks valid.

`gpus == 0` is the CPU-only baseline: it never enters the speedup series, only `acceleration_table`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable

import numpy as np
import pandas as pd

from scalesweep.analysis.breakdown import LOSS_COLUMNS, NO_BREAKDOWN_NOTE, PARTS, loss_table
from scalesweep.plan.analysis_settings import DEFAULTS
from scalesweep.tidy.table import (
    BREAKDOWN_COLUMNS,
    check_runs,
    group_keys,
    iter_groups,
    key_tuple,
    positions_by_cell,
    table_group_keys,
)

# Breakdown medians per GPU count (scalesweep/analysis/breakdown.py), then the loss they explain.
SCALED_BREAKDOWN = tuple(c for c in BREAKDOWN_COLUMNS if c not in ("breakdown_steps", "allreduce_bytes"))

# GPU energy per GPU count: medians of runs.csv's, the energy efficiency jpi(N_min) / jpi(N) in %,
# and the projected energy of the analysis' epoch budget (scaling_table's epoch_budget).
ENERGY_MEDIANS = ("joules_per_image", "avg_power_w_per_gpu")
SCALING_ENERGY_COLUMNS = (*ENERGY_MEDIANS, "energy_efficiency_pct", "projected_energy_j")

# Columns scaling_table adds after the group keys, in output order. Any other column of a scaling
# table is a group key (table_group_keys), so a scaling.csv read back from disk works as is.
SCALING_COLUMNS = (
    "gpus", "nodes", "n_runs", "n_ok", "n_busy", "protocol", "scaling_basis", "baseline_gpus",
    "scale_factor", "epochs",
    "time_s", "time_s_min", "time_s_max", "time_s_range",
    "throughput_img_s", "throughput_img_s_min", "throughput_img_s_max",
    "throughput_ci_low_img_s", "throughput_ci_high_img_s", "throughput_ci_source",
    "throughput_per_gpu_img_s", "ideal_throughput_img_s",
    "speedup", "efficiency_pct", "time_speedup", "throughput_speedup", "karp_flatt",
    "marginal_gain_img_s", "marginal_gain_pct",
    "total_time_s", "total_time_s_min", "total_time_s_max",
    "tts_speedup", "tts_efficiency_pct", "tts_gain_vs_prev_pct", "tts_gain_vs_min_pct",
    "train_images", "gpu_hours", "global_batch",
    *SCALING_ENERGY_COLUMNS,
    *SCALED_BREAKDOWN, *LOSS_COLUMNS, "breakdown_note",
    "note", "flags",
)

# Which ratio the relative metrics (speedup, efficiency, Karp-Flatt, fits, sweet spot) follow.
# Speedup is "the same work, done faster": T(1)/T(N) says that only when the timed unit holds the
# same work at every N. Under the steps protocol the timed window is T steps of per_gpu_batch x N
# images, so its work grows with N and only the throughput ratio thr(N)/thr(1) measures speedup;
# the same holds whenever the images per epoch change with N. Under the epochs protocol with a
# fixed dataset both ratios agree; the time ratio (the book's definition) is then kept as basis.
THROUGHPUT_BASIS, TIME_BASIS = "throughput", "time"

SINGLE_COUNT_NOTE = "single GPU count: no scaling"
# Efficiency above this is flagged, not reported as a result: a few % above 100 is noise, more is
# almost always a baseline that was slowed (more processes than CPU cores at N_min make one
# process slow, not many fast; a shared node), rarely a working set that now fits a cache.
SUPERLINEAR_PCT = 105.0
SUPERLINEAR_FLAG = "superlinear"
SUPERLINEAR_NOTE = (f"efficiency above {SUPERLINEAR_PCT:g} %: superlinear, likely a slowed "
                    "baseline (more processes than cores, a busy or shared node: see node_load); "
                    "kept out of the sweet spot")
AT_CAP_NOTE = ("{} run(s) timed to the step cap (timed_stop_reason cap): the precision target "
               "was not reached, see step_time_ci_pct in runs.csv")
# runs.csv's images_per_epoch_source of a count that is only Keras' steps x global batch.
ESTIMATE_SOURCE = "estimate"
ESTIMATED_IMAGES_NOTE = ("images per epoch estimated as steps x global batch (an upper bound): "
                         "throughput too; give the dataset's size (--images-per-epoch)")
MIXED_PROTOCOLS_NOTE = "mixed protocols ({}): the timed units differ, no relative metrics"
NO_BASELINE_NOTE = "no GPU count with a usable ok run: no baseline"


# ----------------------------------------------------------------------------- metrics (pure)

def speedup(baseline_time, time):
    """S = T(N_min) / T(N): how many times faster than the baseline."""
    return np.divide(baseline_time, time)


def efficiency_pct(speedup_value, scale):
    """Parallel efficiency in %: speedup over the ideal speedup N / N_min."""
    return np.divide(speedup_value, scale) * 100.0


def karp_flatt(speedup_value, scale):
    """Karp-Flatt experimental serial fraction e = (1/S - 1/N') / (1 - 1/N'); NaN at N' = 1."""
    s = np.asarray(speedup_value, dtype=float)
    n = np.asarray(scale, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 / s - 1.0 / n) / (1.0 - 1.0 / n)
    return np.where(n > 1.0, e, np.nan)


def time_gain_pct(reference_time, time):
    """How much shorter `time` is than `reference_time`, in % of the reference."""
    return (np.asarray(reference_time, float) - np.asarray(time, float)) / np.asarray(
        reference_time, float) * 100.0


def energy_efficiency_pct(joules_per_image, base: int):
    """100 x jpi(N_min) / jpi(N): below 100 % each image costs more energy than at the baseline."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100.0 * joules_per_image[base] / joules_per_image


def marginal_gain(gpus, throughput) -> tuple[np.ndarray, np.ndarray]:
    """Throughput gained by the doubling that reached each GPU count: thr(N) - thr(N/2), in img/s
    and in % of thr(N/2). NaN where N/2 is not among `gpus`."""
    by_count = dict(zip(np.asarray(gpus, int).tolist(), np.asarray(throughput, float).tolist()))
    gain, gain_pct = [], []
    for n in np.asarray(gpus, int).tolist():
        half = n // 2
        if n % 2 == 0 and half in by_count:
            gain.append(by_count[n] - by_count[half])
            gain_pct.append(gain[-1] / by_count[half] * 100.0)
        else:
            gain.append(math.nan)
            gain_pct.append(math.nan)
    return np.array(gain), np.array(gain_pct)


def gain_vs_previous_pct(gpus, time) -> np.ndarray:
    """Time gain of each GPU count over the next smaller count that has a usable time, in %."""
    order = np.argsort(np.asarray(gpus))
    times = np.asarray(time, float)
    out = np.full(len(times), math.nan)
    previous = math.nan
    for i in order:
        if is_usable(previous):
            out[i] = time_gain_pct(previous, times[i])
        if is_usable(times[i]):
            previous = times[i]
    return out


def is_usable(value) -> bool:
    """A time or throughput that can be divided by: finite and > 0."""
    return value is not None and bool(np.isfinite(value)) and value > 0


def format_value(value) -> str:
    """An axis value for labels and column names: 64.0 (a CSV-read integer) prints as 64."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def records_by_group(table: pd.DataFrame | None, keys) -> Callable[[dict], list[dict]]:
    """A lookup of `table`'s rows, as dicts (tidy.table.group_records), by the group values of
    another table (`keys`: its group keys): matched on the keys both have, a value as
    format_value prints it (64 and 64.0 are one, and two missing values too). Grouped once:
    filtering the whole table per group was most of the findings' time at hundreds of groups."""
    if table is None or table.empty:
        return lambda values: []
    records = table.to_dict("records")
    shared = [key for key in keys if key in table]
    if not shared:
        return lambda values: records
    printed = pd.DataFrame({key: table[key].map(format_value) for key in shared}, index=table.index)
    positions = {(key if isinstance(key, tuple) else (key,)): rows
                 for key, rows in printed.groupby(shared, sort=False).indices.items()}

    def records_of(values: dict) -> list[dict]:
        found = positions.get(tuple(format_value(values[key]) for key in shared))
        return [] if found is None else [records[position] for position in found]

    return records_of


# ----------------------------------------------------------------------------- aggregation

def _status_note(rows: list[dict]) -> str | None:
    """Why some or all runs at one GPU count give no numbers."""
    not_ok = [row for row in rows if row["status"] != "ok"]
    if not not_ok:
        return None
    # most frequent first, equally frequent in the order they first appear (pandas' value_counts)
    counts = sorted(Counter(row["status"] for row in not_ok).items(), key=lambda item: -item[1])
    statuses = ", ".join(f"{status} x{count}" if count > 1 else status for status, count in counts)
    n_ok = len(rows) - len(not_ok)
    head = "no ok run" if n_ok == 0 else f"{n_ok} of {len(rows)} runs ok"
    note = f"{head} ({statuses})"
    if n_ok == 0 and "reason" in rows[0]:
        reasons = [str(row["reason"]).strip() for row in not_ok if not pd.isna(row["reason"])]
        reasons = [reason for reason in reasons if reason]
        if reasons:
            note += f": {reasons[0].splitlines()[0][:100]}"
    return note


def _unusable_note(rows: list[dict], column: str, label: str) -> str | None:
    """Ok runs whose time or throughput is zero or missing: say so instead of using them."""
    unusable = [row[column] for row in rows if not is_usable(row[column])]
    if not unusable:
        return None
    zero = sum(value == 0 for value in unusable)
    kind = "zero" if zero == len(unusable) else "missing or zero" if zero else "missing"
    return f"{len(unusable)} ok run(s) with {kind} {label}: not used"


# The runs.csv columns cell_notes reads.
_NOTE_COLUMNS = ("status", "reason", "steady_epoch_time_s", "throughput_img_s", "nodes")


def cell_notes(rows: list[dict]) -> list[str]:
    """Notes on the runs (runs.csv rows as dicts of _NOTE_COLUMNS) of ONE GPU count of one
    group: failed runs, ok runs without a usable time or throughput, mixed node counts."""
    ok = [row for row in rows if row["status"] == "ok"]
    notes = [n for n in (_status_note(rows),) if n]
    if ok:
        notes += [n for n in (
            _unusable_note(ok, "steady_epoch_time_s", "steady epoch time"),
            _unusable_note(ok, "throughput_img_s", "throughput"),
        ) if n]
    nodes = {row["nodes"] for row in rows if "nodes" in row and not pd.isna(row["nodes"])}
    if len(nodes) > 1:
        notes.append(f"mixed node counts {sorted(nodes)}")
    return notes


# (column of aggregate_counts, runs.csv column it aggregates over the usable ok runs)
_AGGREGATED = (
    ("time_s", "steady_epoch_time_s"),
    ("throughput_img_s", "throughput_img_s"),
    ("total_time_s", "total_time_s"),
)


def aggregate_counts(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each GPU count of each group (a cell) over its ok repeats: the median, min and max of the
    usable (finite, > 0) times, throughputs and total times, the run counts, the medians of the
    energy and breakdown columns, and `notes` (cell_notes: failed runs, ok runs without a usable
    time or throughput, mixed node counts). Columns keys, gpus, then those; one row per cell
    sorted by keys and gpus, from one groupby for all cells (a large sweep has thousands); the
    notes only for the few cells that need any."""
    cells = [*keys, "gpus"]
    ok = runs["status"] == "ok"
    missing = pd.Series(np.nan, index=runs.index)
    frame = runs[cells].assign(
        _ok=ok,
        nodes=runs["nodes"] if "nodes" in runs else missing,
        epochs=runs["epochs"].where(ok) if "epochs" in runs else missing,
        _counted_images=counted_images(runs).where(ok),
        _at_cap=(runs["timed_stop_reason"] == "cap") & ok if "timed_stop_reason" in runs else False,
        _busy=(runs["node_load"] == "busy") & ok if "node_load" in runs else False,
        _estimated=(runs["images_per_epoch_source"] == ESTIMATE_SOURCE) & ok
        if "images_per_epoch_source" in runs else False,
        **_ok_values(runs, ok, ("protocol", "train_images", "gpu_hours",
                                "throughput_ci_low_img_s", "throughput_ci_high_img_s",
                                "global_batch", *ENERGY_MEDIANS, *SCALED_BREAKDOWN)),
        # usable (finite, > 0) values of ok runs; NaN elsewhere, which median/min/max skip
        **{name: runs[column].where(ok & np.isfinite(runs[column]) & (runs[column] > 0))
           if column in runs else missing for name, column in _AGGREGATED},
    )
    grouped = frame.groupby(cells, dropna=False, sort=True)
    aggregations = {"n_runs": ("_ok", "size"), "n_ok": ("_ok", "sum"), "nodes": ("nodes", "min"),
                    "node_counts": ("nodes", "nunique"), "epochs": ("epochs", "median"),
                    "protocol": ("protocol", "first"), "_protocols": ("protocol", "nunique"),
                    "_images_min": ("_counted_images", "min"),
                    "_images_max": ("_counted_images", "max"),
                    "_estimated": ("_estimated", "any"),
                    "_at_cap": ("_at_cap", "sum"), "n_busy": ("_busy", "sum"),
                    "train_images": ("train_images", "median"), "gpu_hours": ("gpu_hours", "median"),
                    "_thr_mean": ("throughput_img_s", "mean"), "_thr_sd": ("throughput_img_s", "std"),
                    "_run_ci_low": ("throughput_ci_low_img_s", "first"),
                    "_run_ci_high": ("throughput_ci_high_img_s", "first"),
                    "global_batch": ("global_batch", "median"),
                    **{column: (column, "median") for column in (*ENERGY_MEDIANS, *SCALED_BREAKDOWN)}}
    for name, _ in _AGGREGATED:
        aggregations.update({name: (name, "median"), f"{name}_min": (name, "min"),
                             f"{name}_max": (name, "max"), f"_{name}_usable": (name, "count")})
    table = grouped.agg(**aggregations).reset_index()
    table["time_s_range"] = (table["time_s_max"] - table["time_s_min"]).where(table["n_ok"] > 1)
    table = table.assign(**cell_throughput_interval(table))
    needs_notes = (
        (table["n_runs"] > table["n_ok"]) | (table["node_counts"] > 1)
        | (table["_time_s_usable"] < table["n_ok"])
        | (table["_throughput_img_s_usable"] < table["n_ok"])
    )
    table["notes"] = _notes_of_cells(runs, grouped.ngroup().to_numpy(), needs_notes.to_numpy())
    return table.drop(columns=["node_counts", "_thr_mean", "_thr_sd", "_run_ci_low", "_run_ci_high",
                               *(f"_{name}_usable" for name, _ in _AGGREGATED)])


def _notes_of_cells(runs: pd.DataFrame, cell_of_run: np.ndarray, needs_notes: np.ndarray) -> list[list[str]]:
    """cell_notes of each cell that `needs_notes` (cells numbered as in `cell_of_run`), [] for
    the others. Plain values of the few columns the notes read: a DataFrame per cell cost more
    than its notes."""
    noted = {column: runs[column].tolist() for column in _NOTE_COLUMNS if column in runs}
    return [cell_notes([{column: values[run] for column, values in noted.items()} for run in positions])
            if needed else [] for positions, needed in zip(positions_by_cell(cell_of_run, len(needs_notes)), needs_notes)]


def counted_images(runs: pd.DataFrame) -> pd.Series:
    """Images per epoch of every run where they are a count, NaN where only an estimate (Keras
    steps x global batch, which differs between GPU counts for one dataset: no change of work)."""
    if "images_per_epoch" not in runs:
        return pd.Series(np.nan, index=runs.index)
    images = pd.to_numeric(runs["images_per_epoch"], errors="coerce")
    if "images_per_epoch_source" not in runs:
        return images
    return images.where(runs["images_per_epoch_source"] != ESTIMATE_SOURCE)


def _ok_values(runs: pd.DataFrame, ok: pd.Series, columns) -> dict:
    """`columns` of the ok runs (NaN elsewhere and where runs.csv lacks them): what aggregate_counts
    takes per cell besides the measurements."""
    return {column: runs[column].where(ok) if column in runs else pd.Series(np.nan, index=runs.index)
            for column in columns}


def cell_throughput_interval(cells: pd.DataFrame) -> dict:
    """95 % interval of each cell's throughput, and where it comes from: with 2+ usable ok
    repeats, Student's t interval of their mean ("repeats"); with one, that run's own interval
    from its timed steps ("steps"); else NaN and ""."""
    n = cells["_throughput_img_s_usable"].to_numpy(float)
    repeats = n >= 2
    half = np.full(len(n), np.nan)
    if repeats.any():
        # Student's t quantile from scipy.special (what scipy.stats.t.ppf calls): scipy.stats
        # costs half a second of imports, and scipy.special a quarter, which a sweep without
        # repeats (the default one) never needs.
        from scipy.special import stdtrit

        with np.errstate(invalid="ignore", divide="ignore"):
            half = stdtrit(np.maximum(n - 1, 1), 0.975) * cells["_thr_sd"].to_numpy(float) / np.sqrt(n)
    single = (n == 1) & cells["_run_ci_low"].notna()
    low = np.where(repeats, cells["_thr_mean"] - half, np.where(single, cells["_run_ci_low"], np.nan))
    high = np.where(repeats, cells["_thr_mean"] + half, np.where(single, cells["_run_ci_high"], np.nan))
    source = np.where(repeats, "repeats", np.where(single, "steps", ""))
    return {"throughput_ci_low_img_s": low, "throughput_ci_high_img_s": high,
            "throughput_ci_source": source}


# Columns _group_metrics derives from a group's aggregate_counts rows.
_RELATIVE_COLUMNS = tuple(c for c in SCALING_COLUMNS if c not in (
    "gpus", "nodes", "n_runs", "n_ok", "n_busy", "protocol", "epochs", "time_s", "time_s_min", "time_s_max",
    "time_s_range", "throughput_img_s", "throughput_img_s_min", "throughput_img_s_max",
    "throughput_ci_low_img_s", "throughput_ci_high_img_s", "throughput_ci_source",
    "total_time_s", "total_time_s_min", "total_time_s_max", "throughput_per_gpu_img_s",
    "train_images", "gpu_hours", "global_batch", *ENERGY_MEDIANS, "projected_energy_j",
    *SCALED_BREAKDOWN, "breakdown_note", "note", "flags"))


def group_basis(group: pd.DataFrame) -> str:
    """The basis a scaling table gives a group (basis_of_values)."""
    return basis_of_values(group["scaling_basis"] if "scaling_basis" in group else None)


def basis_of_values(bases) -> str:
    """The basis a group's scaling_basis values give ("" when it has none: mixed protocols);
    None, a table written before the basis existed: the time ratio it used."""
    if bases is None:
        return TIME_BASIS
    given = [basis for basis in bases if not pd.isna(basis)]
    return str(given[0]) if given else ""


def scaling_basis(cells: pd.DataFrame) -> tuple[str | None, str | None]:
    """(basis, note) of one group from its aggregate_counts rows: THROUGHPUT_BASIS when the work
    per timed unit changes with N (the steps protocol, or images per epoch that differ), else
    TIME_BASIS; (None, note) when the group mixes protocols."""
    protocols = sorted(set(cells["protocol"].dropna()))
    if len(protocols) > 1 or (cells["_protocols"] > 1).any():
        return None, MIXED_PROTOCOLS_NOTE.format(", ".join(protocols))
    images = pd.concat([cells["_images_min"], cells["_images_max"]]).dropna()
    if protocols == ["steps"] or images.nunique() > 1:
        return THROUGHPUT_BASIS, None
    return TIME_BASIS, None


def _group_metrics(cells: pd.DataFrame) -> dict:
    """Scaling columns of one group (gpus >= 1 only) from its aggregate_counts rows, sorted by
    gpus: arrays (plain numpy, a DataFrame column each would cost more than the arithmetic)."""
    gpus = cells["gpus"].to_numpy(dtype=float)
    time = cells["time_s"].to_numpy(dtype=float)
    thr = cells["throughput_img_s"].to_numpy(dtype=float)
    total = cells["total_time_s"].to_numpy(dtype=float)
    basis, basis_note = scaling_basis(cells)
    measured = thr if basis == THROUGHPUT_BASIS else time
    usable = np.isfinite(measured) & (measured > 0)  # is_usable
    group_notes: list[str] = [basis_note] if basis_note else []
    if len(cells) == 1:
        group_notes.append(SINGLE_COUNT_NOTE)

    columns = {"throughput_per_gpu_img_s": thr / gpus}
    if basis is None or not usable.any():
        if basis is not None:
            group_notes.append(NO_BASELINE_NOTE)
        columns.update({column: np.full(len(cells), math.nan) for column in _RELATIVE_COLUMNS})
        columns["scaling_basis"] = np.full(len(cells), "", dtype=object)
    else:
        base = int(np.flatnonzero(usable)[0])
        base_gpus = int(gpus[base])
        if base_gpus != 1:
            group_notes.append(
                f"baseline is N={base_gpus}, not 1: speedups relative to N={base_gpus}")
        columns.update(_relative_metrics(gpus, time, thr, total, base, group_notes))
        columns["speedup"] = columns[f"{basis}_speedup"]
        columns["efficiency_pct"] = efficiency_pct(columns["speedup"], columns["scale_factor"])
        columns["karp_flatt"] = karp_flatt(columns["speedup"], columns["scale_factor"])
        columns["scaling_basis"] = np.full(len(cells), basis, dtype=object)
        columns["energy_efficiency_pct"] = energy_efficiency_pct(cells["joules_per_image"].to_numpy(float), base)
        columns.update(loss_table(cells, base))

    superlinear = np.asarray(columns["efficiency_pct"], dtype=float) > SUPERLINEAR_PCT
    columns["flags"] = np.where(superlinear, SUPERLINEAR_FLAG, "")
    columns["note"] = ["; ".join(group_notes + notes + _measurement_notes(estimated, capped, flagged))
                       for notes, estimated, capped, flagged
                       in zip(cells["notes"], cells["_estimated"], cells["_at_cap"], superlinear)]
    # Older and reference logs have no step breakdown: said beside the note, not in it.
    lacking = (cells["n_ok"] > 0) & cells[list(PARTS)].isna().all(axis=1)
    columns["breakdown_note"] = np.where(lacking, NO_BREAKDOWN_NOTE, "")
    return columns


def _measurement_notes(estimated: bool, capped: int, superlinear: bool) -> list[str]:
    """Why one GPU count's numbers deserve doubt: estimated images, windows at their step cap,
    an efficiency above ideal."""
    return ([ESTIMATED_IMAGES_NOTE] * bool(estimated) + [AT_CAP_NOTE.format(int(capped))] * bool(capped)
            + [SUPERLINEAR_NOTE] * bool(superlinear))


def _relative_metrics(gpus, time, thr, total, base: int, group_notes: list[str]) -> dict:
    """Everything measured against the group's baseline row `base`."""
    base_gpus = gpus[base]
    scale = gpus / base_gpus
    columns = {
        "baseline_gpus": np.full(len(gpus), int(base_gpus)),
        "scale_factor": scale,
        # Ideal only beside a measurement: at a failed GPU count it would look like a result.
        "ideal_throughput_img_s": np.where(np.isfinite(thr), thr[base] * scale, np.nan),
        "time_speedup": speedup(time[base], time),
        "throughput_speedup": thr / thr[base],
        "tts_speedup": speedup(total[base], total),
        "tts_gain_vs_prev_pct": gain_vs_previous_pct(gpus, total),
        "tts_gain_vs_min_pct": time_gain_pct(total[base], total),
    }
    columns["marginal_gain_img_s"], columns["marginal_gain_pct"] = marginal_gain(gpus, thr)
    columns["tts_efficiency_pct"] = efficiency_pct(columns["tts_speedup"], scale)
    if not is_usable(total[base]) and np.isfinite(total).any():
        group_notes.append(f"no total time at baseline N={int(base_gpus)}: "
                           f"time-to-solution metrics NaN")
    return columns


def _group_bounds(table: pd.DataFrame, keys: list[str]) -> list[tuple[int, int]]:
    """(start, end) row positions of each group of a table sorted by its keys."""
    if not keys:
        return [(0, len(table))] if len(table) else []
    group = table.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    return list(zip(starts.tolist(), [*starts[1:].tolist(), len(table)]))


def scaling_table(runs: pd.DataFrame, epoch_budget: float = DEFAULTS.epoch_budget) -> pd.DataFrame:
    """One row per group x GPU count (gpus >= 1): medians over ok repeats and the scaling metrics.

    Columns: the group keys, then SCALING_COLUMNS. `time_s` is the median steady epoch time,
    `time_s_min`/`time_s_max` bound the ok repeats and `time_s_range` = max - min (NaN with a single
    ok repeat); the same min/max for throughput and total time. `scale_factor` = N / N_min.
    `time_speedup` = T(N_min) / T(N) of the steady epoch (or timed window) time and
    `throughput_speedup` = thr(N) / thr(N_min); `speedup`, `efficiency_pct` and `karp_flatt`
    follow the group's `scaling_basis` (see THROUGHPUT_BASIS): the throughput ratio whenever the
    work per timed unit changes with N, else the time ratio. A group mixing protocols gets a note
    and no relative metrics. `tts_*` use total time (time to solution); `tts_gain_vs_prev_pct`
    compares with the next smaller GPU count that has a total time. `throughput_ci_*` is the 95 %
    interval of the throughput (`throughput_ci_source`: repeats, or one run's own steps);
    `gpu_hours` the median cost of one run; `train_images` the images of one full epoch.
    Energy: `joules_per_image` and `avg_power_w_per_gpu` are medians over the ok repeats,
    `energy_efficiency_pct` = 100 x jpi(N_min) / jpi(N), `projected_energy_j` = `epoch_budget` x
    train_images x joules_per_image.
    """
    runs = check_runs(runs)
    keys = group_keys(runs)
    counts = aggregate_counts(runs[runs["gpus"] >= 1], keys)
    groups = [_group_metrics(counts.iloc[start:end]) for start, end in _group_bounds(counts, keys)]
    if not groups:
        return pd.DataFrame(columns=[*keys, *SCALING_COLUMNS])
    # One column at a time over all groups; an integer column stays integer unless a group has NaN.
    derived = {column: np.concatenate([group[column] for group in groups]) for column in groups[0]}
    helpers = ["notes", "_protocols", "_images_min", "_images_max", "_estimated", "_at_cap"]
    table = pd.concat([counts.drop(columns=helpers), pd.DataFrame(derived, index=counts.index)],
                      axis=1)
    table["projected_energy_j"] = epoch_budget * table["train_images"] * table["joules_per_image"]
    return table[[*keys, *SCALING_COLUMNS]].reset_index(drop=True)


# ----------------------------------------------------------------------------- CPU vs 1 GPU

ACCELERATION_COLUMNS = (
    "per_gpu_batch", "cpu_per_gpu_batch", "cpu_n_ok", "gpu_n_ok",
    "cpu_time_s", "gpu_time_s", "acceleration",
    "cpu_throughput_img_s", "gpu_throughput_img_s", "throughput_acceleration",
    "cpu_total_time_s", "gpu_total_time_s", "tts_acceleration", "note",
)


def acceleration_table(runs: pd.DataFrame) -> pd.DataFrame:
    """CPU-only baseline (gpus 0) against 1 GPU, per group that has a CPU baseline.

    `acceleration` = CPU steady epoch time / 1-GPU steady epoch time (x faster);
    `throughput_acceleration` the throughput ratio, `tts_acceleration` the total-time ratio.
    A CPU baseline usually runs a smaller batch than a GPU (the reference TF runs: 256 vs 2048), so CPU
    and GPU runs are matched on every key except per_gpu_batch: a 1-GPU run is compared with the
    CPU run of its own batch when there is one, else with the fastest CPU batch (noted).
    """
    runs = check_runs(runs)
    keys = group_keys(runs)
    batch = "requested_per_gpu_batch" if "requested_per_gpu_batch" in keys else None
    match_keys = [k for k in keys if k != batch]
    rows_out = []
    cpu_runs = runs[runs["gpus"] == 0]
    columns = [*match_keys, *ACCELERATION_COLUMNS]
    if cpu_runs.empty:  # most sweeps: no baseline, and no cell worth aggregating
        return pd.DataFrame(rows_out, columns=columns)
    cells = _cells_by_batch(runs[runs["gpus"].isin((0, 1))], match_keys, batch)
    for values, _ in iter_groups(cpu_runs, match_keys):
        group = key_tuple(values, match_keys)
        cpu, gpu = cells.get((group, 0), {}), cells.get((group, 1), {})
        if not gpu:
            for cpu_batch, c in cpu.items():
                rows_out.append({**values, **_acceleration_row(c, None, cpu_batch, math.nan,
                                                               ["no 1-GPU run in this group"])})
        for gpu_batch, g in gpu.items():
            cpu_batch, notes = _matching_cpu_batch(cpu, gpu_batch)
            rows_out.append({**values, **_acceleration_row(cpu[cpu_batch], g, cpu_batch,
                                                           gpu_batch, notes)})
    return pd.DataFrame(rows_out, columns=columns)


def _cells_by_batch(runs: pd.DataFrame, match_keys: list[str], batch: str | None) -> dict:
    """{(group's key_tuple, gpus): {per-GPU batch (NaN without the axis): its aggregate_counts
    row}}, in batch order, from one aggregate_counts over all groups."""
    table = aggregate_counts(runs, [*match_keys, *([batch] if batch else [])])
    cells: dict = {}
    for cell in table.to_dict("records"):
        by_batch = cells.setdefault((key_tuple(cell, match_keys), cell["gpus"]), {})
        by_batch[cell[batch] if batch else math.nan] = cell
    return cells


def _matching_cpu_batch(cpu: dict, gpu_batch) -> tuple:
    if gpu_batch in cpu or (pd.isna(gpu_batch) and len(cpu) == 1):
        return (gpu_batch if gpu_batch in cpu else next(iter(cpu))), []
    usable = {b: c for b, c in cpu.items() if is_usable(c["time_s"])}
    choice = min(usable, key=lambda b: usable[b]["time_s"]) if usable else next(iter(cpu))
    why = "fastest CPU batch" if len(cpu) > 1 else "the only CPU batch"
    return choice, [f"CPU per_gpu_batch {format_value(choice)} ({why}) vs 1-GPU per_gpu_batch "
                    f"{format_value(gpu_batch)}"]


def _acceleration_row(cpu: dict, gpu: dict | None, cpu_batch, gpu_batch, notes: list[str]) -> dict:
    gpu = gpu or {"n_ok": 0, "time_s": math.nan, "throughput_img_s": math.nan,
                  "total_time_s": math.nan, "notes": []}
    notes = [*(f"CPU: {n}" for n in cpu["notes"]), *(f"1 GPU: {n}" for n in gpu["notes"]), *notes]
    return {
        "per_gpu_batch": gpu_batch, "cpu_per_gpu_batch": cpu_batch,
        "cpu_n_ok": cpu["n_ok"], "gpu_n_ok": gpu["n_ok"],
        "cpu_time_s": cpu["time_s"], "gpu_time_s": gpu["time_s"],
        "acceleration": cpu["time_s"] / gpu["time_s"],
        "cpu_throughput_img_s": cpu["throughput_img_s"],
        "gpu_throughput_img_s": gpu["throughput_img_s"],
        "throughput_acceleration": gpu["throughput_img_s"] / cpu["throughput_img_s"],
        "cpu_total_time_s": cpu["total_time_s"], "gpu_total_time_s": gpu["total_time_s"],
        "tts_acceleration": cpu["total_time_s"] / gpu["total_time_s"],
        "note": "; ".join(notes),
    }


# ----------------------------------------------------------------------------- side by side

COMPARISON_METRICS = ("time_s", "throughput_img_s", "speedup", "efficiency_pct")


def comparison_table(scaling: pd.DataFrame, by: str = "model",
                     metrics=COMPARISON_METRICS) -> pd.DataFrame:
    """Wide table: one row per GPU count (and per value of any other varying key), one column
    `<metric>:<value of by>` per metric and value of `by`, e.g. `speedup:resnet50v2`.

    Keys that `by` determines (each model has its own framework, or its own per-GPU batch as in
    the reference) would otherwise put every model on its own row; they become columns like the
    metrics (`per_gpu_batch:resnet50v2`). Keys constant over the table stay in the index.
    """
    keys = table_group_keys(scaling, SCALING_COLUMNS)
    if by not in keys:
        raise ValueError(f"comparison_table: {by!r} is not a group key of the scaling table "
                         f"(keys: {', '.join(keys) or 'none'})")
    missing = [m for m in metrics if m not in scaling.columns]
    if missing:
        raise ValueError(f"comparison_table: scaling table lacks {', '.join(map(repr, missing))}")
    others = [k for k in keys if k != by]
    determined = [k for k in others if _determined_by(scaling, by, k)]
    index = [k for k in others if k not in determined] + ["gpus"]
    values = [*determined, *metrics]
    wide = scaling.pivot(index=index, columns=by, values=values)
    wide.columns = [f"{metric}:{format_value(value)}" for metric, value in wide.columns]
    return wide.reset_index()


def _determined_by(table: pd.DataFrame, by: str, key: str) -> bool:
    """True when `key` varies over the table but has one value per value of `by`."""
    if table[key].nunique(dropna=False) <= 1:
        return False
    return bool((table.groupby(by, dropna=False)[key].nunique(dropna=False) <= 1).all())


def says_superlinear(flags) -> bool:
    """Whether a scaling.csv `flags` value flags its point superlinear (a measurement suspected
    wrong)."""
    return not pd.isna(flags) and SUPERLINEAR_FLAG in str(flags)


def is_flagged(row: dict) -> bool:
    """Whether the scaling table flags the point of `row` (a scaling.csv row as a dict)."""
    return says_superlinear(row.get("flags"))


def flagged_gpus(group: pd.DataFrame) -> list:
    """GPU counts of the group whose point the scaling table flags (superlinear): a measurement
    suspected wrong is no evidence for a law."""
    if "flags" not in group:
        return []
    # Plain values: the fits and the predictions ask once per group, a thousand times on a large
    # sweep, and a pandas string operation per group cost seconds there.
    return sorted(int(gpus) for gpus, flags in zip(group["gpus"].tolist(), group["flags"].tolist())
                  if says_superlinear(flags))