"""The sweep history: every sweep's runs archived as one immutable Parquet file, queried with DuckDB.

Layout: `<history>/sweep-<sweep id>.parquet`, one file per sweep, never modified once written.
Each holds the sweep's runs.csv rows plus the sweep's own columns (SWEEP_COLUMNS): its id, date,
config (JSON), the results folder it came from and the host that archived it.

Why files and not a database file: several sweeps (several checkouts sharing one history folder
on GPFS, say) may finish at once. Each writes its own file under a temporary name in the same
folder, fsyncs it and renames it into place (atomic on one file system), so no writer waits for
a lock, no reader sees half a file, and two writers never touch the same file (the id holds a
hash of the content: the same sweep archived twice is the same file). DuckDB reads the files in
place (`read_parquet`), in memory: no server and no lock held on the folder. A damaged file (a
disk full, a copy cut short) or a foreign one (a Parquet file named like an archive, without the
sweep's columns) is skipped with a warning naming it; the rest of the history still answers, and
archiving the same sweep again rewrites a damaged file. A copied archive file adds no run: each
run is read once (by run id, `_runs_view`). DuckDB reads each path as a glob pattern, so
the paths it is given have their pattern characters escaped (`duckdb_path`): a folder named
`hist[1]` or `h*` reads its own files, never those of `hist1` or `h2`.

The sweep id is `<UTC start of the sweep's first run>-<12 hex digits of the runs' content>`, e.g.
`20261122T101502Z-3fa4c1d2e5b6`: ids sort by date and name the content (48 bits: two different
sweeps share a hash with a chance of about 2 in 10^9 in a history of 1,000 sweeps).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from scalesweep import atomic, scaling, sqlfilter
from scalesweep.provenance import SWEEP_COLUMNS
from scalesweep.tidy import read_runs_csv

DEFAULT_HISTORY_DIR = "results/history"
COMPARE_OUTPUTS = ("compare.csv", "compare.png", "summary.txt")  # scalesweep/compare.py writes them
FILE_PREFIX, FILE_SUFFIX = "sweep-", ".parquet"
SELECTOR_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


class DamagedArchiveWarning(UserWarning):
    """A history file that DuckDB cannot read: left out of every answer, named in the message."""


class ForeignFileWarning(UserWarning):
    """A Parquet file named like an archive that is none (no sweep_id column): left out of every
    answer, named in the message."""


# The column that marks a Parquet file as one of our archives (archive_frame writes it first).
MARKER_COLUMN = "sweep_id"


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


# ----------------------------------------------------------------------------- writing

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
    known = archived_run_ids(history_dir)
    if "run_id" in runs and known:
        held = runs["run_id"].isin(list(known))
        if held.all():
            sweep_id = max(known[run] for run in runs["run_id"])
            return Archived(sweep_id, history_dir / f"{FILE_PREFIX}{sweep_id}{FILE_SUFFIX}",
                            _id_date(sweep_id), 0)
        runs = runs[~held].reset_index(drop=True)
    content = content_hash(runs)
    date = sweep_date(runs)
    existing = [path for path in sorted(history_dir.glob(f"{FILE_PREFIX}*-{content}{FILE_SUFFIX}"))
                if unreadable(path) is None]
    if existing:
        sweep_id = sweep_id_of(existing[0])
        return Archived(sweep_id, existing[0], _id_date(sweep_id), len(runs))
    # A damaged file of this content (a write cut short on a file system that renamed it into
    # place anyway, a copy cut short) is written again below, under its own name.
    sweep_id = f"{_id_time(date)}-{content}"
    path = history_dir / f"{FILE_PREFIX}{sweep_id}{FILE_SUFFIX}"
    frame = archive_frame(runs, sweep_id, date, config, source)
    write_parquet_atomic(frame, path)
    return Archived(sweep_id, path, date, len(runs))


def archived_run_ids(history_dir) -> dict[str, str]:
    """{run_id: the sweep id that archived it} over the history (older files lack run ids)."""
    files = sweep_files(history_dir)
    if not files:
        return {}
    present = _query(files, "SELECT * FROM raw_runs LIMIT 0")[0].columns
    if "run_id" not in present:
        return {}
    held = query(files, "SELECT run_id, min(sweep_id) AS sweep_id FROM raw_runs "
                 "WHERE run_id IS NOT NULL GROUP BY run_id")
    return dict(zip(held["run_id"], held["sweep_id"]))


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
    """Write `frame` to `path` as Parquet, replaced whole or not at all (scalesweep.atomic)."""
    import duckdb

    with atomic.replaced_whole(path) as temporary:
        connection = duckdb.connect()
        connection.register("archived", _typed_for_parquet(frame))
        connection.execute(f"COPY archived TO {_sql_text(str(temporary))} (FORMAT parquet)")
        connection.close()


def _typed_for_parquet(frame: pd.DataFrame) -> pd.DataFrame:
    """An all-empty column of objects has no type in Parquet (DuckDB writes NULL): text unites
    with any other file's type of the same column. DuckDB infers the rest from pandas."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object and frame[column].isna().all():
            frame[column] = frame[column].astype("string")
    return frame


# ----------------------------------------------------------------------------- reading

def sweep_files(history_dir) -> list[Path]:
    """The archived sweeps' files, oldest id first (temporary files of writers are hidden)."""
    history_dir = Path(history_dir)
    if not history_dir.is_dir():
        return []
    return sorted(history_dir.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"))


def unreadable(path) -> str | None:
    """Why DuckDB cannot read `path` whole as an archive (damaged, or foreign: no sweep_id
    column), or None."""
    import duckdb

    connection = duckdb.connect()
    try:
        rows = connection.execute("SELECT * FROM read_parquet(?)", [duckdb_path(path)])
        if MARKER_COLUMN not in [column[0] for column in rows.description]:
            return f"not a sweep archive (no {MARKER_COLUMN} column)"
        rows.fetchall()
    except duckdb.Error as reason:
        return str(reason).splitlines()[0]
    finally:
        connection.close()
    return None


def duckdb_path(path) -> str:
    """`path` as DuckDB's read_parquet reads it literally: DuckDB expands every path as a glob
    and has no escape character, but a one-character class ([[], [*], [?]) matches the
    character itself."""
    return re.sub(r"([\[*?])", r"[\1]", str(path))


def sweep_id_of(path: Path) -> str:
    return Path(path).name[len(FILE_PREFIX):-len(FILE_SUFFIX)]


def files_of_sweeps(history_dir, ids) -> list[Path]:
    """The file of each sweep id (or unique prefix of one); ValueError naming the id otherwise."""
    files = sweep_files(history_dir)
    chosen = []
    for wanted in ids:
        matching = [path for path in files if sweep_id_of(path).startswith(wanted)]
        if not matching:
            raise ValueError(f"no archived sweep {wanted!r} in {history_dir}: {known_sweeps(files)}")
        if len(matching) > 1:
            names = ", ".join(sweep_id_of(path) for path in matching[:5])
            raise ValueError(f"sweep id {wanted!r} is ambiguous in {history_dir}: {names}")
        chosen.append(matching[0])
    return chosen


# Sweep ids a message lists, the newest: the one a user meant is most often a recent one.
LISTED_SWEEPS = 5


def known_sweeps(files) -> str:
    """'archived: <the newest ids> (N sweeps; `scalesweep history` lists them)', or that
    there is none."""
    if not files:
        return "the history holds no sweep"
    newest = [sweep_id_of(path) for path in files[-LISTED_SWEEPS:]][::-1]
    more = f" and {len(files) - len(newest)} older" if len(files) > len(newest) else ""
    return f"archived: {', '.join(newest)}{more} (`scalesweep history` lists them)"


def check_side(spec: str, history_dir, workdir=".") -> None:
    """ValueError unless `spec` names runs that load_side would find: a path, selectors that
    match an archived run, or an archived sweep id. For `compare_with`, which is read only
    after every run of the sweep (the compare rule)."""
    refuse_blank_side(spec, "sweep to compare with")
    if (Path(workdir) / spec).exists():
        return
    history_dir = Path(workdir) / history_dir
    if "=" in spec:
        if archived_runs(history_dir, selectors=[spec]).empty:
            raise ValueError(f"no archived run in {history_dir} matches {spec!r}: "
                             f"{known_sweeps(sweep_files(history_dir))}")
        return
    files_of_sweeps(history_dir, [spec])


def parse_selectors(selectors) -> list[tuple[str, str]]:
    """['gpu_model=NVIDIA H100', 'gpus=4'] or 'a=1,b=2' -> [(column, value)]."""
    pairs = []
    for text in selectors or ():
        for part in str(text).split(","):
            if not part.strip():
                continue
            match = SELECTOR_RE.match(part)
            if not match:
                raise ValueError(f"selector {part!r}: expected column=value (e.g. gpu_model=NVIDIA H100)")
            pairs.append((match.group(1), match.group(2)))
    return pairs


def archived_runs(history_dir, where: str | None = None, selectors=(), files=None) -> pd.DataFrame:
    """The archived runs (of `files`, default every sweep) that match `where` (a DuckDB SQL
    condition, scalesweep/sqlfilter.py) and every `column=value` selector; an empty frame when
    the history is empty."""
    files = sweep_files(history_dir) if files is None else list(files)
    _refuse_bad_filter(where)
    if not files:
        return pd.DataFrame(columns=list(SWEEP_COLUMNS))
    condition, parameters = _selector_condition(parse_selectors(selectors))
    return query(files, f"SELECT * FROM runs WHERE {condition}", parameters, where=where)


# What compare's run-to-run spread reads of the history (compare.repeat_spread).
SPREAD_COLUMNS = ("run_id", "settings_hash", "gpu_model", "cpu_model", "status", "throughput_img_s")


def spread_runs(history_dir) -> pd.DataFrame:
    """The archived runs' SPREAD_COLUMNS (a column no file has is left out): a comparison's
    source of repeats, without reading every column of a long history."""
    files = sweep_files(history_dir)
    if not files:
        return pd.DataFrame(columns=list(SPREAD_COLUMNS))
    present, files = _query(files, "SELECT * FROM runs LIMIT 0")
    columns = [c for c in SPREAD_COLUMNS if c in present.columns]
    if not files or not columns:
        return pd.DataFrame(columns=list(SPREAD_COLUMNS))
    return query(files, f"SELECT {', '.join(map(_sql_name, columns))} FROM runs")


def query(files, sql: str, parameters=(), where: str | None = None) -> pd.DataFrame:
    """`sql` over the view `runs`: every file's rows (columns united by name, each run once)
    where the user's filter `where` holds (sqlfilter: one condition, evaluated where no file
    but these can be read). A file DuckDB cannot read is left out with a
    DamagedArchiveWarning, and the query runs on the others."""
    return _query(files, sql, parameters, where)[0]


def _query(files, sql: str, parameters=(), where: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """query() and the files it could read."""
    import duckdb

    condition = None if where is None else sqlfilter.condition_sql(where)  # refused before any file is read
    readable = [str(path) for path in files]
    while readable:
        connection = _reading_connection(readable)
        try:
            paths = f"[{', '.join(_sql_text(duckdb_path(path)) for path in readable)}]"
            foreign = _foreign(connection, readable, paths)
            for path in foreign:
                warnings.warn(f"sweep history: skipping {path}: a Parquet file named like an archive "
                              f"but none (no {MARKER_COLUMN} column)", ForeignFileWarning, stacklevel=2)
            if foreign:
                readable = [path for path in readable if path not in foreign]
                continue
            connection.execute(f"CREATE OR REPLACE VIEW raw_runs AS SELECT * FROM read_parquet({paths}, union_by_name = true)")
            connection.execute(_runs_view(connection, condition))
            return connection.execute(sql, list(parameters)).df(), readable
        except duckdb.Error as error:
            damaged = {} if _is_query_error(error) else _damaged(readable, error)
            if not damaged:
                problem = _query_error(error, where, _columns(connection, "raw_runs"))
                _forget_connection()
                raise problem from error
            _forget_connection()
            for path, reason in damaged.items():
                warnings.warn(f"sweep history: skipping damaged file {path}: {reason}",
                              DamagedArchiveWarning, stacklevel=2)
            readable = [path for path in readable if path not in damaged]
    return pd.DataFrame(columns=list(SWEEP_COLUMNS)), []


# One DuckDB database per process for reading the history, kept while its files stay as they
# were: every query reads each file's footer (the schema check, the view, the rows), and DuckDB's
# Parquet metadata cache then reads a footer once, not four times per query and twice per
# comparison (1,000 files: 0.8 s of a comparison's 1.7 s in DuckDB). The database is replaced
# whenever any file's size, inode or modification time (in nanoseconds) differs from when it was
# opened, so a stale footer never depends on how the cache tells a replaced file.
_reader: dict = {}


def _reading_connection(files: list[str]):
    """The shared database, able to read the folders of `files` only (sqlfilter.confined_connection)."""
    identity = tuple(_file_identity(path) for path in files)
    if _reader.get("files") != identity:
        _forget_connection()
        folders = {str(Path(path).parent) for path in files}
        connection = sqlfilter.confined_connection([*folders, *map(duckdb_path, folders)],
                                                   {"parquet_metadata_cache": True})
        _reader.update(files=identity, connection=connection)
    return _reader["connection"]


def _file_identity(path: str) -> tuple:
    try:
        stat = Path(path).stat()
    except OSError:
        return (path,)  # DuckDB names the missing file when it reads it
    return (path, stat.st_size, stat.st_ino, stat.st_mtime_ns)


def _forget_connection() -> None:
    """Drop the shared database (after an error its state is not to be trusted)."""
    connection = _reader.pop("connection", None)
    _reader.pop("files", None)
    if connection is not None:
        connection.close()


def _foreign(connection, files: list[str], paths: str) -> list[str]:
    """The files without the archive's marker column (only their footers are read)."""
    marked = {row[0] for row in connection.execute(
        f"SELECT DISTINCT file_name FROM parquet_schema({paths}) WHERE name = ?", [MARKER_COLUMN]).fetchall()}
    return [path for path in files if path not in marked]


def _runs_view(connection, condition: str | None = None) -> str:
    """The view `runs`: every archived run once, whatever the files, where the user's checked
    `condition` (sqlfilter.condition_sql) holds. A run read from two files (a copied archive
    file, a sweep archived before run ids existed and again after) keeps its oldest sweep's row;
    rows without a run id (older archives) are all kept. The condition applies after that."""
    every_run = "SELECT * FROM raw_runs"
    if "run_id" in _columns(connection, "raw_runs"):
        every_run += " QUALIFY run_id IS NULL OR row_number() OVER (PARTITION BY run_id ORDER BY sweep_id) = 1"
    if condition is None:
        return f"CREATE OR REPLACE VIEW runs AS {every_run}"
    return f"CREATE OR REPLACE VIEW runs AS SELECT * FROM ({every_run}) WHERE {condition}"


def _columns(connection, table: str) -> list[str]:
    """The columns of a view of ours ([] where it cannot be described: they are a hint)."""
    import duckdb

    try:
        return [row[0] for row in connection.execute(f"DESCRIBE {table}").fetchall()]
    except duckdb.Error:
        return []


def _is_query_error(error: Exception) -> bool:
    """DuckDB's errors about the query itself (syntax, unknown column), not about a file."""
    import duckdb

    return isinstance(error, (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException))


def _damaged(files: list[str], error: Exception) -> dict[str, str]:
    """{file: why} of the files behind `error`: the one its message names, else every file that
    does not read whole on its own (a query error of the user's is no damaged file: empty)."""
    import duckdb

    named = [path for path in files if path in str(error)]
    suspects = named or files
    damaged = {}
    connection = duckdb.connect()
    for path in suspects:
        try:
            connection.execute("SELECT * FROM read_parquet(?)", [duckdb_path(path)]).fetchall()
        except duckdb.Error as reason:
            damaged[path] = str(reason).splitlines()[0]
    connection.close()
    return damaged


def _query_error(error: Exception, where: str | None, columns: list[str]) -> ValueError:
    """A user's query error, with the columns to choose from; double quotes are names in SQL.
    An unknown column is named in our words, not DuckDB's ('Binder Error: Referenced column')."""
    message = str(error).splitlines()[0]
    hint = f" (columns: {', '.join(columns)})" if columns else ""
    unknown = UNKNOWN_COLUMN_RE.search(message)
    if where and '"' in where and unknown:
        hint += "; SQL strings take single quotes: --where \"gpu_model LIKE '%H100%'\""
    if unknown:
        return ValueError(f"no column {unknown.group(1)!r} in the runs{hint}")
    if where is not None:
        return ValueError(f"--where {sqlfilter.shown(where)}: {message}{hint}")
    return ValueError(f"sweep history query failed: {message}{hint}")


UNKNOWN_COLUMN_RE = re.compile(r'Referenced column "([^"]*)" not found')


def _refuse_bad_filter(where: str | None) -> None:
    """sqlfilter.FilterError for a filter that is not one plain condition, even where the
    history is empty: a bad filter is an error, not an empty answer."""
    if where is not None:
        sqlfilter.parsed_filter(where)


def _selector_condition(pairs) -> tuple[str, list]:
    """SQL condition and its parameters: each selector compared as a number where both sides
    are numbers (gpus=4 matches 4.0) and as text otherwise (the column quoted, the value a
    parameter)."""
    parts, parameters = ["TRUE"], []
    for column, value in pairs:
        name = _sql_name(column)
        parts.append(f"(CAST({name} AS VARCHAR) = ? OR (TRY_CAST(? AS DOUBLE) IS NOT NULL "
                     f"AND TRY_CAST({name} AS DOUBLE) = TRY_CAST(? AS DOUBLE)))")
        parameters += [value, value, value]
    return " AND ".join(parts), parameters


def _sql_text(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _sql_name(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


# ----------------------------------------------------------------------------- listing

# (listing column, SQL over one sweep's runs); a column missing in every file reads as NULL.
LISTING = (
    ("date", "min(sweep_date)"),
    ("cluster", "string_agg(DISTINCT cluster, ', ')"),
    ("hardware", "string_agg(DISTINCT coalesce(gpu_model, cpu_model), ', ')"),
    ("runs", "count(*)"),
    ("ok", "count(*) FILTER (WHERE status = 'ok')"),
    ("failed", "count(*) FILTER (WHERE status IS DISTINCT FROM 'ok')"),
)


def sweeps_table(history_dir, where: str | None = None, selectors=()) -> pd.DataFrame:
    """One row per archived sweep with runs matching the filters: id, date, cluster, hardware,
    configurations (distinct axis values incl. GPU count), runs, ok, failed (not ok)."""
    from scalesweep.scaling import NON_KEY_COLUMNS

    files = sweep_files(history_dir)
    columns = ["sweep_id", *(name for name, _ in LISTING[:3]), "configurations",
               *(name for name, _ in LISTING[3:])]
    _refuse_bad_filter(where)
    if not files:
        return pd.DataFrame(columns=columns)
    present, files = _query(files, "SELECT * FROM runs LIMIT 0")
    present = list(present.columns)
    keys = [c for c in present if c not in NON_KEY_COLUMNS or c == "gpus"]
    fields = {c: (_sql_name(c) if c in present else "NULL") for c in ("cluster", "gpu_model", "cpu_model")}
    condition, parameters = _selector_condition(parse_selectors(selectors))
    selects = ", ".join(f"{_fill(sql, fields)} AS {name}" for name, sql in LISTING)
    distinct = f"count(DISTINCT row({', '.join(map(_sql_name, keys))}))" if keys else "1"
    sql = (f"SELECT sweep_id, {selects}, {distinct} AS configurations FROM runs "
           f"WHERE {condition} GROUP BY sweep_id ORDER BY date, sweep_id")
    if not files:
        return pd.DataFrame(columns=columns)
    return query(files, sql, parameters, where=where)[columns]


def _fill(sql: str, fields: dict) -> str:
    for name, expression in fields.items():
        sql = re.sub(rf"\b{name}\b", expression, sql)
    return sql


# ----------------------------------------------------------------------------- comparison sides

@dataclass
class Side:
    """One side of a comparison: its runs and where they came from."""

    label: str
    runs: pd.DataFrame

    @property
    def sweeps(self) -> list[str]:
        if "sweep_id" not in self.runs:
            return []
        return sorted(self.runs["sweep_id"].dropna().astype(str).unique())


def refuse_blank_side(spec: str, role: str) -> None:
    """ValueError for an empty or blank side: Path('') is the working folder and '' a prefix of
    every sweep id, so a script's unset variable would compare whatever lies there."""
    if not str(spec).strip():
        raise ValueError(f"the {role} is blank ({spec!r}): name a sweep id, a results folder, a runs.csv "
                         "or column=value selectors (is a variable of a script unset?)")


def load_side(spec: str, history_dir=DEFAULT_HISTORY_DIR, where: str | None = None, role: str = "side") -> Side:
    """A comparison side from `spec`: a results folder (its tidy/runs.csv), a runs.csv, an
    archived .parquet file, `column=value[,column=value]` selectors over the history (the runs
    of every matching sweep), or a sweep id (or a unique prefix of one). `where` (SQL) then
    narrows the runs. `role` names the side in the error for a blank spec."""
    refuse_blank_side(spec, role)
    path = Path(spec)
    if path.exists():
        runs = _runs_at(path)
    elif "=" in spec:
        runs = archived_runs(history_dir, selectors=[spec])
        if runs.empty:
            raise ValueError(f"no archived run in {history_dir} matches {spec!r}")
    else:
        runs = archived_runs(history_dir, files=files_of_sweeps(history_dir, [spec]))
    if runs.empty:
        raise ValueError(f"{spec}: holds no runs")
    if where is not None:
        held, runs = len(runs), filter_frame(runs, where)
        if runs.empty:
            raise ValueError(f"{spec}: none of its {held} runs meets --where {where!r}")
    return Side(spec, runs.reset_index(drop=True))


def _runs_at(path: Path) -> pd.DataFrame:
    if path.is_dir():
        for candidate in (path / "tidy" / "runs.csv", path / "runs.csv"):
            if candidate.is_file():
                return read_runs_csv(candidate)
        raise ValueError(f"{path}: a results folder holds tidy/runs.csv (or runs.csv); none here")
    if path.suffix == FILE_SUFFIX:
        return query([path], "SELECT * FROM runs")
    return read_runs_csv(path)


def filter_frame(runs: pd.DataFrame, where: str) -> pd.DataFrame:
    """The rows of `runs` where the user's filter `where` holds (sqlfilter, DuckDB over the
    frame on a connection that reads no file)."""
    import duckdb

    condition = sqlfilter.condition_sql(where)
    connection = sqlfilter.confined_connection()
    try:
        connection.register("runs", runs)
        return connection.execute(f"SELECT * FROM runs WHERE {condition}").df()
    except duckdb.Error as error:
        raise _query_error(error, where, list(map(str, runs.columns))) from error
    finally:
        connection.close()


def write_history(runs_csv, history_dir, config, archived_json, figure=None) -> str:
    """The history stage (rule `history`): archive runs.csv (its results folder as the source), write
    `archived_json` naming the file, and with `figure` the history at a glance there
    (scalesweep/history_figure.py); return the log line."""
    source = Path(runs_csv).resolve().parent.parent
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
    from scalesweep import history_figure  # matplotlib: loaded only when a figure is asked for

    return line + "\n" + history_figure.write_history_figure(history_dir, figure)


def comparison_outputs(compare_with, outdir) -> list[str]:
    """The comparison's files when the config names a sweep to compare with, else none."""
    if compare_with is None:
        return []
    return [f"{outdir}/{name}" for name in COMPARE_OUTPUTS]


