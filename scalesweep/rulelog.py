"""The log of a workflow rule that runs package code (`run:`): its one-line summary, or the
traceback of what went wrong, in the rule's log file (logs/<stage>.log)."""

import traceback
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def logged(path):
    """`with logged(log[0]) as log_line: log_line(write_...(...))`; on an exception the
    traceback goes to the log and the exception on to Snakemake."""
    lines = []
    try:
        yield lines.append
    except BaseException:
        Path(path).write_text("".join(f"{line}\n" for line in lines) + traceback.format_exc())
        raise
    Path(path).write_text("".join(f"{line}\n" for line in lines))


def run_logged(path, write, *args, **kwargs):
    """`write(*args, **kwargs)` (a stage's write_... function) with its line, or its traceback,
    in the rule's log `path`: the whole `run:` of a rule."""
    with logged(path) as log_line:
        log_line(write(*args, **kwargs))
