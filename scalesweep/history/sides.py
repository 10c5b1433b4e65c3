"""The two sides of a comparison: the runs a spec names (a results folder, a runs.csv, an
archived file, selectors over the history or a sweep id), narrowed by a `--where` filter, and what
a comparison writes (scalesweep/history/compare.py compares them).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from scalesweep.contract import layout
from scalesweep.contract.input_files import not_a_file_refusal
from scalesweep.history import sqlfilter
from scalesweep.history.query import (
    FILE_SUFFIX,
    archived_runs,
    archived_runs_each,
    known_sweeps,
    query,
    query_error,
    sweep_catalog,
    sweeps_named,
    unreadable,
)
from scalesweep.plan.checks import ConfigError
from scalesweep.plan.history_place import DEFAULT_HISTORY_DIR
from scalesweep.tidy.copies import copies_report, without_copies
from scalesweep.tidy.table import read_runs_csv


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
    return load_sides({role: spec}, history_dir, where)[0]


def load_sides(specs: dict, history_dir=DEFAULT_HISTORY_DIR, where: str | None = None) -> list[Side]:
    """load_side of each {role: spec}, in order. Sides that are selectors over the history are
    read from it together (archived_runs_each): a comparison of two selections reads every file
    once, not twice."""
    for role, spec in specs.items():
        refuse_blank_side(spec, role)
    selecting = [role for role, spec in specs.items() if _selects(spec)]
    selected = {}
    if len(selecting) > 1:
        try:
            selected = dict(zip(selecting, archived_runs_each(history_dir, [[specs[role]] for role in selecting])))
        except ValueError:
            pass  # each side on its own below, so that the error named is the first side's
    return [_side(spec, history_dir, where, selected.get(role)) for role, spec in specs.items()]


def _selects(spec: str) -> bool:
    """Whether `spec` is column=value selectors (what load_side takes it for), not a path."""
    return not Path(spec).exists() and "=" in spec


def _side(spec: str, history_dir, where: str | None, selected: pd.DataFrame | None) -> Side:
    """The side `spec` names; `selected`: its runs, where its selectors were read already."""
    path = Path(spec)
    if path.exists():
        runs = _runs_at(path)
    elif "=" in spec:
        runs = archived_runs(history_dir, selectors=[spec]) if selected is None else selected
        if runs.empty:
            raise ValueError(f"no archived run in {history_dir} matches {spec!r}")
    else:
        (sweep_id, path), = sweeps_named(history_dir, [spec])
        runs = archived_runs(history_dir, selectors=[f"sweep_id={sweep_id}"], files=[path])
        refuse_damaged(spec, [path] if runs.empty else [])
    if runs.empty:
        raise ValueError(f"{spec}: holds no runs")
    if where is not None:
        held, runs = len(runs), filter_frame(runs, where)
        if runs.empty:
            raise ValueError(f"{spec}: none of its {held} runs meets --where {where!r}")
    return Side(spec, runs.reset_index(drop=True))


def refuse_damaged(spec, files) -> None:
    """ValueError naming the damaged archive file of the sweep `spec` names: 'holds no runs'
    would hide that its runs are archived but cannot be read."""
    for path in files:
        why = unreadable(path)
        if why:
            raise ValueError(f"sweep {spec}: its archive file {path} is damaged ({why}): nothing of it "
                             "can be compared; archive the sweep again from its results folder, or "
                             "compare that folder")


def _runs_at(path: Path) -> pd.DataFrame:
    refusal = not_a_file_refusal(path, "a runs table, archive file or results folder")
    if refusal and not path.is_dir():
        raise ValueError(refusal)
    if path.is_dir():
        for candidate in (Path(layout.in_results(path, layout.tidy_table("runs"))), path / "runs.csv"):
            if candidate.is_file():
                return runs_once(candidate)
        raise ValueError(f"{path}: a results folder holds tidy/runs.csv (or runs.csv); none here")
    if path.suffix == FILE_SUFFIX:
        return query([path], "SELECT * FROM runs")
    return runs_once(path)


def runs_once(runs_csv: Path) -> pd.DataFrame:
    """A runs.csv side with each run once: a table written before copies were left out at tidy
    time may hold one run twice (tidy/copies.py), which would pass for two repeats. Each copy
    left out is a warning naming its line."""
    runs = read_runs_csv(runs_csv)
    runs, copied = without_copies(runs, [f"{runs_csv}:{line}" for line in range(2, len(runs) + 2)])
    if copied:
        warnings.warn("\n".join(copies_report(copied)), stacklevel=2)
    return runs


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
        raise query_error(error, where, list(map(str, runs.columns))) from error
    finally:
        connection.close()


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
                             f"{known_sweeps(list(sweep_catalog(history_dir)))}")
        return
    sweeps_named(history_dir, [spec])


def check_compare_with(config, workdir=".") -> None:
    """The sweep to compare with is in the history (or a folder) before any run starts: a
    ConfigError naming the key. The workflow runs it beside the config's other checks
    (scalesweep/plan/checks.py), which cannot read the history."""
    if config["compare_with"] is None:
        return
    try:
        check_side(str(config["compare_with"]), config["history_dir"], workdir)
    except ValueError as error:
        raise ConfigError("compare_with", str(error)) from None


# The files scalesweep/history/compare.py writes: named here, which the workflow imports when it
# is parsed (compare.py loads scipy).
COMPARE_OUTPUTS = ("compare.csv", "compare.png", "summary.txt")


def comparison_outputs(compare_with, outdir) -> list[str]:
    """The comparison's files when the config names a sweep to compare with, else none."""
    if compare_with is None:
        return []
    return [f"{outdir}/{name}" for name in COMPARE_OUTPUTS]
