"""Waiting on real processes and files in tests: polling with a deadline, and the process table
(/proc) by argument or by working directory."""

import os
import signal
import time
from pathlib import Path


def default_signal_actions() -> None:
    """A child's `preexec_fn`: SIGHUP and SIGINT do what they do by default (end the process).
    A test run started under nohup, or as a background job of a script, hands its children these
    signals ignored, and a head that ignores SIGHUP is a head that survives a dropped login."""
    for signum in (signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def wait_for(condition, timeout_s: float, what: str, poll_s: float = 0.1) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(poll_s)


def process_table():
    """(pid, argv, working directory or None) of every process that can be read."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        try:
            cwd = os.path.realpath(os.readlink(entry / "cwd"))
        except OSError:
            cwd = None
        yield int(entry.name), argv, cwd


def processes_with(marker: str, exact: bool = True) -> list:
    """Ids of the processes with `marker` as one of their arguments, or (exact=False) anywhere in
    their command line."""
    return [pid for pid, argv, _ in process_table()
            if (marker in argv if exact else any(marker in arg for arg in argv))]


def processes_in(folder: Path) -> dict:
    """{pid: command line} of the processes whose working directory is `folder`."""
    folder = os.path.realpath(folder)
    return {pid: " ".join(argv) for pid, argv, cwd in process_table() if cwd == folder}
