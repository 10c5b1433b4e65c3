"""Where a training step's time goes: the summary keys of the step breakdown (docs/records.md).

Standard library only (it runs inside both frameworks' containers). The trainers measure, per
timed step, how long the loop waited for its batch (`data_waits`, the host-to-device copy
included) and the whole step (`steps`); a probe window times the same steps without gradient
synchronisation (`compute`); an all-reduce probe times the synchronisation alone. Then:

    wall per step = window seconds / steps        (what the throughput sees)
    data          = median data wait
    compute       = median probe step
    exposed sync  = max(0, median step - data - compute)   (0 with one process: nothing to sync)
    other         = wall per step - data - compute - exposed sync

so the four parts add up to the wall time per step by construction. `other` holds the host work
between steps (and, negative, the noise of taking medians); nothing is dropped.
"""

from __future__ import annotations

import math
import statistics

# DDP's default bucket (bucket_cap_mb=25): the all-reduce probe reduces one bucket-sized buffer
# as many times as the gradients fill buckets, so it needs 25 MB, not a second copy of them.
BUCKET_BYTES = 25 * 1024 * 1024
ALLREDUCE_WARMUP = 2
ALLREDUCE_REPEATS = 5
COMPUTE_PROBE_STEPS = 5
PART_KEYS = ("breakdown_step_s", "data_wait_s", "compute_s", "sync_exposed_s", "other_s")


def _median_or_none(values):
    values = [value for value in values if value is not None and math.isfinite(value)]
    return statistics.median(values) if values else None


def step_parts(window_seconds: float, window_steps: int, step_durations, data_waits, compute_durations,
               ranks: int = 2) -> dict:
    """The breakdown keys of the summary record (nulls where a part was not measured). A run of
    one process (`ranks` 1) synchronises nothing: what its step holds beyond data and compute
    (contention, noise) is `other`, not exposed synchronisation."""
    keys = (*PART_KEYS, "breakdown_steps")
    step, data, compute = (_median_or_none(step_durations), _median_or_none(data_waits),
                           _median_or_none(compute_durations))
    if not window_steps or window_seconds is None or None in (step, data, compute):
        return dict.fromkeys(keys)
    wall = window_seconds / window_steps
    exposed = max(0.0, step - data - compute) if ranks > 1 else 0.0
    return dict(zip(keys, (wall, data, compute, exposed, wall - data - compute - exposed,
                           len(list(step_durations)))))


def allreduce_keys(gradient_bytes: int, seconds_per_bucket, ranks: int, parts: dict) -> dict:
    """The all-reduce probe's keys: pure synchronisation time of a step's gradients, nccl-tests'
    algorithm and bus bandwidth, overlap = 1 - exposed / pure and communication / compute."""
    keys = ("allreduce_s", "allreduce_bytes", "algbw_gb_s", "busbw_gb_s", "overlap_pct", "comm_compute_ratio")
    per_bucket = _median_or_none(seconds_per_bucket or [])
    if ranks < 2 or per_bucket is None or per_bucket <= 0 or not gradient_bytes:
        return dict.fromkeys(keys)
    pure = per_bucket * math.ceil(gradient_bytes / BUCKET_BYTES)
    algbw = gradient_bytes / pure / 1e9
    exposed, compute = parts.get("sync_exposed_s"), parts.get("compute_s")
    overlap = None if exposed is None else 100.0 * (1.0 - exposed / pure)
    ratio = None if not compute else pure / compute
    return dict(zip(keys, (pure, gradient_bytes, algbw, algbw * 2.0 * (ranks - 1) / ranks, overlap, ratio)))


def bucket_elements(gradient_bytes: int, element_size: int) -> int:
    """Elements of the all-reduce probe's buffer: one DDP bucket, or all gradients when smaller."""
    return max(1, min(gradient_bytes, BUCKET_BYTES) // element_size)
