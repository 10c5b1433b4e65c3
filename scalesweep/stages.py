"""File-to-file steps shared by the workflow's rules and `python -m scalesweep analyze`.

Each reads its inputs, calls the pure functions of its stage module and writes its outputs, and
returns a one-line summary for the rule's log.
"""

from pathlib import Path

import pandas as pd

from scalesweep import plots, scaling, tidy


def status_counts(runs):
    """e.g. '12 runs: 11 ok, 1 failed'."""
    counts = runs["status"].value_counts()
    return f"{len(runs)} runs: " + ", ".join(f"{n} {status}" for status, n in counts.items())


def tidy_logs(items, outdir):
    """(log path or None, run axes) pairs -> outdir/epochs.csv and outdir/runs.csv."""
    epochs, runs = tidy.runs_table(items)
    tidy.write_tidy(epochs, runs, Path(outdir))
    return status_counts(runs)


def scaling_csv(runs_csv, out_csv):
    table = scaling.scaling_table(pd.read_csv(runs_csv))
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_csv, index=False)
    return f"{len(table)} rows"


def figures(scaling_csv_path, outdir):
    written = plots.plot_scaling(pd.read_csv(scaling_csv_path), outdir)
    return f"{len(written)} figures: " + " ".join(Path(path).name for path in written)


def write_log(path, line):
    Path(path).write_text(line + "\n")
