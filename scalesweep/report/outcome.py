"""What a sweep ends with on the terminal: how many runs are ok or failed (each failed one with
its reason and log), and where the tables, figures, findings, archive and report are. Snakemake's
own output ends with hundreds of job lines and no word of either.

After failures (Snakemake's `onerror`, scalesweep/pipeline.py: failure_outcome) the same lines
come from the runs just tidied, in memory: a disk that is full (ENOSPC), over quota (EDQUOT) or
read-only (EROFS) may refuse the tables, and the user still needs to see what ran and why the
rest failed, plus which file was not written.
"""

from pathlib import Path

import pandas as pd

from scalesweep.contract import layout
from scalesweep.tidy.table import status_counts

RUN_AXES = ("framework", "model", "dataset", "gpus")


def run_label(run: dict, with_repeat: bool = False) -> str:
    """'pytorch vit_tiny d gpus=2', with ' repeat=1' where the sweep has repeats: two failures of
    one configuration would read as one."""
    label = " ".join(str(run[axis]) for axis in RUN_AXES[:-1]) + f" gpus={run['gpus']}"
    return label + (f" repeat={run.get('repeat')}" if with_repeat else "")


def failed_lines(runs: pd.DataFrame) -> list:
    repeats = "repeat" in runs and runs["repeat"].replace("", pd.NA).dropna().nunique() > 1
    failed = runs[runs["status"] != "ok"]
    return [f"  {row['status']}: {run_label(row, repeats)}: {row.get('reason') or 'no reason recorded'} "
            f"(log: {row.get('log')})"
            for row in failed.to_dict("records")]


def where_lines(results: Path) -> list:
    """The outputs that exist, one line each."""
    lines = []
    tables_dir, figures_dir, findings, archived = (
        Path(layout.in_results(results, path))
        for path in (layout.TABLES, layout.FIGURES, layout.FINDINGS, layout.archived_marker()))
    tables = sorted(p.name for p in tables_dir.glob("*.csv"))
    if tables:
        lines.append(f"  tables:   {tables_dir}/ ({', '.join(tables)})")
    counts = {suffix: len(list(figures_dir.glob(f"*.{suffix}"))) for suffix in layout.FIGURE_FORMATS}
    if any(counts.values()):
        written = ", ".join(f"{count} {suffix.upper()}" for suffix, count in counts.items() if count)
        lines.append(f"  figures:  {figures_dir}/ ({written})")
    if findings.exists():
        lines.append(f"  findings: {findings}")
    if archived.exists():
        lines.append(f"  archive:  named in {archived} (python -m scalesweep history)")
    lines.append("  report:   snakemake --report report.html")
    return lines


def sweep_outcome(results=layout.RESULTS) -> str:
    """The closing lines of a sweep that succeeded (Snakemake's onsuccess), from
    results/tidy/runs.csv and what results/ holds. Without a runs table the targets asked for
    were made and none of them was the tables (a single run's result, a dataset): no error to
    point at, and what was measured is on disk for the next full sweep to tidy."""
    results = Path(results)
    runs_csv = Path(layout.in_results(results, layout.tidy_table("runs")))
    if not runs_csv.exists():
        return (f"scalesweep: the targets asked for are made; no runs table yet ({runs_csv}): "
                "snakemake without a target tidies every run into it, training only what is missing")
    return outcome_lines(pd.read_csv(runs_csv, dtype=str, keep_default_na=False), str(runs_csv), results)


def outcome_lines(runs: pd.DataFrame, source: str, results: Path) -> str:
    """The closing lines of the runs in `runs` (as text; `source` says where they are)."""
    lines = [f"scalesweep: {status_counts(runs)} ({source})", *failed_lines(runs), *where_lines(results)]
    # An out-of-memory run finished with its answer ("this batch does not fit"): it has a result.
    unfinished = int((~runs["status"].isin(["ok", "oom"])).sum())
    if unfinished:
        lines.append(f"  the same command again runs only the {unfinished} configuration(s) without a result")
    return "\n".join(lines)


def not_written(error: OSError) -> str:
    """'<file>: not written (No space left on device)' of an OSError of a write."""
    return f"{error.filename or 'a file'}: not written ({error.strerror or error})"


