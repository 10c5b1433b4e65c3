# Epoch logs -> tidy CSVs (results/tidy/epochs.csv: run x epoch; runs.csv: one row per run).
from pathlib import Path

from scalesweep import tidy


rule tidy:
    input:
        logs=all_run_logs(),
    output:
        epochs="results/tidy/epochs.csv",
        runs="results/tidy/runs.csv",
    params:
        configs=run_configs(),
    localrule: True
    run:
        tidy.write_tidy(*tidy.runs_table(zip(input.logs, params.configs)), Path(output.runs).parent)


def best_log(path):
    """The run's result if it finished, else the log a failed attempt left, else None."""
    for candidate in (run_log(path), failed_run_log(path)):
        if Path(candidate).exists():
            return candidate
    return None


# After a sweep with failures the tidy rule cannot run (its inputs are incomplete), yet the
# user needs to see what was measured and why the rest failed: write the same tables with one
# failed row per missing run. A rerun replaces them once the failed configurations succeed.
onerror:
    items = [(best_log(path), run) for path, run in zip(RUN_PATHS, run_configs())]
    tidy.write_tidy(*tidy.runs_table(items), Path("results/tidy"))
    print("scalesweep: results/tidy/runs.csv lists the failed runs with their reasons", file=sys.stderr)
