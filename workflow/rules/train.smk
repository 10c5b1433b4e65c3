# One job per configuration. The trainer's whole output goes to the log; the log is copied to the
# run's result only when the trainer succeeds, so a failed run leaves no result that looks
# complete, keeps its log for diagnosis, and is the only thing a rerun repeats.
# Local runs take every core: timings from jobs sharing a machine would mean nothing.


rule train_tensorflow:
    input:
        data=dataset_input("tensorflow"),
    output:
        f"results/runs/tensorflow/{RUN_PATTERN}/train.log",
    log:
        f"logs/train/tensorflow/{RUN_PATTERN}.log",
    params:
        command=trainer_command("tensorflow"),
    threads: workflow.cores
    shell:
        "{params.command} > {log} 2>&1 && cp {log} {output}"


rule train_pytorch:
    input:
        data=dataset_input("pytorch"),
    output:
        f"results/runs/pytorch/{RUN_PATTERN}/train.log",
    log:
        f"logs/train/pytorch/{RUN_PATTERN}.log",
    params:
        command=trainer_command("pytorch"),
    threads: workflow.cores
    shell:
        "{params.command} > {log} 2>&1 && cp {log} {output}"
