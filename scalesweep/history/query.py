"""Reading the sweep history with DuckDB: its files, the archived runs, selectors and `--where`
filters, the list of sweeps and each sweep's scaling table (scalesweep/history/archive.py writes
the files: `<history>/sweep-<sweep id>.parquet`, one per sweep).

DuckDB reads the files in place (`read_parquet`), in memory: no server and no lock held on the
folder. A damaged file (a disk full, a copy cut short) or a foreign one (a Parquet file named like
an archive, without the sweep's columns) is skipped with a warning naming it; the rest of the
history still answers, and archiving the same sweep again rewrites a damaged file. A copied
archive file adds no run: each run is read once (by run id, `_runs_select`). DuckDB reads each path
as a glob pattern, so the paths it is given have their pattern characters escaped
(`duckdb_path`): a folder named `hist[1]` or `h*` reads its own files, never those of `hist1` or
`h2`.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd

from scalesweep.analysis.scaling import scaling_table
from scalesweep.history import sqlfilter, store
from scalesweep.history.store import FILE_PREFIX, FILE_SUFFIX, duckdb_path, sql_text, sweep_files, sweep_id_of
from scalesweep.tidy.provenance import SWEEP_COLUMNS
from scalesweep.tidy.table import NON_KEY_COLUMNS

SELECTOR_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


class DamagedArchiveWarning(UserWarning):
    """A history file that DuckDB cannot read: left out of every answer, named in the message."""


class ForeignFileWarning(UserWarning):
    """A Parquet file named like an archive that is none (no sweep_id column): left out of every
    answer, named in the message."""


# The column that marks a Parquet file as one of our archives (archive_frame writes it first).
MARKER_COLUMN = "sweep_id"


# ----------------------------------------------------------------------------- reading

def refuse_missing_history(history_dir) -> None:
    """ValueError when `history_dir` is no folder: a mistyped --history would otherwise list "no
    archived sweep" as if the history were empty."""
    path = Path(history_dir)
    if not path.exists():
        raise ValueError(f"--history {history_dir}: no such folder (no sweep was archived there; "
                         "a sweep archives into its config's history_dir)")
    if not path.is_dir():
        raise ValueError(f"--history {history_dir}: is not a folder")


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


def sweep_catalog(history_dir) -> dict[str, Path]:
    """{sweep id: the file holding it}, oldest id first: a sweep file's id is its name, a store's
    ids its sweep_id column (a damaged store holds none)."""
    import duckdb

    catalog = {}
    connection = duckdb.connect()
    try:
        for path in sweep_files(history_dir):
            if not store.is_store(path):
                catalog.setdefault(sweep_id_of(path), path)
                continue
            try:
                held = store.sweeps_by_file(connection, [path])[str(path)]
            except duckdb.Error:
                continue  # named as damaged by the queries that read it
            catalog.update((sweep_id, path) for sweep_id in held if sweep_id not in catalog)
    finally:
        connection.close()
    return dict(sorted(catalog.items()))


def sweeps_named(history_dir, ids) -> list[tuple[str, Path]]:
    """(sweep id, its file) of each sweep id (or unique prefix of one); ValueError naming the id
    otherwise."""
    catalog = sweep_catalog(history_dir)
    chosen = []
    for wanted in ids:
        matching = [sweep_id for sweep_id in catalog if sweep_id.startswith(wanted)]
        if not matching:
            raise ValueError(f"no archived sweep {wanted!r} in {history_dir}: {known_sweeps(list(catalog))}")
        if len(matching) > 1:
            raise ValueError(f"sweep id {wanted!r} is ambiguous in {history_dir}: {', '.join(matching[:5])}")
        chosen.append((matching[0], catalog[matching[0]]))
    return chosen


# Sweep ids a message lists, the newest: the one a user meant is most often a recent one.
LISTED_SWEEPS = 5


def known_sweeps(sweep_ids) -> str:
    """'archived: <the newest ids> (N sweeps; `scalesweep history` lists them)', or that
    there is none; `sweep_ids` oldest first."""
    if not sweep_ids:
        return "the history holds no sweep"
    newest = list(sweep_ids)[-LISTED_SWEEPS:][::-1]
    more = f" and {len(sweep_ids) - len(newest)} older" if len(sweep_ids) > len(newest) else ""
    return f"archived: {', '.join(newest)}{more} (`scalesweep history` lists them)"


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
    condition, scalesweep/history/sqlfilter.py) and every `column=value` selector; an empty frame when
    the history is empty."""
    files = sweep_files(history_dir) if files is None else list(files)
    _refuse_bad_filter(where)
    if not files:
        return pd.DataFrame(columns=list(SWEEP_COLUMNS))
    condition, parameters = _selector_condition(parse_selectors(selectors))
    return query(files, f"SELECT * FROM runs WHERE {condition}", parameters, where=where)


# Marks the rows of each selector set in archived_runs_each's one query: no column of a run is named so.
SELECTED_MARK = "__scalesweep_selected_{}"


def archived_runs_each(history_dir, selector_sets, where: str | None = None) -> list[pd.DataFrame]:
    """archived_runs(history_dir, where, selectors) of each of `selector_sets`, from one reading
    of the history: each reading opens every file (0.4 s of 1,000 files), and a comparison of two
    selections made two."""
    files = sweep_files(history_dir)
    _refuse_bad_filter(where)
    if not files:
        return [pd.DataFrame(columns=list(SWEEP_COLUMNS)) for _ in selector_sets]
    conditions = [_selector_condition(parse_selectors(selectors)) for selectors in selector_sets]
    marks = [SELECTED_MARK.format(number) for number in range(len(conditions))]
    selected = ", ".join(f"coalesce(({condition}), false) AS {mark}" for (condition, _), mark in zip(conditions, marks))
    either = " OR ".join(f"({condition})" for condition, _ in conditions)
    parameters = [value for _, values in conditions for value in values]
    runs = query(files, f"SELECT *, {selected} FROM runs WHERE {either}", parameters * 2, where=where)
    return [runs[runs[mark]].drop(columns=marks).reset_index(drop=True) for mark in marks]


def archived_sweeps_of(history_dir, run_ids) -> dict[str, str]:
    """{run_id: the sweep id that archived it} for the `run_ids` the history holds (older files
    lack run ids). Each file is read once per process while it stays as it was (_held_runs)."""
    held = _held_runs(history_dir)
    return {run: held[run] for run in dict.fromkeys(run_ids) if run in held}


# The run ids read so far: {"files": identities of the files read, "runs": {run_id: sweep id}}.
# Archive files are never modified once written, so archiving a sweep reads only the files
# added since the last archive in this process: reading every file for every sweep made
# archiving 1,000 sweeps quadratic (469 s). A file that changed or vanished since it was read
# makes the whole history read again.
_held: dict = {"files": frozenset(), "runs": {}}


def _held_runs(history_dir) -> dict[str, str]:
    """{run_id: oldest sweep id holding it} over the history's readable files."""
    # Each file's identity is taken before it is read: a file replaced meanwhile is read again.
    present = {str(path): store.file_identity(str(path)) for path in sweep_files(history_dir)}
    if not _held["files"] <= set(present.values()):
        _held.update(files=frozenset(), runs={})
    unread = [path for path, identity in present.items() if identity not in _held["files"]]
    if unread:
        read, runs = _run_ids_in(unread)
        merged = dict(_held["runs"])
        for run, sweep_id in runs.items():
            merged[run] = min(sweep_id, merged.get(run, sweep_id))
        _held.update(files=_held["files"] | {present[path] for path in read}, runs=merged)
    return _held["runs"]


def _run_ids_in(files) -> tuple[list[str], dict[str, str]]:
    """(the files read, {run_id: oldest sweep id}) of `files`; damaged ones are left out."""
    present, readable = _query(files, "SELECT * FROM raw_runs LIMIT 0")
    if "run_id" not in present.columns:
        return readable, {}
    held = query(readable, "SELECT run_id, min(sweep_id) AS sweep_id FROM raw_runs "
                 "WHERE run_id IS NOT NULL GROUP BY run_id")
    return readable, dict(zip(held["run_id"], held["sweep_id"]))


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
    return query(files, f"SELECT {', '.join(map(sql_name, columns))} FROM runs")


def query(files, sql: str, parameters=(), where: str | None = None) -> pd.DataFrame:
    """`sql` over `runs`: every file's rows (columns united by name, each run once)
    where the user's filter `where` holds (sqlfilter: one condition, evaluated where no file
    but these can be read). A file DuckDB cannot read is left out with a
    DamagedArchiveWarning, and the query runs on the others."""
    return _query(files, sql, parameters, where)[0]


def _query(files, sql: str, parameters=(), where: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """query() and the files it could read."""
    import duckdb

    condition = None if where is None else sqlfilter.condition_sql(where)  # refused before any file is read
    readable, relisted = [str(path) for path in files], 0
    while readable:
        connection = _reading_connection(readable)
        try:
            foreign = _foreign(connection, readable)
            for path in foreign:
                warnings.warn(f"sweep history: skipping {path}: a Parquet file named like an archive "
                              f"but none (no {MARKER_COLUMN} column)", ForeignFileWarning, stacklevel=2)
            if foreign:
                readable = [path for path in readable if path not in foreign]
                continue
            views = _views(connection, readable)
            runs = "SELECT * FROM all_runs" + ("" if condition is None else f" WHERE {condition}")
            return connection.execute(f"WITH {views}, runs AS ({runs}) {sql}", list(parameters)).df(), readable
        except duckdb.Error as error:
            if relisted < RELISTINGS and any(not Path(path).exists() for path in readable):
                _forget_connection()
                readable, relisted = _relisted(readable), relisted + 1
                continue
            damaged = {} if _is_query_error(error) else _damaged(readable, error)
            if not damaged:
                columns = _reader["columns"] if _reader.get("views_of") == readable else []
                problem = query_error(error, where, columns)
                _forget_connection()
                raise problem from error
            _forget_connection()
            for path, reason in damaged.items():
                warnings.warn(f"sweep history: skipping damaged file {path}: {reason}",
                              DamagedArchiveWarning, stacklevel=2)
            readable = [path for path in readable if path not in damaged]
    return pd.DataFrame(columns=list(SWEEP_COLUMNS)), []


# A file listed but gone when read was compacted meanwhile (history/store.py): its sweeps are in a
# store that is in place, found by listing the folder again. A few times, not forever: a history
# compacted faster than it is read is a bug to see, not a loop.
RELISTINGS = 3


def _relisted(files: list[str]) -> list[str]:
    """The history files of the folders of `files`, listed again."""
    folders = dict.fromkeys(str(Path(path).parent) for path in files)
    return [str(path) for folder in folders for path in sweep_files(folder)]


# One DuckDB database per process for reading the history, kept while the files it has read stay
# as they were: every query reads each file's footer (the schema check, the view, the rows), and
# DuckDB's Parquet metadata cache then reads a footer once, not four times per query and twice
# per comparison (1,000 files: 0.8 s of a comparison's 1.7 s in DuckDB). The database is replaced
# whenever a file it has read has another size, inode or modification time (in nanoseconds) than
# when it read it, so a stale footer never depends on how the cache tells a replaced file. A file
# added since (the sweep just archived) is read fresh by the same database: opening one costs
# 30-60 ms, paid again for every sweep when archiving many in one process.
_reader: dict = {}


def _reading_connection(files: list[str]):
    """The shared database, able to read the folders of `files` only (sqlfilter.confined_connection)."""
    identities = {path: store.file_identity(path) for path in files}
    folders = {str(Path(path).parent) for path in files}
    if not _reader_serves(identities, folders):
        _forget_connection()
        connection = sqlfilter.confined_connection([*folders, *map(duckdb_path, folders)],
                                                   {"parquet_metadata_cache": True})
        _reader.update(files={}, folders=folders, connection=connection)
    _reader["files"].update(identities)
    return _reader["connection"]


def _reader_serves(identities: dict, folders: set) -> bool:
    """Whether the shared database may read these files: it reads their folders (and no other),
    and each file it read before is as it was then."""
    if "connection" not in _reader or folders != _reader["folders"]:
        return False
    read = _reader["files"]
    return all(read.get(path, identity) == identity for path, identity in identities.items())


def _forget_connection() -> None:
    """Drop the shared database (after an error its state is not to be trusted)."""
    connection = _reader.pop("connection", None)
    _reader.clear()
    if connection is not None:
        connection.close()


def _foreign(connection, files: list[str]) -> list[str]:
    """The files without the archive's marker column (only their footers are read, each once
    per database: it is kept only while the files it read are unchanged)."""
    marked = _reader.setdefault("marked", {})
    unseen = [path for path in files if path not in marked]
    if unseen:
        found = {row[0] for row in connection.execute(
            f"SELECT DISTINCT file_name FROM parquet_schema({store.paths_sql(unseen)}) WHERE name = ?",
            [MARKER_COLUMN]).fetchall()}
        marked.update((path, path in found) for path in unseen)
    return [path for path in files if not marked[path]]


# DuckDB's names for a row's file and its place in it (virtual columns of read_parquet): what
# tells the copies of one run apart. A history whose runs have a column of either name hides
# them, and its copies are then found by a window over whole rows (slower, the same runs).
ROW_PLACE = ("filename", "file_row_number")


def _views(connection, files: list[str]) -> str:
    """The named queries `raw_runs` (every file's rows, columns united by name) and `all_runs`
    (each run once, _runs_select) over `files`, for a WITH clause; worked out once for as long as
    the database reads these files. (Not views: DuckDB reads every file's schema again for each
    view made or described, 0.07 s over 1,000 files.)"""
    if _reader.get("views_of") != files:
        source = f"read_parquet({store.paths_sql(files)}, union_by_name = true)"
        columns = [column[0] for column in connection.execute(f"SELECT * FROM {source} LIMIT 0").description]
        copies = _copies(connection, source, columns)
        _reader.update(views_of=list(files), columns=columns,
                       views=f"raw_runs AS (SELECT * FROM {source}), all_runs AS ({_runs_select(source, columns, copies)})")
    return _reader["views"]


def _copies(connection, source: str, columns: list[str]) -> str | None:
    """None where no sweep is read from two files and no run is held twice; else the SQL of the
    rows that _runs_select leaves out (kept as the table run_copies where DuckDB's row places tell
    them): every row of a sweep read from a file after the first holding it (by name, stores
    first: a copy of a file under any name, of any format, with or without run ids; a sweep in
    two stores while a compaction removes what its store replaced), then each run's later copies."""
    sweep_twice = connection.execute(f"SELECT sweep_id FROM {source} GROUP BY sweep_id "
                                     "HAVING count(DISTINCT filename) > 1 LIMIT 1").fetchall()
    run_twice = "run_id" in columns and connection.execute(
        f"SELECT run_id FROM {source} WHERE run_id IS NOT NULL GROUP BY run_id HAVING count(*) > 1 LIMIT 1").fetchall()
    if not (sweep_twice or run_twice):
        return None
    if any(name in columns for name in ROW_PLACE):
        return "window" if "run_id" in columns else None
    place = ", ".join(ROW_PLACE)
    run_id = "run_id" if "run_id" in columns else "NULL"
    connection.execute(
        f"CREATE OR REPLACE TEMP TABLE run_copies AS WITH placed AS (SELECT {place}, sweep_id, {run_id} AS run_id, "
        f"filename <> min(filename) OVER (PARTITION BY sweep_id) AS later_file FROM {source}) "
        f"SELECT {place} FROM placed WHERE later_file UNION ALL "
        f"SELECT {place} FROM placed WHERE NOT later_file AND run_id IS NOT NULL "
        f"QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY sweep_id, {place}) > 1")
    return "run_copies"


def _runs_select(source: str, columns: list[str], copies: str | None) -> str:
    """Every archived run once, whatever the files. A run read from two files (a copied archive
    file, a sweep archived before run ids existed and again after) keeps its oldest sweep's row
    (of two copies in one sweep, the first file's by name); rows without a run id (older
    archives) are all kept. A filter applies after that (_query). Only a history that holds a
    run twice pays for finding the copies (_copies), once per set of files. A sweep archived
    before requested_per_gpu_batch asked for its per_gpu_batch (tidy/table.py's
    with_requested_batch), so its configurations stay what they were beside later sweeps'."""
    every_run = f"SELECT * FROM {source} AS raw"
    if "per_gpu_batch" in columns:
        every_run = (f"SELECT * REPLACE (coalesce(requested_per_gpu_batch, per_gpu_batch) AS requested_per_gpu_batch) "
                     f"FROM {source} AS raw" if "requested_per_gpu_batch" in columns
                     else f"SELECT *, per_gpu_batch AS requested_per_gpu_batch FROM {source} AS raw")
    if copies == "window":
        return every_run + " QUALIFY run_id IS NULL OR row_number() OVER (PARTITION BY run_id ORDER BY sweep_id) = 1"
    if copies is not None:
        joined = " AND ".join(f"raw.{name} = copy.{name}" for name in ROW_PLACE)
        return every_run + f" ANTI JOIN {copies} AS copy ON {joined}"
    return every_run


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


def query_error(error: Exception, where: str | None, columns: list[str]) -> ValueError:
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
        name = sql_name(column)
        parts.append(f"(CAST({name} AS VARCHAR) = ? OR (TRY_CAST(? AS DOUBLE) IS NOT NULL "
                     f"AND TRY_CAST({name} AS DOUBLE) = TRY_CAST(? AS DOUBLE)))")
        parameters += [value, value, value]
    return " AND ".join(parts), parameters


def sql_name(column: str) -> str:
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
    files = sweep_files(history_dir)
    columns = ["sweep_id", *(name for name, _ in LISTING[:3]), "configurations",
               *(name for name, _ in LISTING[3:])]
    _refuse_bad_filter(where)
    if not files:
        return pd.DataFrame(columns=columns)
    present, files = _query(files, "SELECT * FROM runs LIMIT 0")
    present = list(present.columns)
    keys = [c for c in present if c not in NON_KEY_COLUMNS or c == "gpus"]
    fields = {c: (sql_name(c) if c in present else "NULL") for c in ("cluster", "gpu_model", "cpu_model")}
    condition, parameters = _selector_condition(parse_selectors(selectors))
    selects = ", ".join(f"{_fill(sql, fields)} AS {name}" for name, sql in LISTING)
    distinct = f"count(DISTINCT row({', '.join(map(sql_name, keys))}))" if keys else "1"
    sql = (f"SELECT sweep_id, {selects}, {distinct} AS configurations FROM runs "
           f"WHERE {condition} GROUP BY sweep_id ORDER BY date, sweep_id")
    if not files:
        return pd.DataFrame(columns=columns)
    return query(files, sql, parameters, where=where)[columns]


def _fill(sql: str, fields: dict) -> str:
    for name, expression in fields.items():
        sql = re.sub(rf"\b{name}\b", expression, sql)
    return sql


# ----------------------------------------------------------------------------- over time

def history_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The scaling table of each archived sweep, with its `sweep_id` and `sweep_date`."""
    tables = []
    for (sweep_id, date), part in runs.groupby(["sweep_id", "sweep_date"], sort=True):
        table = scaling_table(part.drop(columns=list(SWEEP_COLUMNS)))
        tables.append(table.assign(sweep_id=sweep_id, sweep_date=pd.to_datetime(date, utc=True)))
    if not tables:
        return pd.DataFrame(columns=["sweep_id", "sweep_date"])
    return pd.concat(tables, ignore_index=True)
