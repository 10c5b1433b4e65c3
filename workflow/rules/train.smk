# One job per configuration. Its shell is scripts/run_attempt.py, which runs the trainer's command
# with its whole output (module load, srun, ...) in the attempt's own numbered log,
# <run>.attempt-N.log, points the rule's log <run>.log at it, and copies it to the run's result
# only when the trainer succeeds (and no newer attempt has started), atomically: a failed run
# leaves no result that looks complete, keeps its logs for diagnosis, and is the only thing a
# rerun repeats. Snakemake deletes a job's log: file before the job starts; that removes only the
# link, so the logs of earlier attempts (a crash, a SLURM timeout) stay. `exec`: the runner is
# the child of the Snakemake that runs the job, and stops the training when that Snakemake dies.
# On SLURM the resources below shape each job (scalesweep/plan/launch.py: slurm_resources).
import shlex

from scalesweep.contract import layout
from scalesweep.plan import matrix

# The runner under the sweep's interpreter, quoted for bash; its braces doubled, kept from
# Snakemake's format.
RUNNER = shlex.join([PYTHON, script("run_attempt.py")])
TRAIN_SHELL = (
    f"exec {RUNNER.replace('{', '{{').replace('}', '}}')}"
    " --log={log:q} --result={output:q} --command={params.command:q}"
)


# The training rules are made from the framework registry (scalesweep/contract/frameworks.py;
# matrix.trainer_rules): per framework train_<framework>, plus train_<framework>_multinode where it
# runs across nodes (an `mpi` job for the slurm plugin: its shell runs in the batch step on the
# first node and starts one torchrun per node itself, see launch.py), and max_batch_<framework> for
# the maximum-batch search (max_batch.smk), the same job with another command and result.
# A framework running across nodes has one rule for a node, one for several (the gpus wildcard);
# the search stays on one node. The sweep's runs (not the searches) go into the HTML report: every
# finished run's log, labelled by its configuration.
TRAINER_RULES = matrix.trainer_rules()

for made in TRAINER_RULES:
    result_of = max_batch_log if made.max_batch else run_log
    result = result_of(run_pattern(made.framework.name))

    rule:
        name:
            matrix.trainer_rule_name(
                made.framework.name, made.multinode, made.max_batch
            )
        input:
            data=dataset_input(made.framework.name, result_of=result_of),
            image=image_inputs(made.framework.name, result_of=result_of),
            earlier_jobs=parameters_named_once(await_earlier_slurm_jobs),
        output:
            (
                result
                if made.max_batch
                else report(
                    result,
                    caption="../report/run_log.rst",
                    category="Run logs",
                    labels={
                        "framework": made.framework.name,
                        "model": "{model}",
                        "dataset": "{dataset}",
                        "gpus": "{gpus}",
                        "settings": "{settings}",
                    },
                )
            ),
        log:
            layout.attempt_log(
                "max_batch" if made.max_batch else "train",
                run_pattern(made.framework.name),
            ),
        wildcard_constraints:
            gpus=(
                gpu_counts(multinode=made.multinode)
                if made.framework.multinode
                else "[^/]+"
            ),
        conda:
            conda_env(made.framework)
        threads: trainer_threads(made.framework.name)
        resources:
            **slurm_resources(made.framework.name, multinode=made.multinode),
        params:
            command=job_command(made.framework.name, max_batch=made.max_batch),
        shell:
            TRAIN_SHELL


# --set-resources <rule>:slurm_extra=... would replace the train rules' own (resources.smk).
train_rules_keep_their_slurm_extra(
    [made for made in TRAINER_RULES if not made.max_batch]
)
