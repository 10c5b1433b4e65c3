# Epoch logs -> tidy CSVs (results/tidy/epochs.csv: run x epoch; runs.csv: one row per run).
from scalesweep import stages


rule tidy:
    input:
        logs=all_run_logs(),
    output:
        epochs="results/tidy/epochs.csv",
        runs="results/tidy/runs.csv",
    params:
        configs=run_configs(),
    log:
        "logs/tidy.log",
    localrule: True
    run:
        stages.write_log(log[0], stages.tidy_logs(zip(input.logs, params.configs), "results/tidy"))


# After a sweep with failures the tidy rule cannot run (its inputs are incomplete), yet the
# user needs to see what was measured and why the rest failed: write the same tables with one
# failed row per missing run, with SLURM's verdict where accounting has one. The next invocation
# runs the missing configurations (each run's result is a target of rule all) and then rebuilds
# these tables from complete results.
onerror:
    counts = stages.tidy_logs(
        zip(map(best_log, RUN_PATHS), run_configs()), "results/tidy", ask_slurm=True
    )
    print(f"scalesweep: results/tidy/runs.csv lists what was measured and why runs failed: {counts}", file=sys.stderr)
