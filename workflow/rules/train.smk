# One job per configuration. Its shell is scripts/run_attempt.py, which runs the trainer's command
# with its whole output (module load, srun, ...) in the attempt's own numbered log,
# <run>.attempt-N.log, points the rule's log <run>.log at it, and copies it to the run's result
# only when the trainer succeeds (and no newer attempt has started), atomically: a failed run
# leaves no result that looks complete, keeps its logs for diagnosis, and is the only thing a
# rerun repeats. Snakemake deletes a job's log: file before the job starts; that removes only the
# link, so the logs of earlier attempts (a crash, a SLURM timeout) stay. `exec`: the runner is
# the child of the Snakemake that runs the job, and stops the training when that Snakemake dies.
# On SLURM the resources below shape each job (scalesweep/plan/launch.py: slurm_resources).

TRAIN_SHELL = (
    f"exec {shell_literal(PYTHON)} {shell_literal(script('run_attempt.py'))}"
    " --log={log:q} --result={output:q} --command={params.command:q}"
)


rule train_tensorflow:
    input:
        data=dataset_input("tensorflow"),
        image=image_inputs("tensorflow"),
        earlier_jobs=await_earlier_slurm_jobs,
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
        earlier_jobs=await_earlier_slurm_jobs,
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
