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
import shlex
import time
from pathlib import Path

LOCKS = Path(".snakemake") / "locks"
HEAD_RECORD = Path(".snakemake") / "scalesweep-head.json"


def lock_files(workdir) -> list[Path]:
    return sorted((Path(workdir) / LOCKS).glob("*.lock"))


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
    if not isinstance(record, dict) or {"host", "pid", "started"} - record.keys():
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


def head_state(record: dict | None, host: str, workdir) -> str:
    """'running' (the head still runs here), 'gone' (it ran here and has ended), 'elsewhere'
    (it ran on another machine: a login node of the same cluster) or 'unknown'."""
    if record is None:
        return "unknown"
    if record["host"] != host:
        return "elsewhere"
    runs = process_runs_in(int(record["pid"]), workdir)
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
    check = {
        "gone": f"The Snakemake that took it ({who(record)}) is no longer running.",
        "elsewhere": (
            f"The Snakemake that took it ({who(record)}) ran on another machine: check there "
            f"that it no longer runs (ssh {record['host']} ps -p {record['pid']})."
        ),
        "unknown": (
            "Check that no other Snakemake runs in this folder, on this or another login node "
            "(ps -fu $USER | grep snakemake)."
        ),
    }[state]
    unlock, again = commands(argv)
    return "\n".join([
        f"scalesweep: this folder is locked (.snakemake/locks). {check}",
        "A head that was killed (an SSH drop, a kill signal, a power loss) leaves its lock; then:",
        "  1. make sure no other Snakemake runs in this folder;",
        f"  2. {unlock}",
        f"  3. {again}",
        "     (the same command again: it waits for the SLURM jobs still queued or running from",
        "     this folder instead of submitting them twice, keeps the results they finished and",
        "     runs again only what failed or never ran; docs/cluster-head.md)",
    ])


def lock_advice(workdir, host: str, argv: list[str]) -> str | None:
    """The advice for this folder's lock, or None when it is not locked."""
    locks = lock_files(workdir)
    if not locks:
        return None
    record = head_record(workdir, locks)
    return advice(head_state(record, host, workdir), record, argv)
