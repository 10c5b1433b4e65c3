# The history stage: the finished sweep's runs archived into the (possibly shared) history folder
# as one immutable file, by scalesweep/history/archive.py. The history folder is append-only and
# shared between sweeps, so it is no output of this workflow: results/tables/archived.json names
# the file this sweep archived, and is the rule's output. Then the history at a glance: every
# archived sweep's throughput per configuration over time (scalesweep/report/history_figure.py).
from scalesweep import rulelog
from scalesweep.analysis import tables
from scalesweep.contract import layout
from scalesweep.history import archive


rule history:
    input:
        runs=layout.tidy_table("runs"),
        tables=[layout.table(table) for table in tables.TABLES],
    output:
        archived=layout.archived_marker(),
        figure=report(
            layout.HISTORY_FIGURE,
            caption="../report/history.rst",
            category="History",
            labels={"figure": "throughput_history"},
        ),
    log:
        layout.rule_log("history"),
    localrule: True
    params:
        history_dir=config["history_dir"],
        config=key_ordered(config),
    run:
        rulelog.run_logged(
            log[0],
            archive.write_history,
            input.runs,
            params.history_dir,
            params.config,
            output.archived,
            output.figure,
        )
