"""The adaptive timed window (`--timed-steps auto`) on step-time series whose behaviour is known,
and the batch-means interval it stops on (scripts/runlog.py; standard library, no framework)."""

import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
import measure  # noqa: E402
import runlog  # noqa: E402


def run_window(series, target_pct=1.0, cap=500):
    """Feed `series` step by step as a trainer does; (steps timed, stop reason, window)."""
    window = measure.TimedWindow(measure.AUTO_TIMED_STEPS, target_pct, cap)
    for n in range(1, len(series) + 1):
        if window.done(series[:n]):
            return n, window.stop_reason, window
    raise AssertionError("the series ended before the window did")


def test_batch_means_interval_by_hand():
    """20 steps, 10 batches of 2: batch means 1, 2, ..., 10 (each batch (m - 0.1, m + 0.1)).
    sd of 1..10 = 3.02765; t(0.975, 9) = 2.262 -> half-width 2.262 x 3.02765 / sqrt(10) = 2.1657;
    mean 5.5 -> 39.38 %."""
    steps = [value for m in range(1, 11) for value in (m - 0.1, m + 0.1)]
    interval = measure.batch_means_interval(steps)
    assert interval["ci_batches"] == 10
    assert interval["step_time_mean_s"] == pytest.approx(5.5)
    assert interval["step_time_ci_half_width_s"] == pytest.approx(2.262 * statistics.stdev(range(1, 11)) / math.sqrt(10))
    assert interval["step_time_ci_pct"] == pytest.approx(100 * 2.1657 / 5.5, rel=1e-4)


def test_too_few_steps_give_no_interval():
    assert measure.batch_means_interval([0.1])["step_time_ci_pct"] is None
    assert measure.batch_means_interval([])["step_time_mean_s"] is None


def test_batch_means_do_not_shrink_on_correlated_steps():
    """AR(1) step times (phi 0.95: slow steps come in runs, like a loader refill or a throttled
    clock): the naive iid half-width is far too small; the batch-means one covers the true mean
    much more often."""
    rng = np.random.default_rng(0)
    naive_hits = batch_hits = 0
    for _ in range(200):
        noise = np.zeros(400)
        for i in range(1, 400):
            noise[i] = 0.95 * noise[i - 1] + rng.normal(0.0, 0.01)
        steps = (0.1 + noise).tolist()
        mean = np.mean(steps)
        naive = 1.96 * np.std(steps, ddof=1) / math.sqrt(len(steps))
        batch = measure.batch_means_interval(steps)["step_time_ci_half_width_s"]
        naive_hits += abs(mean - 0.1) <= naive
        batch_hits += abs(mean - 0.1) <= batch
    assert naive_hits / 200 < 0.6  # the iid interval misses the true mean most of the time
    assert batch_hits / 200 > 0.85


def test_stable_series_stops_early_at_the_target():
    """1 % noise: the 95 % half-width is ~ 2.26 x 1 % / sqrt(n) -> under 1 % after a few steps;
    the window still times its minimum (10 batches of 3)."""
    rng = np.random.default_rng(1)
    series = (0.1 * (1 + 0.01 * rng.standard_normal(500))).tolist()
    steps, reason, window = run_window(series)
    assert reason == "target" and steps == measure.CI_BATCHES * measure.MIN_BATCH_STEPS
    assert window.record_keys() == {"timed_steps_rule": "auto", "target_ci_pct": 1.0,
                                    "stop_reason": "target"}


def test_noisy_series_runs_to_the_cap_and_says_so():
    """50 % noise needs ~ (2.26 x 50 / 1)^2 = 12,800 steps for 1 %: the cap (500) comes first."""
    rng = np.random.default_rng(2)
    series = (0.1 * rng.lognormal(0.0, 0.5, 600)).tolist()
    steps, reason, _ = run_window(series, cap=500)
    assert (steps, reason) == (500, "cap")
    assert measure.batch_means_interval(series[:500])["step_time_ci_pct"] > 1.0


def test_drifting_series_runs_to_the_cap():
    """A clock that slows down (0.1 s -> 0.2 s over the run, thermal throttling): batch means
    keep differing, so no 1 % interval is ever declared however many steps are timed."""
    series = np.linspace(0.1, 0.2, 600).tolist()
    steps, reason, _ = run_window(series, cap=500)
    assert (steps, reason) == (500, "cap")


def test_the_rule_is_looked_at_only_at_checkpoints_ten_percent_apart():
    window = measure.TimedWindow(measure.AUTO_TIMED_STEPS, 1.0, 60)
    assert sorted(window.checkpoints) == [30, 33, 37, 41, 46, 51, 57, 60]
    assert not window.done([0.1] * 31)  # perfectly stable, but 31 is no checkpoint
    assert window.done([0.1] * 33) and window.stop_reason == "target"


def test_fixed_window_ends_at_its_count():
    window = measure.TimedWindow(7)
    assert not window.done([0.1] * 6) and window.done([0.1] * 7)
    assert window.record_keys() == {"timed_steps_rule": "fixed", "target_ci_pct": None,
                                    "stop_reason": "fixed"}


@pytest.mark.parametrize("text, value", [("auto", "auto"), ("AUTO", "auto"), ("50", 50)])
def test_timed_steps_setting(text, value):
    assert measure.timed_steps_setting(text) == value


@pytest.mark.parametrize("text", ["0", "-3", "many"])
def test_timed_steps_setting_refuses_nonsense(text):
    with pytest.raises(ValueError, match="--timed-steps"):
        measure.timed_steps_setting(text)


def test_one_subset_rule_for_both_trainers():
    """Seeded, sorted, the same for the same seed; 0 or more than exist = all (a cap)."""
    picked = measure.subset_indices(1000, 100, seed=3)
    assert picked == measure.subset_indices(1000, 100, seed=3)
    assert picked != measure.subset_indices(1000, 100, seed=4)
    assert picked == sorted(picked) and len(set(picked)) == 100 and max(picked) < 1000
    assert max(picked) > 500  # drawn from the whole set, not its head
    assert measure.subset_indices(10, 0, seed=0) == list(range(10)) == measure.subset_indices(10, 50, seed=0)
    with pytest.raises(ValueError, match="--max-train-images"):
        measure.subset_indices(10, -1, seed=0)


def test_the_adaptive_cap_is_bounded_by_the_configured_epochs():
    # 3 epochs of 16 steps: 48 steps, not 500; never below the 30 steps the interval needs;
    # without a known epoch (unknown steps) the cap stays.
    assert measure.timed_steps_cap(500, 3, 16) == 48
    assert measure.timed_steps_cap(500, 3, 2) == 30
    assert measure.timed_steps_cap(40, 5, 16) == 40
    assert measure.timed_steps_cap(500, 3, None) == 500
