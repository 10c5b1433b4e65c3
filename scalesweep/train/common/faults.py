"""Injected failures and delays, for tests and the SLURM failure drills: both trainers read the
same environment variables, so a drill means the same in either framework.

Standard library only: imported inside TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import math
import os
import re
import time

# Failure injection for tests and the SLURM failure drills: both trainers read this variable.
# "oom" raises the framework's out-of-memory error at the first training step (summary status
# oom, exit 0); "crash" raises a RuntimeError there (summary status failed, exit non-zero).
# "oom-once" runs out of memory in the first attempt only (the halve policy's retry then fits);
# "oom-above:N" whenever the per-GPU batch exceeds N (a device with a known capacity, for the
# maximum-batch finder). injected_failure() resolves a mode for one attempt.
FAIL_INJECT_ENV = "SCALESWEEP_FAIL_INJECT"
FAIL_INJECT_MODES = ("oom", "crash", "oom-once", "oom-above:N")
_OOM_ABOVE_RE = re.compile(r"^oom-above:(\d+)$")


def fail_inject_mode(environ=None) -> str | None:
    """The requested injected failure, or None; an unknown value is an error, not ignored."""
    env = os.environ if environ is None else environ
    mode = env.get(FAIL_INJECT_ENV, "").strip().lower()
    if not mode:
        return None
    if mode not in FAIL_INJECT_MODES[:-1] and not _OOM_ABOVE_RE.match(mode):
        raise ValueError(
            f"{FAIL_INJECT_ENV}={env[FAIL_INJECT_ENV]!r}: expected one of {', '.join(FAIL_INJECT_MODES)}"
            " (N a whole number)"
        )
    return mode


# Delay injection, for tests that check where a known slowdown lands: a delay inside every timed
# step (the comparison of sweeps must find it), inside the gradient all-reduce (a DDP comm hook:
# the step breakdown must put it into exposed synchronisation) or in the data loader (into data
# wait). Seconds; unset or 0 = none.
STEP_DELAY_ENV = "SCALESWEEP_INJECT_STEP_DELAY_S"
SYNC_DELAY_ENV = "SCALESWEEP_INJECT_SYNC_DELAY_S"
DATA_DELAY_ENV = "SCALESWEEP_INJECT_DATA_DELAY_S"
# A delay before the backward of every timed step of one rank (RANK_DELAY_RANK_ENV, default 1):
# the others wait for it in the gradient all-reduce (the breakdown's sync wait). PyTorch only.
RANK_DELAY_ENV = "SCALESWEEP_INJECT_RANK_DELAY_S"
RANK_DELAY_RANK_ENV = "SCALESWEEP_INJECT_DELAY_RANK"


def injected_delay_s(name: str, environ=None) -> float:
    """The delay `name` asks for in seconds (0 when unset); a bad value is an error, not ignored."""
    env = os.environ if environ is None else environ
    text = env.get(name, "").strip()
    try:
        delay = float(text) if text else 0.0
    except ValueError:
        delay = math.nan
    if not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"{name}={text!r}: expected seconds >= 0")
    return delay


def busy_wait(seconds: float) -> None:
    """Keep the CPU busy `seconds`: a sleeping process hands its core to others and waits to get
    it back, which would add an unknown slowdown to the known one."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def inject_delay(name: str) -> None:
    """Spend the delay `name` asks for; a no-op unless it is set."""
    delay = injected_delay_s(name)
    if delay:
        busy_wait(delay)


def inject_step_delay() -> None:
    inject_delay(STEP_DELAY_ENV)


def inject_rank_delay(rank: int, environ=None) -> None:
    """Spend RANK_DELAY_ENV's delay when `rank` is the one RANK_DELAY_RANK_ENV names (default 1)."""
    env = os.environ if environ is None else environ
    delay = injected_delay_s(RANK_DELAY_ENV, env)
    if delay and str(rank) == env.get(RANK_DELAY_RANK_ENV, "1").strip():
        busy_wait(delay)


def injected_failure(mode: str | None, per_gpu_batch: int, attempt: int = 1) -> str | None:
    """What an attempt (1-based) at `per_gpu_batch` must raise: "oom", "crash" or None."""
    if mode in ("oom", "crash"):
        return mode
    if mode == "oom-once":
        return "oom" if attempt == 1 else None
    above = _OOM_ABOVE_RE.match(mode or "")
    if above:
        return "oom" if per_gpu_batch > int(above.group(1)) else None
    return None
