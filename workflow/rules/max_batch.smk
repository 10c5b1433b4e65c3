# The maximum viable per-GPU batch of each configuration on one GPU (the reference's "find the
# maximum viable batch size" task): `snakemake find_max_batch` -> results/tables/max_batch.csv.
# It probes a few steps per batch size, so it costs minutes, not epochs. The table is
# scalesweep/analysis/max_batch.py's.
from scalesweep import rulelog
from scalesweep.contract import layout
from scalesweep.analysis import max_batch
from scalesweep.plan import matrix


rule find_max_batch:
    input:
        preview_of(max_batch=True),
        layout.table("max_batch"),


# The searches run under the rules max_batch_<framework>, made beside the training rules
# (train.smk).


rule max_batch:
    input:
        logs=max_batch_logs(),
    output:
        report(
            layout.table("max_batch"),
            caption="../report/max_batch.rst",
            category="Tables",
        ),
    log:
        layout.rule_log("max_batch"),
    localrule: True
    params:
        configs=key_ordered([RUNS[index] for index in matrix.max_batch_runs(RUNS)]),
    run:
        rulelog.run_logged(
            log[0],
            max_batch.write_max_batch,
            zip(input.logs, params.configs),
            output[0],
        )
