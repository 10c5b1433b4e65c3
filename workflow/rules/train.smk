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


# The training rules are made from the framework registry (scalesweep/contract/frameworks.py):
# per framework train_<framework>, plus train_<framework>_multinode where it runs across nodes (an
# `mpi` job for the slurm plugin: its shell runs in the batch step on the first node and starts one
# torchrun per node itself, see launch.py), and max_batch_<framework> for the maximum-batch search
# (max_batch.smk), the same job with another command and result.
TRAINER_RULES = trainer_rules()

for trainer_rule in TRAINER_RULES:

    rule:
        name:
            trainer_rule_name(
                trainer_rule.framework.name,
                trainer_rule.multinode,
                trainer_rule.max_batch,
            )
        input:
            data=dataset_input(
                trainer_rule.framework.name, result_of=result_of(trainer_rule)
            ),
            image=image_inputs(
                trainer_rule.framework.name, result_of=result_of(trainer_rule)
            ),
            earlier_jobs=await_earlier_slurm_jobs,
        output:
            reported_result(trainer_rule),
        log:
            attempt_log(trainer_rule),
        wildcard_constraints:
            gpus=gpus_constraint(trainer_rule),
        conda:
            conda_env(trainer_rule.framework)
        threads: trainer_threads(trainer_rule.framework.name)
        resources:
            **slurm_resources(
                trainer_rule.framework.name, multinode=trainer_rule.multinode
            ),
        params:
            command=job_command(trainer_rule),
        shell:
            TRAIN_SHELL


# --set-resources <rule>:slurm_extra=... would replace the train rules' own (common.smk).
train_rules_keep_their_slurm_extra(
    [made for made in TRAINER_RULES if not made.max_batch]
)
