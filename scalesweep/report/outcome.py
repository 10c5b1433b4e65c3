"""What a sweep ends with on the terminal: how many runs are ok or failed (each failed one with
its reason and log), and where the tables, figures, findings, archive and report are. Snakemake's
own output ends with hundreds of job lines and no word of either.

After failures (Snakemake's `onerror`) the same lines come from the runs just tidied, in memory:
a disk that is full (ENOSPC), over quota (EDQUOT) or read-only (EROFS) may refuse the tables, and
the user still needs to see what ran and why the rest failed, plus which file was not written.
"""

from pathlib import Path

import pandas as pd

from scalesweep import tidy
from scalesweep.tidy import status_counts

RUN_AXES = ("framework", "model", "dataset", "gpus")


def run_label(run: dict) -> str:
    return " ".join(str(run[axis]) for axis in RUN_AXES[:-1]) + f" gpus={run['gpus']}"


def failed_lines(runs: pd.DataFrame) -> list:
    failed = runs[runs["status"] != "ok"]
    return [f"  {row['status']}: {run_label(row)}: {row.get('reason') or 'no reason recorded'} (log: {row.get('log')})"
            for row in failed.to_dict("records")]


def where_lines(results: Path) -> list:
    """The outputs that exist, one line each."""
    lines = []
    tables = sorted(p.name for p in (results / "tables").glob("*.csv"))
    if tables:
        lines.append(f"  tables:   {results / 'tables'}/ ({', '.join(tables)})")
    figures = list((results / "figures").glob("*.png"))
    if figures:
        lines.append(f"  figures:  {results / 'figures'}/ ({len(figures)} PNG)")
    if (results / "findings.md").exists():
        lines.append(f"  findings: {results / 'findings.md'}")
    if (results / "tables" / "archived.json").exists():
        lines.append(f"  archive:  named in {results / 'tables' / 'archived.json'} (python -m scalesweep history)")
    lines.append("  report:   snakemake --report report.html")
    return lines


def sweep_outcome(results="results") -> str:
    """The closing lines of a sweep, from results/tidy/runs.csv and what results/ holds."""
    results = Path(results)
    runs_csv = results / "tidy" / "runs.csv"
    if not runs_csv.exists():
        return "scalesweep: no runs table was written (see the errors above)"
    return outcome_lines(pd.read_csv(runs_csv, dtype=str, keep_default_na=False), str(runs_csv), results)


def outcome_lines(runs: pd.DataFrame, source: str, results: Path) -> str:
    """The closing lines of the runs in `runs` (as text; `source` says where they are)."""
    lines = [f"scalesweep: {status_counts(runs)} ({source})", *failed_lines(runs), *where_lines(results)]
    # An out-of-memory run finished with its answer ("this batch does not fit"): it has a result.
    unfinished = int((~runs["status"].isin(["ok", "oom"])).sum())
    if unfinished:
        lines.append(f"  the same command again runs only the {unfinished} configuration(s) without a result")
    return "\n".join(lines)


def failure_outcome(items, tidy_outputs: dict, rebuild: dict, digests=None) -> str:
    """The failure handler (`onerror`): the tidy tables of every run, with a failed row per
    missing one and SLURM's verdict where accounting has one (tidy_outputs: {"epochs", "runs"}
    paths), written together or not at all; then the scaling tables, figures and findings
    rebuilt from them (rebuild: rebuild_tables_and_figures' arguments after runs_csv); then the
    closing lines, from the runs in memory. A file that cannot be written is named with why,
    and nothing already written is touched (scalesweep/atomic.py)."""
    epochs, runs = tidy.tidy_frames(items, ask_slurm=True, digests=digests)
    runs_csv = Path(tidy_outputs["runs"])
    try:
        tidy.write_pair(epochs, runs, tidy_outputs["epochs"], runs_csv)
    except OSError as error:
        first = (f"scalesweep: {not_written(error)}: the tidy tables, and the tables, figures and findings "
                 "made from them, are those of before this sweep")
        source = f"not written to {runs_csv}"
    else:
        first = rebuild_tables_and_figures(runs_csv, **rebuild)
        source = str(runs_csv)
    as_text = runs.astype(object).where(runs.notna(), "").astype(str)
    return "\n".join([first, outcome_lines(as_text, source, runs_csv.parent.parent)])


def not_written(error: OSError) -> str:
    """'<file>: not written (No space left on device)' of an OSError of a write."""
    return f"{error.filename or 'a file'}: not written ({error.strerror or error})"


def rebuild_tables_and_figures(runs_csv, table_outputs: dict, analysis: dict, scaling_csv, fits_csv,
                               figures_dir, findings_md) -> str:
    """After a sweep with failures: the scaling tables, figures and findings from the runs.csv
    just written, so none still shows a run that runs.csv lists as failed. The failure may be
    the tables' own: then say so and leave runs.csv standing."""
    from scalesweep import figures, findings, tables

    try:
        tables.write_tables(runs_csv, table_outputs, analysis["efficiency_floor_pct"],
                            analysis["gpu_hour_budget"], analysis["epoch_budget"],
                            analysis["greenest_time_bound_s"], analysis["allow_superlinear"])
        figures.write_figures(scaling_csv, fits_csv, figures_dir)
        findings.write_findings(scaling_csv, fits_csv, table_outputs["sweet_spot"], findings_md)
    except OSError as error:
        return f"scalesweep: tables, figures and findings not all rebuilt: {not_written(error)}"
    except Exception as error:  # noqa: BLE001
        return f"scalesweep: tables, figures and findings not rebuilt: {type(error).__name__}: {error}"
    return "scalesweep: tables, figures and findings rebuilt from the runs table"
