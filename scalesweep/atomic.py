"""Files replaced whole or not at all, with the mode any file the user writes gets.

A job killed mid-write must leave the previous table or none, never half a CSV that the analysis
would read as fewer runs: each file is written beside its target, fsynced and renamed onto it
(atomic on one file system). A temporary file is created private (0600) and a rename keeps that
mode, so the file is given the user's umask first: on a shared results folder (GPFS) colleagues
read it like every other table.
"""

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pandas as pd


def user_file_mode() -> int:
    """0666 less the process's umask: the mode open() would give a new file."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def replaced_whole(path):
    """A temporary path beside `path` for the block to write; it becomes `path` when the block
    ends without error and is removed otherwise."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield Path(temporary)
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.chmod(temporary, user_file_mode())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def write_csv(frame: pd.DataFrame, path) -> None:
    with replaced_whole(path) as temporary:
        frame.to_csv(temporary, index=False)


def write_text(text: str, path) -> None:
    with replaced_whole(path) as temporary:
        temporary.write_text(text)


def fsync_folder(folder: Path) -> None:
    # The rename is durable only once the folder's entry is on disk (POSIX); not all file
    # systems allow opening a folder for that, and the file itself is already safe.
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
