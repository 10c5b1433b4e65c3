"""One steady-state estimate per run, from which its time and its throughput both follow.

The course book measures throughput as the images of an epoch over the epoch's time. A run's
steady epoch time is the median of its steady epochs' times; its throughput is the images per
epoch over that time, not the median of the epochs' own rates: the median of ratios is not the
ratio of medians, and with two noisy steady epochs the time speedup and the throughput speedup of
the same runs would then disagree (docs/metrics.md, "One steady-state estimate"). Under the steps
protocol the steady window is the timed window: its images over its time.

Standard library only (Python 3.8): the trainers' summary record (scalesweep/train/common/runlog.py)
gives the same estimate as the tidy table.
"""

import math
import statistics

from scalesweep.contract import records
from scalesweep.contract.records import FIRST_STEADY_EPOCH


def steady_windows(epochs: list) -> list:
    return [epoch for epoch in epochs if epoch["epoch"] >= FIRST_STEADY_EPOCH]


def epoch_rate(epoch: dict):
    """An epoch's (or window's) own rate: the trainer's where it gives one, else images / seconds."""
    rate = epoch.get("throughput_img_s")
    if records.is_number(rate):
        return rate
    images, seconds = epoch.get("images"), epoch.get("seconds")
    return images / seconds if records.is_number(images) and records.is_number(seconds) and seconds > 0 else None


def steady_metrics(epochs: list, world_size, protocol: str = "epochs") -> dict:
    """steady_epoch_time_s, throughput_img_s and throughput_per_gpu_img_s of a run's epochs (or
    timed windows). Without image counts the throughput is the median of
    the epochs' own rates (a log that gives rates only)."""
    steady = steady_windows(epochs)
    seconds = [e["seconds"] for e in steady if records.is_number(e.get("seconds")) and e["seconds"] > 0]
    images = [e["images"] for e in steady if records.is_number(e.get("images"))]
    rates = [rate for rate in map(epoch_rate, steady) if records.is_number(rate)]
    time_s = statistics.median(seconds) if seconds else math.nan
    timed = len(seconds) == len(images) == len(steady) and steady
    if timed and protocol == "steps":
        throughput = sum(images) / sum(seconds)
    elif timed:
        throughput = statistics.median(images) / time_s
    else:
        throughput = statistics.median(rates) if rates else math.nan
    return {
        "steady_epoch_time_s": time_s,
        "throughput_img_s": throughput,
        "throughput_per_gpu_img_s": throughput / max(world_size or 1, 1),
    }
