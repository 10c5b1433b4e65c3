"""The heartbeat: a human line in the run's log every `--heartbeat-s` seconds (30 by default) and
at least every 10 % of an epoch (at most one a second): step k of K, images/s so far, the run's ETA.

A line for a person watching the log, never a record (docs/records.md holds no heartbeat). It
costs the timed steps nothing: the step clock calls `tick` after it has read a step's end, the
check is a step count comparison and one host clock read, with no device synchronisation (on an
event clock the host runs ahead of the device, so "so far" then counts steps launched, and the
ETA is the launch rate's; it corrects itself at each window's end, when the host waits).

Standard library only: it runs inside the TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import math
import time

DEFAULT_INTERVAL_S = 30.0
# At least this many lines per epoch (or per run of the steps protocol)...
BEATS_PER_EPOCH = 10
# ...but never more than one a second (or one per --heartbeat-s, if shorter): a person reads no
# more, and a laptop's sub-second epochs would bury the log's other lines (Keras' own) in them.
MIN_GAP_S = 1.0


def planned_steps(header: dict) -> tuple:
    """(the run's steps K, steps per epoch, whether K is only a cap) from its header: the epochs
    protocol's epochs x steps per epoch; the steps protocol's warm-up plus its timed window (an
    adaptive window's cap: it may end sooner)."""
    global_batch = header["global_batch"]
    if header.get("protocol") == "steps":
        auto = header.get("max_timed_steps") is not None
        total = header["warmup_steps"] + (header["max_timed_steps"] if auto else header["timed_steps"])
        return total, total, auto
    per_epoch = max(1, header["images_per_epoch"] // global_batch)
    return header["epochs"] * per_epoch, per_epoch, False


def duration_text(seconds: float) -> str:
    """'1 h 02 min', '4 min 12 s', '37 s'."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def heartbeat_line(step: int, total: int, capped: bool, images_per_s: float, eta_s: float) -> str:
    of = f"at most {total}" if capped else str(total)
    return (f"[heartbeat] step {step} of {of} ({100.0 * step / total:.0f} %), {images_per_s:.1f} images/s so far, "
            f"ETA {duration_text(eta_s)}{' at most' if capped else ''}")


class Heartbeat:
    """Says the run's progress through `say` when `interval_s` passed, or a tenth of an epoch's
    steps were taken and MIN_GAP_S passed, since the last line."""

    def __init__(self, say, total_steps: int, steps_per_epoch: int, global_batch: int, capped: bool = False,
                 interval_s: float = DEFAULT_INTERVAL_S, now=time.perf_counter):
        self.say, self.now = say, now
        self.total, self.capped, self.global_batch = max(1, total_steps), capped, global_batch
        self.every_steps = max(1, math.ceil(steps_per_epoch / BEATS_PER_EPOCH))
        self.interval_s = interval_s
        self.min_gap_s = min(MIN_GAP_S, interval_s)
        self.started = now()
        self.last_at, self.last_step = self.started, 0

    def tick(self, steps_done: int) -> None:
        """After a step's end: `steps_done` (>= 1) steps of the attempt are done."""
        now = self.now()
        waited = now - self.last_at
        if waited < self.interval_s and (steps_done - self.last_step < self.every_steps or waited < self.min_gap_s):
            return
        self.last_at, self.last_step = now, steps_done
        elapsed = max(now - self.started, 1e-9)
        rate = steps_done / elapsed
        remaining = max(0, self.total - steps_done)
        self.say(heartbeat_line(steps_done, self.total, self.capped, rate * self.global_batch, remaining / rate))
