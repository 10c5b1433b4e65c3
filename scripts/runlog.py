"""Writer of the `:::SCALESWEEP {json}` run records of docs/records.md, shared by both trainers.

Standard library only: it is imported inside TensorFlow and PyTorch containers alike, and by tests
that must not pay for a framework import.
"""

import datetime
import json
import math
import os
import resource
import signal
import socket
import statistics
import sys

SCHEMA = 1
PREFIX = ":::SCALESWEEP "

# Failure injection for tests and the SLURM failure drills: both trainers read this variable.
# "oom" raises the framework's out-of-memory error at the first training step (summary status
# oom, exit 0); "crash" raises a RuntimeError there (summary status failed, exit non-zero).
FAIL_INJECT_ENV = "SCALESWEEP_FAIL_INJECT"
FAIL_INJECT_MODES = ("oom", "crash")

# Epoch 1 carries graph build / compilation / cache fill; steady state starts at epoch 2.
FIRST_STEADY_EPOCH = 2

_GIB = 1024**3


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
    full = {"record": record["record"], "schema": SCHEMA}
    full.update({key: value for key, value in record.items() if key != "record"})
    # Round trip through builtins first so numpy scalars get the same NaN handling as floats.
    builtin = json.loads(json.dumps(full, default=_to_builtin))
    return PREFIX + json.dumps(_json_safe(builtin), allow_nan=False)


def emit(record: dict, stream=None) -> None:
    """Print one record and flush, so a killed run keeps every record written so far."""
    out = sys.stdout if stream is None else stream
    print(format_record(record), file=out, flush=True)


def utc_now_iso(timestamp: float | None = None) -> str:
    """ISO 8601 UTC time of `timestamp` (seconds since the epoch; now when None)."""
    moment = (
        datetime.datetime.now(datetime.timezone.utc)
        if timestamp is None
        else datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc)
    )
    return moment.isoformat(timespec="seconds")


def provenance(start_timestamp: float | None = None, environ=None) -> dict:
    """Header keys saying where and when the run happened (null where SLURM is absent)."""
    env = os.environ if environ is None else environ
    return {
        "hostname": socket.gethostname(),
        "slurm_job_id": env.get("SLURM_JOB_ID") or None,
        "slurm_nodelist": env.get("SLURM_JOB_NODELIST") or None,
        "start_time": utc_now_iso(start_timestamp),
    }


def python_version() -> str:
    return ".".join(str(part) for part in sys.version_info[:3])


def peak_host_rss_gb() -> float:
    """Peak resident memory of this process in GiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    peak_bytes = peak if sys.platform == "darwin" else peak * 1024
    return round(peak_bytes / _GIB, 3)


def epoch_record(epoch: int, images: int, seconds: float, loss=None, accuracy=None) -> dict:
    """The `epoch` record of one finished epoch (1-based `epoch`)."""
    return {
        "record": "epoch",
        "epoch": epoch,
        "images": images,
        "seconds": seconds,
        "throughput_img_s": images / seconds if seconds > 0 else None,
        "loss": None if loss is None else float(loss),
        "accuracy": None if accuracy is None else float(accuracy),
    }


def summarize(epochs: list[dict]) -> dict:
    """Summary numbers from epoch records: totals and medians over epochs >= 2.

    The steady keys are null when fewer than two epochs finished, since epoch 1 alone is start-up.
    """
    steady = [rec for rec in epochs if rec["epoch"] >= FIRST_STEADY_EPOCH]
    steady_rates = [rec["throughput_img_s"] for rec in steady if rec["throughput_img_s"] is not None]
    return {
        "epochs": len(epochs),
        "train_time_s": sum(rec["seconds"] for rec in epochs),
        "steady_epoch_time_s": statistics.median(rec["seconds"] for rec in steady) if steady else None,
        "throughput_img_s": statistics.median(steady_rates) if steady_rates else None,
    }


def summary_record(
    status: str,
    epochs: list[dict],
    total_time_s: float,
    reason: str | None = None,
    memory_gb: float | None = None,
) -> dict:
    """The closing `summary` record; `reason` must be given unless status is ok."""
    if status not in ("ok", "oom", "failed"):
        raise ValueError(f"summary status must be ok, oom or failed, not {status!r}")
    if status != "ok" and not reason:
        raise ValueError(f"summary status {status!r} needs a reason")
    return {
        "record": "summary",
        "status": status,
        "reason": None if status == "ok" else one_line(reason),
        **summarize(epochs),
        "total_time_s": total_time_s,
        "memory_gb": memory_gb,
        "peak_host_rss_gb": peak_host_rss_gb(),
    }


def one_line(text: str, limit: int = 500) -> str:
    """First non-empty line of `text`, shortened: reasons are one line by contract."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    first = lines[0] if lines else str(text).strip()
    return first if len(first) <= limit else first[: limit - 3] + "..."


def fail_inject_mode(environ=None) -> str | None:
    """The requested injected failure, or None; an unknown value is an error, not ignored."""
    env = os.environ if environ is None else environ
    mode = env.get(FAIL_INJECT_ENV, "").strip().lower()
    if not mode:
        return None
    if mode not in FAIL_INJECT_MODES:
        raise ValueError(
            f"{FAIL_INJECT_ENV}={env[FAIL_INJECT_ENV]!r}: expected one of {', '.join(FAIL_INJECT_MODES)}"
        )
    return mode


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
