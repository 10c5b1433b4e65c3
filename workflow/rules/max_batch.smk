# The maximum viable per-GPU batch of each configuration on one GPU (the reference's "find the
# maximum viable batch size" task): `snakemake find_max_batch` -> results/tables/max_batch.csv.
# It probes a few steps per batch size, so it costs minutes, not epochs. The table is
# scalesweep/analysis/max_batch.py's.
from scalesweep import rulelog
from scalesweep.analysis import max_batch


rule find_max_batch:
    input:
        preview_of(max_batch=True),
        "results/tables/max_batch.csv",


use rule train_tensorflow as max_batch_tensorflow with:
    input:
        data=dataset_input("tensorflow", result_of=max_batch_log),
        image=image_inputs("tensorflow", result_of=max_batch_log),
        earlier_jobs=await_earlier_slurm_jobs,
    output:
        f"results/max_batch/tensorflow/{RUN_PATTERN}/max_batch.log",
    log:
        f"logs/max_batch/tensorflow/{RUN_PATTERN}.log",
    params:
        command=max_batch_command("tensorflow"),


use rule train_pytorch as max_batch_pytorch with:
    input:
        data=dataset_input("pytorch", result_of=max_batch_log),
        image=image_inputs("pytorch", result_of=max_batch_log),
        earlier_jobs=await_earlier_slurm_jobs,
    output:
        f"results/max_batch/pytorch/{RUN_PATTERN}/max_batch.log",
    log:
        f"logs/max_batch/pytorch/{RUN_PATTERN}.log",
    params:
        command=max_batch_command("pytorch"),


rule max_batch:
    input:
        logs=max_batch_logs(),
    output:
        report(
            "results/tables/max_batch.csv",
            caption="../report/max_batch.rst",
            category="Tables",
        ),
    log:
        "logs/max_batch.log",
    localrule: True
    params:
        configs=key_ordered(max_batch_axes()),
    run:
        rulelog.run_logged(
            log[0],
            max_batch.write_max_batch,
            zip(input.logs, params.configs),
            output[0],
        )
