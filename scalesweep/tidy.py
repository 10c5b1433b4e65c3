"""Parsed runs -> two tidy tables: epochs.csv (one row per run x epoch) and runs.csv (one per run).

Each run is a log plus the sweep axes it was launched with. The axes say what was asked, the log
what happened: axes override or complete the log, metrics always come from the log. Steady-state
metrics are recomputed from the epochs (median over epochs >= 2), never copied from a summary.
A run that did not finish is a row with status failed / oom / timeout, a reason, and NaN in every
metric column, so no plot or fit can take it for a measurement.
"""

import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from scalesweep.parse import FIRST_STEADY_EPOCH, LogFormatError, parse_file
from scalesweep.provenance import PROVENANCE_COLUMNS, run_provenance

AXIS_COLUMNS = ["framework", "model", "dataset", "gpus", "nodes", "repeat"]
METRIC_COLUMNS = [
    "steady_epoch_time_s",
    "throughput_img_s",
    "throughput_per_gpu_img_s",
    "total_time_s",
    "memory_gb",
    "peak_host_rss_gb",
]
RUN_RESULT_COLUMNS = [
    "per_gpu_batch",
    "global_batch",
    "world_size",
    "status",
    "reason",
    "epochs",
    *METRIC_COLUMNS,
    "protocol",
    "log_format",
    "log",
    # provenance, after the contract's columns
    "device_kind",
    "images_per_epoch",
    "slurm_job_id",
    "hostname",
    *PROVENANCE_COLUMNS,
]
EPOCH_RESULT_COLUMNS = ["epoch", "images", "seconds", "throughput_img_s", "loss", "accuracy", "steady"]
EPOCH_FLOAT_COLUMNS = ["seconds", "throughput_img_s", "loss", "accuracy"]
RUN_COLUMNS = AXIS_COLUMNS + RUN_RESULT_COLUMNS
EPOCH_COLUMNS = AXIS_COLUMNS + EPOCH_RESULT_COLUMNS

# Config keys that would overwrite a measurement or the verdict on it. Other result columns
# (per_gpu_batch, epochs, ...) may be sweep axes: the axis value then fills that column.
RESERVED_KEYS = frozenset(
    {"status", "reason", "log", "log_format", *METRIC_COLUMNS, *EPOCH_RESULT_COLUMNS}
)
# Counts stay integers in the CSVs (`4`, not `4.0`) even where a failed row leaves them empty.
COUNT_COLUMNS = (
    "gpus", "nodes", "repeat", "per_gpu_batch", "global_batch", "world_size", "epochs",
    "images_per_epoch", "epoch", "images",
)  # fmt: skip
NO_LOG_REASON = "no log"
NO_STEADY_REASON = "only epoch 1 finished: no steady-state epoch (epoch >= 2) to measure"


def runs_table(items) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(epochs, runs) tables from `(log path or None, config axes)` pairs.

    Columns: AXIS_COLUMNS, then the configs' other axes sorted, then the result columns (a result
    column that is also an axis appears once, as the axis). epochs holds the epochs of finished
    (status ok) runs only: a failed run's partial epochs are not measurements to plot.
    """
    items = [(path, dict(config)) for path, config in items]
    extra_axes = _extra_axes(config for _, config in items)
    run_rows, epoch_rows = [], []
    for path, config in items:
        for run_row, run_epochs in _rows_for_item(path, config):
            run_rows.append(run_row)
            epoch_rows.extend(run_epochs)
    axes = AXIS_COLUMNS + extra_axes
    runs = pd.DataFrame(run_rows, columns=axes + [c for c in RUN_RESULT_COLUMNS if c not in axes])
    epochs = pd.DataFrame(epoch_rows, columns=axes + [c for c in EPOCH_RESULT_COLUMNS if c not in axes])
    return _typed(epochs, EPOCH_FLOAT_COLUMNS), _typed(runs, METRIC_COLUMNS)


def _typed(frame: pd.DataFrame, float_columns) -> pd.DataFrame:
    """Metrics always float (a column of only failed runs is NaN, not None); counts integers."""
    for column in float_columns:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return _counts_as_integers(frame)


def _counts_as_integers(frame: pd.DataFrame) -> pd.DataFrame:
    for column in COUNT_COLUMNS:
        if column not in frame:
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        known = values.dropna()
        # Only where every given value is a whole number: a user axis may hold other things.
        if values.notna().sum() == frame[column].notna().sum() and (known == known.round()).all():
            frame[column] = values.astype("Int64")
    return frame


def write_tidy(epochs: pd.DataFrame, runs: pd.DataFrame, outdir) -> tuple[Path, Path]:
    """Write epochs.csv and runs.csv into `outdir`, each replaced whole or not at all."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = outdir / "epochs.csv", outdir / "runs.csv"
    for frame, path in zip((epochs, runs), paths):
        _write_csv_atomic(frame, path)
    return paths


def _write_csv_atomic(frame: pd.DataFrame, path: Path) -> None:
    # A job killed mid-write must leave the previous table or none, never half a CSV that the
    # analysis would read as fewer runs: write beside it, then rename (atomic on one file system).
    handle = tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False, newline=""
    )
    try:
        with handle:
            frame.to_csv(handle, index=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def _extra_axes(configs) -> list[str]:
    keys = set()
    for config in configs:
        clashes = sorted(set(config) & RESERVED_KEYS)
        if clashes:
            raise ValueError(
                f"config key(s) {', '.join(clashes)} clash with result columns of the tidy tables; "
                f"rename the axis (config: {config})"
            )
        keys.update(config)
    return sorted(keys - set(AXIS_COLUMNS))


def _rows_for_item(path, config: dict) -> list[tuple[dict, list[dict]]]:
    """[(run row, epoch rows)] for one log: several runs when the file holds several."""
    if path is None or not Path(path).is_file():
        return [(_failed_row(config, NO_LOG_REASON, path), [])]
    try:
        runs = parse_file(path, world_size=_world_size_hint(config))
    except LogFormatError as error:
        return [(_failed_row(config, str(error), path), [])]
    return [_run_rows(run, config, path) for run in runs]


def _world_size_hint(config: dict) -> int | None:
    """World size for logs that do not print it (ddp-reference): the run's total GPU count."""
    for key in ("world_size", "gpus"):
        value = config.get(key)
        if value is not None and int(value) >= 1:
            return int(value)
    return None


def _axes(log_values: dict, config: dict) -> dict:
    """Axis values: config first, then the log, then the defaults (1 node, repeat 0)."""
    values = {key: log_values.get(key) for key in AXIS_COLUMNS}
    values.update(config)
    if values.get("gpus") is None:
        values["gpus"] = log_values.get("world_size")
    if values.get("nodes") is None:
        values["nodes"] = 1
    if values.get("repeat") is None:
        values["repeat"] = 0
    return values


def _failed_row(config: dict, reason: str, path) -> dict:
    return {
        **_axes({}, config),
        "status": "failed",
        "reason": reason,
        "log": None if path is None else str(path),
    }


def _run_rows(run, config: dict, path) -> tuple[dict, list[dict]]:
    header, summary = run.header, run.summary or {}
    row = {key: header.get(key) for key in RUN_RESULT_COLUMNS if key in header}
    row.update(_axes(header, config))
    row["world_size"] = row.get("world_size") or row.get("gpus")
    if row.get("global_batch") is None and row.get("per_gpu_batch") is not None and row["world_size"]:
        row["global_batch"] = row["per_gpu_batch"] * row["world_size"]
    row["status"] = summary.get("status", "failed")
    row["epochs"] = row.get("epochs") if "epochs" in config else len(run.epochs)
    row["log_format"] = run.format
    row["log"] = str(path)
    row.update(run_provenance(header, config))
    if row["status"] != "ok":
        row["reason"] = summary.get("reason") or f"status {row['status']} without a reason in the log"
        return row, []
    metrics = _steady_metrics(run.epochs, row["world_size"])
    row.update(metrics, reason=_ok_reason(summary.get("reason"), metrics, len(run.epochs)))
    for key in ("total_time_s", "memory_gb", "peak_host_rss_gb"):
        row[key] = summary.get(key)
    axes = {key: row[key] for key in row if key in AXIS_COLUMNS or key in config}
    return row, [_epoch_row(axes, epoch) for epoch in run.epochs]


def _steady_metrics(epochs: list[dict], world_size) -> dict:
    steady = [epoch for epoch in epochs if epoch["epoch"] >= FIRST_STEADY_EPOCH]
    seconds = [epoch["seconds"] for epoch in steady if _is_number(epoch.get("seconds"))]
    rates = [rate for rate in (_epoch_rate(epoch) for epoch in steady) if _is_number(rate)]
    throughput = statistics.median(rates) if rates else math.nan
    return {
        "steady_epoch_time_s": statistics.median(seconds) if seconds else math.nan,
        "throughput_img_s": throughput,
        "throughput_per_gpu_img_s": throughput / max(world_size or 1, 1),
    }


def _ok_reason(logged_reason, metrics: dict, epochs_done: int) -> str | None:
    """An ok run's reason stays the log's (empty) unless its steady metrics cannot be measured."""
    if not _is_number(metrics["steady_epoch_time_s"]):
        if epochs_done < FIRST_STEADY_EPOCH:
            return NO_STEADY_REASON
        return "no steady-state epoch has a time in the log"
    if not _is_number(metrics["throughput_img_s"]):
        return "steady throughput unknown: the log gives no image count per epoch"
    return logged_reason


def _epoch_row(axes: dict, epoch: dict) -> dict:
    return {
        **axes,
        "epoch": epoch["epoch"],
        "images": epoch.get("images"),
        "seconds": epoch.get("seconds"),
        "throughput_img_s": _epoch_rate(epoch),
        "loss": epoch.get("loss"),
        "accuracy": epoch.get("accuracy"),
        "steady": epoch["epoch"] >= FIRST_STEADY_EPOCH,
    }


def _epoch_rate(epoch: dict):
    rate = epoch.get("throughput_img_s")
    if _is_number(rate):
        return rate
    images, seconds = epoch.get("images"), epoch.get("seconds")
    return images / seconds if _is_number(images) and _is_number(seconds) and seconds > 0 else None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def main(argv=None) -> int:
    """`python -m scalesweep.tidy --out DIR LOG...`: tables from logs alone (no sweep config)."""
    import argparse

    parser = argparse.ArgumentParser(description="Write epochs.csv and runs.csv from training logs.")
    parser.add_argument("logs", nargs="+", help="log files (format detected)")
    parser.add_argument("--out", required=True, help="folder for epochs.csv and runs.csv")
    args = parser.parse_args(argv)
    epochs, runs = runs_table((path, {}) for path in args.logs)
    for path in write_tidy(epochs, runs, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
