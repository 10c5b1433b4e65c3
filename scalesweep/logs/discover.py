"""The logs and runs tables a user names (`python -m scalesweep analyze PATH...`): files, and folders
read with every subfolder; of a run's numbered attempt logs only the latest, each file once (a
link to a file already listed is the same run), dangling links named and skipped, and the axes of
each folder's manifest.csv.

Broken input does not cost the rest: a manifest, or a row of one, that cannot be used is a
`Refused` line naming the file (and line and key), and the logs beside it are still read.
"""

import os
import stat
import sys
from pathlib import Path

import pandas as pd

from scalesweep.contract import layout
from scalesweep.contract.input_files import not_a_file, not_a_file_refusal
from scalesweep.contract.records import shown
from scalesweep.logs.read import wide_encoding
from scalesweep.logs.run import whole_number

LOG_SUFFIXES = {".log", ".out", ".txt", ".err"}
MANIFEST = "manifest.csv"

# Manifest axes that are counts: a manifest is typed by hand, and a `four` there would reach the
# tables as a GPU count.
MANIFEST_COUNTS = {"gpus": 0, "nodes": 1, "repeat": 0, "world_size": 1, "per_gpu_batch": 1, "global_batch": 1}


class Refused(ValueError):
    """An input that cannot be used; the message names the file (and line where there is one)."""


def is_runs_table(path):
    return path.suffix == ".csv" and path.name != MANIFEST


def check_utf8_text(path):
    """Refused unless `path` is UTF-8 text: pandas would fail with a bare codec error."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise Refused(f"{path}: cannot read: {error.strerror or error}") from None
    wide = wide_encoding(raw)
    if wide:
        raise Refused(f"{path}: {wide} encoded (re-save as UTF-8, e.g. iconv -f {wide} -t UTF-8)")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        byte = raw[error.start]
        raise Refused(f"{path}:{line}: not a UTF-8 text CSV (byte 0x{byte:02x}: {error.reason})") from None


def read_manifest(folder):
    """folder/manifest.csv: a `file` column plus axes (gpus, model, ...) for the logs beside it.

    The reference DDP logs do not print the world size; the manifest (or the file name) gives it.
    Returns ({log path: axes}, [refused rows]); a manifest that cannot be read at all is Refused.
    """
    path = folder / MANIFEST
    if not path.exists():
        return {}, []
    if not_a_file(path):
        raise Refused(not_a_file_refusal(path, "a manifest file"))
    check_utf8_text(path)
    try:
        manifest = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise Refused(f"{path}: cannot read the manifest: {error}") from None
    if "file" not in manifest.columns:
        raise Refused(f"{path}: needs a 'file' column naming each log")
    axes_by_file, refused = {}, []
    for line, row in enumerate(manifest.to_dict("records"), start=2):
        axes = {k: v for k, v in row.items() if pd.notna(v)}
        log = str(folder / str(axes.pop("file", "")))
        problem = manifest_problem(axes)
        if problem:
            refused.append(f"{path}:{line}: {problem}; {log} left out")
        axes_by_file[log] = None if problem else axes
    return axes_by_file, refused


def manifest_problem(axes):
    """Why a manifest row's axes cannot be used, or None."""
    for key, minimum in MANIFEST_COUNTS.items():
        if key in axes:
            value = whole_number(axes[key])
            if value is None or value < minimum:
                return f"column {key!r} must be a whole number >= {minimum}, got {shown(axes[key])}"
    return None




# A compressed log is not read (a log is text, read line by line); skipped without a word it would
# be a run that silently is not there.
COMPRESSED_SUFFIXES = {".gz", ".bz2", ".xz", ".zst", ".zip"}


def compressed_log_refusals(paths) -> list[str]:
    """A refusal per compressed log among `paths` (its name, and how to read it)."""
    return [f"{path}: a compressed log is not read: decompress it first (e.g. gunzip -k {path})"
            for path in paths if Path(path).suffix in COMPRESSED_SUFFIXES]


def compressed_files(folder):
    for root, subfolders, files in os.walk(folder):
        subfolders.sort()
        yield from (Path(root) / name for name in sorted(files) if Path(name).suffix in COMPRESSED_SUFFIXES)


def log_files(folder, unreadable=None):
    """The log files below `folder`, in every subfolder (links to folders are not followed).
    A subfolder that cannot be listed is appended to `unreadable` as a refusal: os.walk would
    skip it without a word, and its runs would silently be missing."""

    def refuse(error):
        if unreadable is not None:
            unreadable.append(f"{error.filename}: cannot read the folder ({error.strerror}): its logs left out")

    for root, subfolders, files in os.walk(folder, onerror=refuse):
        subfolders.sort()
        yield from (Path(root) / name for name in sorted(files) if Path(name).suffix in LOG_SUFFIXES)


def plain_files(paths) -> frozenset:
    """The paths among `paths` that are regular files and no link, each found with one lstat. A
    folder of logs holds little else, and the checks below would look at each of them three times
    (a link? a regular file? its real path?): on a parallel file system every look is a call to
    its metadata server, 30,000 of them for 10,000 logs."""
    plain = set()
    for path in paths:
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                plain.add(path)
        except (OSError, ValueError):  # gone since it was listed, a NUL byte: the checks name it
            pass
    return frozenset(plain)


def regular_files(paths, refused, plain=frozenset()):
    """`paths` without those that are no regular file (a FIFO would hang the reader), each
    appended to `refused`; those in `plain` (plain_files) are not looked at again."""
    kept = []
    for path in paths:
        refusal = None if path in plain else not_a_file_refusal(path, "a log file")
        if refusal:
            refused.append(refusal)
        else:
            kept.append(path)
    return kept


def latest_attempts(logs):
    """Of each run's numbered attempt logs (`<run>.attempt-K.log`), only the highest K: the
    earlier ones are attempts that failed before it. Other logs pass as they are."""
    latest = {}
    for log in logs:
        match = layout.ATTEMPT_STEM.match(log.stem)
        key = (log.parent, match["run"]) if match else (log.parent, log.name)
        attempt = int(match["number"]) if match else 0
        if key not in latest or attempt > latest[key][0]:
            latest[key] = (attempt, log)
    chosen = {log for _, log in latest.values()}
    return [log for log in logs if log in chosen]


def distinct_files(logs, plain=frozenset()):
    """Each file once: a link to a file already listed (the workflow's `<run>.log` points at
    its latest attempt) is the same run. A file that is no link (those in `plain` are known to be
    none) lies where its folder really is: one realpath per folder, not per file (realpath looks
    at every part of the path, and on a parallel file system each look is a call to its metadata
    server)."""
    seen, distinct, real_folders = set(), [], {}
    for log in logs:
        if log not in plain and os.path.islink(log):
            real = os.path.realpath(log)
        else:
            folder, name = os.path.split(log)
            if folder not in real_folders:
                real_folders[folder] = os.path.realpath(folder)
            real = os.path.join(real_folders[folder], name)
        if real not in seen:
            seen.add(real)
            distinct.append(log)
    return distinct


def dangling_link(path) -> bool:
    return Path(path).is_symlink() and not Path(path).exists()


def without_dangling_links(paths, stream=None, plain=frozenset()):
    """`paths` without the links to nothing (a deleted attempt log's `<run>.log`), each named in a
    one-line warning: they hold no run, and the logs beside them are still analysed. Those in
    `plain` (plain_files) are no link."""
    kept = []
    for path in paths:
        if path not in plain and dangling_link(path):
            print(f"scalesweep analyze: warning: {path}: dangling link (to {os.readlink(path)}), skipped",
                  file=sys.stderr if stream is None else stream)
        else:
            kept.append(path)
    return kept


def folder_items(folder, all_attempts=False):
    """((log, axes) pairs, [refused]) below `folder`: axes from the manifest of each log's folder."""
    items, refused, manifests = [], [], {}
    found = list(log_files(folder, refused))
    plain = plain_files(found)
    logs = distinct_files(regular_files(without_dangling_links(found, plain=plain), refused, plain=plain),
                          plain=plain)
    for log in logs if all_attempts else latest_attempts(logs):
        if log.parent not in manifests:
            try:
                manifests[log.parent], bad_rows = read_manifest(log.parent)
            except Refused as error:
                refused.append(f"{error}; the logs of {log.parent} left out")
                manifests[log.parent], bad_rows = None, []
            refused += bad_rows
        if manifests[log.parent] is None:
            continue
        axes = manifests[log.parent].get(str(log), {})
        if axes is not None:
            items.append((str(log), axes))
    return items, refused


def log_items(paths, all_attempts=False):
    """((log path, axes) pairs, [refused]): folders are read with every subfolder, each file
    once, and of a run's attempt logs only the latest unless `all_attempts`. Axes come from a
    folder's manifest where it has one; without, the log says what it can, and a DDP log's
    world size comes from its file name (scalesweep/logs/run.py: gpus_from_filename)."""
    items, refused = [], []
    for path in paths:
        if not path.is_dir() and not_a_file(path):
            refused.append(not_a_file_refusal(path, "a log file or runs table"))
        elif path.is_dir():
            found, problems = folder_items(path, all_attempts)
            items += found
            refused += problems + compressed_log_refusals(compressed_files(path))
        elif compressed_log_refusals([path]):
            refused += compressed_log_refusals([path])
        elif not is_runs_table(path):
            items.append((str(path), {}))
    return items, refused


def with_world_sizes(items, world_sizes):
    """`items` ((log, axes) pairs) with the world size the user gave for a file (`analyze
    --world-size FILE=N`: (FILE, N) pairs, or {FILE: N}) as its world_size and gpus axes, for logs
    that do not print it (the DDP reference). Returns (items, [the given files no item is]): a
    count meant for one log must not be dropped silently. One file given two different counts
    (under one name or two) is a ValueError naming it and both."""
    given = given_world_sizes(world_sizes)
    if not given:
        return items, []
    used, result = set(), []
    for path, axes in items:
        count = given.get(Path(path).resolve())
        if count is not None:
            used.add(Path(path).resolve())
            axes = {**axes, "world_size": count, "gpus": count}
        result.append((path, axes))
    return result, [str(path) for path in given if path not in used]


def given_world_sizes(world_sizes) -> dict:
    """{resolved path: N} of --world-size's (FILE, N) pairs (or {FILE: N})."""
    pairs = world_sizes.items() if isinstance(world_sizes, dict) else (world_sizes or [])
    given, named = {}, {}
    for path, count in pairs:
        real = Path(path).resolve()
        if real in given and given[real] != count:
            raise ValueError(f"--world-size {path}: given twice, as {given[real]} ({named[real]}) and "
                             f"{count}: one count per log")
        given[real], named[real] = count, path
    return given


def world_size_contradictions(runs: pd.DataFrame, world_sizes) -> list[str]:
    """One line per run whose log's own world_size is not the count --world-size gave its file:
    the log's value is what ran, and a count meant for it must not be dropped without a word."""
    given = given_world_sizes(world_sizes)
    if not given or "world_size" not in runs:
        return []
    found = []
    for log, logged in zip(runs["log"], runs["world_size"]):
        count = given.get(Path(log).resolve()) if isinstance(log, str) else None
        if count is not None and pd.notna(logged) and int(logged) != count:
            found.append(f"--world-size {log}={count}: the log's header says 'world_size' {int(logged)}")
    return found
