"""What a path a user names as an input file is, when it is no regular file.

Opening a named pipe (FIFO) for reading waits until some process opens it for writing, and a
character device (/dev/zero, a terminal) may never end: a command that read either would hang
instead of refusing it. A folder where a file is expected would fail with a bare "[Errno 21]".
So every reader of a user's file asks first, from the file's type alone (stat(2), which does not
open it), and refuses with the path and what it is.

Standard library only (Python 3.8): the contract layer.
"""

from __future__ import annotations

import os
import stat

# stat(2)'s file types other than a regular file, as a refusal names them
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_a_file(path) -> str | None:
    """What `path` is when it is not a regular file ("a named pipe (FIFO)", "a folder", ...),
    links followed; None for a regular file, and for a path that cannot be looked at (missing, a
    dangling link, no permission): its reader names that error itself."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None
    if stat.S_ISREG(mode):
        return None
    return next((kind for is_kind, kind in _KINDS if is_kind(mode)), "not a regular file")


def not_a_file_refusal(path, expected: str = "a file") -> str | None:
    """'<path>: a named pipe (FIFO), not <expected>: not read', or None for a regular file."""
    kind = not_a_file(path)
    return None if kind is None else f"{path}: {kind}, not {expected}: not read"
