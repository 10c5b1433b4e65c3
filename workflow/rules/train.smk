# One job per configuration. The trainer's whole output goes to the log; the log is copied to the
# run's result only when the trainer succeeds, so a failed run leaves no result that looks
# complete, keeps its log for diagnosis, and is the only thing a rerun repeats.
# On SLURM the resources below shape each job (scalesweep/launch.py: slurm_resources).
#
# Every attempt writes its own numbered log, <run>.attempt-N.log, and the rule's log: <run>.log is
# a link to the latest attempt. Snakemake deletes a job's log: file before the job starts; that
# removes only the link, so the logs of earlier attempts (a crash, a SLURM timeout) stay.
# The braces around the command send every step of it (module load, srun, ...) to the log.

TRAIN_SHELL = (
    "log={log:q}; n=1; "
    'while [ -e "${{log%.log}}.attempt-$n.log" ]; do n=$((n + 1)); done; '
    'attempt="${{log%.log}}.attempt-$n.log"; '
    'ln -sfn "${{attempt##*/}}" "$log"; '
    '{{ {params.command}; }} > "$attempt" 2>&1 && cp "$attempt" {output:q}'
)


rule train_tensorflow:
    input:
        data=dataset_input("tensorflow"),
        image=image_inputs("tensorflow"),
    output:
        f"results/runs/tensorflow/{RUN_PATTERN}/train.log",
    log:
        f"logs/train/tensorflow/{RUN_PATTERN}.log",
    conda:
        "../../envs/tensorflow.yaml"
    threads: trainer_threads("tensorflow")
    resources:
        **slurm_resources("tensorflow"),
    params:
        command=trainer_command("tensorflow"),
    shell:
        TRAIN_SHELL


use rule train_tensorflow as train_pytorch with:
    input:
        data=dataset_input("pytorch"),
        image=image_inputs("pytorch"),
    output:
        f"results/runs/pytorch/{RUN_PATTERN}/train.log",
    log:
        f"logs/train/pytorch/{RUN_PATTERN}.log",
    wildcard_constraints:
        gpus=gpu_counts(multinode=False),
    conda:
        "../../envs/pytorch.yaml"
    threads: trainer_threads("pytorch")
    resources:
        **slurm_resources("pytorch"),
    params:
        command=trainer_command("pytorch"),


# A run across nodes is an `mpi` job for the slurm plugin: its shell runs in the batch step on
# the first node and starts one torchrun per node itself (srun ... torchrun, see launch.py).
use rule train_pytorch as train_pytorch_multinode with:
    wildcard_constraints:
        gpus=gpu_counts(multinode=True),
    resources:
        **slurm_resources("pytorch", multinode=True),


# --set-resources <rule>:slurm_extra=... would replace the train rules' own (common.smk).
train_rules_keep_their_slurm_extra()
