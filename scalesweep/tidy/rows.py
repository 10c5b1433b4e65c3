"""Parsed runs -> two tidy tables: epochs.csv (one row per run x epoch) and runs.csv (one per run).

Each run is a log plus the sweep axes it was launched with. The axes say what was asked, the log
what happened: the log's value of a setting it carries wins (what ran), the axes complete it,
and requested_per_gpu_batch keeps what was asked beside per_gpu_batch; metrics always come from the log. Steady-state
metrics are recomputed from the epochs (median over epochs >= 2), never copied from a summary.
A run that did not finish is a row with status failed / oom / timeout, a reason, and NaN in every
metric column, so no plot or fit can take it for a measurement. So is a log that cannot be read
or breaks the record contract (scalesweep/contract/records.py); `tidy_tables` also lists those as refused.
"""

import functools
import math
import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from scalesweep.contract import atomic, hardware, layout, records, run_env
from scalesweep.contract.records import FIRST_STEADY_EPOCH
from scalesweep.logs import invariants
from scalesweep.logs.read import parse_regular_file
from scalesweep.logs.run import EmptyLogError, LogFormatError, refused_summary, whole_number
from scalesweep.tidy import copies
from scalesweep.contract.steady import epoch_rate, steady_metrics, steady_windows
from scalesweep.tidy.epoch_parts import EPOCH_PART_COLUMNS, epoch_parts
from scalesweep.tidy.provenance import SETTINGS_KEYS, requested_batch, run_id, run_provenance, what_ran
from scalesweep.tidy.table import (
    AXIS_COLUMNS,
    BREAKDOWN_COLUMNS,
    COST_COLUMNS,
    COUNT_COLUMNS,
    ENERGY_COLUMNS,
    ENERGY_TEXT_COLUMNS,
    EPOCH_FLOAT_COLUMNS,
    EPOCH_RESULT_COLUMNS,
    FLOAT_BREAKDOWN_COLUMNS,
    INTERVAL_COLUMNS,
    METRIC_COLUMNS,
    PEAK_COLUMNS,
    PEAK_TEXT_COLUMNS,
    RUN_RESULT_COLUMNS,
    SLURM_ENERGY_COLUMNS,
    status_counts,
)

# Config keys that would overwrite a measurement or the verdict on it. Other result columns
# (per_gpu_batch, epochs, ...) may be sweep axes: the axis value then fills that column.
RESERVED_KEYS = frozenset(
    {"status", "reason", "log", "log_format", *METRIC_COLUMNS, *INTERVAL_COLUMNS, *COST_COLUMNS,
     *ENERGY_COLUMNS, *ENERGY_TEXT_COLUMNS, *SLURM_ENERGY_COLUMNS, *BREAKDOWN_COLUMNS,
     *PEAK_COLUMNS, *PEAK_TEXT_COLUMNS, *EPOCH_RESULT_COLUMNS, *EPOCH_PART_COLUMNS}
)
NO_LOG_REASON = "no log"
NO_STEADY_REASON = "only epoch 1 finished: no steady-state epoch (epoch >= 2) to measure"


class TidyTables(NamedTuple):
    epochs: pd.DataFrame
    runs: pd.DataFrame
    # One line per log, or run in a log, that could not be read or broke the record contract,
    # naming the log (and line and key where there is one); each is also a failed row in `runs`.
    refused: list[str]
    # One line per run read again (the same log twice, a copy of it): left out, named
    # (scalesweep/tidy/copies.py).
    copies_left_out: list[str] = []


def runs_table(items, images_per_epoch: int | None = None, peak_override: dict | None = None,
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(epochs, runs) tables from `(log path or None, run axes)` pairs. peak_override: the
    config's hardware.peak_tflops, {dtype: TFLOP/s} (contract/hardware.py: run_peak).

    Columns: AXIS_COLUMNS, then the runs' other axes sorted, then the result columns (a result
    column that is also an axis appears once, as the axis). epochs holds the epochs of finished
    (status ok) runs only: a failed run's partial epochs are not measurements to plot.
    """
    tables = tidy_tables(items, images_per_epoch, peak_override)
    return tables.epochs, tables.runs


def tidy_tables(items, images_per_epoch: int | None = None, peak_override: dict | None = None,
                processes: int = 1) -> TidyTables:
    """runs_table's tables, and the logs it refused (TidyTables.refused). `images_per_epoch`: the
    dataset's training images, for logs that count steps instead (Keras; formats/keras.py: keras_epoch_images).
    `processes`: forked processes reading the logs when there are READ_PROCESS_MIN_LOGS or more;
    only for a caller that is a plain process (a fork copies one thread: never Snakemake's)."""
    items = [(path, dict(axes)) for path, axes in items]
    extra_axes = _extra_axes(axes for _, axes in items)
    readings = _readings(items, images_per_epoch, peak_override, processes)
    ids = [run_row["run_id"] for run_row, _, _ in readings]
    later = copies.later_readings(ids)
    copy_lines = copies.copy_lines([run_row["log"] for run_row, _, _ in readings], ids, later)
    readings = [reading for position, reading in enumerate(readings) if position not in later]
    earlier = copies.earlier_attempts([run_row for run_row, _, _ in readings])
    copy_lines += copies.attempt_lines([run_row for run_row, _, _ in readings], earlier)
    readings = [reading for position, reading in enumerate(readings) if position not in earlier]
    run_rows = [run_row for run_row, _, _ in readings]
    epoch_rows = [epoch for _, run_epochs, _ in readings for epoch in run_epochs]
    refused = [refusal for _, _, refusal in readings if refusal]
    axis_columns = AXIS_COLUMNS + extra_axes
    runs = pd.DataFrame(run_rows, columns=axis_columns + [c for c in RUN_RESULT_COLUMNS if c not in axis_columns])
    epochs = pd.DataFrame(epoch_rows, columns=axis_columns + [c for c in EPOCH_RESULT_COLUMNS if c not in axis_columns])
    float_columns = (METRIC_COLUMNS + INTERVAL_COLUMNS + COST_COLUMNS + ENERGY_COLUMNS + ["slurm_energy_j"]
                     + FLOAT_BREAKDOWN_COLUMNS + PEAK_COLUMNS + ["step_time_s", "epoch_overhead_s"])
    return TidyTables(_typed(epochs, EPOCH_FLOAT_COLUMNS), _typed(runs, float_columns), refused, copy_lines)


# A forked reader costs a few milliseconds to start and its rows must be pickled back: below this
# many logs one process reads them sooner.
READ_PROCESS_MIN_LOGS = 200


def _readings(items, images_per_epoch, peak_override, processes: int) -> list:
    """_rows_for_item's readings of every item, in the items' order, read by `processes` forked
    processes (one below READ_PROCESS_MIN_LOGS logs, or where hardware.may_fork_helpers says no:
    off Linux, or beside another thread). A log whose reading raises
    is read again here, so that the error is raised as it is, not as a worker's pickled copy of
    it; so are all of them when a worker dies (killed for memory): never a pool waiting forever."""
    read = functools.partial(_item_readings, images_per_epoch=images_per_epoch, peak_override=peak_override)
    if processes <= 1 or len(items) < READ_PROCESS_MIN_LOGS or not hardware.may_fork_helpers():
        return [reading for item in items for reading in read(item)]
    try:
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
            chunks = list(pool.map(functools.partial(_without_raising, read), items,
                                   chunksize=max(1, len(items) // (processes * 8))))
    except BrokenProcessPool:
        chunks = [None] * len(items)
    return [reading for item, chunk in zip(items, chunks) for reading in (read(item) if chunk is None else chunk)]


def _item_readings(item, images_per_epoch, peak_override) -> list:
    path, axes = item
    return _rows_for_item(path, axes, images_per_epoch, peak_override)


def _without_raising(read, item):
    try:
        return read(item)
    except Exception:  # raised again by the parent, reading the item itself
        return None


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
        # Only where every given value is a whole number: a user axis may hold other things
        # (and one past 2**53 is no count; Int64 could not even hold some of them).
        whole = (known == known.round()).all() and (known.abs() <= records.MAX_COUNT).all()
        if values.notna().sum() == frame[column].notna().sum() and whole:
            frame[column] = values.astype("Int64")
    return frame


def with_digests(runs: pd.DataFrame, digests: dict | None) -> pd.DataFrame:
    """container_digest of every run from {framework: 'sha256:...'}: the workflow knows which
    image each framework's runs ran in and hashed it once (scalesweep/plan/containers.py)."""
    if not digests:
        return runs
    known = runs["framework"].map(digests)
    return runs.assign(container_digest=known.where(known.notna(), runs["container_digest"]))


def write_tidy_tables(items, epochs_csv, runs_csv, ask_slurm: bool = False, digests=None,
                      peak_override=None) -> str:
    """The tidy stage (rule `tidy`): (log path or None, run axes) pairs -> epochs_csv and
    runs_csv (write_pair); the log line. ask_slurm, digests, peak_override: see tidy_frames."""
    epochs, runs = tidy_frames(items, ask_slurm, digests, peak_override)
    write_pair(epochs, runs, epochs_csv, runs_csv)
    return status_counts(runs)


def tidy_frames(items, ask_slurm: bool = False, digests=None, peak_override=None,
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy stage's (epochs, runs) tables, not written. ask_slurm: give failed runs the
    status SLURM's accounting knows (TIMEOUT, OUT_OF_MEMORY...), and every run its job's energy
    where the cluster accounts it (slurm_energy_j); digests: {framework: image digest}
    (with_digests); peak_override: the config's hardware.peak_tflops (runs_table)."""
    from scalesweep.logs import accounting

    epochs, runs = runs_table(items, peak_override=peak_override)
    runs = with_digests(runs, digests)
    if ask_slurm and "slurm_job_id" in runs.columns:
        failed = runs[runs["status"] != "ok"]
        runs = accounting.refine_failures(runs, accounting.sacct_states(failed["slurm_job_id"]))
        runs = accounting.with_slurm_energy(runs, accounting.sacct_energy(runs["slurm_job_id"]))
    return epochs, runs


def write_pair(epochs: pd.DataFrame, runs: pd.DataFrame, epochs_csv, runs_csv) -> None:
    """epochs.csv and runs.csv replaced together or not at all (atomic.write_csvs): the two
    never describe different runs. OSError naming the file that could not be written."""
    for path in (epochs_csv, runs_csv):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csvs({Path(epochs_csv): epochs, Path(runs_csv): runs})


def write_tidy(epochs: pd.DataFrame, runs: pd.DataFrame, outdir) -> tuple[Path, Path]:
    """Write epochs.csv and runs.csv into `outdir` (write_pair)."""
    paths = Path(outdir) / layout.csv_name("epochs"), Path(outdir) / layout.csv_name("runs")
    write_pair(epochs, runs, *paths)
    return paths


def _extra_axes(run_axes) -> list[str]:
    keys = set()
    for axes in run_axes:
        clashes = sorted(set(axes) & RESERVED_KEYS)
        if clashes:
            raise ValueError(
                f"config key(s) {', '.join(clashes)} clash with result columns of the tidy tables; "
                f"rename the axis (axes: {axes})"
            )
        keys.update(axes)
    return sorted(keys - set(AXIS_COLUMNS))


def _rows_for_item(path, axes: dict, images_per_epoch=None, peak_override=None,
                   ) -> list[tuple[dict, list[dict], str | None]]:
    """[(run row, epoch rows, why refused or None)] for one log: several when it holds several runs.

    An empty log is a job that died before printing: a failed run, not a refused log.
    """
    if path is None or not Path(path).is_file():
        return [(_failed_row(axes, NO_LOG_REASON, path), [], None)]
    try:
        runs = parse_regular_file(path, world_size=_world_size_hint(axes), images_per_epoch=images_per_epoch)
    except EmptyLogError as error:
        return [(_failed_row(axes, str(error), path), [], None)]
    except (LogFormatError, OSError) as error:  # OSError: unreadable (permissions, vanished)
        reason = str(error) if isinstance(error, LogFormatError) else f"{path}: cannot read: {error}"
        return [(_failed_row(axes, reason, path), [], reason)]
    rows = []
    for run in runs:
        row, run_epochs = _run_rows(run, axes, path, peak_override)
        mfu = invariants.mfu_problem(row.get("mfu_pct"), row.get("tflops_per_gpu"))
        if mfu:  # the MFU needs the run's GPU count, which the axes may give: judged here
            run.problems = [f"{path}: {mfu}"]
            run.summary = refused_summary(run.problems, len(run.epochs))
            row, run_epochs = _run_rows(run, axes, path, peak_override)
        refusal = run.summary["reason"] if run.problems else None
        rows.append(_refused_without_gpu_count(row, run_epochs, refusal))
    return rows


def _refused_without_gpu_count(row: dict, run_epochs: list[dict], refusal: str | None):
    """An ok run whose GPU count neither the log nor the axes give has no place in any series."""
    if row["status"] != "ok" or not pd.isna(row.get("gpus")):
        return row, run_epochs, refusal
    reason = (f"{row['log']}: GPU count unknown: the log gives no 'world_size' or 'gpus', "
              "nor do the run's axes")
    failed = {**row, "status": "failed", "reason": reason}
    failed.update(dict.fromkeys(METRIC_COLUMNS))
    return failed, [], reason


def _world_size_hint(axes: dict) -> int | None:
    """World size for logs that do not print it (ddp-reference): the run's total GPU count."""
    for key in ("world_size", "gpus"):
        value = whole_number(axes.get(key))
        if value is not None and value >= 1:
            return value
    return None


def _global_batch(per_gpu_batch, world_size) -> int | None:
    """per_gpu_batch x world_size, when both are whole numbers >= 1 (else unknown)."""
    per_gpu, world = whole_number(per_gpu_batch), whole_number(world_size)
    if per_gpu is None or world is None or per_gpu < 1 or world < 1:
        return None
    return per_gpu * world if per_gpu * world <= records.MAX_COUNT else None


def _axis_values(log_values: dict, axes: dict) -> dict:
    """Axis values by provenance.what_ran (the log's value where it carries a setting, else the
    axes'), with requested_per_gpu_batch beside per_gpu_batch; then the defaults (1 node,
    repeat 0).

    From the log only keys of the header contract: a `repeat` or `status` key in a header is
    not one, and readers skip keys they do not know.
    """
    contract = {key: value for key, value in log_values.items() if key in records.HEADER}
    values = {key: contract.get(key) for key in AXIS_COLUMNS}
    values.update(what_ran(contract, axes, [key for key in SETTINGS_KEYS if key in axes]))
    values["requested_per_gpu_batch"] = requested_batch(contract, axes)
    if "env" in values:  # one text cell per mapping: a group key and a label
        values["env"] = run_env.env_text(values["env"])
    if values.get("gpus") is None:
        values["gpus"] = log_values.get("world_size")
    if values.get("nodes") is None:
        values["nodes"] = 1
    if values.get("repeat") is None:
        values["repeat"] = 0
    return values


def _failed_row(axes: dict, reason: str, path) -> dict:
    log = None if path is None else str(path)
    return {
        **_axis_values({}, axes),
        "status": "failed",
        "reason": reason,
        "log": log,
        "run_id": run_id({}, [], None, log={"path": log, "axes": axes, "reason": reason}),
    }


def _run_rows(run, axes: dict, path, peak_override=None) -> tuple[dict, list[dict]]:
    header, summary = run.header, run.summary or {}
    row = {key: header[key] for key in RUN_RESULT_COLUMNS if key in header and key in records.HEADER}
    row.update(_axis_values(header, axes))
    row["world_size"] = row.get("world_size") or row.get("gpus")
    if row.get("global_batch") is None:
        row["global_batch"] = _global_batch(row.get("per_gpu_batch"), row["world_size"])
    row["status"] = summary.get("status", "failed")
    row["epochs"] = row.get("epochs") if "epochs" in axes else len(run.epochs)
    row["log_format"] = run.format
    row["log"] = str(path)
    row["train_images"] = _train_images(header)
    row["images_per_epoch_source"] = run.images_source if _is_number(row.get("images_per_epoch")) else None
    row.update(run_provenance(header, axes))
    row["run_id"] = run_id(header, run.epochs, run.summary, log=str(path))
    # A failed run cost GPU time too: its wall time is kept, its metrics are not.
    row["wall_time_s"] = summary.get("wall_time_s")
    if row["status"] != "ok":
        row["reason"] = summary.get("reason") or f"status {row['status']} without a reason in the log"
        row["gpu_hours"] = run_gpu_hours(row)
        return row, []
    metrics = steady_metrics(run.epochs, row["world_size"], header.get("protocol", "epochs"))
    row.update(metrics, reason=_ok_reason(summary.get("reason"), metrics, len(run.epochs)))
    for key in ("total_time_s", "memory_gb", "peak_host_rss_gb"):
        row[key] = summary.get(key)
    row.update(_step_interval(run.epochs, summary, metrics["throughput_img_s"]))
    row["gpu_hours"] = run_gpu_hours(row)
    row.update(breakdown_fields(header, summary, row, peak_override))
    row.update(steady_energy(run.epochs, row["world_size"]), run_energy_j=summary.get("run_energy_j"))
    row.update(epoch_parts(run.epochs, row["train_images"], row.get("protocol"), run.format))
    epoch_axes = {key: row[key] for key in row if key in AXIS_COLUMNS or key in axes}
    return row, [_epoch_row(epoch_axes, epoch) for epoch in run.epochs]


def _train_images(header: dict):
    """Images of one full training epoch: the header's train_images, else (epochs protocol) its
    images per epoch; unknown under the steps protocol of older records."""
    if _is_number(header.get("train_images")):
        return header["train_images"]
    if header.get("protocol", "epochs") == "epochs" and _is_number(header.get("images_per_epoch")):
        return header["images_per_epoch"]
    return None


def steady_energy(epochs: list[dict], world_size) -> dict:
    """The energy columns of an ok run from its steady epochs (or timed window): their joules
    summed, per image and per GPU per second; NaN with the reason (`energy_note`) where any
    steady window has no energy (older logs say nothing: no note then)."""
    steady = steady_windows(epochs)
    unknown = {"energy_j": math.nan, "joules_per_image": math.nan, "avg_power_w_per_gpu": math.nan,
               "energy_source": None}
    missing = [epoch for epoch in steady if not _is_number(epoch.get("energy_j"))]
    if not steady or missing:
        notes = [epoch["energy_note"] for epoch in missing if epoch.get("energy_note")]
        return {**unknown, "energy_note": notes[0] if notes else None}
    joules = sum(epoch["energy_j"] for epoch in steady)
    images = sum(epoch["images"] for epoch in steady if _is_number(epoch.get("images")))
    seconds = sum(epoch["seconds"] for epoch in steady if _is_number(epoch.get("seconds")))
    return {
        "energy_j": joules,
        "joules_per_image": joules / images if images else math.nan,
        "avg_power_w_per_gpu": joules / seconds / max(world_size or 1, 1) if seconds else math.nan,
        "energy_source": steady[0].get("energy_source"),
        "energy_note": None,
    }


def run_throughput_bounds(throughput, step_time_ci_pct) -> tuple[float, float]:
    """95 % interval of a throughput whose mean step time is known to +/- `step_time_ci_pct` %:
    throughput / (1 +/- pct / 100). NaN where the step interval is unknown or reaches 100 %."""
    if not (_is_number(throughput) and _is_number(step_time_ci_pct)) or not 0 <= step_time_ci_pct < 100:
        return math.nan, math.nan
    relative = step_time_ci_pct / 100.0
    return throughput / (1.0 + relative), throughput / (1.0 - relative)


def _step_interval(epochs: list[dict], summary: dict, throughput) -> dict:
    """timed_steps, step_time_ci_pct and the throughput interval of an ok run (older records
    without the summary's interval: the timed window's own, for the steps protocol)."""
    steady = steady_windows(epochs)
    steps, pct = summary.get("timed_steps"), summary.get("step_time_ci_pct")
    if not _is_number(steps):
        counted = [epoch.get("steps") for epoch in steady]
        steps = sum(counted) if counted and all(_is_number(c) for c in counted) else None
    if not _is_number(pct) and len(steady) == 1:
        pct = steady[0].get("step_time_ci_pct")
    low, high = run_throughput_bounds(throughput, pct)
    # why the steps protocol's timed window ended: `cap` = short of its precision target
    stop = steady[0].get("stop_reason") if len(steady) == 1 else None
    return {"timed_steps": steps, "step_time_ci_pct": pct if _is_number(pct) else None,
            "throughput_ci_low_img_s": low, "throughput_ci_high_img_s": high,
            "timed_stop_reason": stop}


# Breakdown keys the summary record carries as they are (docs/records.md).
_SUMMARY_BREAKDOWN = tuple(c for c in BREAKDOWN_COLUMNS if c not in ("flops_per_image", "tflops_per_gpu", "mfu_pct"))


def breakdown_fields(header: dict, summary: dict, row: dict, peak_override=None) -> dict:
    """The breakdown columns of an ok run: the summary's parts and probes, the header's FLOPs per
    image, and from them the achieved TFLOP/s per GPU and the MFU against the peak of
    scalesweep/contract/hardware.py (peak_override: the config's {dtype: TFLOP/s}), with that
    peak and where it came from (or why there is none)."""
    values = {key: summary.get(key) if _is_number(summary.get(key)) else None for key in _SUMMARY_BREAKDOWN}
    flops = header.get("flops_per_image")
    values["flops_per_image"] = flops if _is_number(flops) else None
    device = (header.get("gpu_models") or [None])[0] if header.get("device_kind") == "gpu" else None
    peak = hardware.run_peak(device, hardware.compute_dtype(header.get("framework"), header.get("precision")),
                             peak_override)
    values.update(tflops_per_gpu=None, mfu_pct=None, peak_tflops=peak.tflops, peak_note=peak.note)
    if values["flops_per_image"] is not None and _is_number(row.get("throughput_img_s")) and _is_number(row.get("gpus")):
        tflops = hardware.tflops_per_gpu(flops, row["throughput_img_s"], row["gpus"])
        values["tflops_per_gpu"] = tflops
        values["mfu_pct"] = hardware.mfu_pct(tflops, peak.tflops)
    return values


def run_gpu_hours(row: dict) -> float:
    """GPU-hours the run cost: GPUs x the trainer's wall time (start-up, warm-up and every
    window or epoch included); without it (older records, reference logs) its time to solution,
    else its steady epoch time x epochs. The CPU baseline (0 GPUs) costs 0 GPU-hours."""
    gpus = row.get("gpus")
    seconds = next((row.get(key) for key in ("wall_time_s", "total_time_s") if _is_number(row.get(key))), None)
    if seconds is None and _is_number(row.get("steady_epoch_time_s")) and _is_number(row.get("epochs")):
        seconds = row["steady_epoch_time_s"] * row["epochs"]
    if seconds is None or not _is_number(gpus):
        return math.nan
    return gpus * seconds / 3600.0


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
        "throughput_img_s": epoch_rate(epoch),
        "loss": epoch.get("loss"),
        "accuracy": epoch.get("accuracy"),
        "steady": epoch["epoch"] >= FIRST_STEADY_EPOCH,
    }


def _is_number(value) -> bool:
    return records.is_number(value)


