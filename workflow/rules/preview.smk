# What a run says before any job (scalesweep/plan/preview.py): the config's warnings when the
# workflow is parsed; then, when Snakemake builds the job of the target `all` (Snakefile) or
# `find_max_batch` (max_batch.smk), the site's refusals (scalesweep/plan/cluster/site.py: nothing
# asks SLURM for a plan it would refuse) and the plan, the jobs to run and what they book.
# Included right after common.smk, whose config, runs and executor it reads.
from snakemake.iocontainers import Wildcards

from scalesweep.plan import containers, launch, matrix, preview
from scalesweep.plan.cluster import site

if workflow.is_main_process:
    WARNINGS = matrix.config_warnings(
        config, EXCLUDED, SETTINGS.values()
    ) + containers.sdm_warnings(
        {str(method) for method in workflow.deployment_settings.deployment_method},
        config["container"],
    )
    if WARNINGS:
        print(preview.warning_lines(WARNINGS), file=sys.stderr)


def preview_of(max_batch):
    """An input function of the target `all` (`find_max_batch`: max_batch) that prints the
    preview and adds no input: only when Snakemake builds that target's job are the targets and
    --forceall known. Snakemake calls it once: it builds a target rule's job once per DAG
    (DAG.init, rule2job), and the DAG once per invocation (Workflow.execute; this workflow has no
    checkpoint, which would build parts of it again)."""

    def print_preview(wildcards):
        if workflow.is_main_process:
            print(plan_text(max_batch), file=sys.stderr)
        return []

    return print_preview


def plan_text(max_batch):
    """The preview's text (preview.preview_text), once the site has refused nothing of the jobs
    to run and, in a run, every path they read holds its data (submission_checks)."""
    jobs = preview_jobs(max_batch)
    forced = workflow.dag_settings.forceall
    done = set() if forced else {path for path in jobs if Path(path).exists()}
    runs = max_batch_paths() if max_batch else RUN_PATHS
    refused = site_problems(preview.pending_runs(runs, jobs, done), max_batch)
    if refused:
        raise WorkflowError(site.site_refusal(refused))
    submission_checks()
    return preview.preview_text(
        RUNS,
        EXCLUDED,
        jobs,
        done,
        ANALYSIS,
        max_batch=max_batch,
        local=runs_locally(),
        probe=probe_to_run(forced),
        config_files=CONFIG_FILES,
        cli_files=workflow.overwrite_configfiles,
        path_problems=PATH_PROBLEMS,
    )


def preview_jobs(max_batch):
    """{result path: settings} of the jobs the preview counts: the sweep's runs, or the
    maximum-batch searches."""
    if max_batch:
        return {
            max_batch_log(path): launch.max_batch_settings(SETTINGS[path])
            for path in max_batch_paths()
        }
    return {run_log(path): SETTINGS[path] for path in RUN_PATHS}


def probe_to_run(forced):
    """The network probe's settings when this sweep runs its job (launch.network_probe_wanted,
    network.csv missing or --forceall), else None."""
    if not launch.network_probe_wanted(ANALYSIS, config["matrix"]["framework"]):
        return None
    return NETWORK_PROBE_SETTINGS if forced or not Path(NETWORK_CSV).exists() else None


def site_problems(jobs, max_batch):
    """What the site refuses of the jobs to run ({run path: settings}; site.job_problems), with
    the rules' QoS and the account the profile (or the command line) gives; the QoS warnings are
    printed. Never for a local run."""
    if runs_locally():
        return []
    defaults = workflow.resource_settings.default_resources
    refusals, warnings = site.job_problems(
        config["site"],
        resource_value("slurm_account", "all"),
        defaults.args if defaults else [],
        jobs,
        rule_of=lambda settings: matrix.job_rule(settings, max_batch),
        qos_of=lambda rule_name: resource_value("qos", rule_name),
    )
    if warnings:
        print(preview.warning_lines(warnings), file=sys.stderr)
    return refusals


def resource_value(name, rule_name):
    """A resource the profile (or the command line) gives every job of a rule, as a job would
    get it: --set-resources for the rule, else --default-resources; None when neither sets it.
    """
    settings = workflow.resource_settings
    for given in (
        settings.overwrite_resources.get(rule_name, {}),
        settings.default_resources or {},
    ):
        if name in given:
            evaluated = given[name].evaluate(
                Wildcards(),
                input=[],
                attempt=1,
                threads=1,
                rulename=rule_name,
                async_run=workflow.async_run,
            )
            return evaluated.value
    return None
