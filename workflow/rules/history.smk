# The history stage: the finished sweep's runs archived into the (possibly shared) history folder
# as one immutable file, by scalesweep/history.py. The history folder is append-only and shared
# between sweeps, so it is no output of this workflow: results/tables/archived.json names the file
# this sweep archived, and is the rule's output.
from scalesweep import history, rulelog, tables


rule history:
    input:
        runs="results/tidy/runs.csv",
        tables=expand("results/tables/{table}.csv", table=tables.TABLES),
    output:
        "results/tables/archived.json",
    log:
        "logs/history.log",
    localrule: True
    params:
        history_dir=config["history_dir"],
        config=config,
    run:
        rulelog.run_logged(
            log[0],
            history.write_history,
            input.runs,
            params.history_dir,
            params.config,
            output[0],
        )
