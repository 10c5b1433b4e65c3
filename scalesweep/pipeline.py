"""The analysis chain, written once: logs -> tidy tables -> scaling tables -> figures -> findings.

The rules run it a stage at a time (workflow/rules/{tables,figures,findings}.smk), `python -m
scalesweep analyze` from logs and runs tables to the end (collect_runs, then
tables_figures_findings), and a sweep that failed (Snakemake's `onerror`, workflow/rules/
outcome.smk) from the tidy tables of every run, with a failed row per missing one
(failure_outcome). Each stage reads the tables the one before wrote, named here once
(FIGURE_TABLES, FINDINGS_TABLES), so a rule, the command and the failure path cannot wire them
differently.

The figures and findings stages import their modules when they run: the workflow imports this
module at every parse, and matplotlib and scipy would slow every one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from scalesweep.analysis import tables
from scalesweep.contract import layout
from scalesweep.contract.hardware import usable_cpu_count
from scalesweep.logs.discover import (
    Refused,
    check_utf8_text,
    dangling_link,
    is_runs_table,
    log_items,
    with_world_sizes,
    world_size_contradictions,
    without_dangling_links,
)
from scalesweep.plan.analysis_settings import AnalysisSettings
from scalesweep.report import outcome
from scalesweep.tidy import after_failure
from scalesweep.tidy.copies import without_copies
from scalesweep.tidy.rows import tidy_frames, tidy_tables, write_pair, write_tidy
from scalesweep.tidy.table import check_runs_file

# The tables each stage after the tables stage reads, by name (tables.TABLES).
FIGURE_TABLES = ("scaling", "fits", "predictions")
FINDINGS_TABLES = ("scaling", "fits", "sweet_spot", "predictions")


def write_tables(runs_csv, table_outputs: dict, settings: AnalysisSettings, network_csv=None,
                 table_written=lambda name: None) -> str:
    """The tables stage: runs.csv (+ the network probe's network.csv) -> every table of
    tables.TABLES at table_outputs[name], `table_written(name)` called as each one is; the log
    line."""
    return tables.write_tables(runs_csv, table_outputs, settings, network_csv, table_written)


# A login node is shared with other users: the figures stage never draws with more processes
# (rule figures asks Snakemake for as many threads).
FIGURE_PROCESSES = 4


def capped_figure_processes(cpus: int) -> int:
    return max(1, min(FIGURE_PROCESSES, cpus))


# Each drawing process imports pandas, scipy and matplotlib again and reads the tables: a few
# CPU-seconds, more than all 17 figures of a sweep of a few dozen runs cost to draw in this one.
# Processes pay off once the figures have this many rows (of the runs or scaling table) to draw.
FIGURE_PROCESS_MIN_ROWS = 1000
# A fork starts with this process's imports, yet each process still pays its own first drawing
# (fonts, text layout caches) and the copied pages: two forks cost 0.4-0.7 CPU-s more than one
# process and save about 1 s of wall. Below this many rows the figures take about 4 s in one
# process on 2 cores, and every `make sweep` of a laptop pays the CPU (measured at b2039a2, 2 runs
# each: 12 runs 3.6-3.9 against 4.2-4.7 CPU-s, 3.6-3.8 against 2.6-3.0 s; 48 runs 4.3-4.4 against
# 5.0-5.5 CPU-s, 4.1-4.2 against 3.3-3.5 s; 120 runs 3.9-4.3 against 4.0-4.9 CPU-s, 3.8-4.3
# against 2.7-3.3 s).
FORKED_PROCESS_MIN_ROWS = 100


def drawing_processes(requested: int | None, table_csv, forked: bool = False) -> int:
    """The drawing processes for the figures of `table_csv` (runs.csv or scaling.csv): `requested`
    (None: one per CPU this process may run on), at most FIGURE_PROCESSES; one for a table of
    fewer than FIGURE_PROCESS_MIN_ROWS rows, or of FORKED_PROCESS_MIN_ROWS when they are
    `forked` (their start-up is then a fork of this process, which has imported everything)."""
    processes = capped_figure_processes(usable_cpu_count() if requested is None else requested)
    least = FORKED_PROCESS_MIN_ROWS if forked else FIGURE_PROCESS_MIN_ROWS
    if processes > 1 and csv_rows(table_csv) < least:
        return 1
    return processes


def csv_rows(path) -> int:
    """Data rows of a CSV file, counted as lines (a quoted field may hold a line break: the count
    is then an upper bound, which only ever starts processes)."""
    with open(path, "rb") as stream:
        return max(0, sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 20), b"")) - 1)


def write_figures(table_files: dict, figures_dir, processes: int | None = 1,
                  formats=layout.FIGURE_FORMATS) -> str:
    """The figures stage: the FIGURE_TABLES of `table_files` ({name: path}) -> figures_dir/*.png
    and *.svg (`formats`), drawn by `processes` processes (None: one per CPU this process may run
    on, up to FIGURE_PROCESSES; one for a small sweep: drawing_processes)."""
    from scalesweep.report import figures  # matplotlib

    processes = drawing_processes(processes, table_files["scaling"])
    return figures.write_figures(*(table_files[name] for name in FIGURE_TABLES), figures_dir,
                                 processes=processes, formats=formats)


def write_findings(table_files: dict, findings_md) -> str:
    """The findings stage: the FINDINGS_TABLES of `table_files` ({name: path}) -> findings_md."""
    from scalesweep.report import findings  # scipy (the fits' predictions)

    return findings.write_findings(*(table_files[name] for name in FINDINGS_TABLES), findings_md)


def import_stage_modules() -> None:
    """Import every module a stage imports when it runs (matplotlib, scipy, DuckDB):
    for a process that then runs stages in several threads at once (Snakemake's local rules),
    which must not import one module concurrently."""
    from scalesweep.history import compare  # noqa: F401
    from scalesweep.report import figures, findings, history_figure  # noqa: F401


def tables_figures_findings(runs_csv, table_outputs: dict, settings: AnalysisSettings, figures_dir,
                            findings_md, network_csv=None, figure_processes: int | None = 1,
                            forked: bool = False, formats=layout.FIGURE_FORMATS):
    """Every stage after the tidy tables, in order: yields each stage's log line as it ends.

    With more than one drawing process (`figure_processes`, as write_figures takes it) the
    figures are drawn while the tables are computed: each figure as soon as its tables are
    written (figures.FigureProcesses), and the findings once the tables are. The tables stage
    runs in one process, and on a laptop the other cores would wait for it. `forked`: the
    drawing processes are forks of this one (only where hardware.may_fork_helpers: Linux, no
    other thread; never Snakemake's), so they are worth starting for a smaller sweep
    (FORKED_PROCESS_MIN_ROWS); the figure modules are imported first, for every fork to inherit.
    `formats`: the figures' file formats (layout.FIGURE_FORMATS)."""
    processes = drawing_processes(figure_processes, runs_csv, forked)
    if processes <= 1:
        yield write_tables(runs_csv, table_outputs, settings, network_csv)
        yield write_figures(table_outputs, figures_dir, processes, formats)
        yield write_findings(table_outputs, findings_md)
    else:
        from scalesweep.report import figures  # matplotlib

        paths = [table_outputs[name] for name in FIGURE_TABLES]
        start_method = "fork" if forked else "spawn"
        with figures.FigureProcesses(paths, figures_dir, processes, start_method, formats) as drawing:
            yield write_tables(runs_csv, table_outputs, settings, network_csv, drawing.table_written)
            # This process would only wait for the drawing ones: it writes the findings meanwhile
            # (2 of 10,000 logs' 16 s), and says so after the figures' line, as in one process.
            findings_line = write_findings(table_outputs, findings_md)
            yield figures.figures_line(drawing.written())
        yield findings_line


# ----------------------------------------------------------------------------- analyze

def read_runs_table(path):
    """A runs table given on the command line, checked (table.check_runs_file) but returned whole:
    check_runs leaves out the failed rows without a GPU count (no place in a scaling series),
    and the runs.csv written from this one must still hold them. Refused naming the file."""
    check_utf8_text(path)
    try:
        runs = check_runs_file(path)
    except ValueError as error:
        raise Refused(str(error)) from None
    return runs


def collect_runs(paths, tidy_dir, all_attempts=False, images_per_epoch=None, world_sizes=None,
                 processes: int | None = 1):
    """Parse the logs, join the runs tables, write tidy_dir/{epochs,runs}.csv, each run once
    (scalesweep/tidy/copies.py: a run read twice, from two logs or a log and a table, is one run).
    `images_per_epoch`: the training set's size, for logs that count steps instead of images (Keras).
    `world_sizes`: (log file, GPUs) pairs or {log file: GPUs} for logs that print no world size
    (discover.with_world_sizes); a file there that is none of the logs read, given two counts, or
    whose log says another world size is a ValueError, before anything is written.
    `processes`: the processes reading the logs (None: one per CPU this process may run on, up
    to FIGURE_PROCESSES; rows.tidy_tables forks them, so never from Snakemake's process).

    Returns (runs.csv's path or None when there is no run at all, [refused inputs], [copies
    left out]).
    """
    missing = [str(p) for p in paths if not p.exists() and not dangling_link(p)]
    if missing:
        raise FileNotFoundError(f"no such file or folder: {', '.join(missing)}")
    paths = without_dangling_links(paths)
    items, refused = log_items(paths, all_attempts)
    items, unmatched = with_world_sizes(items, world_sizes)
    if unmatched:
        raise ValueError(f"--world-size {', '.join(unmatched)}: not among the logs read")
    processes = capped_figure_processes(usable_cpu_count() if processes is None else processes)
    tidied = tidy_tables(items, images_per_epoch, processes=processes)
    contradicted = world_size_contradictions(tidied.runs, world_sizes)
    if contradicted:
        raise ValueError("; ".join(contradicted) + ": leave out --world-size for a log that prints its own")
    refused += tidied.refused
    frames, sources = [tidied.runs], [tidied.runs["log"].tolist()]
    for path in (p for p in paths if p.is_file() and is_runs_table(p)):
        try:
            frames.append(read_runs_table(path))
        except Refused as error:
            refused.append(str(error))
            continue
        sources.append([f"{path}:{line}" for line in range(2, len(frames[-1]) + 2)])
    kept = [(frame, rows) for frame, rows in zip(frames, sources) if not frame.empty]
    if not kept:
        return None, refused, tidied.copies_left_out
    runs, copied = without_copies(pd.concat([frame for frame, _ in kept], ignore_index=True),
                                  [source for _, rows in kept for source in rows])
    _, runs_csv = write_tidy(tidied.epochs, runs, tidy_dir)
    return runs_csv, refused, tidied.copies_left_out + copied


# ----------------------------------------------------------------------------- after failures

def failure_outcome(items, tidy_outputs: dict, rebuild: dict, marker, digests=None, peak_override=None) -> str:
    """The failure handler (`onerror`): the tidy tables of every run, with a failed row per
    missing one and SLURM's verdict where accounting has one (tidy_outputs: {"epochs", "runs"}
    paths), written together or not at all; then the scaling tables, figures and findings
    rebuilt from them (rebuild: rebuild_tables_and_figures' arguments after runs_csv); then the
    closing lines, from the runs in memory (peak_override: see tidy_frames). `marker`
    (tidy/after_failure.py) records that these files are not the rules' own, so the next
    invocation tidies again. A file that cannot be written is named with why, and nothing already
    written is touched (scalesweep/contract/atomic.py)."""
    epochs, runs = tidy_frames(items, ask_slurm=True, digests=digests, peak_override=peak_override)
    runs_csv = Path(tidy_outputs["runs"])
    written = [tidy_outputs["epochs"], runs_csv, *rebuild["table_outputs"].values(),
               rebuild["figures_dir"], rebuild["findings_md"]]
    try:
        after_failure.mark(marker, written)
        write_pair(epochs, runs, tidy_outputs["epochs"], runs_csv)
    except OSError as error:
        first = (f"scalesweep: {outcome.not_written(error)}: the tidy tables, and the tables, figures and "
                 "findings made from them, are those of before this sweep")
        source = f"not written to {runs_csv}"
    else:
        first = rebuild_tables_and_figures(runs_csv, **rebuild)
        source = str(runs_csv)
        try:
            after_failure.mark(marker, written)
        except OSError as error:
            first += f"\nscalesweep: {outcome.not_written(error)}: run `snakemake --forcerun tidy` next"
    as_text = runs.astype(object).where(runs.notna(), "").astype(str)
    return "\n".join([first, outcome.outcome_lines(as_text, source, runs_csv.parent.parent)])


def rebuild_tables_and_figures(runs_csv, table_outputs: dict, settings: AnalysisSettings, figures_dir,
                               findings_md) -> str:
    """After a sweep with failures: the scaling tables, figures and findings from the runs.csv
    just written, so none still shows a run that runs.csv lists as failed. The failure may be
    the tables' own: then say so and leave runs.csv standing."""
    try:
        list(tables_figures_findings(runs_csv, table_outputs, settings, figures_dir, findings_md))
    except Exception as error:  # noqa: BLE001  (the closing lines come next, whatever failed)
        why = outcome.not_written(error) if isinstance(error, OSError) else f"{type(error).__name__}: {error}"
        return f"scalesweep: tables, figures and findings not all rebuilt: {why}; {discard(table_outputs, figures_dir, findings_md)}"
    return "scalesweep: tables, figures and findings rebuilt from the runs table"


def discard(table_outputs: dict, figures_dir, findings_md) -> str:
    """Remove the tables, figures and findings of a rebuild that stopped part-way (a disk that
    filled up): some would be new and some of before, and no file says which. Nothing measured
    goes (runs.csv and the logs stay), the space comes back, and the next run of the workflow
    makes them again. What cannot be removed is named."""
    left = []
    for path in [*map(Path, table_outputs.values()), Path(findings_md)]:
        try:
            path.unlink(missing_ok=True)
        except OSError as error:
            left.append(f"{path} ({error.strerror or error})")
    try:
        shutil.rmtree(figures_dir)
    except FileNotFoundError:
        pass
    except OSError as error:
        left.append(f"{figures_dir} ({error.strerror or error})")
    if left:
        return "these may mix old and new results, and could not be removed: " + ", ".join(left)
    return "removed them, so none shows what it showed before this sweep; the next `snakemake` makes them again"
