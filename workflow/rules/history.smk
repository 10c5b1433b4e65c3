# Sweep history: the finished sweep's runs archived into the (possibly shared) history folder as
# one immutable file (scalesweep/history.py), and, with `compare_with` set, this sweep compared
# with that one (scalesweep/compare.py). The history folder is append-only and shared between
# sweeps, so it is no output of this workflow: results/tables/archived.json names the file this
# sweep archived, and is the rule's output.
from scalesweep import history


rule archive:
    input:
        runs="results/tidy/runs.csv",
        tables=expand("results/tables/{table}.csv", table=stages.TABLES),
    output:
        "results/tables/archived.json",
    params:
        history_dir=config["history_dir"],
        config=config,
    log:
        "logs/archive.log",
    localrule: True
    run:
        line = history.archive_stage(input.runs, params.history_dir, params.config, output[0])
        stages.write_log(log[0], line)


rule compare:
    input:
        "results/tables/archived.json",
    output:
        **{
            f"output_{number}": report(
                f"results/compare/{name}", caption="../report/compare.rst", category="Comparison"
            )
            for number, name in enumerate(history.COMPARE_OUTPUTS)
        },
    params:
        baseline=config["compare_with"],
        history_dir=config["history_dir"],
    log:
        "logs/compare.log",
    localrule: True
    run:
        # imported here: scipy would slow down every parse of the workflow (cluster jobs included)
        from scalesweep import compare

        line = compare.compare_archived(params.baseline, input[0], params.history_dir, "results/compare")
        stages.write_log(log[0], line)
