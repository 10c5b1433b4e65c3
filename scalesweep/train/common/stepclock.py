"""The trainers' step clocks: when each training step of an attempt began, had its data and ended.

StepClock waits for the devices on the host (TensorFlow, PyTorch on CPU); EventStepClock reads
the same times from device events (CUDA), so the host may run ahead. harness.py meters
windows of steps with either.

Standard library only: it runs inside the TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import time

from scalesweep.train.common import faults


class StepClock:
    """Begin and end time of every training step of an attempt, 0-based.

    A step's end first waits for the devices (`synchronize`, when given): they run asynchronously,
    so without the wait a step would end when its work is queued, not done. With `at_begin` the
    begin waits too (work queued between two steps then counts for neither).
    """

    def __init__(self, synchronize=None, at_begin: bool = False):
        self.synchronize = synchronize or (lambda: None)
        self.at_begin = at_begin
        self.after_end = None  # called with the steps finished, after a step's end is read (the heartbeat)
        self.begins: list[float] = []
        self.ends: list[float] = []
        self.readies: list[float] = []

    def begin(self) -> None:
        if self.at_begin:
            self.synchronize()
        self.begins.append(time.perf_counter())

    def data_ready(self) -> None:
        """The step's batch is on the device (the copy waited for): its data wait ends here."""
        self.synchronize()
        self.readies.append(time.perf_counter())

    @property
    def data_waits(self) -> list[float]:
        """Per step, from its begin to data_ready(); empty where the backend does not mark it."""
        if len(self.readies) != len(self.begins):
            return []
        return [ready - begin for begin, ready in zip(self.begins, self.readies)]

    def end(self) -> None:
        faults.inject_step_delay()  # a known slowdown inside the step, for tests; none unless set
        self.synchronize()
        self.ends.append(time.perf_counter())
        if self.after_end is not None:
            self.after_end(self.finished)

    @property
    def finished(self) -> int:
        return len(self.ends)

    @property
    def durations(self) -> list[float]:
        return [end - begin for begin, end in zip(self.begins, self.ends)]


class EventStepClock:
    """StepClock's readings from device events instead of host waits (CUDA): begin(),
    data_ready() and end() record an event on the device's stream and return at once, so the
    host runs ahead and the next batch's copy overlaps this step's compute. The events are read
    back only when the readings are asked for (once per window, or at an adaptive window's
    checkpoints): one wait for the last event, then their times. Events times are device times:
    a step runs from the moment the stream reaches its begin (the previous step's work done, or
    the host's begin if the device was idle) to the end of its work; its data wait is what the
    stream waited between its begin and its batch being there (loader and copy not hidden behind
    earlier work).

    `new_event()` returns an unrecorded event with record(), synchronize() and
    elapsed_time(other) in milliseconds (torch.cuda.Event(enable_timing=True)). The readings are
    host seconds: device times placed after an anchor event recorded at the first begin(), when
    the backend has just waited for the device (its windows start so), so the stream is idle
    and the anchor's device time is its host time.
    """

    def __init__(self, new_event, now=time.perf_counter):
        self.new_event, self.now = new_event, now
        self.anchor = self.anchor_host = None
        self.marks = {"begin": [], "ready": [], "end": []}
        self.resolved = {"begin": [], "ready": [], "end": []}
        self.host_waits = []
        self.after_end = None  # as StepClock's

    def host_waited(self, seconds: float) -> None:
        """The host's own wait for this step's batch (the loader). While the device still works
        off earlier steps, that wait leaves no gap between the step's begin and data-ready
        events: it shows later, as the device idling inside the step for the host's launches.
        The step's data wait is the longer of the two (StepClock's host timers see it directly)."""
        self.host_waits.append(seconds)

    def _mark(self, kind: str) -> None:
        event = self.new_event()
        event.record()
        self.marks[kind].append(event)

    def begin(self) -> None:
        if self.anchor is None:
            self.anchor_host = self.now()
            self.anchor = self.new_event()
            self.anchor.record()
        self._mark("begin")

    def data_ready(self) -> None:
        self._mark("ready")

    def end(self) -> None:
        faults.inject_step_delay()  # a known slowdown inside the step, for tests; none unless set
        self._mark("end")
        if self.after_end is not None:
            self.after_end(self.finished)

    def _readings(self, kind: str) -> list[float]:
        if len(self.resolved[kind]) < len(self.marks[kind]):
            # One read-back for every kind: wait for the last mark of each (the last recorded is
            # done last, the others then cost nothing), then convert what is new.
            for events in self.marks.values():
                if events:
                    events[-1].synchronize()
            for name, events in self.marks.items():
                done = self.resolved[name]
                done.extend(event_seconds(self.anchor_host, self.anchor, events[len(done):]))
        return self.resolved[kind]

    @property
    def begins(self) -> list[float]:
        return self._readings("begin")

    @property
    def ends(self) -> list[float]:
        return self._readings("end")

    @property
    def readies(self) -> list[float]:
        return self._readings("ready")

    @property
    def finished(self) -> int:
        return len(self.marks["end"])

    @property
    def data_waits(self) -> list[float]:
        device = StepClock.data_waits.fget(self)
        if len(self.host_waits) != len(device):
            return device
        return [max(on_device, on_host) for on_device, on_host in zip(device, self.host_waits)]

    durations = StepClock.durations


def event_seconds(anchor_host: float, anchor, events) -> list[float]:
    """Host seconds of recorded, completed `events`: `anchor_host` plus each one's device time
    after `anchor` (elapsed_time is in milliseconds)."""
    return [anchor_host + anchor.elapsed_time(event) / 1000.0 for event in events]
