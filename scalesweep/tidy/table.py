"""The runs table, runs.csv: its columns, reading it back, and its configurations (group keys).

One model of the table for every stage that reads it: the tidy rows write these columns
(scalesweep/tidy/rows.py), the analysis, the history and the comparison read them back with
`read_runs_csv` / `read_runs` and group them with `group_keys` / `iter_groups`. A column is a
configuration axis unless it is listed here as a measurement, bookkeeping or provenance
(NON_KEY_COLUMNS): a new runs.csv column is then no group key by mistake.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from scalesweep.contract.records import BREAKDOWN_PARTS, STATUSES
from scalesweep.tidy.epoch_parts import EPOCH_PART_COLUMNS, EPOCH_PART_NOTE_COLUMN
from scalesweep.tidy.provenance import PROVENANCE_COLUMNS, SWEEP_COLUMNS

AXIS_COLUMNS = ["framework", "model", "dataset", "gpus", "nodes", "repeat"]

METRIC_COLUMNS = [
    "steady_epoch_time_s",
    "throughput_img_s",
    "throughput_per_gpu_img_s",
    "total_time_s",
    "memory_gb",
    "peak_host_rss_gb",
]

# The steady throughput's 95 % interval from the run's own timed steps (batch means).
INTERVAL_COLUMNS = ["step_time_ci_pct", "throughput_ci_low_img_s", "throughput_ci_high_img_s"]

# What a run cost, failed runs included: the trainer's whole life (start-up included) x GPUs.
COST_COLUMNS = ["wall_time_s", "gpu_hours"]

# GPU energy of the steady windows (scalesweep/train/common/energy.py): energy_j of the steady
# epochs or timed window summed, per image and as average power per GPU; run_energy_j the whole
# run's.
ENERGY_COLUMNS = ["energy_j", "joules_per_image", "avg_power_w_per_gpu", "run_energy_j"]
ENERGY_TEXT_COLUMNS = ["energy_source", "energy_note"]

# The job's whole-node energy by SLURM's accounting (scalesweep/logs/accounting.py), where configured.
SLURM_ENERGY_COLUMNS = ["slurm_energy_j", "slurm_energy_source"]

# Where a step's time goes (scalesweep/analysis/breakdown.py), in order: medians of the timed
# steps, the probes' results; empty for logs without it. sync_exposed_s = sync_wait_s +
# sync_comm_s, kept for the logs written before the split.
BREAKDOWN_COLUMNS = (
    "breakdown_step_s", *BREAKDOWN_PARTS, "sync_exposed_s", "breakdown_steps", "allreduce_s", "allreduce_bytes", "algbw_gb_s",
    "busbw_gb_s", "overlap_pct", "comm_compute_ratio", "flops_per_image", "tflops_per_gpu",
    "mfu_pct",
)
FLOAT_BREAKDOWN_COLUMNS = [c for c in BREAKDOWN_COLUMNS if c not in ("breakdown_steps", "allreduce_bytes")]

# The peak mfu_pct is measured against (scalesweep/contract/hardware.py) and where it came from, or
# why a run has no MFU: a reader can check the MFU, and runs on different parts stay comparable.
PEAK_COLUMNS = ["peak_tflops"]
PEAK_TEXT_COLUMNS = ["peak_note"]
RUN_RESULT_COLUMNS = [
    "per_gpu_batch",
    "requested_per_gpu_batch",
    "global_batch",
    "world_size",
    "status",
    "reason",
    "epochs",
    *METRIC_COLUMNS,
    "protocol",
    "log_format",
    "log",
    *INTERVAL_COLUMNS,
    "timed_steps",
    "timed_stop_reason",
    *COST_COLUMNS,
    *ENERGY_COLUMNS,
    *ENERGY_TEXT_COLUMNS,
    *SLURM_ENERGY_COLUMNS,
    *BREAKDOWN_COLUMNS,
    *PEAK_COLUMNS,
    *PEAK_TEXT_COLUMNS,
    *EPOCH_PART_COLUMNS,
    EPOCH_PART_NOTE_COLUMN,
    # provenance, after the contract's columns
    "device_kind",
    "images_per_epoch",
    "images_per_epoch_source",
    "train_images",
    "slurm_job_id",
    "hostname",
    *PROVENANCE_COLUMNS,
    "run_id",
]

EPOCH_RESULT_COLUMNS = ["epoch", "images", "seconds", "throughput_img_s", "loss", "accuracy", "steady"]
EPOCH_FLOAT_COLUMNS = ["seconds", "throughput_img_s", "loss", "accuracy"]

# Read back as text: names ('2024.1' and '2024.10' as numbers would become one float and one group)
# and provenance (a driver "550.540" or a CUDA "12.10" read as numbers would lose digits).
NAME_COLUMNS = ("framework", "model", "dataset", "precision", "protocol")
TEXT_COLUMNS = (*NAME_COLUMNS, *(c for c in PROVENANCE_COLUMNS if c not in ("load_avg_1m", "node_shared")),
                "hostname", "slurm_job_id", "run_id")

# Counts stay integers in the CSVs (`4`, not `4.0`) even where a failed row leaves them empty.
COUNT_COLUMNS = (
    "gpus", "nodes", "repeat", "per_gpu_batch", "requested_per_gpu_batch", "global_batch", "world_size", "epochs",
    "images_per_epoch", "train_images", "timed_steps", "breakdown_steps", "allreduce_bytes",
    "epoch", "images", "steps_per_epoch", "dataset_train_images",
)  # fmt: skip

# Every runs.csv column but the configuration is a measurement, bookkeeping or provenance, never
# a group key: derived from the column lists above, so a new runs.csv column is not a key by mistake.
# gpus/nodes/repeat are the sweep's position within a group; requested_per_gpu_batch is what was
# asked (a batch axis fills it), so it stays a key, while per_gpu_batch is what ran (an
# out-of-memory halving at one GPU count would split its series), and global_batch, world_size,
# epochs and images_per_epoch follow from gpus (a partial last batch dropped makes images per epoch
# shrink with the global batch) and would split one scaling series into one group per GPU count.
NON_KEY_COLUMNS = frozenset(
    {"gpus", "nodes", "repeat", *RUN_RESULT_COLUMNS, *SWEEP_COLUMNS}
) - {"requested_per_gpu_batch"}

REQUIRED_RUN_COLUMNS = ("gpus", "status", "steady_epoch_time_s", "throughput_img_s")
NUMERIC_RUN_COLUMNS = (
    "gpus", "nodes", "epochs", "steady_epoch_time_s", "throughput_img_s", "total_time_s",
)
# Durations in seconds: finite and >= 0 where given (empty where not measured). An epoch's
# overhead is its seconds less its steps' (measure.epoch_overhead): float sums may leave it a
# hair below 0, never a millisecond.
DURATION_COLUMNS = ("steady_epoch_time_s", "total_time_s", "wall_time_s", "step_time_s", "epoch_overhead_s")
DURATION_SLACK_S = {"epoch_overhead_s": 1e-3}


def status_counts(runs: pd.DataFrame) -> str:
    """e.g. '12 runs: 11 ok, 1 failed'."""
    counts = runs["status"].value_counts()
    return f"{len(runs)} runs: " + ", ".join(f"{n} {status}" for status, n in counts.items())


def read_runs_csv(path) -> pd.DataFrame:
    """runs.csv (tidy/rows.py writes it) read back with its text columns as text: the one reader
    of the tables, the history and the comparison. ValueError naming the file when unreadable."""
    try:
        runs = pd.read_csv(path, dtype=dict.fromkeys(TEXT_COLUMNS, str))
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read the runs table: {error}") from error
    return with_requested_batch(runs)


def _written_not_a_number(path, runs: pd.DataFrame) -> str | None:
    """The first duration cell of runs.csv that spells NaN (`nan`, `NA`, ...): the tidy stage
    leaves an unmeasured value empty, and pandas would read the word as one."""
    columns = [column for column in DURATION_COLUMNS if column in runs.columns]
    if not columns:
        return None
    cells = pd.read_csv(path, usecols=columns, dtype=str, keep_default_na=False)
    for column in columns:
        words = cells[column].str.strip()
        spelled = (words != "") & pd.to_numeric(words, errors="coerce").isna() & runs[column].isna()
        if spelled.any():
            position = int(np.flatnonzero(spelled.to_numpy())[0])
            return (f"{path} line {position + 2}: column {column!r} holds {cells[column].iloc[position]!r}, "
                    "not a duration (leave an unmeasured one empty)")
    return None


def with_requested_batch(runs: pd.DataFrame) -> pd.DataFrame:
    """A runs.csv written before requested_per_gpu_batch (or its rows in the history, beside a
    later sweep's) put the asked batch in per_gpu_batch (the axis over the log): that is its
    requested batch, so its groups stay what they were."""
    if "per_gpu_batch" not in runs.columns:
        return runs
    runs = runs.copy()
    if "requested_per_gpu_batch" not in runs.columns:
        runs.insert(list(runs.columns).index("per_gpu_batch") + 1, "requested_per_gpu_batch", None)
    asked = runs["requested_per_gpu_batch"]
    runs["requested_per_gpu_batch"] = asked.where(asked.notna(), runs["per_gpu_batch"])
    return runs


def group_keys(runs: pd.DataFrame) -> list[str]:
    """The configuration axes of a runs table, in column order."""
    return [c for c in runs.columns if c not in NON_KEY_COLUMNS]


def table_group_keys(table: pd.DataFrame, value_columns) -> list[str]:
    """The group keys of a table this package derived (scaling, fits, sweet spots): every column
    that is not one of its `value_columns` (scaling.SCALING_COLUMNS for a scaling table)."""
    return [c for c in table.columns if c not in value_columns]


def read_runs(path) -> pd.DataFrame:
    """Read and check runs.csv; errors name the file, the column and the CSV line."""
    return _read_and_check(path)[1]


def check_runs_file(path) -> pd.DataFrame:
    """runs.csv read whole (read_runs_csv), checked as check_runs checks it and for durations
    spelled NaN; ValueError naming the file, line, column and value."""
    return _read_and_check(path)[0]


def _read_and_check(path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs.csv whole, check_runs' copy of it); errors name the file, column and CSV line."""
    runs = read_runs_csv(path)
    # CSV line = row position + 2 (the header is line 1).
    checked = check_runs(runs, source=str(path), line_offset=2)
    problem = _written_not_a_number(path, runs)
    if problem:
        raise ValueError(problem)
    return runs, checked


def check_runs(runs: pd.DataFrame, source: str = "runs table", line_offset: int | None = None
               ) -> pd.DataFrame:
    """A copy of `runs` with numeric columns as numbers; ValueError naming bad column and row."""
    missing = [c for c in REQUIRED_RUN_COLUMNS if c not in runs.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {', '.join(map(repr, missing))} "
                         f"(runs.csv written by scalesweep.tidy has them)")
    runs = with_requested_batch(runs.reset_index(drop=True)).copy()
    logs = runs["log"] if "log" in runs.columns else pd.Series(None, index=runs.index)

    def where(position: int) -> str:
        return f"row {position}" if line_offset is None else f"line {position + line_offset}"

    def from_log(position: int) -> str:
        # runs.csv is written by the tidy step: the value came from this log, the place to fix.
        log = logs.iloc[position]
        return f" (the run of {log})" if isinstance(log, str) and log else ""

    for column in NUMERIC_RUN_COLUMNS:
        if column not in runs.columns:
            continue
        numbers = pd.to_numeric(runs[column], errors="coerce")
        bad = numbers.isna() & runs[column].notna()
        if bad.any():
            position = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"{source} {where(position)}: column {column!r} holds "
                             f"{runs[column].iloc[position]!r}, not a number{from_log(position)}")
        runs[column] = numbers.astype(float)
    _check_durations(runs, source, where, from_log)
    # A failed run whose log never said its GPU count (an empty log, say) stays in runs.csv but
    # has no place in a scaling series; an ok run without one is an error. The index keeps the
    # CSV rows' positions for the messages below.
    runs = runs[runs["gpus"].notna() | (runs["status"] == "ok")].copy()
    gpus = runs["gpus"]
    bad = gpus.isna() | (gpus < 0) | (gpus != gpus.round())
    if bad.any():
        position = int(gpus.index[bad.to_numpy()][0])
        raise ValueError(f"{source} {where(position)}: column 'gpus' must be a whole number >= 0, "
                         f"got {gpus.loc[position]!r}{from_log(position)}")
    runs["gpus"] = gpus.astype(int)
    unknown = ~runs["status"].isin(STATUSES)
    if unknown.any():
        position = int(runs.index[unknown.to_numpy()][0])
        raise ValueError(f"{source} {where(position)}: column 'status' holds "
                         f"{runs['status'].loc[position]!r}; "
                         f"expected one of {', '.join(STATUSES)}{from_log(position)}")
    return runs.reset_index(drop=True)


def _check_durations(runs: pd.DataFrame, source: str, where, from_log) -> None:
    """ValueError naming the first duration that is not a number, infinite or negative."""
    for column in (c for c in DURATION_COLUMNS if c in runs.columns):
        values = pd.to_numeric(runs[column], errors="coerce")
        floor = -DURATION_SLACK_S.get(column, 0.0)
        bad = (values.isna() & runs[column].notna()) | np.isinf(values) | (values < floor)
        if bad.any():
            position = int(np.flatnonzero(bad.to_numpy())[0])
            value = runs[column].iloc[position]
            value = value.item() if isinstance(value, np.generic) else value  # -4.0, not np.float64(-4.0)
            raise ValueError(f"{source} {where(position)}: column {column!r} holds "
                             f"{value!r}, not a duration (finite, >= 0 s)"
                             f"{from_log(position)}")


def iter_groups(table: pd.DataFrame, keys: list[str]) -> Iterator[tuple[dict, pd.DataFrame]]:
    """(key values, rows) per group; missing key values form their own group."""
    if not keys:
        if len(table):
            yield {}, table
        return
    for values, rows in table.groupby(keys, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        yield dict(zip(keys, values)), rows


def group_positions(table: pd.DataFrame, keys: list[str]) -> list[tuple[dict, np.ndarray]]:
    """iter_groups' groups, in its order and with its key values, as the positions of their rows
    (in row order): for arithmetic on columns taken out of the table once, where a DataFrame per
    group would cost more than the arithmetic (the predictions)."""
    if not keys:
        return [({}, np.arange(len(table)))] if len(table) else []
    groups = table.groupby(keys, dropna=False, sort=True).indices
    return [(dict(zip(keys, values if isinstance(values, tuple) else (values,))), positions)
            for values, positions in groups.items()]


def group_records(table: pd.DataFrame, keys: list[str]) -> list[tuple[dict, list[dict]]]:
    """iter_groups' groups, in its order, with each row a plain dict of Python scalars: for work
    that reads a few values of each row of hundreds of groups, where building a DataFrame per
    group and indexing it cost more than the work itself (the findings)."""
    records = table.to_dict("records")
    groups = []
    for _, positions in group_positions(table, keys):
        rows = [records[position] for position in positions]
        # the key values as Python scalars, a missing one as groupby gives it (NaN, also for None)
        groups.append(({key: np.nan if pd.isna(rows[0][key]) else rows[0][key] for key in keys}, rows))
    return groups


def positions_by_cell(cell_of_row: np.ndarray, cells: int) -> list[np.ndarray]:
    """The row positions of each cell 0 .. cells - 1 (numbered as in `cell_of_row`, a groupby's
    ngroup), each cell's in row order: one sort for all cells, not a filter per cell."""
    order = np.argsort(cell_of_row, kind="stable")
    bounds = np.searchsorted(cell_of_row[order], np.arange(cells + 1))
    return [order[start:end] for start, end in zip(bounds[:-1], bounds[1:])]


def key_tuple(values: dict, keys: list[str]) -> tuple:
    """Hashable group identity in which missing values (NaN) compare equal."""
    return tuple(None if pd.isna(values[k]) else values[k] for k in keys)
