"""File-to-file steps shared by the workflow's rules and `python -m scalesweep analyze`.

Each reads its inputs, calls the pure functions of its stage module, writes its outputs and
returns a one-line summary for the rule's log.
"""

from pathlib import Path

import pandas as pd

from scalesweep import accounting, maxbatch, scaling, sweetspot, tidy

# fits (scipy) and plots (matplotlib, seaborn) are imported by the functions that use them: every
# Snakemake run imports this module while it parses the workflow (for TABLES), each cluster job's
# jobstep included, and they would add about a second to each.

TABLES = ("scaling", "fits", "sweet_spot", "acceleration", "compare_models", "compare_datasets")


def status_counts(runs):
    """e.g. '12 runs: 11 ok, 1 failed'."""
    counts = runs["status"].value_counts()
    return f"{len(runs)} runs: " + ", ".join(f"{n} {status}" for status, n in counts.items())


def tidy_logs(items, outdir, ask_slurm=False):
    """(log path or None, run axes) pairs -> outdir/epochs.csv and outdir/runs.csv.

    ask_slurm: give failed runs the status SLURM's accounting knows (TIMEOUT, OUT_OF_MEMORY...).
    """
    epochs, runs = tidy.runs_table(items)
    if ask_slurm and "slurm_job_id" in runs.columns:
        failed = runs[runs["status"] != "ok"]
        runs = accounting.refine_failures(runs, accounting.sacct_states(failed["slurm_job_id"]))
    tidy.write_tidy(epochs, runs, Path(outdir))
    return status_counts(runs)


def analysis_tables(runs, efficiency_floor=80.0, gpu_hour_budget=None, epoch_budget=1.0):
    """Every table of the analysis, by name (TABLES), from a runs table."""
    from scalesweep import fits

    table = scaling.scaling_table(runs)
    return {
        "scaling": table,
        "fits": fits.fit_table(runs, scaling=table),
        "sweet_spot": sweetspot.sweet_spot_table(table, efficiency_floor, gpu_hour_budget,
                                                 epoch_budget),
        "acceleration": scaling.acceleration_table(runs),
        "compare_models": scaling.comparison_table(table, by="model"),
        "compare_datasets": scaling.comparison_table(table, by="dataset"),
    }


def write_tables(runs_csv, outdir, efficiency_floor=80.0, gpu_hour_budget=None, epoch_budget=1.0):
    """runs.csv -> outdir/<table>.csv for every table in TABLES."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    tables = analysis_tables(scaling.read_runs(runs_csv), efficiency_floor, gpu_hour_budget,
                             epoch_budget)
    for name, table in tables.items():
        table.to_csv(outdir / f"{name}.csv", index=False)
    return ", ".join(f"{name}: {len(table)} rows" for name, table in tables.items())


def figures(tables_dir, outdir):
    """tables_dir/scaling.csv (+ fits.csv for the fitted curves) -> outdir/*.png."""
    from scalesweep import plots

    tables_dir = Path(tables_dir)
    written = plots.plot_scaling(
        pd.read_csv(tables_dir / "scaling.csv"), outdir, fits=pd.read_csv(tables_dir / "fits.csv")
    )
    return f"{len(written)} figures: " + " ".join(Path(path).name for path in written)


def max_batch_csv(items, out_csv):
    table = maxbatch.max_batch_table(items)
    table.to_csv(out_csv, index=False)
    return f"{len(table)} configurations"


def write_log(path, line):
    Path(path).write_text(line + "\n")
