# Config validation, the run matrix and the input/params functions of the workflow (the training
# jobs' threads and SLURM resources: resources.smk).
import collections
import functools
import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import min_version

min_version("9.0")

# The analysis package sits beside the Snakefile; rules import it, they don't reimplement it.
sys.path.insert(0, workflow.basedir)

from scalesweep.contract import frameworks, layout  # noqa: E402
from scalesweep.history import sides  # noqa: E402
from scalesweep.plan import (
    checks,
    code_version,
    containers,
    launch,
    matrix,
    preview,
)  # noqa: E402
from scalesweep.plan.cluster import site  # noqa: E402
from scalesweep.plan import config as config_files  # noqa: E402
from scalesweep.plan.analysis_settings import AnalysisSettings  # noqa: E402

# The code every trainer of this invocation runs, computed once where git is (the trainers may
# run in a container without it); a SLURM job's own Snakemake inherits the submitter's value.
os.environ.setdefault(code_version.VERSION_ENV, code_version.code_version())

# The default config is read here, not by a `configfile:` line in the Snakefile: each file used is
# read strictly first (a syntax error or a duplicate key named with file, line and column), and a
# default replaced by --configfile ... --replace-workflow-config is neither read nor listed.
DEFAULT_CONFIGFILE = "config/config.yaml"
# Snakemake's own condition (Workflow.configfile) for dropping the default config altogether.
DEFAULT_REPLACED = bool(
    workflow.config_settings.overwrite_config
    and workflow.config_settings.replace_workflow_config
)
CONFIG_FILES = config_files.files_used(
    DEFAULT_CONFIGFILE, workflow.overwrite_configfiles, DEFAULT_REPLACED
)
try:
    for config_file in CONFIG_FILES:
        config_files.load_strict(config_file)
except config_files.ConfigFileError as error:
    raise WorkflowError(str(error)) from None

if not DEFAULT_REPLACED:

    configfile: DEFAULT_CONFIGFILE


# A site declared by the profile's `config:` entry arrives as text below the top level.
if "site" in workflow.config_settings.config:
    config["site"] = site.from_command_line(workflow.config_settings.config["site"])
try:
    config_files.validate_config(
        config, os.path.join(workflow.basedir, "workflow/schemas/config.schema.yaml")
    )
    RUNS, EXCLUDED = matrix.plan(config)
    site.check_images(config, RUNS)
except checks.ConfigError as error:
    config_sources = config_files.sources(CONFIG_FILES, workflow.config_settings.config)
    raise WorkflowError(f"{error} {config_sources}") from None

# The analysis settings, built once: the preview, the network probe's decision, rule tables and
# the failure path (outcome.smk) all read this one object.
ANALYSIS = AnalysisSettings.from_config(config["analysis"], config["cluster"])

# A run's result and logs live at <framework>/model~M/dataset~D/gpus~N, then one folder level per
# setting it measures away from the default (matrix.run_path, spelled by contract/layout.py); the two trainers are separate
# rules with their own commands and resources.
TRAINING_DEFAULTS = config_files.training_defaults()
RUN_SETTINGS = [matrix.run_settings(run, config) for run in RUNS]
RUN_PATHS = [matrix.run_path(settings, TRAINING_DEFAULTS) for settings in RUN_SETTINGS]
WORKDIR = os.getcwd()
SETTINGS = dict(zip(RUN_PATHS, RUN_SETTINGS))
# Missing or empty datasets and images: listed by a preview, refused by a run (submission_checks).
PATH_PROBLEMS = site.path_problems(config, RUN_SETTINGS, WORKDIR)
try:
    checks.check_planned(
        config, SETTINGS.values(), WORKDIR, training_defaults=TRAINING_DEFAULTS
    )
    sides.check_compare_with(config, WORKDIR)
except checks.ConfigError as error:
    config_sources = config_files.sources(CONFIG_FILES, workflow.config_settings.config)
    raise WorkflowError(f"{error} {config_sources}") from None
# With --sdm conda each rule's own environment provides `python`; otherwise the sweep's
# interpreter runs everything (its absolute path also works on compute nodes sharing the file system).
PYTHON = (
    "python"
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    else sys.executable
)


wildcard_constraints:
    model="[^/]+",
    dataset="[^/]+",
    gpus="[^/]+",
    settings=layout.SETTINGS_WILDCARD,


def run_path(framework, wildcards):
    return layout.run_path(framework, **dict(wildcards.items()))


def run_pattern(framework):
    """The run paths of a framework's rules, in wildcards."""
    return layout.run_path(framework, "{model}", "{dataset}", "{gpus}", "{settings}")


def settings_of(framework, wildcards):
    return SETTINGS[run_path(framework, wildcards)]


def run_log(path):
    return layout.run_result(path)


def failed_run_log(path):
    return layout.attempt_log("train", path)


def best_log(path):
    """The run's result if it finished, else the log a failed attempt left, else None."""
    for candidate in (run_log(path), failed_run_log(path)):
        if Path(candidate).exists():
            return candidate
    return None


def all_run_logs():
    return [run_log(path) for path in RUN_PATHS]


def key_ordered(value):
    """A config value (YAML's mappings, lists, scalars) with every mapping's keys in sorted order:
    Snakemake compares a rule's params as serialized, so the same config written in another key
    order would otherwise rerun the rules that take config sections as params."""
    return json.loads(json.dumps(value, sort_keys=True))


def run_axes():
    """The axes of each run (plus its node count), in the order of all_run_logs()."""
    return [
        {**run, "nodes": SETTINGS[path]["nodes"]} for run, path in zip(RUNS, RUN_PATHS)
    ]


def max_batch_log(path):
    return layout.max_batch_result(path)


def while_unmeasured(framework, result_of, inputs_of):
    """An input function giving a job `inputs_of(settings)` only while its result
    (`result_of(run path)`) is missing. A measured run has no edge to its dataset or image, so
    one generated or pulled again (a deleted resources/ folder, a changed generator, a new image
    digest) never trains it again. Not ancient(): Snakemake 9.27.1 drops from the plan a job whose
    output is missing when its ancient input's producer reruns for a changed param (dag.py
    update_needrun masks it, then skips it as ancient), and the sweep ends "successfully" with
    stale tables."""

    def inputs(wildcards):
        path = run_path(framework, wildcards)
        if Path(result_of(path)).exists():
            return []
        return inputs_of(SETTINGS[path])

    return inputs


def dataset_input(framework, result_of=run_log):
    """A generated dataset is an input of the runs still to measure (its rule runs first); a
    real one is only checked (submission_checks)."""

    def dataset_of(settings):
        submission_checks()
        name = settings["dataset"]
        if config["datasets"][name].get("synthetic") is None:
            return []
        return matrix.dataset_path(name, config)

    return while_unmeasured(framework, result_of, dataset_of)


# The image each framework's trainer runs in (container runtimes only), and by file-safe name.
IMAGES = containers.sweep_images(
    config["container"], {run["framework"] for run in RUNS}
)
IMAGE_NAMES = {containers.image_name(image): image for image in IMAGES.values()}


def image_needs(framework):
    """What a job of the framework needs of its image: the digest (rule image_digest, or rule
    `images` with the pulled SIF); nothing without a container runtime."""
    image = IMAGES.get(framework)
    pulled = (
        [containers.pulled_sif(image)] if image and containers.is_pulled(image) else []
    )
    return pulled + [containers.digest_file(image)] if image else []


def image_inputs(framework, result_of=run_log):
    """What a run still to measure needs of its image."""
    needed = image_needs(framework)
    return while_unmeasured(framework, result_of, lambda settings: needed)


def image_digest_files():
    return [containers.digest_file(image) for image in IMAGES.values()]


def image_names(pulled):
    """A regex of the names of the sweep's pulled (or local) images; one matching nothing if none."""
    names = sorted(
        name
        for name, image in IMAGE_NAMES.items()
        if containers.is_pulled(image) == pulled
    )
    return "|".join(map(re.escape, names)) or "(?!)"


def image_key(name):
    """The config key(s) naming an image, for messages: container.images.<framework>."""
    return " and ".join(
        f"container.images.{framework}"
        for framework, image in IMAGES.items()
        if containers.image_name(image) == name
    )


def pull_command(wildcards):
    image = IMAGE_NAMES[wildcards.image]
    return launch.pull_command(config["container"], image, containers.pulled_sif(image))


def local_image_path(wildcards):
    return launch.absolute(IMAGE_NAMES[wildcards.image], WORKDIR)


def trainer_command(framework, job_settings=lambda settings: settings):
    """The job's command; its trainer processes share the job's threads at run time
    (launch.omp_threads_word)."""

    def command_of(wildcards):
        settings = job_settings(settings_of(framework, wildcards))
        return launch.job_command(
            settings, config["container"], workflow.basedir, WORKDIR, PYTHON
        )

    return command_of


def max_batch_command(framework):
    return trainer_command(framework, launch.max_batch_settings)


def max_batch_paths():
    return [RUN_PATHS[index] for index in matrix.max_batch_runs(RUNS)]


def max_batch_logs():
    return [max_batch_log(path) for path in max_batch_paths()]


def max_batch_axes():
    runs = dict(zip(RUN_PATHS, RUNS))
    return [runs[path] for path in max_batch_paths()]


def gpu_counts(multinode):
    """A regex of the gpus wildcard values that need several nodes (or fit on one)."""
    return matrix.gpu_count_pattern(RUNS, config["cluster"]["gpus_per_node"], multinode)


def script(name):
    return os.path.join(workflow.basedir, "scripts", name)


def shell_literal(word):
    """A fixed word of a shell template: quoted for bash, braces kept from Snakemake's format."""
    return shlex.quote(str(word)).replace("{", "{{").replace("}", "}}")


def synthetic_options(wildcards):
    return matrix.synthetic_options(config["datasets"][wildcards.dataset]["synthetic"])


def trainer_rule_name(framework, multinode, max_batch):
    """train_<framework>[_multinode] or max_batch_<framework> (train.smk makes them)."""
    if max_batch:
        return f"max_batch_{framework}"
    return f"train_{framework}{'_multinode' if multinode else ''}"


# The rules a training job runs under, made from the framework registry by train.smk.
TrainerRule = collections.namedtuple("TrainerRule", "framework multinode max_batch")


def trainer_rules():
    """Every rule a training job runs under, in the registry's order."""
    made = []
    for framework in frameworks.FRAMEWORKS:
        made.append(TrainerRule(framework, multinode=False, max_batch=False))
        if framework.multinode:
            made.append(TrainerRule(framework, multinode=True, max_batch=False))
    return made + [
        TrainerRule(f, multinode=False, max_batch=True) for f in frameworks.FRAMEWORKS
    ]


def result_of(trainer_rule):
    return max_batch_log if trainer_rule.max_batch else run_log


def reported_result(trainer_rule):
    """A training rule's result, and for the sweep's runs (not the maximum-batch search) its
    entry in the HTML report: every finished run's log, labelled by its configuration.
    """
    path = result_of(trainer_rule)(run_pattern(trainer_rule.framework.name))
    if trainer_rule.max_batch:
        return path
    return report(
        path,
        caption="../report/run_log.rst",
        category="Run logs",
        labels={
            "framework": trainer_rule.framework.name,
            "model": "{model}",
            "dataset": "{dataset}",
            "gpus": "{gpus}",
            "settings": "{settings}",
        },
    )


def attempt_log(trainer_rule):
    stage = "max_batch" if trainer_rule.max_batch else "train"
    return layout.attempt_log(stage, run_pattern(trainer_rule.framework.name))


def gpus_constraint(trainer_rule):
    """The GPU counts of the rule: a framework running across nodes has one rule for a node, one
    for several (the maximum-batch search stays on one node)."""
    if not trainer_rule.framework.multinode:
        return "[^/]+"
    return gpu_counts(multinode=trainer_rule.multinode)


def conda_env(framework):
    return f"../../{framework.conda_env}" if framework.conda_env else None


def job_command(trainer_rule):
    if trainer_rule.max_batch:
        return max_batch_command(trainer_rule.framework.name)
    return trainer_command(trainer_rule.framework.name)


@functools.cache
def executor_name():
    """The executor the user gave: a dry run executes with Snakemake's own 'dryrun' (or 'touch'),
    which says nothing of it (scalesweep/plan/preview.py: intended_executor). None: unknown.
    """
    executor = workflow.executor_plugin
    if executor is not None and executor.name not in ("dryrun", "touch"):
        return executor.name
    return preview.intended_executor(sys.argv[1:])


def runs_locally():
    return executor_name() == "local"


def submission_checks():
    """Before a run's first job: missing or empty paths (a preview only lists them)."""
    if not workflow.dryrun and workflow.is_main_process and PATH_PROBLEMS:
        raise WorkflowError(site.missing_paths_error(PATH_PROBLEMS))


# ------------------------------------------------------------------ `snakemake trace` (trace.smk)
TRACED_PATHS = [RUN_PATHS[index] for index in matrix.traced_runs(RUNS, config["trace"])]


# `snakemake trace` alone is no sweep: its end writes no failed rows into the tidy tables
# (outcome.smk), it names where the traces are.
def traces_only():
    """Whether this invocation's only target is `trace` (known once the DAG is being built)."""
    return set(getattr(workflow.dag_settings, "targets", None) or ()) == {"trace"}


TRACES_ONLY_LINE = (
    f"scalesweep: traces and their summaries under {layout.TRACES}/ (docs/traces.md)"
)


def trace_output(framework):
    """The trace folder; its summary and trace files go into the report, category Traces: that of
    `snakemake trace --report traces.html` and the sweep's (reported_traces)."""
    return report(
        directory(layout.trace_dir(run_pattern(framework))),
        patterns=[layout.TRACE_REPORT_PATTERN],
        caption="../report/traces.rst",
        category="Traces",
        labels={
            "framework": framework,
            "model": "{model}",
            "dataset": "{dataset}",
            "gpus": "{gpus}",
            "settings": "{settings}",
            "file": "{file}",
        },
    )


def trace_summaries(trace_folder):
    """The summary files of a trace folder: JSON, then Markdown."""
    return [
        f"{trace_folder}/{layout.TRACE_SUMMARY_JSON}",
        f"{trace_folder}/{layout.TRACE_SUMMARY_MD}",
    ]


def reported_traces(wildcards):
    """The trace folders of planned configurations that `snakemake trace` made, for the sweep's
    report to show; none otherwise. Only while a report is made (Snakemake runs no executor
    then): a sweep never reruns a trace, which would change no measured number."""
    if workflow.executor_plugin is not None:
        return []
    return [
        layout.trace_dir(path)
        for path in RUN_PATHS
        if os.path.isdir(layout.trace_dir(path))
    ]


def trace_command(framework):
    def command_of(wildcards):
        path = run_path(framework, wildcards)
        settings = matrix.trace_settings(
            SETTINGS[path], config["trace"], layout.trace_dir(path)
        )
        return launch.job_command(
            settings, config["container"], workflow.basedir, WORKDIR, PYTHON
        )

    return command_of


def traced_outputs(wildcards):
    if not TRACED_PATHS:
        raise WorkflowError(
            "config key 'trace.select': picks no planned configuration to trace "
            f"({config['trace'].get('select', [])}); docs/traces.md"
        )
    return [layout.trace_dir(path) for path in TRACED_PATHS]


NETWORK_CSV = layout.table("network")
NETWORK_PROBE_SETTINGS = launch.network_probe_settings(config["cluster"])


def network_probe_command(wildcards):
    """The probe's command (launch.network_probe_shell), built when its job is: a sweep without a
    run of the probe framework has no gradients to all-reduce."""
    models = launch.network_probe_models(SETTINGS.values())
    if not models:
        framework = NETWORK_PROBE_SETTINGS["framework"]
        raise WorkflowError(
            f"probe_network all-reduces the gradients of the sweep's {framework} models, "
            f"and matrix.framework plans no {framework} run (docs/prediction.md)"
        )
    return launch.network_probe_shell(
        config["cluster"],
        config["container"],
        workflow.basedir,
        WORKDIR,
        PYTHON,
        NETWORK_CSV,
        models,
    )


def network_input(wildcards):
    """network.csv for the tables when the sweep runs the probe; none otherwise."""
    return (
        [NETWORK_CSV]
        if launch.network_probe_wanted(ANALYSIS, config["matrix"]["framework"])
        else []
    )
