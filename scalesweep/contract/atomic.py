"""Files replaced whole or not at all, with the mode any file the user writes gets.

A job killed mid-write must leave the previous table or none, never half a CSV that the analysis
would read as fewer runs: each file is written beside its target, fsynced and renamed onto it
(atomic on one file system). A temporary file is created private (0600) and a rename keeps that
mode, so the file is given the user's umask first: on a shared results folder (GPFS) colleagues
read it like every other table.

A write that fails (a full disk: ENOSPC, a quota: EDQUOT, a read-only file system: EROFS) leaves
no temporary file and raises the OSError with the target's name as its filename: the temporary
name (or none, for a write(2) that fails) would not say which table was lost.
"""

import os
import tempfile
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path


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
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise naming(error, path) from error
    os.close(handle)
    try:
        yield Path(temporary)
        fsync_file(temporary)
        os.chmod(temporary, user_file_mode())
        os.replace(temporary, path)
    except BaseException as error:
        with suppress(OSError):
            Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise naming(error, path) from error
        raise
    fsync_folder(path.parent)


def naming(error: OSError, path) -> OSError:
    """`error` as the same kind of OSError (PermissionError stays one) naming `path`, where it
    named none or the temporary file; an error already naming another file is left as it is."""
    path = Path(path)
    named = error.filename
    ours = named is None or (os.path.abspath(Path(named).parent) == os.path.abspath(path.parent)
                             and Path(named).name.startswith(f".{path.name}."))
    if error.errno is None or not ours:
        return error
    return OSError(error.errno, error.strerror or str(error), str(path))


def fsync_file(path) -> None:
    with open(path, "rb") as written:
        os.fsync(written.fileno())


def write_csv(frame, path) -> None:
    """A table (a pandas DataFrame: this module imports no pandas) as CSV, without its index."""
    with replaced_whole(path) as temporary:
        frame.to_csv(temporary, index=False)


def write_csvs(frames: dict) -> None:
    """{path: frame} replaced together: every table is written and synced beside its target
    before any is renamed into place, so a disk that fills up on the last one leaves all of them
    as they were (tables that belong together never disagree)."""
    with ExitStack() as stack:
        for path, frame in frames.items():
            temporary = stack.enter_context(replaced_whole(path))
            frame.to_csv(temporary, index=False)
            fsync_file(temporary)


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
