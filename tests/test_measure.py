"""The measurement rules both trainers follow (scalesweep/train/common/measure.py; standard library,
no framework): percentiles, warm-up, windows from clock readings, the maximum-batch search, and the
adaptive timed window (`--timed-steps auto`) on step-time series whose behaviour is known, with the
batch-means interval it stops on. RECORDED_STEPS were recorded from a Keras fit on this machine
(ResNet50V2, 128 px, batch 16, one CPU device, 2 cores); the first step holds graph tracing."""

import math
import statistics

import numpy as np
import pytest

from scalesweep.train.common import measure  # noqa: E402


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


def test_ten_batch_means_are_never_wider_than_226_percent():
    """With one batch holding all the time (the widest any spread can make it), 10 batch means
    have sd = mean x sqrt(10), so the half-width is t(9) = 2.262 times the mean: 226 %. A target
    above that is met at the first checkpoint however noisy the steps (tests/test_backends.py's
    adaptive window relies on it)."""
    worst = [1.0] * 3 + [1e-12] * 27
    assert measure.batch_means_interval(worst)["step_time_ci_pct"] == pytest.approx(226.2, rel=1e-4)
    rng = np.random.default_rng(7)
    for _ in range(200):
        steps = list(rng.exponential(1.0, 30) ** rng.uniform(1, 8))
        assert measure.batch_means_interval(steps)["step_time_ci_pct"] < 226.3


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


# Step durations in seconds, in run order.
RECORDED_STEPS = [7.134, 1.358, 0.766, 1.238, 1.154, 1.25, 0.88, 1.405, 1.527, 1.228]


def clock_readings(durations, gap=0.004, start=100.0):
    """Begin/end readings of back-to-back steps with `gap` s of host work between them."""
    begins, ends, now = [], [], start
    for duration in durations:
        begins.append(now)
        ends.append(now + duration)
        now += duration + gap
    return begins, ends


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 0.95, 1.0])
def test_percentile_matches_numpy_linear(fraction):
    assert measure.percentile(RECORDED_STEPS, fraction) == pytest.approx(np.percentile(RECORDED_STEPS, fraction * 100))


def test_percentile_rejects_nothing_and_bad_fractions():
    with pytest.raises(ValueError, match="no values"):
        measure.percentile([], 0.5)
    with pytest.raises(ValueError, match="0..1"):
        measure.percentile([1.0], 90)


def test_warmup_steps_are_left_out_of_the_statistics():
    stats = measure.step_statistics(RECORDED_STEPS, first_step=0, warmup_steps=2)
    steady = RECORDED_STEPS[2:]
    assert stats["steps"] == 10  # every step counts as a step of the epoch
    assert stats["step_time_median_s"] == pytest.approx(float(np.median(steady)))
    assert stats["step_time_p90_s"] == pytest.approx(float(np.percentile(steady, 90)))
    # Kept, the tracing step would push the p90 above every steady step.
    with_warmup = measure.step_statistics(RECORDED_STEPS)
    assert with_warmup["step_time_p90_s"] > max(steady) >= stats["step_time_p90_s"]


def test_warmup_counts_run_wide_steps_not_epoch_steps():
    """W = 5 over epochs of 4 steps: epoch 1 has no timed step, epoch 2 loses its first step."""
    first_epoch, second_epoch, third_epoch = RECORDED_STEPS[:4], RECORDED_STEPS[4:8], RECORDED_STEPS[8:]
    assert measure.step_statistics(first_epoch, 0, 5) == {
        "steps": 4, "step_time_median_s": None, "step_time_p90_s": None,
        "step_time_mean_s": None, "step_time_ci_pct": None}
    assert measure.step_statistics(second_epoch, 4, 5)["step_time_median_s"] == pytest.approx(np.median(second_epoch[1:]))
    assert measure.step_statistics(third_epoch, 8, 5)["step_time_median_s"] == pytest.approx(np.median(third_epoch))
    assert [measure.warmup_steps_in(first, 4, 5) for first in (0, 4, 8)] == [4, 1, 0]


def test_steps_protocol_windows_from_recorded_clock_readings():
    begins, ends = clock_readings(RECORDED_STEPS)
    warmup, timed_steps = 3, 7
    timed_started = ends[warmup - 1] + 0.001  # after the metric reset between the windows
    first = measure.window_timing(begins, ends, 0, warmup, warmup)
    second = measure.window_timing(begins, ends, warmup, timed_steps, warmup, started=timed_started)
    # Warm-up: begin of step 1 to the end of step W, gaps included; no step statistics.
    assert first["seconds"] == pytest.approx(sum(RECORDED_STEPS[:3]) + 2 * 0.004)
    assert (first["steps"], first["step_time_median_s"], first["step_time_p90_s"]) == (3, None, None)
    # Timed: from the reset to the end of step W + T: the T steps and the gaps between them.
    assert second["seconds"] == pytest.approx(sum(RECORDED_STEPS[3:]) + 7 * 0.004 - 0.001)
    assert second["steps"] == 7
    assert second["step_time_median_s"] == pytest.approx(np.median(RECORDED_STEPS[3:]))
    # The two windows cover the run without overlap.
    assert first["seconds"] + second["seconds"] < ends[-1] - begins[0]


def test_window_timing_refuses_steps_not_recorded():
    begins, ends = clock_readings([1.0, 1.0])
    with pytest.raises(ValueError, match="steps 1..2 asked, 2 steps recorded"):
        measure.window_timing(begins, ends, 1, 2)


def capacity(limit):
    """A device on which batches up to `limit` fit, recording what was asked."""
    asked = []

    def fits(batch):
        asked.append(batch)
        return batch <= limit

    return fits, asked


def test_search_doubles_then_bisects_to_the_exact_limit():
    fits, asked = capacity(100)
    found = measure.search_max_batch(fits, start=16, limit=65536)
    assert found["per_gpu_batch"] == 100 and not found["limit_reached"]
    assert asked == [16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
    assert found["tried"] == [[batch, "ok" if batch <= 100 else "oom"] for batch in asked]


def test_search_from_a_start_that_does_not_fit_bisects_down():
    fits, asked = capacity(5)
    found = measure.search_max_batch(fits, start=16, limit=1024)
    assert found["per_gpu_batch"] == 5 and asked == [16, 8, 4, 6, 5]


def test_search_where_nothing_fits():
    fits, asked = capacity(0)
    found = measure.search_max_batch(fits, start=4, limit=1024)
    assert found["per_gpu_batch"] is None and asked == [4, 2, 1] and not found["limit_reached"]


def test_search_stops_at_the_limit_when_nothing_fails():
    fits, asked = capacity(10**9)
    found = measure.search_max_batch(fits, start=16, limit=100)
    assert found == {"per_gpu_batch": 100, "tried": [[16, "ok"], [32, "ok"], [64, "ok"], [100, "ok"]],
                     "limit_reached": True}


@pytest.mark.parametrize("limit", [1, 2, 3, 255, 256, 257, 4095, 5000])
def test_search_finds_every_limit_in_logarithmic_tries(limit):
    fits, asked = capacity(limit)
    assert measure.search_max_batch(fits, start=1, limit=8192)["per_gpu_batch"] == limit
    assert len(asked) <= 2 * limit.bit_length() + 2 and len(set(asked)) == len(asked)


def test_search_refuses_a_start_beyond_the_limit():
    with pytest.raises(ValueError, match="start \\(512\\) <= limit \\(256\\)"):
        measure.search_max_batch(lambda batch: True, start=512, limit=256)
