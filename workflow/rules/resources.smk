# What a training job is given: its command, the threads a trainer takes, the SLURM resources the
# slurm executor plugin reads from each job (scalesweep/plan/launch.py: slurm_resources), with the
# user's slurm_extra of the profile or the command line merged in. Included before train.smk and
# trace.smk, whose rules use them. (The resources a profile gives every job of a rule, which the
# preview checks against the site: preview.smk, resource_value.)
import sys

from scalesweep.contract import layout
from scalesweep.plan import launch, matrix, preview


def settings_of(framework, wildcards):
    return SETTINGS[run_path(framework, wildcards)]


def job_command(framework, max_batch=False, traced=False):
    """An input function: the command of a job of the framework's rules (launch.job_command), a
    run's, a maximum-batch search's (`max_batch`) or a trace run's (`traced`: trace.smk); its
    trainer processes share the job's threads at run time (launch.omp_threads_word)."""

    def command_of(wildcards):
        path = run_path(framework, wildcards)
        settings = SETTINGS[path]
        if max_batch:
            settings = launch.max_batch_settings(settings)
        if traced:
            settings = matrix.trace_settings(
                settings, config["trace"], layout.trace_dir(path)
            )
        return launch.job_command(
            settings, config["container"], workflow.basedir, WORKDIR, PYTHON
        )

    return parameters_named_once(command_of)


def job_threads(framework, wildcards):
    """Locally a trainer takes every core given to Snakemake, so runs never share the machine and
    their timings mean something; a cluster job (and a preview) gets its own CPUs (cpus_per_task).
    """
    # Without an executor (--report, --lint) there is no core count to take.
    if workflow.executor_plugin is not None and runs_locally():
        return workflow.cores
    return settings_of(framework, wildcards)["cpus_per_task"]


def trainer_threads(framework):
    return parameters_named_once(lambda wildcards: job_threads(framework, wildcards))


def profile_slurm_extra(resource_settings):
    """The slurm_extra of the profile's (or --default-resources') defaults, or None: the train
    rules set slurm_extra themselves, which replaces a default (launch.slurm_resources merges it).
    """
    from snakemake.resources import Resources

    defaults = resource_settings.default_resources
    return Resources.from_mapping(defaults).get("slurm_extra") if defaults else None


def command_line_slurm_extra(resource_settings):
    """{rule: slurm_extra} given with --set-resources (or a profile's set-resources). Snakemake
    applies these after a rule's own resources, replacing the train rules' options; train.smk
    puts the merged value back (train_rules_keep_their_slurm_extra)."""
    from snakemake.resources import Resources

    return {
        rule_name: Resources.from_mapping(overrides)["slurm_extra"]
        for rule_name, overrides in resource_settings.overwrite_resources.items()
        if "slurm_extra" in overrides
    }


PROFILE_SLURM_EXTRA = profile_slurm_extra(workflow.resource_settings)

# The executor Snakemake's command line names (None: no command line, e.g. the API, where the
# executor is known only when the jobs run).
COMMAND_LINE_EXECUTOR = preview.intended_executor(sys.argv[1:])

COMMAND_LINE_SLURM_EXTRA = command_line_slurm_extra(workflow.resource_settings)


def user_slurm_extra(wildcards, input, attempt, threads, rulename):
    """The user's slurm_extra for one job: the profile's default, then the command line's for
    this rule; each is an expression Snakemake evaluates per job. The more specific comes
    later, as sbatch mostly keeps the last of an option given twice."""
    values = []
    for resource in (PROFILE_SLURM_EXTRA, COMMAND_LINE_SLURM_EXTRA.get(rulename)):
        if resource is None:
            continue
        value = resource.evaluate(
            wildcards,
            input=input,
            attempt=attempt,
            threads=threads,
            rulename=rulename,
            async_run=workflow.async_run,
        ).value
        values.append(str(value or ""))
    return " ".join(value for value in values if value)


@functools.lru_cache(maxsize=None)
def job_slurm_resources(path, extra):
    """A run's SLURM resources, computed once for the six or seven its job asks for (once more
    with the user's slurm_extra)."""
    return launch.slurm_resources(SETTINGS[path], config["cluster"], extra)


def slurm_resource(framework, name, default=None):
    """One SLURM resource of a training job (the plugin reads them); none for a local run, whose
    preview would otherwise show SLURM job shapes for a laptop."""

    def resource_of(wildcards, input, attempt, threads, rulename):
        if runs_locally():
            return None
        extra = (
            user_slurm_extra(wildcards, input, attempt, threads, rulename)
            if name == "slurm_extra"
            else ""
        )
        path = run_path(framework, wildcards)
        return job_slurm_resources(path, extra).get(name, default)

    return parameters_named_once(resource_of)


def slurm_resources(framework, multinode=False):
    """Every SLURM resource of a training job, by name: `resources: **slurm_resources(...)`. A
    run across nodes is an `mpi` job of the plugin, one task per node (scalesweep/plan/launch.py).
    Where the command line says the jobs run here, none but `mpi` is declared: each would be a
    function Snakemake evaluates for every job only to learn it is None (resource_of).
    """
    if COMMAND_LINE_EXECUTOR == "local":
        return {"mpi": "srun"} if multinode else {}
    resources = {
        name: slurm_resource(framework, name, default)
        for name, default in (
            ("nodes", None),
            ("gres", ""),
            ("cpus_per_task", None),
            ("tasks_per_gpu", None),
            ("runtime", None),
            ("slurm_extra", ""),
        )
    }
    if multinode:
        resources.update(tasks=slurm_resource(framework, "tasks"), mpi="srun")
    return resources


def train_rules_keep_their_slurm_extra(made_train_rules):
    """Run after the train rules (train.smk, matrix.trainer_rules) are defined. --set-resources
    <rule>:slurm_extra=... replaces a rule's own slurm_extra (Snakemake applies it after the rule's
    resources), dropping the workflow's options such as --exclusive: put back the train rules'
    own, which adds the command line's (user_slurm_extra)."""
    for made in made_train_rules:
        framework = made.framework.name
        rule_name = matrix.trainer_rule_name(framework, made.multinode, max_batch=False)
        if rule_name in COMMAND_LINE_SLURM_EXTRA:
            getattr(rules, rule_name).rule.resources["slurm_extra"] = slurm_resource(
                framework, "slurm_extra", ""
            )
