"""The max_batch stage (rule `max_batch`, workflow/rules/max_batch.smk): the maximum viable per-GPU
batch per configuration, from the trainers' `max_batch` records (`--find-max-batch`: doubling
until out of memory, then bisecting) -> results/tables/max_batch.csv."""

import pandas as pd

from scalesweep.contract import atomic
from scalesweep.logs.formats.scalesweep import iter_records

MAX_BATCH_COLUMNS = ["max_per_gpu_batch", "limit_reached", "tried", "status", "reason", "log"]


def records(text, kind, source="<string>"):
    """Every record of one kind in a log, in order (iter_records: the one record reader)."""
    lines = enumerate(text.splitlines(), start=1)
    return [record for _, record in iter_records(lines, source)
            if record is not None and record.get("record") == kind]


def max_batch_row(text, log):
    """One table row from a finder's log: the batch found, or why there is none."""
    found = records(text, "max_batch")
    summary = (records(text, "summary") or [{}])[-1]
    if not found:
        reason = summary.get("reason") or "no max_batch record in the log"
        return {"status": summary.get("status", "failed"), "reason": reason, "log": log}
    result = found[-1]
    tried = " ".join(f"{batch}:{verdict}" for batch, verdict in result.get("tried", []))
    return {
        "max_per_gpu_batch": result.get("per_gpu_batch"),
        "limit_reached": result.get("limit_reached"),
        "tried": tried,
        "status": summary.get("status", "ok"),
        "reason": summary.get("reason"),
        "log": log,
    }


def max_batch_table(items):
    """(log path, run axes) pairs -> one row per configuration."""
    rows = []
    for log, axes in items:
        with open(log) as handle:
            rows.append({**axes, **max_batch_row(handle.read(), str(log))})
    frame = pd.DataFrame(rows)
    axes_columns = [c for c in frame.columns if c not in MAX_BATCH_COLUMNS]
    return frame.reindex(columns=axes_columns + MAX_BATCH_COLUMNS)


def write_max_batch(items, out_csv) -> str:
    """(finder log, run axes) pairs -> out_csv; the log line."""
    table = max_batch_table(items)
    atomic.write_csv(table, out_csv)
    return f"{len(table)} configurations"
