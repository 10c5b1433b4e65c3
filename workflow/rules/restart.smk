# A head started again after a crash (docs/cluster-head.md): the lock the dead head left is
# explained with the exact commands (scalesweep/plan/cluster/head_lock.py), and on SLURM the jobs
# it left queued or running are waited for instead of submitted twice
# (scalesweep/plan/cluster/slurm_jobs.py), and a result on disk is never trained again
# (measured_results_are_final).
import functools
import socket

from snakemake.io import IOFile

from scalesweep import pipeline
from scalesweep.logs import accounting
from scalesweep.plan.cluster import head_lock, slurm_jobs

HOST = socket.gethostname()

if workflow.is_main_process and not head_lock.unlocking(sys.argv):
    LOCK_REFUSAL = head_lock.unreadable_lock(WORKDIR)
    if LOCK_REFUSAL:
        raise WorkflowError(LOCK_REFUSAL)
    LOCK_ADVICE = head_lock.lock_advice(WORKDIR, HOST, sys.argv)
    if LOCK_ADVICE:
        print(LOCK_ADVICE, file=sys.stderr)


# Snakemake runs onstart once it holds the lock (never in a dry run or a SLURM job's own
# Snakemake, which runs with --no-hooks): who holds it, for the next start to check.
onstart:
    head_lock.write_head_record(WORKDIR, HOST, os.getpid())
    # The local rules run in threads of this process and import the report's modules as they
    # start: two importing matplotlib at once can find it half-initialised (AttributeError from
    # pyplot). Imported here, once, before any job starts (never in a dry run).
    pipeline.import_stage_modules()


def train_results_by_comment():
    """{the comment the slurm plugin gives a run's job: the run's result}."""
    train_rules = [rule for rule in workflow.rules if rule.name.startswith("train_")]
    comments = {
        result: slurm_jobs.job_comment(rule.name, rule.get_wildcards(result).values())
        for result in all_run_logs()
        for rule in train_rules
        if rule.is_producer(result)
    }
    return slurm_jobs.results_by_comment(comments)


def should_wait_for_earlier_jobs():
    """A real SLURM run of the main Snakemake whose folder is not locked: a lock means another
    head, or a dead one to --unlock first, and Snakemake stops at it right after the DAG.
    """
    plugin = workflow.executor_plugin
    return (
        workflow.is_main_process
        and plugin is not None
        and plugin.name == "slurm"
        and not (workflow.execution_settings.lock and head_lock.lock_files(WORKDIR))
    )


def await_earlier_slurm_jobs(wildcards):
    """The input function of rule all and of every training job. It adds no input; the first
    job Snakemake builds of them waits for the SLURM jobs an earlier head of this folder left
    queued or running (earlier_jobs_awaited), so that the DAG sees what they finished
    (docs/cluster-head.md). For the target `all` that is the job of rule all, built before any
    training job, whose inputs (common.smk, while_unmeasured) then see what those jobs left.
    """
    earlier_jobs_awaited()
    return []


@functools.cache
def earlier_jobs_awaited():
    """Once per invocation, before the DAG decides what to run: the wait, then the measured
    results made final. Cached: the later jobs asking find it done."""
    if should_wait_for_earlier_jobs():
        wait_for_earlier_jobs()
    if workflow.is_main_process:
        measured_results_are_final()


def wait_for_earlier_jobs():
    say = lambda line: print(line, file=sys.stderr, flush=True)
    try:
        slurm_jobs.wait_for_earlier_jobs(
            WORKDIR,
            train_results_by_comment(),
            workflow.remote_execution_settings.seconds_between_status_checks,
            workflow.execution_settings.latency_wait,
            say,
            accounting.sacct_states,
        )
    except slurm_jobs.SlurmQueryError as error:
        raise WorkflowError(
            f"{error}. Without it a restart cannot tell which SLURM jobs of this folder an "
            "earlier head left running, and would submit them again: retry once squeue answers."
        ) from None


def measured_results_are_final():
    """A run's result on disk is a measurement, and only a missing one runs (or one named with
    -R/--forcerun). Snakemake would also rerun it when the job's command or the rule's text
    changed since (its params and code triggers): a new trainer option, a command prefix, a new
    shell. That says nothing about what was measured: every setting a run measures is in its path
    (matrix.run_path). So before the DAG decides, the metadata Snakemake keeps of how existing
    results were made is dropped (with any stale "incomplete" mark: a result is only ever
    written whole, by scripts/run_attempt.py), and GPU hours are never spent twice on a run.
    """
    for result in [*all_run_logs(), *max_batch_logs()]:
        if Path(result).exists():
            workflow.persistence.cleanup_metadata(IOFile(result))
