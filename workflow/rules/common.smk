# The config read and checked, the run matrix and the wildcards, and what several rules files share
# (a run's paths and settings, its inputs while unmeasured, the sweep's images, the executor). A
# rules file keeps a helper only it uses, as a lambda (snakemake --lint allows no function beside
# rules), and the logic it needs is scalesweep/plan/'s (docs/layout.md).
import functools
import json
import os
import sys
from pathlib import Path

from snakemake.common import get_function_params, overwrite_function_params
from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import min_version

min_version("9.0")

# The analysis package sits beside the Snakefile; rules import it, they don't reimplement it.
sys.path.insert(0, workflow.basedir)

from scalesweep.contract import layout  # noqa: E402
from scalesweep.history import sides  # noqa: E402
from scalesweep.plan import checks, code_version, containers  # noqa: E402
from scalesweep.plan import launch, matrix, preview  # noqa: E402
from scalesweep.plan import config as config_files  # noqa: E402
from scalesweep.plan.analysis_settings import AnalysisSettings  # noqa: E402
from scalesweep.plan.cluster import site  # noqa: E402

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
    # The schema's one path (plan/config.py): its document is then read once, for the
    # validation and the defaults alike.
    config_files.validate_config(config)
    RUNS, EXCLUDED = matrix.plan(config)
    site.check_images(config, RUNS)
    # The analysis settings, built once: the preview, the network probe's decision, rule tables and
    # the failure path (outcome.smk) all read this one object.
    ANALYSIS = AnalysisSettings.from_config(config["analysis"], config["cluster"])
    # A run's result and logs live at <framework>/model~M/dataset~D/gpus~N, then one folder level per
    # setting it measures away from the default (matrix.run_path, spelled by contract/layout.py).
    TRAINING_DEFAULTS = config_files.training_defaults()
    RUN_SETTINGS = [matrix.run_settings(run, config) for run in RUNS]
    RUN_PATHS = [matrix.run_path(run, TRAINING_DEFAULTS) for run in RUN_SETTINGS]
    WORKDIR = os.getcwd()
    SETTINGS = dict(zip(RUN_PATHS, RUN_SETTINGS))
    # Missing or empty datasets and images: listed by a preview, refused by a run (submission_checks).
    PATH_PROBLEMS = site.path_problems(config, RUN_SETTINGS, WORKDIR)
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


def run_log(path):
    return layout.run_result(path)


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


def max_batch_paths():
    return [RUN_PATHS[index] for index in matrix.max_batch_runs(RUNS)]


def max_batch_logs():
    return [max_batch_log(path) for path in max_batch_paths()]


def parameters_named_once(function):
    """`function` with its parameters read once: Snakemake reads them at each call (ioutils' way)."""
    overwrite_function_params(function, get_function_params(function))
    return function


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
        return inputs_of(planned_settings(path, result_of))

    return parameters_named_once(inputs)


def planned_settings(path, result_of):
    """The planned run's settings; a target of a rule's pattern that is no planned run (the older
    layout, a count not in the matrix) is refused by name, not a KeyError."""
    if path not in SETTINGS:
        examples = [result_of(planned) for planned in RUN_PATHS[:1]]
        raise WorkflowError(matrix.unplanned_run_message(result_of(path), examples))
    return SETTINGS[path]


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


def refusal(message):
    """An input function refusing the job with `message` when Snakemake builds it: a rules file
    holds rules, and functions only as lambdas (snakemake --lint)."""

    def refuse(wildcards):
        raise WorkflowError(message)

    return parameters_named_once(refuse)


def submission_checks():
    """Before a run's first job: missing or empty paths (a preview only lists them)."""
    if not workflow.dryrun and workflow.is_main_process and PATH_PROBLEMS:
        raise WorkflowError(site.missing_paths_error(PATH_PROBLEMS))


# The image each framework's trainer runs in (container runtimes only).
IMAGES = containers.sweep_images(
    config["container"], {run["framework"] for run in RUNS}
)


def image_needs(framework):
    return containers.image_files(IMAGES.get(framework))


def image_inputs(framework, result_of=run_log):
    """What a run still to measure needs of its image."""
    needed = image_needs(framework)
    return while_unmeasured(framework, result_of, lambda settings: needed)


def gpu_counts(multinode):
    """A regex of the gpus wildcard values that need several nodes (or fit on one)."""
    return matrix.gpu_count_pattern(RUNS, config["cluster"]["gpus_per_node"], multinode)


def script(name):
    return os.path.join(workflow.basedir, "scripts", name)


def conda_env(framework):
    return f"../../{framework.conda_env}" if framework.conda_env else None


@functools.cache
def executor_name():
    plugin = workflow.executor_plugin
    return preview.executor_named(plugin.name if plugin else None, sys.argv[1:])


def runs_locally():
    return executor_name() == "local"


# The network probe's table and its job's settings (probe.smk), which rule tables and the preview
# read too.
NETWORK_CSV = layout.table("network")
NETWORK_PROBE_SETTINGS = launch.network_probe_settings(config["cluster"])
