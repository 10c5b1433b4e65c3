"""stepclock.EventStepClock, the CUDA step clock, on fake events: step times from paired device
timestamps, read back with one wait per read, never per step."""

from scalesweep.train.common import stepclock
import pytest


class Device:
    """A fake stream: events get the device times the test queues; synchronize() on an event
    completes it and every event recorded before it, as on a CUDA stream."""

    def __init__(self, times_ms):
        self.times_ms = list(times_ms)
        self.recorded = 0
        self.completed = 0
        self.waits = 0
        self.elapsed_calls = 0

    def new_event(self):
        return Event(self)


class Event:
    def __init__(self, device: Device):
        self.device, self.seq, self.time_ms = device, None, None

    def record(self):
        self.device.recorded += 1
        self.seq = self.device.recorded
        self.time_ms = self.device.times_ms.pop(0)

    def synchronize(self):
        self.device.waits += 1
        self.device.completed = max(self.device.completed, self.seq)

    def elapsed_time(self, other):
        assert max(self.seq, other.seq) <= self.device.completed, "elapsed_time of an event not yet done"
        self.device.elapsed_calls += 1
        return other.time_ms - self.time_ms


def run_steps(clock, steps):
    for _ in range(steps):
        clock.begin()
        clock.data_ready()
        clock.end()


def test_step_times_and_data_waits_come_from_the_paired_device_times():
    # anchor at device 1000 ms = host 50 s; step 1: begin 1000, batch 1002, end 1030;
    # step 2 begins when step 1's work is done (1030), waits 0.5 ms, ends 1070.
    device = Device([1000.0, 1000.0, 1002.0, 1030.0, 1030.0, 1030.5, 1070.0])
    clock = stepclock.EventStepClock(device.new_event, now=lambda: 50.0)
    run_steps(clock, 2)
    assert clock.finished == 2
    assert clock.begins == pytest.approx([50.0, 50.030])
    assert clock.ends == pytest.approx([50.030, 50.070])
    assert [round(d, 6) for d in clock.durations] == [0.030, 0.040]
    assert [round(w, 6) for w in clock.data_waits] == [0.002, 0.0005]


def test_a_host_waiting_for_its_loader_behind_a_busy_device_is_data_wait():
    """The device still works off step 1 (to 1070 ms) while the host waits 35 ms for step 2's
    batch: step 2's begin and data-ready events both land at 1070, no gap; the wait shows as the
    device idling inside step 2 (1070 -> 1140). The host's 35 ms is the step's data wait; where
    the device wait is the longer (step 1: idle device, 2 ms), that one."""
    device = Device([1000.0, 1000.0, 1002.0, 1070.0, 1070.0, 1070.0, 1140.0])
    clock = stepclock.EventStepClock(device.new_event, now=lambda: 50.0)
    for host_wait in (0.001, 0.035):
        clock.begin()
        clock.host_waited(host_wait)
        clock.data_ready()
        clock.end()
    assert [round(w, 6) for w in clock.data_waits] == [0.002, 0.035]
    assert [round(d, 6) for d in clock.durations] == [0.070, 0.070]


def test_steps_record_without_waiting_and_a_read_waits_once():
    device = Device([0.0] + [float(n) for n in range(30)])
    clock = stepclock.EventStepClock(device.new_event, now=lambda: 0.0)
    run_steps(clock, 10)
    assert device.waits == 0  # ten steps, no wait for the device
    durations = clock.durations
    assert len(durations) == 10 and device.waits <= 3  # one wait per kind of mark, at most
    waits, calls = device.waits, device.elapsed_calls
    assert clock.durations == durations and clock.data_waits == pytest.approx([0.001] * 10)
    assert (device.waits, device.elapsed_calls) == (waits, calls)  # read before: nothing read again


def test_a_later_read_converts_only_the_new_steps():
    device = Device([0.0] + [float(n) for n in range(3 * 5)])
    clock = stepclock.EventStepClock(device.new_event, now=lambda: 0.0)
    run_steps(clock, 3)
    assert len(clock.ends) == 3
    calls = device.elapsed_calls
    run_steps(clock, 2)
    assert [round(end, 6) for end in clock.ends] == [0.002, 0.005, 0.008, 0.011, 0.014]
    assert device.elapsed_calls - calls == 2 * 3  # begin, ready and end of the two new steps


def test_event_seconds_place_device_times_after_the_anchor():
    device = Device([10.0, 12.5, 20.0])
    anchor, first, second = (device.new_event() for _ in range(3))
    for event in (anchor, first, second):
        event.record()
    second.synchronize()
    assert stepclock.event_seconds(7.0, anchor, [first, second]) == pytest.approx([7.0025, 7.010])
