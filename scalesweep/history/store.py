"""The history's files on disk: each sweep's own file as its archiving wrote it
(`sweep-<id>.parquet`) and the compacted stores (`store-<hash>.parquet`), which hold many sweeps'
rows, so that a comparison over 1,000 sweeps opens a few files, not 1,000.

Why compaction keeps every guarantee of one-file-per-sweep (docs/history.md):

- Writers never wait and never share a file: archiving still writes only its own sweep file
  (temporary name, fsync, rename). Compacting writes only a new store, under a temporary name, renamed
  into place, its name the hash of the sweep ids it holds (two compactions of the same sweeps
  write the same file, identical content).
- Nothing is removed before a store holding it is in place: a compaction deletes a sweep file or
  an older store only after its own store is renamed into place, and only a file it read and that
  is unchanged since (size, inode, mtime) whose every sweep its store holds. Any file is thus
  deleted only while a file holding all its sweeps exists, at every instant: a compaction cut short
  at any point, or two at once from two checkouts on one GPFS folder, lose no sweep.
- Nothing is read twice: a reader reads every sweep id from one file only (query.py), so the
  moment between a store's rename and the deletions, two overlapping stores, or a user's copy
  of any file (under any name, of any format) double nothing.
- Only files named as the archive names them are deleted (`sweep-<its own sweep id>.parquet`, a
  store): a user's copy under another name stays where it is, read once like the rest.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

FILE_PREFIX, FILE_SUFFIX = "sweep-", ".parquet"
STORE_PREFIX = "store-"
# Sweep files beside the stores that make an archiving compact them: a comparison reads at most
# this many files plus the stores; each compaction rewrites the history's rows once (about 0.1 s
# per 100,000 runs), so compacting every 16 sweeps costs a 1,000-sweep history about 6 s in all.
COMPACT_AT = 16


def sweep_files(history_dir) -> list[Path]:
    """The files a reader reads: the stores, then each sweep's own file (temporary files of
    writers are hidden: they start with a dot)."""
    history_dir = Path(history_dir)
    if not history_dir.is_dir():
        return []
    return store_files(history_dir) + loose_files(history_dir)


def store_files(history_dir) -> list[Path]:
    return sorted(Path(history_dir).glob(f"{STORE_PREFIX}*{FILE_SUFFIX}"))


def loose_files(history_dir) -> list[Path]:
    return sorted(Path(history_dir).glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"))


def is_store(path) -> bool:
    return Path(path).name.startswith(STORE_PREFIX)


def sweep_id_of(path: Path) -> str:
    """The sweep id a sweep file's name gives (a store's name gives none)."""
    return Path(path).name[len(FILE_PREFIX):-len(FILE_SUFFIX)]


def duckdb_path(path) -> str:
    """`path` as DuckDB's read_parquet reads it literally: DuckDB expands every path as a glob
    and has no escape character, but a one-character class ([[], [*], [?]) matches the
    character itself."""
    return re.sub(r"([\[*?])", r"[\1]", str(path))


def sql_text(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def paths_sql(files) -> str:
    return f"[{', '.join(sql_text(duckdb_path(path)) for path in files)}]"


def file_identity(path) -> tuple:
    try:
        stat = Path(path).stat()
    except OSError:
        return (str(path),)  # DuckDB names the missing file when it reads it
    return (str(path), stat.st_size, stat.st_ino, stat.st_mtime_ns)


def sweeps_by_file(connection, files) -> dict[str, set]:
    """{file: the sweep ids its rows hold} (the sweep_id column of each file, as DuckDB names it)."""
    if not files:
        return {}
    rows = connection.execute(f"SELECT DISTINCT filename, sweep_id FROM read_parquet({paths_sql(files)}, "
                              "union_by_name = true)").fetchall()
    held = {str(path): set() for path in files}
    by_duckdb_name = {duckdb_path(path): str(path) for path in files}
    for name, sweep_id in rows:
        held[by_duckdb_name.get(name, name)].add(sweep_id)
    return held


def compact(history_dir, files, write_store, at: int = COMPACT_AT) -> Path | None:
    """One store holding every sweep of the archives among `files` (stores first), written by
    `write_store(sql, path)`, then the files it replaces removed; None (nothing done) where fewer
    than `at` sweep files lie beside the stores. A damaged file is a duckdb.Error, before
    anything is removed."""
    import duckdb

    connection = duckdb.connect()
    connection.execute("SET enable_progress_bar = false")
    try:
        readable = _archives(connection, [str(path) for path in files])
        if sum(not is_store(path) for path in readable) < at:
            return None
        identities = {path: file_identity(path) for path in readable}
        columns = connection.execute(f"SELECT * FROM read_parquet({paths_sql(readable)}, union_by_name = true) "
                                     "LIMIT 0").description
        if "filename" in [column[0] for column in columns]:
            return None  # a run's own column hides DuckDB's file names: the files stay as they are
        held = sweeps_by_file(connection, readable)
        sweeps = set().union(*held.values())
        path = Path(history_dir) / f"{STORE_PREFIX}{_sweeps_hash(sweeps)}{FILE_SUFFIX}"
        write_store(_store_sql(held), path)
    finally:
        connection.close()
    for file, its_sweeps in held.items():
        if file != str(path) and _ours(file, its_sweeps) and file_identity(file) == identities[file]:
            _remove(file)
    return path


def _archives(connection, files: list[str]) -> list[str]:
    """The files with the archives' marker column (sweep_id): a foreign Parquet file is not compacted."""
    if not files:
        return []
    marked = {row[0] for row in connection.execute(
        f"SELECT DISTINCT file_name FROM parquet_schema({paths_sql(files)}) WHERE name = 'sweep_id'").fetchall()}
    return [path for path in files if path in marked or duckdb_path(path) in marked]


def _store_sql(held: dict[str, set]) -> str:
    """Every sweep's rows once: each sweep from the first file (stores first) that holds it. Files
    all of whose sweeps are new are read as one list (a query per file made compacting 1,000 files
    take a minute); a file holding some sweep already taken gives only its other sweeps."""
    taken, whole, parts = set(), [], []
    for file, sweeps in held.items():
        new = sorted(sweeps - taken)
        taken |= sweeps
        if new and new == sorted(sweeps):
            whole.append(file)
        elif new:
            parts.append(f"SELECT * FROM read_parquet({paths_sql([file])}) "
                         f"WHERE sweep_id IN ({', '.join(map(sql_text, new))})")
    if whole:
        parts.insert(0, f"SELECT * FROM read_parquet({paths_sql(whole)}, union_by_name = true)")
    # No ORDER BY: DuckDB keeps the files' row order, so the first of two rows of one run stays first.
    return " UNION ALL BY NAME ".join(parts)


def _ours(file: str, sweeps: set) -> bool:
    """Whether compaction may remove `file`: a store, or a sweep file named after its one sweep."""
    return is_store(file) or sweeps == {sweep_id_of(Path(file))}


def _remove(file: str) -> None:
    try:
        os.unlink(file)
    except FileNotFoundError:
        pass  # another compaction removed it: its store holds these sweeps too


def _sweeps_hash(sweeps) -> str:
    return hashlib.sha256("\n".join(sorted(sweeps)).encode()).hexdigest()[:16]
