"""What to do about the lock a killed Snakemake head left in its folder.

Snakemake locks the folder it works in (.snakemake/locks/) and says only after parsing the workflow
and building its DAG that the folder "cannot be locked … can be removed with the --unlock
argument", without telling a lock of a head that still runs from one whose head was killed.
Every head of this workflow writes who it is (host, process id, start) into .snakemake/ once it
holds the lock (an `onstart` handler: Snakemake runs it after taking the lock); the next start
compares that with the lock and says, while the workflow is parsed, whether that head still runs
here, ran on another machine, or is gone, and the exact commands to go on with.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from pathlib import Path

LOCKS = Path(".snakemake") / "locks"
HEAD_RECORD = Path(".snakemake") / "scalesweep-head.json"


# The lock files Snakemake itself reads (snakemake/persistence/file.py, _read_locks): regular
# files named <number>.input.lock or <number>.output.lock; a folder of that name it skips.
LOCK_NAME = re.compile(r"[0-9]+\.(input|output)\.lock")


def lock_files(workdir) -> list[Path]:
    """The lock files Snakemake would stop at: anything else in locks/ (a folder named like a
    lock, another name) it ignores and runs, so no advice is given about it."""
    return sorted(path for path in (Path(workdir) / LOCKS).glob("*.lock")
                  if LOCK_NAME.fullmatch(path.name) and path.is_file())


def unreadable_lock(workdir) -> str | None:
    """The refusal for a lock file this user cannot read, or None. Snakemake opens every lock
    file after building its DAG and stops there with a PermissionError traceback; said here while
    the workflow is parsed, with the one way on (--unlock removes the folder of locks whole)."""
    for path in lock_files(workdir):
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            return (f"scalesweep: the lock file {path} cannot be read ({error.strerror}), so Snakemake "
                    "cannot tell which files it locks: make sure no other Snakemake runs in this "
                    "folder, then run the same command with --unlock (it removes .snakemake/locks/), "
                    "then the command again")
    return None


def write_head_record(workdir, host: str, pid: int, started: float | None = None) -> None:
    path = Path(workdir) / HEAD_RECORD
    record = {"host": host, "pid": pid, "started": started or time.time()}
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{pid}")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, path)


def head_record(workdir, locks: list[Path]) -> dict | None:
    """The record of the head that took the lock: written after the lock files, so one older
    than the newest lock file belongs to an earlier head (a head started with --no-hooks writes
    none)."""
    path = Path(workdir) / HEAD_RECORD
    try:
        record = json.loads(path.read_text())
        written = path.stat().st_mtime
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not (isinstance(record.get("host"), str)
                                            and type(record.get("pid")) is int
                                            and type(record.get("started")) in (int, float)):
        return None
    if locks and written < max(lock.stat().st_mtime for lock in locks):
        return None
    return record


def process_runs_in(pid: int, workdir) -> bool | None:
    """Whether process `pid` runs with `workdir` as its folder (Linux /proc); None where that
    cannot be read (another system; then only whether the id is taken)."""
    try:
        return os.path.realpath(os.readlink(f"/proc/{pid}/cwd")) == os.path.realpath(workdir)
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return None


def process_started(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch, to about a second: Linux /proc's
    start in clock ticks after boot, and the boot time), or None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        # fields[0] is the state, the 3rd of stat(5)'s fields: starttime, the 22nd, is fields[19]
        return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# The head writes its record once it holds the lock, after it started; /proc's start time is
# rounded to the boot time's whole second. A process that started later than this after the
# record was written is another process that got the dead head's id.
START_SLACK_S = 2.0


def head_state(record: dict | None, host: str, workdir) -> str:
    """'running' (the head still runs here), 'gone' (it ran here and has ended, its process id
    free or reused by a later process), 'elsewhere' (it ran on another machine: a login node of
    the same cluster) or 'unknown'."""
    if record is None:
        return "unknown"
    if record["host"] != host:
        return "elsewhere"
    pid = int(record["pid"])
    runs = process_runs_in(pid, workdir)
    started = process_started(pid)
    if runs is not False and started is not None and started > float(record["started"]) + START_SLACK_S:
        return "gone"
    return {True: "running", False: "gone", None: "unknown"}[runs]


def unlocking(argv: list[str]) -> bool:
    """Whether this invocation is the --unlock itself: Snakemake parses the workflow before
    unlocking, and the workflow cannot ask Snakemake which command it runs."""
    return "--unlock" in argv[1:]


def commands(argv: list[str]) -> tuple[str, str]:
    """The --unlock command and the same command again, as typed: --unlock goes first, because
    options such as --configfile take every word after them."""
    program = argv[0] if os.path.basename(argv[0]) == "snakemake" else "snakemake"
    return shlex.join([program, "--unlock", *argv[1:]]), shlex.join([program, *argv[1:]])


def who(record: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["started"]))
    return f"process {record['pid']} on {record['host']}, started {started}"


def advice(state: str, record: dict | None, argv: list[str]) -> str:
    """What to do about the lock, given what is known of the head that took it (head_state)."""
    if state == "running":
        return (
            f"scalesweep: this folder is locked by a Snakemake that is still running ({who(record)}). "
            "Let it finish, or stop it: Ctrl-C in its terminal (or kill -INT with its process id) "
            "cancels its SLURM jobs, kill -TERM lets them finish first. Do not --unlock while it runs."
        )
    unlock, again = commands(argv)
    return "\n".join([
        f"scalesweep: this folder is locked (.snakemake/locks). {what_to_check(state, record)}",
        "A head that was killed (an SSH drop, a kill signal, a power loss) leaves its lock; then:",
        "  1. make sure no other Snakemake runs in this folder;",
        f"  2. {unlock}",
        f"  3. {again}",
        "     (the same command again: it waits for the SLURM jobs still queued or running from",
        "     this folder instead of submitting them twice, keeps the results they finished and",
        "     runs again only what failed or never ran; docs/cluster-head.md)",
    ])


def what_to_check(state: str, record: dict | None) -> str:
    """Only the sentence of the state at hand: the others name a record that may not exist."""
    if state == "gone":
        return f"The Snakemake that took it ({who(record)}) is no longer running."
    if state == "elsewhere":
        return (f"The Snakemake that took it ({who(record)}) ran on another machine: check there "
                f"that it no longer runs (ssh {record['host']} ps -p {record['pid']}).")
    return ("Check that no other Snakemake runs in this folder, on this or another login node "
            "(ps -fu $USER | grep snakemake).")


def lock_advice(workdir, host: str, argv: list[str]) -> str | None:
    """The advice for this folder's lock, or None when it is not locked."""
    locks = lock_files(workdir)
    if not locks:
        return None
    record = head_record(workdir, locks)
    return advice(head_state(record, host, workdir), record, argv)
