"""Writer of the `:::SCALESWEEP {json}` run records of docs/records.md, shared by both trainers.

Standard library only: it is imported inside TensorFlow and PyTorch containers alike, and by tests
that must not pay for a framework import.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import stepparts  # standard library only, beside this module

# The record contract is defined once, in scalesweep/records.py (standard library only): the
# repository is on every container's bind list, so the trainers import it from there too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scalesweep.records import FIRST_STEADY_EPOCH, PREFIX, SCHEMA, SUMMARY_STATUSES  # noqa: E402,F401

# Failure injection for tests and the SLURM failure drills: both trainers read this variable.
# "oom" raises the framework's out-of-memory error at the first training step (summary status
# oom, exit 0); "crash" raises a RuntimeError there (summary status failed, exit non-zero).
# "oom-once" runs out of memory in the first attempt only (the halve policy's retry then fits);
# "oom-above:N" whenever the per-GPU batch exceeds N (a device with a known capacity, for the
# maximum-batch finder). injected_failure() resolves a mode for one attempt.
FAIL_INJECT_ENV = "SCALESWEEP_FAIL_INJECT"
FAIL_INJECT_MODES = ("oom", "crash", "oom-once", "oom-above:N")
_OOM_ABOVE_RE = re.compile(r"^oom-above:(\d+)$")


_GIB = 1024**3


# The first steps hold tracing/compilation (XLA, torch.compile), cuDNN/oneDNN autotuning, the
# allocator's growth and the input pipeline's first fill on the setups measured; later steps are
# steady.
DEFAULT_WARMUP_STEPS = 5
DEFAULT_TIMED_STEPS = 50
# `--timed-steps auto`: time until the 95 % confidence half-width of the mean step time is at most
# --target-ci-pct of the mean, or --max-timed-steps steps were timed. Batch means: the steps are
# cut into CI_BATCHES consecutive batches and the interval is Student's t over the batch means,
# so correlated neighbours (a slow step followed by a slow step: a GC pause, a loader refill)
# do not shrink it falsely. 10 batches is the usual lower end (Schmeiser 1982); at least
# MIN_BATCH_STEPS steps per batch before a stop may be declared. The rule is looked at only at
# checkpoints 10 % apart, not after every step: every look is a chance to stop on a lucky low
# estimate of the spread (simulated: 94-97 % of the stopped windows hold the true mean within
# the target, as a 95 % interval should), and a multi-process run agrees on stopping only there.
AUTO_TIMED_STEPS = "auto"
DEFAULT_TARGET_CI_PCT = 1.0
DEFAULT_MAX_TIMED_STEPS = 500
CI_BATCHES = 10
MIN_BATCH_STEPS = 3
CHECKPOINT_GROWTH = 1.1
# Two-sided 95 % Student t quantiles by degrees of freedom; past 30 the normal 1.96 is within 2 %.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# A probe of the maximum-batch finder trains this many steps: the first allocates activations,
# gradients and the optimizer's state; the second runs with all of them resident, the steady peak.
PROBE_STEPS = 2
# On CPUs running out of host memory is a kernel OOM kill, not an exception: the search needs a
# ceiling there.
DEFAULT_MAX_BATCH_LIMIT = 65536

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
    """Header keys saying where and when the run happened (null where SLURM or a container is
    absent)."""
    env = os.environ if environ is None else environ
    return {
        "hostname": socket.gethostname(),
        "slurm_job_id": env.get("SLURM_JOB_ID") or None,
        "slurm_nodelist": env.get("SLURM_JOB_NODELIST") or None,
        "slurm_cluster_name": env.get("SLURM_CLUSTER_NAME") or None,
        "container_image": container_image(env),
        "start_time": utc_now_iso(start_timestamp),
        # the code that runs, as the workflow computed it (git may be absent in a container)
        "scalesweep_version": env.get("SCALESWEEP_VERSION") or None,
        **node_load(env),
    }


def node_load(environ=None, loadavg=os.getloadavg, cpu_count=os.cpu_count) -> dict:
    """What else ran on the node as the run started: the 1-minute load average and the CPUs it
    is spread over; under SLURM whether the job holds only part of the node's CPUs, i.e. others
    may share it (SLURM_CPUS_ON_NODE below the node's CPUs; null outside SLURM)."""
    env = os.environ if environ is None else environ
    try:
        load = round(loadavg()[0], 2)
    except OSError:  # not every system has a load average
        load = None
    cpus = cpu_count()
    held = env.get("SLURM_CPUS_ON_NODE")
    shared = None
    if held and held.isdigit() and cpus:
        shared = int(held) < cpus
    return {"load_avg_1m": load, "node_cpus": cpus, "node_shared": shared}


def container_image(environ=None) -> str | None:
    """The Apptainer/Singularity image this process runs in (both runtimes export its path)."""
    env = os.environ if environ is None else environ
    return env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER") or None


NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits")


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of NVIDIA_SMI_QUERY's output -> [{"name", "driver", "memory_mib"}], one per GPU."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 3 or not fields[0]:
            continue
        memory = int(fields[2]) if fields[2].isdigit() else None
        gpus.append({"name": fields[0], "driver": fields[1] or None, "memory_mib": memory})
    return gpus


def nvidia_gpus(run=subprocess.run) -> list[dict]:
    """The node's NVIDIA GPUs from nvidia-smi; [] without it (CPU nodes, containers without --nv)."""
    if shutil.which(NVIDIA_SMI_QUERY[0]) is None:
        return []
    try:
        done = run(list(NVIDIA_SMI_QUERY), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else []


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU's model name (Linux), or None."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip() or None
    except OSError:
        return None
    return None


def device_provenance(run=subprocess.run) -> dict:
    """Header keys on the node's hardware: GPU models and driver (nvidia-smi), CPU model; the GPU
    keys list every GPU of the node, `devices` the ones the run used."""
    gpus = nvidia_gpus(run)
    drivers = sorted({gpu["driver"] for gpu in gpus if gpu["driver"]})
    return {
        "gpu_models": [gpu["name"] for gpu in gpus],
        "gpu_driver": ", ".join(drivers) or None,
        "cpu_model": cpu_model(),
    }


def usable_cpu_count() -> int:
    """CPUs this process may run on (the affinity mask a scheduler set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity masks
        return os.cpu_count() or 1


def thread_fields(intra_op_threads: int | None, environ=None) -> dict:
    """Header keys on the CPU threads the process computes with: the framework's intra-op pool
    (`intra_op_threads`, as the framework reports it) and OMP_NUM_THREADS as the launcher set it
    (null when unset): a rank given more threads than its share of the cores slows every rank."""
    env = os.environ if environ is None else environ
    return {"omp_num_threads": intra_op_threads, "omp_num_threads_env": env.get("OMP_NUM_THREADS")}


def nccl_version_from_env(environ=None) -> str | None:
    """NGC images export the NCCL they ship as NCCL_VERSION; frameworks without an API for it
    (TensorFlow) record that."""
    env = os.environ if environ is None else environ
    return env.get("NCCL_VERSION") or None


def python_version() -> str:
    return ".".join(str(part) for part in sys.version_info[:3])


def peak_host_rss_gb() -> float:
    """Peak resident memory of this process in GiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    peak_bytes = peak if sys.platform == "darwin" else peak * 1024
    return round(peak_bytes / _GIB, 3)


def window_timing(begins, ends, first_step: int, steps: int, warmup_steps: int = 0, started=None,
                  ended=None) -> dict:
    """Seconds and step keys of `steps` consecutive steps from run-wide step `first_step`.

    `begins`/`ends` are the clock readings at every step's begin and (device-synchronized) end,
    0-based over the run. The window's seconds run from `started` (default: the begin of its
    first step) to `ended` (default: the end of its last step), so the host work between steps
    counts too.
    """
    last = first_step + steps - 1
    if steps < 1 or first_step < 0 or last >= min(len(begins), len(ends)):
        raise ValueError(f"steps {first_step}..{last} asked, {min(len(begins), len(ends))} steps recorded")
    start = begins[first_step] if started is None else started
    end = ends[last] if ended is None else ended
    durations = [ends[index] - begins[index] for index in range(first_step, last + 1)]
    return {"seconds": end - start, **step_statistics(durations, first_step, warmup_steps)}


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

def percentile(values, fraction: float) -> float:
    """The `fraction` quantile (0..1) with linear interpolation between order statistics.

    The same definition as numpy's default (`method="linear"`), without numpy.
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 <= fraction <= 1:
        raise ValueError(f"percentile fraction must be in 0..1, got {fraction}")
    position = fraction * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def warmup_steps_in(first_step: int, steps: int, warmup_steps: int) -> int:
    """How many of `steps` steps, the first of them run-wide step `first_step` (0-based), fall in
    the run's first `warmup_steps` steps."""
    return max(0, min(steps, warmup_steps - first_step))


def step_statistics(durations, first_step: int = 0, warmup_steps: int = 0) -> dict:
    """Step keys of an epoch record from its steps' durations in seconds.

    `steps` counts every step of the epoch; the median and 90th percentile leave out the steps
    that belong to the run's warm-up (the first `warmup_steps` steps of the run, this epoch's
    first step being run-wide step `first_step`, 0-based). Null when no step is left.
    """
    durations = list(durations)
    timed = timed_durations(durations, first_step, warmup_steps)
    interval = batch_means_interval(timed)
    return {
        "steps": len(durations),
        "step_time_median_s": statistics.median(timed) if timed else None,
        "step_time_p90_s": percentile(timed, 0.9) if timed else None,
        "step_time_mean_s": interval["step_time_mean_s"],
        "step_time_ci_pct": interval["step_time_ci_pct"],
    }


def t_quantile_975(dof: int) -> float:
    """Two-sided 95 % quantile of Student's t with `dof` degrees of freedom (>= 1)."""
    if dof < 1:
        raise ValueError(f"t quantile needs dof >= 1, got {dof}")
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


def batch_means_interval(durations, batches: int = CI_BATCHES) -> dict:
    """Mean step time and the 95 % half-width of its confidence interval by batch means.

    The first len // batches * batches steps are cut into `batches` consecutive batches of equal
    size; the half-width is t(batches - 1) x sd(batch means) / sqrt(batches). With fewer than two
    steps per batch there are too few steps: fewer batches are used, down to 2 batches of 1 step
    (an honest but wide interval). Returns step_time_mean_s, step_time_ci_half_width_s,
    step_time_ci_pct (half-width in % of the mean) and ci_batches; nulls with fewer than 2 steps.
    """
    durations = list(durations)
    n = len(durations)
    batches = min(batches, n // 2) if n >= 4 else min(n, 2)
    if n < 2 or batches < 2:
        return {"step_time_mean_s": statistics.fmean(durations) if durations else None,
                "step_time_ci_half_width_s": None, "step_time_ci_pct": None, "ci_batches": None}
    size = n // batches
    means = [statistics.fmean(durations[i * size:(i + 1) * size]) for i in range(batches)]
    half_width = t_quantile_975(batches - 1) * statistics.stdev(means) / math.sqrt(batches)
    mean = statistics.fmean(durations)
    return {
        "step_time_mean_s": mean,
        "step_time_ci_half_width_s": half_width,
        "step_time_ci_pct": 100.0 * half_width / mean if mean > 0 else None,
        "ci_batches": batches,
    }


def timed_steps_setting(text: str):
    """--timed-steps: a whole number of steps, or "auto" (the adaptive window)."""
    if str(text).strip().lower() == AUTO_TIMED_STEPS:
        return AUTO_TIMED_STEPS
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--timed-steps must be a whole number or 'auto', got {text!r}") from None
    if value < 1:
        raise ValueError(f"--timed-steps must be >= 1 or 'auto', got {value}")
    return value


def timed_steps_cap(max_timed_steps: int, epochs: int, steps_per_epoch) -> int:
    """The adaptive window's step cap: --max-timed-steps, but never more steps than the
    configured epochs would have run (epochs x steps per epoch): the steps protocol exists to
    cost less than those epochs, and a drifting machine ran 500-step windows on 3-epoch sweeps
    of a few steps each. Never below the steps the interval needs (10 batches of 3)."""
    if not steps_per_epoch or not epochs:
        return max_timed_steps
    return min(max_timed_steps, max(CI_BATCHES * MIN_BATCH_STEPS, epochs * steps_per_epoch))


class TimedWindow:
    """When the steps protocol's timed window ends: after a fixed number of steps, or (auto) once
    the mean step time is known to `target_ci_pct` (batch means, 95 %), at the latest after
    `max_steps`. `stop_reason` says which: "fixed", "target" or "cap"."""

    def __init__(self, timed_steps, target_ci_pct: float = DEFAULT_TARGET_CI_PCT,
                 max_steps: int = DEFAULT_MAX_TIMED_STEPS):
        self.auto = timed_steps == AUTO_TIMED_STEPS
        self.target_ci_pct = target_ci_pct if self.auto else None
        self.max_steps = max_steps if self.auto else int(timed_steps)
        self.min_steps = min(CI_BATCHES * MIN_BATCH_STEPS, self.max_steps)
        self.checkpoints = self._checkpoints()
        self.stop_reason = None

    def _checkpoints(self) -> frozenset:
        """Step counts at which the window may end: min_steps, then 10 % more each time, and
        max_steps (a fixed window: its count only)."""
        if not self.auto:
            return frozenset({self.max_steps})
        points, n = [], self.min_steps
        while n < self.max_steps:
            points.append(n)
            n = max(n + 1, math.ceil(n * CHECKPOINT_GROWTH))
        return frozenset([*points, self.max_steps])

    def decides_at(self, steps: int) -> bool:
        """Whether done() may answer True after `steps` timed steps (the same on every rank)."""
        return steps in self.checkpoints or steps >= self.max_steps

    def done(self, durations) -> bool:
        """Whether the window, having timed `durations` so far, is complete."""
        n = len(durations)
        if not self.decides_at(n):
            return False
        if not self.auto:
            self.stop_reason = "fixed"
        elif self._precise_enough(durations):
            self.stop_reason = "target"
        elif n >= self.max_steps:
            self.stop_reason = "cap"
        return self.stop_reason is not None

    def _precise_enough(self, durations) -> bool:
        pct = batch_means_interval(durations)["step_time_ci_pct"]
        return pct is not None and pct <= self.target_ci_pct

    def record_keys(self) -> dict:
        """Keys of the timed window's epoch record that say how it ended."""
        return {"timed_steps_rule": "auto" if self.auto else "fixed",
                "target_ci_pct": self.target_ci_pct, "stop_reason": self.stop_reason}


def subset_indices(total: int, max_images: int, seed: int) -> list[int]:
    """The training images --max-train-images keeps, the same rule in both trainers: all when
    `max_images` is 0 or at least `total`, else a seeded random pick of `max_images` indices out of `total`, sorted.

    Seeded and framework-free (Python's own Mersenne Twister): the same seed picks the same images
    in TensorFlow and PyTorch. The first M would drop whole classes where images are stored by
    class (ImageFolder) and is no less arbitrary for CIFAR.
    """
    if max_images < 0:
        raise ValueError(f"--max-train-images must be 0 (all) or more, got {max_images}")
    if max_images == 0 or max_images >= total:  # a cap: more than exist means all of them
        return list(range(total))
    import random

    return sorted(random.Random(seed).sample(range(total), max_images))


def timed_durations(durations, first_step: int, warmup_steps: int) -> list:
    """The durations of one epoch's steps that are not warm-up (see step_statistics)."""
    durations = list(durations)
    return durations[warmup_steps_in(first_step, len(durations), warmup_steps):]


def summarize(epochs: list[dict], steady_durations=()) -> dict:
    """Summary numbers from epoch records: totals and medians over epochs >= 2, and the interval
    of the mean step time over `steady_durations` (the timed steps of epochs >= 2).

    The steady keys are null when fewer than two epochs finished, since epoch 1 alone is start-up.
    """
    interval = batch_means_interval(steady_durations)
    steady = [rec for rec in epochs if rec["epoch"] >= FIRST_STEADY_EPOCH]
    steady_rates = [rec["throughput_img_s"] for rec in steady if rec["throughput_img_s"] is not None]
    return {
        "epochs": len(epochs),
        "train_time_s": sum(rec["seconds"] for rec in epochs),
        "steady_epoch_time_s": statistics.median(rec["seconds"] for rec in steady) if steady else None,
        "throughput_img_s": statistics.median(steady_rates) if steady_rates else None,
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


def fail_inject_mode(environ=None) -> str | None:
    """The requested injected failure, or None; an unknown value is an error, not ignored."""
    env = os.environ if environ is None else environ
    mode = env.get(FAIL_INJECT_ENV, "").strip().lower()
    if not mode:
        return None
    if mode not in FAIL_INJECT_MODES[:-1] and not _OOM_ABOVE_RE.match(mode):
        raise ValueError(
            f"{FAIL_INJECT_ENV}={env[FAIL_INJECT_ENV]!r}: expected one of {', '.join(FAIL_INJECT_MODES)}"
            " (N a whole number)"
        )
    return mode


# Delay injection, for tests that check where a known slowdown lands: a delay inside every timed
# step (the comparison of sweeps must find it), inside the gradient all-reduce (a DDP comm hook:
# the step breakdown must put it into exposed synchronisation) or in the data loader (into data
# wait). Seconds; unset or 0 = none.
STEP_DELAY_ENV = "SCALESWEEP_INJECT_STEP_DELAY_S"
SYNC_DELAY_ENV = "SCALESWEEP_INJECT_SYNC_DELAY_S"
DATA_DELAY_ENV = "SCALESWEEP_INJECT_DATA_DELAY_S"
# A delay before the backward of every timed step of one rank (RANK_DELAY_RANK_ENV, default 1):
# the others wait for it in the gradient all-reduce (the breakdown's sync wait). PyTorch only.
RANK_DELAY_ENV = "SCALESWEEP_INJECT_RANK_DELAY_S"
RANK_DELAY_RANK_ENV = "SCALESWEEP_INJECT_DELAY_RANK"


def injected_delay_s(name: str, environ=None) -> float:
    """The delay `name` asks for in seconds (0 when unset); a bad value is an error, not ignored."""
    env = os.environ if environ is None else environ
    text = env.get(name, "").strip()
    try:
        delay = float(text) if text else 0.0
    except ValueError:
        delay = math.nan
    if not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"{name}={text!r}: expected seconds >= 0")
    return delay


def busy_wait(seconds: float) -> None:
    """Keep the CPU busy `seconds`: a sleeping process hands its core to others and waits to get
    it back, which would add an unknown slowdown to the known one."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def inject_delay(name: str) -> None:
    """Spend the delay `name` asks for; a no-op unless it is set."""
    delay = injected_delay_s(name)
    if delay:
        busy_wait(delay)


def inject_step_delay() -> None:
    inject_delay(STEP_DELAY_ENV)


def inject_rank_delay(rank: int, environ=None) -> None:
    """Spend RANK_DELAY_ENV's delay when `rank` is the one RANK_DELAY_RANK_ENV names (default 1)."""
    env = os.environ if environ is None else environ
    delay = injected_delay_s(RANK_DELAY_ENV, env)
    if delay and str(rank) == env.get(RANK_DELAY_RANK_ENV, "1").strip():
        busy_wait(delay)


def injected_failure(mode: str | None, per_gpu_batch: int, attempt: int = 1) -> str | None:
    """What an attempt (1-based) at `per_gpu_batch` must raise: "oom", "crash" or None."""
    if mode in ("oom", "crash"):
        return mode
    if mode == "oom-once":
        return "oom" if attempt == 1 else None
    above = _OOM_ABOVE_RE.match(mode or "")
    if above:
        return "oom" if per_gpu_batch > int(above.group(1)) else None
    return None


def search_max_batch(fits, start: int, limit: int) -> dict:
    """The largest batch for which `fits(batch)` holds: double from `start`, then bisect.

    Doubles while batches fit (never past `limit`), then bisects between the last batch that fit
    and the first that did not; starting too high bisects down from `start`. Assumes a bigger
    batch never fits where a smaller one does not. Returns `per_gpu_batch` (None: not even 1
    fits), `tried` ([batch, "ok" | "oom"] in order) and `limit_reached` (no failure up to `limit`).
    """
    if not 1 <= start <= limit:
        raise ValueError(f"the search needs 1 <= start ({start}) <= limit ({limit})")
    tried = []

    def attempt(batch: int) -> bool:
        ok = bool(fits(batch))
        tried.append([batch, "ok" if ok else "oom"])
        return ok

    largest_fit, smallest_failure, batch = 0, None, start
    while smallest_failure is None:
        if not attempt(batch):
            smallest_failure = batch
        elif batch >= limit:
            largest_fit = batch
            break
        else:
            largest_fit, batch = batch, min(2 * batch, limit)
    while smallest_failure is not None and smallest_failure - largest_fit > 1:
        middle = (largest_fit + smallest_failure) // 2
        if attempt(middle):
            largest_fit = middle
        else:
            smallest_failure = middle
    return {"per_gpu_batch": largest_fit or None, "tried": tried, "limit_reached": smallest_failure is None}


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
