"""Where a training step's time goes: the summary keys of the step breakdown (docs/records.md).

Standard library only (it runs inside both frameworks' containers). The trainers measure, per
timed step, how long the loop waited for its batch (`data_waits`, the host-to-device copy
included) and the whole step (`steps`); every `probe_every()`-th step of a steady window is
followed by a probe step without gradient synchronisation on the same batch (`compute`: beside
the timed steps, under the same load, kept out of the window's seconds); an all-reduce probe
times the synchronisation alone. Per timed step every rank also measures how long it spends from
joining the gradient synchronisation to the step's end (`joins`, gathered once per window): all
ranks leave the all-reduce together, so a rank's join time beyond the shortest one of that step
(the last rank to arrive) is time it waited for the slowest rank, not bytes on the wire. Then, with `after` a step's seconds after its data wait (step - data wait, per step):

    wall per step = window seconds / steps        (what the throughput sees)
    data          = mean data wait
    compute share = median over the probes of probe step / after of the step it followed
                    (1 with one process: it synchronises nothing, so its steps after their data
                    wait are all compute, and it runs no probe)
    compute       = compute share x mean after
    exposed sync  = max(0, mean after - compute)  (0 with one process: nothing to sync)
    contention    = mean after / median after     (> 1 where preemption stretched some steps)
    sync wait     = min(exposed sync, median own wait x contention)  (waiting for the slowest rank)
    sync comm     = exposed sync - sync wait      (communication overlap did not hide)
    other         = wall per step - data - compute - exposed sync

so data + compute + sync wait + sync comm + other add up to the wall time per step by
construction. On a loaded machine the speed changes from moment to moment (a core taken for a
while): each probe step is compared with the step right before it, on the same batch under the
same load, and the few probes give the compute's share of the step after its data wait, not an
absolute time a slow or fast moment would skew; the share of the mean step is compute (time
preemption added is spread over the parts in proportion: it lands in a part as often as the
part is long). The data wait is a mean: its stalls are data's. `other` holds
the host work between steps (and, either sign, the noise of the probe's median); nothing is
dropped. overlap = 1 - sync comm / pure all-reduce, clipped to [0, 1]: a communication slower
than the probe's (a slowed or contended all-reduce) hid nothing.
"""

from __future__ import annotations

import math
import statistics

from scalesweep.contract.records import BREAKDOWN_PARTS

# DDP's default bucket (bucket_cap_mb=25): the all-reduce probe reduces one bucket-sized buffer
# as many times as the gradients fill buckets, so it needs 25 MB, not a second copy of them.
BUCKET_BYTES = 25 * 1024 * 1024
ALLREDUCE_WARMUP = 2
ALLREDUCE_REPEATS = 5
# The least probe steps between a run's steady steps: the compute share is their median, and on
# a busy 2-core machine 5 left it 20-25 % off in 1 run of 5 (a median's error falls as 1/sqrt(n));
# 10 cost 5.2 % of a 5-epoch run of 128 steady steps (benchmarks/bench_breakdown.py), 8 about 4 %.
LEAST_INTERLEAVED_PROBES = 8
# A probe step after every PROBE_EVERY-th timed step: at most 1/20 = 5 % more training work
# (a probe step has no data wait and no synchronisation, so it is shorter than a step).
PROBE_EVERY = 20
PART_KEYS = ("breakdown_step_s", *BREAKDOWN_PARTS)


def _median_or_none(values):
    values = [value for value in values if value is not None and math.isfinite(value)]
    return statistics.median(values) if values else None


def probe_every(window_steps, ranks: int) -> int:
    """A probe step follows every this many steady steps of a run of `ranks` processes (or
    replicas) with `window_steps` of them, all its steady windows (epochs) together, counted
    across them (None: not known in advance, an adaptive window): PROBE_EVERY, or often enough
    that a short run still gets LEAST_INTERLEAVED_PROBES probes (its probes then cost more than
    5 % of its steps). 0, no probe, for one process: there is no synchronisation to take out of
    its steps, which measure its compute themselves."""
    if ranks < 2:
        return 0
    if not window_steps:
        return PROBE_EVERY
    return max(2, min(PROBE_EVERY, window_steps // LEAST_INTERLEAVED_PROBES))


def is_probe_step(index: int, every: int) -> bool:
    """Whether the run's steady step `index` (0-based) is followed by a probe step: the same
    indices on every rank (a DDP forward may broadcast buffers, a collective)."""
    return index % every == every - 1


def own_waits(joins_by_rank, rank: int = 0) -> list[float]:
    """Per step, how long `rank` waited for the slowest rank: its seconds from joining the
    gradient synchronisation to the step's end minus the shortest such time of any rank that step
    (every rank leaves the all-reduce together; the last to join waited for none). `joins_by_rank`:
    one equally long list per rank. Differences of one rank's own clock readings only: no clock
    needs to agree across nodes."""
    return [steps[rank] - min(steps) for steps in zip(*joins_by_rank)]


def step_parts(window_seconds: float, window_steps: int, step_durations, data_waits, compute_durations,
               ranks: int = 2, sync_waits=None, paired_after=None) -> dict:
    """The breakdown keys of the summary record (nulls where a part was not measured). A run of
    one process (`ranks` 1) synchronises nothing and runs no probe (probe_every): its steps after
    their data wait are compute, and what its window holds beyond its steps (host work between
    them) is `other`. `sync_waits`: the reporting rank's own_waits() (None or empty: no skew
    measured, all exposed synchronisation is communication, as with TensorFlow's replicas in one
    process). `paired_after`: per probe step, the seconds after the data wait of the step it
    followed (None: each probe is compared with the steps' median instead)."""
    keys = (*PART_KEYS, "sync_exposed_s", "breakdown_steps")
    steps = list(step_durations)
    waits = list(data_waits)
    median_probe = _median_or_none(compute_durations)
    measured = ranks < 2 or median_probe is not None
    if not window_steps or window_seconds is None or not measured or not steps or len(waits) != len(steps):
        return dict.fromkeys(keys)
    after = [step - wait for step, wait in zip(steps, waits)]
    mean_after, typical_after = statistics.fmean(after), statistics.median(after)
    contention = mean_after / typical_after if typical_after > 0 else 1.0
    share = 1.0 if ranks < 2 else _compute_share(list(compute_durations), median_probe, paired_after, typical_after)
    wall, data, compute = window_seconds / window_steps, statistics.fmean(waits), share * mean_after
    exposed = max(0.0, mean_after - compute) if ranks > 1 else 0.0
    wait = min(exposed, contention * max(0.0, _median_or_none(sync_waits or []) or 0.0))
    return dict(zip(keys, (wall, data, compute, wait, exposed - wait, wall - data - compute - exposed,
                           exposed, len(steps))))


def _compute_share(probes, median_probe, paired_after, typical_after) -> float:
    """Median of probe step / after-data-wait seconds of the step each followed (each probe
    against the steps' median, without pairs)."""
    references = list(paired_after) if paired_after else [typical_after] * len(probes)
    shares = [probe / reference for probe, reference in zip(probes, references) if reference > 0]
    if shares:
        return statistics.median(shares)
    return median_probe / typical_after if typical_after > 0 else 1.0


def allreduce_keys(gradient_bytes: int, seconds_per_bucket, ranks: int, parts: dict) -> dict:
    """The all-reduce probe's keys: pure synchronisation time of a step's gradients, nccl-tests'
    algorithm and bus bandwidth, overlap = 1 - exposed communication / pure (in [0, 100] %: the
    wait for the slowest rank is not communication, and communication slower than the probe's hid
    nothing) and communication / compute."""
    keys = ("allreduce_s", "allreduce_bytes", "algbw_gb_s", "busbw_gb_s", "overlap_pct", "comm_compute_ratio")
    per_bucket = _median_or_none(seconds_per_bucket or [])
    if ranks < 2 or per_bucket is None or per_bucket <= 0 or not gradient_bytes:
        return dict.fromkeys(keys)
    pure = per_bucket * math.ceil(gradient_bytes / BUCKET_BYTES)
    algbw = gradient_bytes / pure / 1e9
    comm, compute = parts.get("sync_comm_s"), parts.get("compute_s")
    overlap = None if comm is None else 100.0 * max(0.0, 1.0 - comm / pure)
    ratio = None if not compute else pure / compute
    return dict(zip(keys, (pure, gradient_bytes, algbw, bus_bandwidth(algbw, ranks), overlap, ratio)))


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce over `ranks`: algbw x 2(n-1)/n, the rate each
    link carries in a ring (doc/PERFORMANCE.md), comparable across rank counts."""
    return algbw * 2.0 * (ranks - 1) / ranks


def bucket_elements(gradient_bytes: int, element_size: int) -> int:
    """Elements of the all-reduce probe's buffer: one DDP bucket, or all gradients when smaller."""
    return max(1, min(gradient_bytes, BUCKET_BYTES) // element_size)


def probe_overhead_pct(probe_s, wall_time_s):
    """The probes' share of the run's wall time in %: the interleaved probe steps and the probes
    after training together; None where either is unknown."""
    if probe_s is None or not wall_time_s:
        return None
    return 100.0 * probe_s / wall_time_s
