# The tidy stage: every run's log -> results/tidy/epochs.csv (run x epoch) and runs.csv (one row
# per run) by scalesweep/tidy.py.
from scalesweep import rulelog, tidy


rule tidy:
    input:
        logs=all_run_logs(),
    output:
        epochs="results/tidy/epochs.csv",
        runs=report(
            "results/tidy/runs.csv",
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "runs"},
        ),
    log:
        "logs/tidy.log",
    localrule: True
    params:
        configs=run_configs(),
    run:
        rulelog.run_logged(
            log[0], tidy.write_tidy_tables, zip(input.logs, params.configs), *output
        )


# After a sweep with failures the tidy rule cannot run (its inputs are incomplete), yet the
# user needs to see what was measured and why the rest failed: write the same tables with one
# failed row per missing run, with SLURM's verdict where accounting has one. The next invocation
# runs the missing configurations (each run's result is a target of rule all) and then rebuilds
# these tables from complete results.
onerror:
    items = zip(map(best_log, RUN_PATHS), run_configs())
    counts = tidy.write_tidy_tables(
        items, rules.tidy.output.epochs, rules.tidy.output.runs, ask_slurm=True
    )
    print(
        f"scalesweep: {rules.tidy.output.runs} lists what was measured and why runs failed: {counts}",
        file=sys.stderr,
    )
