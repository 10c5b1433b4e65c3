"""Writer of the `:::SCALESWEEP {json}` run records of docs/records.md, shared by both trainers:
the record builders and `RunLog`, which emits a run's records in contract order. What the records
hold comes from node.py (where the run ran), measure.py (the measurement rules) and the trainers.

Standard library only: it is imported inside TensorFlow and PyTorch containers alike, and by tests
that must not pay for a framework import.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import sys
import time

from scalesweep.contract.records import FIRST_STEADY_EPOCH, PREFIX, RECORD_SCHEMA, SUMMARY_STATUSES
from scalesweep.contract.steady import steady_metrics
from scalesweep.train.common import stepparts
from scalesweep.train.common.measure import batch_means_interval
from scalesweep.train.common.node import peak_host_rss_gb


def _json_safe(value):
    """Non-finite floats become null: a diverged loss must not make the line invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def _to_builtin(value):
    # numpy scalars (np.float32 loss, np.int64 counts) expose .item(); stdlib json cannot see them.
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"record value of type {type(value).__name__} is not JSON serializable")


def format_record(record: dict) -> str:
    """One record line, schema added, without the trailing newline."""
    if "record" not in record:
        raise ValueError(f"record has no 'record' kind: {record!r}")
    full = {"record": record["record"], "schema": RECORD_SCHEMA}
    full.update({key: value for key, value in record.items() if key != "record"})
    # Round trip through builtins first so numpy scalars get the same NaN handling as floats.
    builtin = json.loads(json.dumps(full, default=_to_builtin))
    return PREFIX + json.dumps(_json_safe(builtin), allow_nan=False)


def emit(record: dict, stream=None) -> None:
    """Write one record line, newline included, in one write(2) and at once, so a killed run
    keeps every record written so far and no other process's output lands inside it: all ranks,
    torchrun and C++ libraries share one O_APPEND log, and `print` under PYTHONUNBUFFERED=1 (set
    by many CI and module environments) writes the line and its newline in two calls."""
    out = sys.stdout if stream is None else stream
    line = format_record(record) + "\n"
    out.flush()  # human lines printed before the record stay before it
    try:
        descriptor = out.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        out.write(line)
        out.flush()
        return
    data = line.encode("ascii")  # json.dumps escapes every non-ASCII character
    while data:  # a write(2) is cut short only by a signal or a full disk: go on from there
        data = data[os.write(descriptor, data):]


STEP_KEYS = ("steps", "step_time_median_s", "step_time_p90_s", "step_time_mean_s", "step_time_ci_pct")


def epoch_record(
    epoch: int,
    images: int,
    seconds: float,
    loss=None,
    accuracy=None,
    *,
    step_stats: dict | None = None,
    phase: str | None = None,
    window: dict | None = None,
) -> dict:
    """The `epoch` record of one finished epoch (1-based `epoch`).

    `step_stats` is what step_statistics() returns (null step keys without it); `phase` names the
    window of the steps protocol ("warmup" or "timed"), null for whole epochs; `window` is the
    timed window's TimedWindow.record_keys().
    """
    stats = {key: None for key in STEP_KEYS}
    stats.update(step_stats or {})
    return {
        "record": "epoch",
        **_work_keys(epoch, images, seconds, loss, accuracy),
        "steps": stats["steps"],
        "step_time_median_s": stats["step_time_median_s"],
        "step_time_p90_s": stats["step_time_p90_s"],
        "step_time_mean_s": stats["step_time_mean_s"],
        "step_time_ci_pct": stats["step_time_ci_pct"],
        "phase": phase,
        **(window or {}),
    }



def eval_record(epoch: int, images: int, seconds: float, loss=None, accuracy=None) -> dict:
    """The `eval` record: validation after epoch `epoch` (PyTorch --eval)."""
    return {"record": "eval", **_work_keys(epoch, images, seconds, loss, accuracy)}


def _work_keys(epoch: int, images: int, seconds: float, loss, accuracy) -> dict:
    return {
        "epoch": epoch,
        "images": images,
        "seconds": seconds,
        "throughput_img_s": images / seconds if seconds > 0 else None,
        "loss": None if loss is None else float(loss),
        "accuracy": None if accuracy is None else float(accuracy),
    }


def _finite_or_none(value):
    return value if math.isfinite(value) else None


def summarize(epochs: list[dict], steady_durations=()) -> dict:
    """Summary numbers from epoch records: totals and medians over epochs >= 2, and the interval
    of the mean step time over `steady_durations` (the timed steps of epochs >= 2).

    The steady keys are null when fewer than two epochs finished, since epoch 1 alone is start-up.
    """
    interval = batch_means_interval(steady_durations)
    metrics = steady_metrics(epochs, 1)
    return {
        "epochs": len(epochs),
        "train_time_s": sum(rec["seconds"] for rec in epochs),
        "steady_epoch_time_s": _finite_or_none(metrics["steady_epoch_time_s"]),
        "throughput_img_s": _finite_or_none(metrics["throughput_img_s"]),
        "timed_steps": len(steady_durations),
        "step_time_mean_s": interval["step_time_mean_s"],
        "step_time_ci_pct": interval["step_time_ci_pct"],
    }


def summary_record(
    status: str,
    epochs: list[dict],
    total_time_s: float | None,
    reason: str | None = None,
    memory_gb: float | None = None,
    *,
    oom_retries: int = 0,
    steady_durations=(),
    wall_time_s: float | None = None,
) -> dict:
    """The closing `summary` record; `reason` must be given unless status is ok.

    `total_time_s` is None where no time to solution was measured (the steps protocol);
    `oom_retries` counts the attempts given up for lack of memory (the halve policy);
    `steady_durations` are the timed steps of epochs >= 2; `wall_time_s` is what the run cost,
    from the trainer's start (before its framework import) to this record, under every protocol.
    """
    if status not in SUMMARY_STATUSES:
        raise ValueError(f"summary status must be ok, oom or failed, not {status!r}")
    if status != "ok" and not reason:
        raise ValueError(f"summary status {status!r} needs a reason")
    return {
        "record": "summary",
        "status": status,
        "reason": None if status == "ok" else one_line(reason),
        **summarize(epochs, steady_durations),
        "total_time_s": total_time_s,
        "wall_time_s": wall_time_s,
        "memory_gb": memory_gb,
        "peak_host_rss_gb": peak_host_rss_gb(),
        "oom_retries": oom_retries,
    }


def one_line(text: str, limit: int = 500) -> str:
    """First non-empty line of `text`, shortened: reasons are one line by contract."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    first = lines[0] if lines else str(text).strip()
    return first if len(first) <= limit else first[: limit - 3] + "..."


class Terminated(Exception):
    """SIGTERM arrived: SLURM's time limit, scancel or preemption."""


def raise_on_sigterm() -> None:
    """Turn SIGTERM into an exception, so the trainer still writes a `failed` summary.

    SLURM sends SIGTERM first and SIGKILL only after KillWait (30 s by default); Python's default
    SIGTERM action would end the log without a summary and without a reason.
    """

    def handler(signum, frame):
        raise Terminated(f"terminated by {signal.Signals(signum).name} (time limit, scancel or preemption)")

    signal.signal(signal.SIGTERM, handler)




class RunLog:
    """A run's records in contract order, whatever attempt or failure produces them; both trainers
    use it.

    The header is built per attempt and stays pending until the run is committed to it: before
    training with --oom-policy fail, at the first epoch record with halve (an attempt that runs out
    of memory before that leaves only an `oom_retry` record), or before the summary. In a
    multi-process run every rank keeps this state, so all take the same retry decision; the
    `emit` given prints on the primary process only.
    """

    def __init__(self, emit=emit, started: float | None = None):
        self.emit = emit
        self.header = None
        self.header_emitted = False
        self.epochs = []
        self.steady_durations = []
        self.steady_waits = []
        # Summary keys measured after the epochs (the step breakdown's probes), given to close().
        self.measured = {}
        self.oom_retries = 0
        # time.perf_counter() at the trainer's start: the summary's wall_time_s counts from it.
        self.started = started

    def expect(self, header):
        if self.header_emitted:
            raise RuntimeError("the header record is already out; a run has one header")
        self.header = header

    def open(self):
        if self.header is not None and not self.header_emitted:
            self.emit(self.header)
            self.header_emitted = True

    def epoch(self, record, timed=(), waits=()):
        """Emit an epoch record; `timed` are the durations of its non-warm-up steps and `waits`
        their data waits, kept for the summary's step-time interval and step breakdown when the
        record is steady (epoch >= 2)."""
        self.open()
        self.epochs.append(record)
        if record["epoch"] >= FIRST_STEADY_EPOCH:
            self.steady_durations.extend(timed)
            self.steady_waits.extend(waits)
        self.emit(record)

    def steady_window(self) -> tuple[float | None, int]:
        """(seconds, steps) of the steady epochs or timed window together."""
        steady = [rec for rec in self.epochs if rec["epoch"] >= FIRST_STEADY_EPOCH and rec.get("steps")]
        if not steady:
            return None, 0
        return sum(rec["seconds"] for rec in steady), sum(rec["steps"] for rec in steady)

    def close(self, status, total_time_s, reason=None, memory_gb=None):
        self.open()
        wall = None if self.started is None else time.perf_counter() - self.started
        summary = summary_record(
            status, self.epochs, total_time_s, reason, memory_gb, oom_retries=self.oom_retries,
            steady_durations=self.steady_durations, wall_time_s=wall,
        )
        summary.update(self.measured)
        if "probe_s" in summary:
            summary["probe_overhead_pct"] = stepparts.probe_overhead_pct(summary["probe_s"], summary["wall_time_s"])
        self.emit(summary)
        return summary
