"""The measurement rules both trainers follow: the run's warm-up, the timed window (fixed, or
adaptive until the mean step time is known to a target), step statistics and the batch-means
interval, the maximum-batch search and the seeded training subset.

Standard library only: imported inside TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import math
import statistics

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

def epoch_overhead(seconds: float, durations) -> float | None:
    """What an epoch spent outside its steps: its wall `seconds` less the sum of its steps'
    `durations` (loader start, evaluation, barriers, logging). It does not shrink as GPUs are
    added, which is why the scaling prediction (scalesweep/analysis/predict.py) keeps it apart
    from the time per step. None without steps."""
    if not durations:
        return None
    return seconds - sum(durations)


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
