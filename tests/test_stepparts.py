"""The breakdown keys of the summary record (scalesweep/train/common/stepparts.py), by hand."""

import sys
from pathlib import Path

import pytest

from scalesweep.train.common import stepparts  # noqa: E402


def test_parts_add_up_to_the_wall_time_per_step():
    """Window 12 s over 100 steps = 0.120 s per step; median step 0.115 s, data 0.010 s,
    compute 0.080 s -> exposed 0.025 s, other 0.120 - 0.115 = 0.005 s (host work between steps)."""
    parts = stepparts.step_parts(12.0, 100, [0.115] * 100, [0.010] * 100, [0.080] * 10)
    assert parts == pytest.approx({"breakdown_step_s": 0.120, "data_wait_s": 0.010, "compute_s": 0.080,
                                   "sync_wait_s": 0.0, "sync_comm_s": 0.025, "sync_exposed_s": 0.025,
                                   "other_s": 0.005, "breakdown_steps": 100})


def test_waiting_for_the_slowest_rank_is_split_from_communication():
    """Rank 0 joins the all-reduce 0.030/0.031/0.029 s before its steps end, rank 1 (slowed)
    0.010/0.010/0.012 s: rank 0 waited 0.020, 0.021, 0.017 s (median 0.020); exposed sync
    0.120 - 0.010 - 0.080 = 0.030 -> wait 0.020, comm 0.010; overlap against a 0.020 s pure
    all-reduce 1 - 0.010/0.020 = 50 %, and a wait larger than all exposed sync is capped at it."""
    waits = stepparts.own_waits([[0.030, 0.031, 0.029], [0.010, 0.010, 0.012]], rank=0)
    assert waits == pytest.approx([0.020, 0.021, 0.017])
    assert stepparts.own_waits([[0.030, 0.031, 0.029], [0.010, 0.010, 0.012]], rank=1) == [0.0, 0.0, 0.0]
    parts = stepparts.step_parts(12.5, 100, [0.120] * 100, [0.010] * 100, [0.080] * 10, sync_waits=waits)
    assert (parts["sync_wait_s"], parts["sync_comm_s"]) == pytest.approx((0.020, 0.010))
    assert sum(parts[k] for k in stepparts.PART_KEYS[1:]) == pytest.approx(parts["breakdown_step_s"])
    keys = stepparts.allreduce_keys(1000, [0.020] * 5, 2, parts)
    assert keys["overlap_pct"] == pytest.approx(50.0)
    capped = stepparts.step_parts(12.5, 100, [0.120] * 100, [0.010] * 100, [0.080] * 10, sync_waits=[0.5] * 3)
    assert (capped["sync_wait_s"], capped["sync_comm_s"]) == pytest.approx((0.030, 0.0))


def test_time_preemption_added_is_spread_over_the_parts_it_hit():
    """10 steps with a 0.010 s data wait; after it 9 take 0.050 s and one, preempted, 0.140 s:
    mean after 0.059 s, median 0.050 s, contention 1.18. Two ranks, probes of 0.050 s (the
    median step's after its data wait): compute 0.059 s, other 0.075 - 0.010 - 0.059 = 0.006 s
    (the host work between steps), not the preemption's 0.009 s, and nothing exposed. Probes of
    0.040 s: compute 0.0472, exposed 0.059 - 0.0472 = 0.0118 s, of it wait 0.005 x 1.18 =
    0.0059 s."""
    steps, waits = [0.060] * 9 + [0.150], [0.010] * 10
    one = stepparts.step_parts(0.75, 10, steps, waits, [0.050, 0.049, 0.051], ranks=2)
    assert one == pytest.approx({"breakdown_step_s": 0.075, "data_wait_s": 0.010, "compute_s": 0.059,
                                 "sync_wait_s": 0.0, "sync_comm_s": 0.0, "sync_exposed_s": 0.0,
                                 "other_s": 0.006, "breakdown_steps": 10})
    two = stepparts.step_parts(0.75, 10, steps, waits, [0.040] * 3, ranks=2, sync_waits=[0.005] * 10)
    assert (two["compute_s"], two["sync_wait_s"], two["sync_comm_s"]) == pytest.approx((0.0472, 0.0059, 0.0059))


def test_each_probe_is_compared_with_the_step_it_followed():
    """Steps after their 0.002 s data wait: 0.010, 0.020 (a slow moment), 0.012, 0.010 s (mean
    0.013, median 0.011); probes after the first three take 0.009, 0.018, 0.0108 s: 90 % of their
    step each, so compute = 0.9 x 0.013 = 0.0117 s and, two ranks, exposed sync 0.013 - 0.0117 =
    0.0013 s, other 0.015 - 0.002 - 0.013 = 0. Unpaired, the slow moment's probe would count
    against the median step: 0.0108 / 0.011 x 0.013 = 0.012764 s."""
    steps, waits, probes = [0.012, 0.022, 0.014, 0.012], [0.002] * 4, [0.009, 0.018, 0.0108]
    paired = stepparts.step_parts(0.060, 4, steps, waits, probes, ranks=2, paired_after=[0.010, 0.020, 0.012])
    assert (paired["compute_s"], paired["sync_comm_s"], paired["other_s"]) == pytest.approx((0.0117, 0.0013, 0.0))
    assert stepparts.step_parts(0.060, 4, steps, waits, probes, ranks=2)["compute_s"] == pytest.approx(0.012764, abs=1e-6)


def test_overlap_stays_between_0_and_100_percent():
    """Exposed communication 0.025 s against a 0.005 s pure all-reduce (a slowed all-reduce):
    nothing hidden, 0 %, not 1 - 5 = -400 %; no exposed communication: 100 %."""
    slow = stepparts.allreduce_keys(1000, [0.005] * 5, 2, {"sync_comm_s": 0.025, "compute_s": 0.08})
    hidden = stepparts.allreduce_keys(1000, [0.005] * 5, 2, {"sync_comm_s": 0.0, "compute_s": 0.08})
    assert (slow["overlap_pct"], hidden["overlap_pct"]) == (0.0, 100.0)


def test_probe_steps_follow_every_kth_step_and_short_windows_get_enough():
    """30 timed steps: every 3rd (30 // 8) is probed, 10 probes; 1000 steps or an adaptive window:
    every 20th (at most 5 % more work); 3 steady steps: every 2nd. One process: never."""
    assert stepparts.probe_every(30, 2) == 3 and stepparts.probe_every(1000, 4) == stepparts.probe_every(None, 2) == 20
    assert stepparts.probe_every(3, 2) == 2 and stepparts.probe_every(200, 8) == 20
    assert stepparts.probe_every(30, 1) == stepparts.probe_every(None, 1) == 0
    assert [i for i in range(12) if stepparts.is_probe_step(i, 3)] == [2, 5, 8, 11]
    assert stepparts.probe_overhead_pct(3.0, 120.0) == 2.5 and stepparts.probe_overhead_pct(None, 1.0) is None


def test_exposed_sync_is_never_negative_and_other_takes_the_noise():
    """A probe step slower than the median step (noise): exposed 0, other negative, sum kept."""
    parts = stepparts.step_parts(10.0, 100, [0.095] * 100, [0.010] * 100, [0.090] * 10)
    assert parts["sync_exposed_s"] == 0.0
    assert parts["other_s"] == pytest.approx(0.100 - 0.010 - 0.090)
    assert sum(parts[k] for k in ("data_wait_s", "compute_s", "sync_exposed_s", "other_s")) == pytest.approx(0.1)


def test_one_process_synchronises_nothing():
    """One rank, 0.120 s per step in its window, steps of 0.115 s of which 0.010 s data wait: its
    steps after the data wait are compute (0.105 s, no probe needed or used), the 0.005 s between
    steps other, nothing is synchronisation."""
    for probes in ([0.080] * 10, []):
        parts = stepparts.step_parts(12.0, 100, [0.115] * 100, [0.010] * 100, probes, ranks=1)
        assert parts["sync_exposed_s"] == 0.0 and parts["sync_wait_s"] == parts["sync_comm_s"] == 0.0
        assert (parts["compute_s"], parts["other_s"]) == pytest.approx((0.105, 0.005))
    assert set(stepparts.step_parts(12.0, 100, [0.115] * 100, [0.010] * 100, [], ranks=2).values()) == {None}


def test_missing_measurement_gives_nulls():
    assert set(stepparts.step_parts(10.0, 100, [0.1], [], [0.05]).values()) == {None}


def test_allreduce_keys_by_hand():
    """100 MB of gradients fill 4 buckets of 25 MiB (26,214,400 B each); 0.005 s per
    bucket -> pure 0.020 s; algbw 100e6 / 0.020 = 5 GB/s; 4 ranks: busbw 5 x 2 x 3/4 = 7.5 GB/s;
    exposed 0.005 s -> overlap 75 %; compute 0.080 s -> ratio 0.25."""
    keys = stepparts.allreduce_keys(100_000_000, [0.005] * 5, 4, {"sync_comm_s": 0.005, "compute_s": 0.080})
    assert keys == pytest.approx({"allreduce_s": 0.020, "allreduce_bytes": 100_000_000, "algbw_gb_s": 5.0,
                                  "busbw_gb_s": 7.5, "overlap_pct": 75.0, "comm_compute_ratio": 0.25})
    assert set(stepparts.allreduce_keys(100, [0.001], 1, {}).values()) == {None}  # one rank: no sync


def test_probe_buffer_is_one_bucket_at_most():
    assert stepparts.bucket_elements(10**9, 4) == stepparts.BUCKET_BYTES // 4
    assert stepparts.bucket_elements(4000, 4) == 1000
