"""The breakdown keys of the summary record (scripts/stepparts.py), by hand."""

import sys
from pathlib import Path

import pytest

import stepparts  # noqa: E402


def test_parts_add_up_to_the_wall_time_per_step():
    """Window 12 s over 100 steps = 0.120 s per step; median step 0.115 s, data 0.010 s,
    compute 0.080 s -> exposed 0.025 s, other 0.120 - 0.115 = 0.005 s (host work between steps)."""
    parts = stepparts.step_parts(12.0, 100, [0.115] * 100, [0.010] * 100, [0.080] * 10)
    assert parts == pytest.approx({"breakdown_step_s": 0.120, "data_wait_s": 0.010, "compute_s": 0.080,
                                   "sync_exposed_s": 0.025, "other_s": 0.005, "breakdown_steps": 100})


def test_exposed_sync_is_never_negative_and_other_takes_the_noise():
    """A probe step slower than the median step (noise): exposed 0, other negative, sum kept."""
    parts = stepparts.step_parts(10.0, 100, [0.095] * 100, [0.010] * 100, [0.090] * 10)
    assert parts["sync_exposed_s"] == 0.0
    assert parts["other_s"] == pytest.approx(0.100 - 0.010 - 0.090)
    assert sum(parts[k] for k in ("data_wait_s", "compute_s", "sync_exposed_s", "other_s")) == pytest.approx(0.1)


def test_one_process_synchronises_nothing():
    """Same numbers at one rank: the 0.025 s beyond data and compute is other, not sync."""
    parts = stepparts.step_parts(12.0, 100, [0.115] * 100, [0.010] * 100, [0.080] * 10, ranks=1)
    assert parts["sync_exposed_s"] == 0.0 and parts["other_s"] == pytest.approx(0.030)


def test_missing_measurement_gives_nulls():
    assert set(stepparts.step_parts(10.0, 100, [0.1], [], [0.05]).values()) == {None}


def test_allreduce_keys_by_hand():
    """100 MB of gradients fill 4 buckets of 25 MiB (26,214,400 B each); 0.005 s per
    bucket -> pure 0.020 s; algbw 100e6 / 0.020 = 5 GB/s; 4 ranks: busbw 5 x 2 x 3/4 = 7.5 GB/s;
    exposed 0.005 s -> overlap 75 %; compute 0.080 s -> ratio 0.25."""
    keys = stepparts.allreduce_keys(100_000_000, [0.005] * 5, 4, {"sync_exposed_s": 0.005, "compute_s": 0.080})
    assert keys == pytest.approx({"allreduce_s": 0.020, "allreduce_bytes": 100_000_000, "algbw_gb_s": 5.0,
                                  "busbw_gb_s": 7.5, "overlap_pct": 75.0, "comm_compute_ratio": 0.25})
    assert set(stepparts.allreduce_keys(100, [0.001], 1, {}).values()) == {None}  # one rank: no sync


def test_probe_buffer_is_one_bucket_at_most():
    assert stepparts.bucket_elements(10**9, 4) == stepparts.BUCKET_BYTES // 4
    assert stepparts.bucket_elements(4000, 4) == 1000
