"""One attempt of a training job: the whole shell of the train rules (workflow/rules/train.smk).

- Claims the attempt's own log, <run>.attempt-N.log (created exclusively: two attempts never get
  one number), and points the rule's log <run>.log at it.
- Runs the job's command with all it prints going to that log, in a process group of its own, so
  that the whole training (torchrun and its workers, srun) is stopped as one.
- Stops that group when the Snakemake that started the attempt is gone (killed by SIGKILL, by
  SIGHUP when the login drops, by the OOM killer: its jobs are then re-parented) and when it is
  told to stop itself (SIGHUP, SIGINT, SIGTERM: a terminal's Ctrl-C, SLURM's scancel or time
  limit). A guard process inside the group stops the group when this runner is killed with
  SIGKILL. A dead head leaves no training running on its machine.
- Publishes the attempt's log as the run's result only when the command succeeded and <run>.log
  still points to this attempt, by a copy to a temporary file renamed over the result: a result
  is never half-written, and a stale attempt (one a newer attempt replaced while it ran) never
  overwrites the newer one's result.

Standard library only (Python 3.8; scalesweep.contract.layout, which names the attempt logs, is
too): it runs under the sweep's interpreter on the machine that runs the job, a laptop, a login
node or a compute node.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from scalesweep.contract import layout

STOP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
# The command ran in the job's bash under Snakemake's strict mode (snakemake.shell prefixes every
# bash command with this); it keeps it.
STRICT_BASH = "set -euo pipefail; "
POLL_S = 0.5
# What a training gets between SIGTERM and SIGKILL (torchrun passes SIGTERM on to its workers).
GRACE_S = 10.0
STALE_EXIT = 1
# The guard is this runner's program started again (scripts/run_attempt.py, which runs this module
# from the repository whatever the working directory).
PROGRAM = str(Path(__file__).resolve().parents[2] / "scripts" / "run_attempt.py")


def claim_attempt(log: str) -> str:
    """The first attempt log of `log` that does not exist yet, created empty."""
    number = 1
    while True:
        path = layout.numbered_attempt(log, number)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            number += 1
            continue
        return path


def point_log_at(log: str, attempt: str) -> None:
    """`log` becomes a link to `attempt` (relative: the folder may move), replaced atomically."""
    temporary = f"{log}.{os.getpid()}.link"
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(os.path.basename(attempt), temporary)
    os.replace(temporary, log)


def is_latest(log: str, attempt: str) -> bool:
    try:
        return os.readlink(log) == os.path.basename(attempt)
    except OSError:
        return False


def publish(attempt: str, log: str, result: str) -> bool:
    """Copy `attempt` to `result` if it is still the latest attempt of `log`; False if not."""
    if not is_latest(log, attempt):
        return False
    folder = os.path.dirname(result) or "."
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{os.path.basename(result)}.{os.getpid()}.tmp")
    shutil.copyfile(attempt, temporary)
    os.replace(temporary, result)
    return True


def note(attempt: str, text: str) -> None:
    """A line of the runner's own in the attempt's log; never in the way of stopping a training."""
    try:
        with open(attempt, "a") as out:
            out.write(f"run_attempt: {text}\n")
    except OSError:
        pass


def exit_code(returncode: int) -> int:
    """A shell's exit status for a child's return code (a signal N reads 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def become_subreaper() -> None:
    """Orphans below this process are re-parented to it, not to init (Linux prctl(2)
    PR_SET_CHILD_SUBREAPER): a trainer process whose parent died stays findable as a
    descendant. Best effort: elsewhere the process tree is only what it is."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def descendants(pid: int) -> set:
    """The ids of every process below `pid` (Linux /proc; empty where it cannot be read)."""
    children: dict = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, pending = set(), [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def signal_all(pids, signum: int) -> set:
    """`signum` to each of `pids`; the ones still there."""
    alive = set()
    for pid in pids:
        try:
            os.kill(pid, signum)
            alive.add(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return alive


def signal_group(group: int, signum: int) -> bool:
    """Send `signum` to process group `group`; False when no process is left in it."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    return True


def stop_group(leader: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the leader's group and to every process below this runner, SIGKILL to what is
    left of them after `grace_s`. Not the group alone: a trainer may start processes in a group
    or session of their own (torchrun's workers, a setsid), which a signal to the group misses,
    and they trained on after their head was gone; the runner and the guard are subreapers, so
    such a process stays below them even when its parent has died."""
    below = descendants(os.getpid())
    signal_group(leader.pid, signal.SIGTERM)
    signal_all(below, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        leader.poll()  # a zombie leader would keep the group alive
        below |= descendants(os.getpid())
        reap_orphans(below - {leader.pid})
        if not signal_group(leader.pid, 0) and not signal_all(below - {leader.pid}, 0):
            return
        time.sleep(0.1)
    signal_group(leader.pid, signal.SIGKILL)
    signal_all(below | descendants(os.getpid()), signal.SIGKILL)
    leader.wait()
    reap_orphans(below - {leader.pid})


def reap_orphans(pids) -> None:
    """Collect the exit status of those of `pids` re-parented to this subreaper (else they stay
    zombies, and a zombie still answers signal 0). Never waitpid(-1): it could take the
    leader's own status, which Popen then reads as 0, a success."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def watch(process: subprocess.Popen, poll_s: float, stop_reason) -> int | None:
    """`process`'s exit status once it ends, or None as soon as `stop_reason()` gives one."""
    while True:
        try:
            return exit_code(process.wait(timeout=poll_s))
        except subprocess.TimeoutExpired:
            if stop_reason():
                return None


def supervise(leader: subprocess.Popen, head: int, stop_requests: list, attempt: str,
              poll_s: float, grace_s: float) -> int:
    """Wait for the group's leader; stop the group when asked to or when `head` is gone."""
    head_gone = f"the Snakemake that started it (process {head}) is gone"
    status = watch(leader, poll_s, lambda: stop_requests or os.getppid() != head)
    if status is not None:
        return status
    stop_group(leader, grace_s)
    note(attempt, f"stopped the training: {stop_requests[0] if stop_requests else head_gone}")
    return exit_code(leader.returncode)


def run_attempt(log: str, result: str, command: str, poll_s: float = POLL_S,
                grace_s: float = GRACE_S) -> int:
    """One attempt of `command` for the run whose rule log is `log` and result `result`."""
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    attempt = claim_attempt(log)
    point_log_at(log, attempt)
    head = os.getppid()
    become_subreaper()
    stop_requests: list = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda number, frame: stop_requests.append(f"signal {signal.Signals(number).name}"))
    with open(attempt, "ab") as out:
        leader = subprocess.Popen(
            [sys.executable, PROGRAM, "--guard-of", str(os.getpid()),
             "bash", "-c", STRICT_BASH + command],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    status = supervise(leader, head, stop_requests, attempt, poll_s, grace_s)
    if status != 0:
        return status
    if not publish(attempt, log, result):
        note(attempt, f"a newer attempt ({os.path.realpath(log)}) started meanwhile: this attempt "
                      f"is not copied to {result}")
        return STALE_EXIT
    return 0


def guard(runner: int, argv: list, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> int:
    """The leader of the training's process group: runs `argv` and stops the whole group when
    `runner` (its parent) is gone. A plain SIGTERM to the group leaves the guard waiting for the
    training to end, so that the runner sees the training's own exit status."""
    become_subreaper()
    training = subprocess.Popen(argv)
    signal.signal(signal.SIGTERM, lambda number, frame: None)  # after the fork: not inherited
    status = watch(training, poll_s, lambda: os.getppid() != runner)
    if status is not None:
        return status
    below = descendants(os.getpid())
    signal_group(0, signal.SIGTERM)
    signal_all(below, signal.SIGTERM)
    try:
        training.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    signal_all(below | descendants(os.getpid()), signal.SIGKILL)
    signal_group(0, signal.SIGKILL)  # the guard too
    return exit_code(-signal.SIGKILL)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", help="the rule's log: becomes a link to this attempt's log")
    parser.add_argument("--result", help="the run's result: this attempt's log, if it succeeds")
    parser.add_argument("--command", help="the job's command, run by bash")
    parser.add_argument("--guard-of", type=int, help=argparse.SUPPRESS)
    parser.add_argument("guarded", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.guard_of is not None:
        return guard(args.guard_of, args.guarded)
    if None in (args.log, args.result, args.command):
        parser.error("--log, --result and --command are required")
    return run_attempt(args.log, args.result, args.command)


if __name__ == "__main__":
    sys.exit(main())
