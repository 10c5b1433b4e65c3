"""The sweep history: every sweep's runs archived as one immutable Parquet file (rule `history`),
read back with DuckDB (scalesweep/history/query.py).

Layout: `<history>/sweep-<sweep id>.parquet`, one file per sweep, never modified once written.
Each holds the sweep's runs.csv rows plus the sweep's own columns (SWEEP_COLUMNS): its id, date,
config (JSON), the results folder it came from and the host that archived it.

Why files and not a database file: several sweeps (several checkouts sharing one history folder
on GPFS, say) may finish at once. Each writes its own file under a temporary name in the same
folder, fsyncs it and renames it into place (atomic on one file system), so no writer waits for
a lock, no reader sees half a file, and two writers never touch the same file (the id holds a
hash of the content: the same sweep archived twice is the same file). Archiving the same sweep
again rewrites a damaged file.

The sweep id is `<UTC start of the sweep's first run>-<12 hex digits of the runs' content>`, e.g.
`20261122T101502Z-3fa4c1d2e5b6`: ids sort by date and name the content (48 bits: two different
sweeps share a hash with a chance of about 2 in 10^9 in a history of 1,000 sweeps).
"""

from __future__ import annotations

import hashlib
import json
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from scalesweep.contract import atomic, layout
from scalesweep.history import query, store
from scalesweep.tidy.provenance import SWEEP_COLUMNS
from scalesweep.tidy.table import read_runs_csv


@dataclass(frozen=True)
class Archived:
    sweep_id: str
    path: Path
    date: str
    runs: int

    def as_json(self) -> str:
        return json.dumps(
            {"sweep_id": self.sweep_id, "file": str(self.path), "date": self.date, "runs": self.runs},
            indent=2,
        )


def archive(runs: pd.DataFrame, history_dir, config: dict | None = None, source=None) -> Archived:
    """Archive the runs of `runs` that the history does not hold yet (by run_id) as one new
    sweep; with nothing new, the sweep that archived the last of them is returned and nothing
    is written. A rerun that completes a sweep (a fixed failure, an added configuration) thus
    archives only what it ran: every run is in the history once. A folder that cannot be
    written is a ValueError naming it."""
    history_dir = Path(history_dir)
    try:
        return _archive(runs, history_dir, config, source)
    except PermissionError as error:
        raise ValueError(f"history folder {history_dir}: cannot be written "
                         f"({error.strerror or error}): history_dir must name a folder you can write") from None


def _archive(runs: pd.DataFrame, history_dir: Path, config, source) -> Archived:
    history_dir.mkdir(parents=True, exist_ok=True)
    runs = runs.reset_index(drop=True)
    # The history is read even for runs without ids: a damaged file in it is named here.
    known = query.archived_sweeps_of(history_dir, runs["run_id"].dropna() if "run_id" in runs else ())
    if known:
        held = runs["run_id"].isin(list(known))
        if held.all():
            sweep_id = max(known[run] for run in runs["run_id"])
            return Archived(sweep_id, _file_of(history_dir, sweep_id), _id_date(sweep_id), 0)
        runs = runs[~held].reset_index(drop=True)
    content = content_hash(runs)
    date = sweep_date(runs)
    existing = [(sweep_id, path) for sweep_id, path in query.sweep_catalog(history_dir).items()
                if sweep_id.endswith(f"-{content}") and query.unreadable(path) is None]
    if existing:
        sweep_id, path = existing[0]
        return Archived(sweep_id, path, _id_date(sweep_id), len(runs))
    # A damaged file of this content (a write cut short on a file system that renamed it into
    # place anyway, a copy cut short) is written again below, under its own name.
    sweep_id = f"{_id_time(date)}-{content}"
    path = history_dir / f"{store.FILE_PREFIX}{sweep_id}{store.FILE_SUFFIX}"
    frame = archive_frame(runs, sweep_id, date, config, source)
    write_parquet_atomic(frame, path)
    return Archived(sweep_id, compact(history_dir) or path, date, len(runs))


def _file_of(history_dir: Path, sweep_id: str) -> Path:
    """The file holding sweep `sweep_id`: its own, or the store it was compacted into."""
    own = history_dir / f"{store.FILE_PREFIX}{sweep_id}{store.FILE_SUFFIX}"
    return own if own.is_file() else query.sweep_catalog(history_dir).get(sweep_id, own)


def compact(history_dir, at: int | None = None) -> Path | None:
    """Compact the history's files into one store once `at` (default store.COMPACT_AT) sweep files
    lie beside the stores (scalesweep/history/store.py); the store's path, or None. A damaged or foreign file is
    left where it is. Compaction only speeds reading: the sweep is archived before it, so a
    compaction that cannot finish (a full disk, files compacted away by another process again and
    again) is a warning, and the files stay as they are."""
    import duckdb

    history_dir = Path(history_dir)
    at = store.COMPACT_AT if at is None else at
    problem = None
    for _ in range(query.RELISTINGS):
        if len(store.loose_files(history_dir)) < at:
            return None
        files = store.sweep_files(history_dir)
        try:
            return store.compact(history_dir, files, _write_query_atomic, at)
        except (duckdb.Error, OSError) as error:
            problem = error
        if all(path.exists() for path in files):  # not another compaction: a damaged file, or the disk
            readable = [path for path in files if query.unreadable(path) is None]
            try:
                return store.compact(history_dir, readable, _write_query_atomic, at)
            except (duckdb.Error, OSError) as error:
                problem = error
    warnings.warn(f"sweep history {history_dir}: not compacted ({str(problem).splitlines()[0]}); "
                  "every sweep stays readable in its own file", stacklevel=2)
    return None


def content_hash(runs: pd.DataFrame) -> str:
    """12 hex digits naming a runs table's content (its CSV text)."""
    return hashlib.sha256(runs.to_csv(index=False).encode()).hexdigest()[:12]


def sweep_date(runs: pd.DataFrame) -> str:
    """When the sweep ran: the start of its first run (ISO 8601, UTC); now when no run says."""
    first = pd.Timestamp.now("UTC")
    if "start_time" in runs:
        starts = pd.to_datetime(runs["start_time"], utc=True, errors="coerce", format="ISO8601")
        first = starts.min() if starts.notna().any() else first
    return first.floor("s").isoformat()


ID_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


def _id_time(date: str) -> str:
    return pd.Timestamp(date).tz_convert("UTC").strftime(ID_TIME_FORMAT)


def _id_date(sweep_id: str) -> str:
    """The date an id was made from (the inverse of _id_time)."""
    return pd.to_datetime(sweep_id.split("-")[0], format=ID_TIME_FORMAT, utc=True).isoformat()


def archive_frame(runs: pd.DataFrame, sweep_id: str, date: str, config, source) -> pd.DataFrame:
    """The archived table: the sweep's columns, then the runs. The code version stays the runs'
    own (their headers'): the code archiving them may be a later one."""
    frame = runs.drop(columns=[c for c in SWEEP_COLUMNS if c in runs.columns])
    sweep = {
        "sweep_id": sweep_id,
        "sweep_date": date,
        "sweep_config": json.dumps(config or {}, sort_keys=True, default=str),
        "sweep_source": None if source is None else str(Path(source).resolve()),
        "sweep_host": socket.gethostname(),
    }
    return pd.concat([pd.DataFrame(sweep, index=frame.index), frame], axis=1)


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write `frame` to `path` as Parquet, replaced whole or not at all (scalesweep/contract/atomic.py)."""
    connection = _writer()
    connection.register("archived", _typed_for_parquet(frame))
    try:
        _write_query_atomic("SELECT * FROM archived", path)
    finally:
        connection.unregister("archived")


def _write_query_atomic(sql: str, path: Path) -> None:
    """The rows of `sql` (on the writing database) as the Parquet file `path`, replaced whole or not at all."""
    with atomic.replaced_whole(path) as temporary:
        _writer().execute(f"COPY ({sql}) TO {query.sql_text(str(temporary))} (FORMAT parquet)")


# One in-memory DuckDB database per process for writing archives: opening one costs 30-60 ms,
# paid for every sweep when archiving many in one process (the history benchmark's 1,000).
_writing: dict = {}


def _writer():
    if "connection" not in _writing:
        import duckdb

        _writing["connection"] = duckdb.connect()
        _writing["connection"].execute("SET enable_progress_bar = false")
    return _writing["connection"]


def _typed_for_parquet(frame: pd.DataFrame) -> pd.DataFrame:
    """An all-empty column of objects has no type in Parquet (DuckDB writes NULL): text unites
    with any other file's type of the same column. DuckDB infers the rest from pandas."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object and frame[column].isna().all():
            frame[column] = frame[column].astype("string")
    return frame


def write_history(runs_csv, history_dir, config, archived_json, figure=None) -> str:
    """The history stage (rule `history`): archive runs.csv (its results folder as the source), write
    `archived_json` naming the file, and with `figure` the history at a glance there
    (scalesweep/report/history_figure.py); return the log line."""
    source = Path(layout.results_folder_of(Path(runs_csv).resolve()))
    archived = archive(read_runs_csv(runs_csv), history_dir, config=config, source=source)
    record = json.loads(archived.as_json())
    # What this sweep holds, for `compare_with`: the archive file holds only its new runs.
    record["runs_csv"] = str(Path(runs_csv).resolve())
    atomic.write_text(json.dumps(record, indent=2) + "\n", archived_json)
    if archived.runs == 0:
        line = f"nothing new to archive: every run is in the history (last in {archived.sweep_id})"
    else:
        line = f"archived {archived.runs} new runs as {archived.sweep_id}: {archived.path}"
    if figure is None:
        return line
    from scalesweep.report import history_figure  # matplotlib: loaded only when a figure is asked for

    table = query.history_table(query.archived_runs(history_dir))
    return line + "\n" + history_figure.write_history_figure(table, figure)
