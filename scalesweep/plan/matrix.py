"""The sweep matrix: config -> one row per configuration, with explicit exclusion rules.

Pure functions of the (schema-validated) config dict, shared by the Snakefile and the tests. The
JSON schema (workflow/schemas/config.schema.yaml) checks types and names; `plan` first runs the
checks a schema cannot express (cross references between keys, files that must exist:
scalesweep/plan/checks.py). The warnings here are about what would run but hardly as meant
(printed in the preview).
"""

import itertools
import math
from collections import Counter, namedtuple

from scalesweep.contract import frameworks, layout, run_env
from scalesweep.contract.records import FIRST_STEADY_EPOCH
from scalesweep.plan.launch import is_multinode
from scalesweep.plan.checks import (
    ConfigError,
    check_datasets,
    check_exclude,
    check_references,
    check_trainer_pythons,
    exclude_values,
    matches,
)

CORE_AXES = ("framework", "model", "dataset", "gpus")

# Job-shape settings a model may set for itself (models.<framework>.<model>), else `cluster:`'s.
JOB_SHAPE_KEYS = ("time_limit_min", "exclusive", "whole_node")

# The exclusion rules before the config's own `exclude` entries, in the order they apply. A
# framework that does not run across nodes names the third after itself: `tensorflow-single-node`.
SINGLE_NODE = "single-node"
BUILT_IN_RULES = ("model-framework", "dataset-format", SINGLE_NODE)


def axis_names(matrix):
    """Core axes first, then the user's extra axes in the order the config lists them."""
    return list(CORE_AXES) + [axis for axis in matrix if axis not in CORE_AXES]


def expand_matrix(matrix):
    """The full Cartesian product of the matrix axes, as dicts."""
    names = axis_names(matrix)
    return [dict(zip(names, values)) for values in itertools.product(*(matrix[n] for n in names))]


def nodes_for(gpus, gpus_per_node):
    """Nodes a run needs: one up to a full node, then whole nodes."""
    return max(1, math.ceil(gpus / gpus_per_node))


def dataset_format(config, dataset):
    return config["datasets"][dataset]["format"]


def rule_of(reason):
    """The rule named by an exclusion reason: 'model-framework', 'exclude[0]', ..."""
    return reason.split(":")[0]


def rule_rank(rule):
    """Where a rule comes in the order exclusion_reason applies them."""
    if rule.startswith("exclude["):
        return len(BUILT_IN_RULES) + int(rule[len("exclude["):-1])
    if rule.endswith("-" + SINGLE_NODE):
        return BUILT_IN_RULES.index(SINGLE_NODE)
    return BUILT_IN_RULES.index(rule)


def exclusion_counts(excluded):
    """How many combinations each exclusion rule left out, e.g. {"model-framework": 24}."""
    return Counter(rule_of(reason) for _, reason in excluded)


def exclude_warnings(config, excluded):
    """Exclude entries that remove nothing: a value the matrix does not have, or an entry whose
    combinations an earlier rule already left out."""
    matrix = config["matrix"]
    removed = exclusion_counts(excluded)
    warnings = []
    for index, pattern in enumerate(config.get("exclude", [])):
        absent = [
            f"exclude[{index}].{axis}{suffix}: {value!r} is not a value of matrix.{axis} "
            f"{matrix[axis]}, so it matches nothing"
            for axis, wanted in pattern.items()
            for suffix, value in exclude_values(wanted)
            if value not in matrix[axis]
        ]
        warnings += absent
        if not absent and not removed[f"exclude[{index}]"]:
            warnings.append(
                f"exclude[{index}] removes nothing: every combination it matches is already "
                "left out by an earlier rule"
            )
    return warnings


def short_epoch_keys(config):
    """The config keys that set fewer epochs than the first steady one (an epochs axis overrides
    the others, so then only its values count)."""
    if "epochs" in config["matrix"]:
        keys = [(f"matrix.epochs[{i}]", epochs) for i, epochs in enumerate(config["matrix"]["epochs"])]
    else:
        keys = [("training.epochs", config["training"].get("epochs"))] + [
            (f"models.{framework}.{model}.epochs", settings.get("epochs"))
            for framework, models in config.get("models", {}).items()
            for model, settings in models.items()
        ]
    return [f"{key}: {epochs}" for key, epochs in keys if epochs is not None and epochs < FIRST_STEADY_EPOCH]


def epochs_warnings(config, all_settings):
    """Runs timed by whole epochs with fewer than two measure start-up only: no steady state."""
    all_settings = list(all_settings)
    startup_only = [
        s for s in all_settings
        if s.get("protocol", "epochs") == "epochs" and s["epochs"] < FIRST_STEADY_EPOCH
    ]
    if not startup_only:
        return []
    return [
        f"{len(startup_only)} of {len(all_settings)} runs have fewer than {FIRST_STEADY_EPOCH} epochs "
        f"under protocol epochs ({'; '.join(short_epoch_keys(config))}): epoch 1 is start-up, so "
        f"they measure no steady-state time or throughput; use epochs >= {FIRST_STEADY_EPOCH} or "
        "protocol: steps"
    ]


def config_warnings(config, excluded, all_settings):
    """What the config asks for that runs but is probably not what was meant (printed in the preview)."""
    return exclude_warnings(config, excluded) + epochs_warnings(config, all_settings)


def exclusion_reason(run, config):
    """Why a combination of the matrix is not run, or None when it is.

    The rules, in order (documented in docs/config.md): a model belongs to one framework; a framework
    reads only its dataset formats; a framework that does not run across nodes (TensorFlow's
    MirroredStrategy) stops at one; then the user's own `exclude` patterns.
    """
    framework, model = frameworks.get(run["framework"]), run["model"]
    if model not in framework.models:
        return f"model-framework: {model} is not a {framework.name} model"
    fmt = dataset_format(config, run["dataset"])
    if fmt not in framework.dataset_formats:
        return f"dataset-format: {framework.name} does not read {fmt} datasets ({run['dataset']})"
    gpus_per_node = config["cluster"]["gpus_per_node"]
    if not framework.multinode and run["gpus"] > gpus_per_node:
        return (
            f"{framework.name}-{SINGLE_NODE}: {framework.single_node_reason}; {run['gpus']} GPUs "
            f"need {nodes_for(run['gpus'], gpus_per_node)} nodes of {gpus_per_node}"
        )
    for index, pattern in enumerate(config.get("exclude", [])):
        if matches(run, pattern):
            return f"exclude[{index}]: {pattern}"
    return None


def nothing_to_run(config, excluded):
    """The error when the rules leave nothing: which rules removed how many combinations."""
    patterns = config.get("exclude", [])
    removed = []
    for rule, count in sorted(exclusion_counts(excluded).items(), key=lambda item: rule_rank(item[0])):
        label = rule
        if rule.startswith("exclude["):
            label += f" {patterns[rule_rank(rule) - len(BUILT_IN_RULES)]}"
        removed.append(f"{label} removed {count}")
    return ConfigError(
        "matrix",
        f"every combination is excluded: nothing to run ({len(excluded)} combinations; "
        + ", ".join(removed) + ")",
    )


def plan(config, workdir=".", check_paths=True):
    """(runs, excluded): the configurations to run and the (combination, reason) pairs left out."""
    check_references(config)
    check_datasets(config)
    check_exclude(config, axis_names(config["matrix"]))
    runs, excluded = [], []
    for run in expand_matrix(config["matrix"]):
        reason = exclusion_reason(run, config)
        if reason is None:
            runs.append(run)
        else:
            excluded.append((run, reason))
    if not runs:
        raise nothing_to_run(config, excluded)
    if check_paths:
        check_trainer_pythons(config, sorted({run["framework"] for run in runs}), workdir)
    return runs, excluded


def run_settings(run, config):
    """Everything a trainer needs for one configuration: axes first, then defaults."""
    framework, model = run["framework"], run["model"]
    model_defaults = {
        **frameworks.get(framework).models[model],
        **config.get("models", {}).get(framework, {}).get(model, {}),
    }
    dataset = config["datasets"][run["dataset"]]
    cluster = config["cluster"]
    gpus_per_node = cluster["gpus_per_node"]
    # Precedence: shared training settings < per-model settings < the run's own axes.
    settings = {
        **config["training"],
        **model_defaults,
        "resolution": dataset["resolution"],
        "max_train_images": dataset.get("max_train_images", 0),
        "dataset_format": dataset["format"],
        "data_path": dataset_path(run["dataset"], config),
        "nodes": nodes_for(run["gpus"], gpus_per_node),
        "gpus_per_node": min(run["gpus"], gpus_per_node),
        "node_gpus": gpus_per_node,
        "repeat": 0,
    }
    for key in JOB_SHAPE_KEYS:
        settings.setdefault(key, cluster[key])
    # A whole node's CPUs go with its GPUs: the CPUs of every GPU the job holds on a node.
    held_per_node = gpus_per_node if settings["whole_node"] else min(run["gpus"], gpus_per_node)
    settings["cpus_per_task"] = cluster["cpus_per_gpu"] * max(1, held_per_node)
    settings.update(run)
    return settings


# ----------------------------------------------------------------------- where a run's result lives
# A run is found by what it measures: its path names the core axes, then each setting that changes
# the measurement and is not at its default, as /key~value sorted by key. A setting at its default
# adds nothing, so adding an axis (repeat: [0, 1]) keeps the runs already measured where they are,
# and a config that moves away from a default (protocol: steps) and back finds its old results.
# The defaults are the schema's and the framework registry's, not the config's: a config's own values are the
# settings a run is known by.
# Training settings that do not change what a run measures: the ceiling of the maximum-batch
# search (its own target), not of the sweep's runs.
UNMEASURED = ("max_batch_limit",)
AUTO_TIMED_STEPS = "auto"


def measured_defaults(framework, model, training_defaults) -> dict:
    """Each setting that changes what a run measures, at its value when no config sets it: the
    schema's training defaults (config.training_defaults), the model's built-in batch and
    learning rate, the first repeat."""
    unset = {key: value for key, value in training_defaults.items() if key not in UNMEASURED}
    return {**unset, **frameworks.get(framework).models[model], "repeat": 0}


def unread_settings(settings) -> set:
    """The settings a run's protocol never reads (scalesweep/train/common/harness.py,
    _protocol_keys): a value left over from another protocol must not move a run whose measurement
    it does not change."""
    if settings.get("protocol", "epochs") != "steps":
        return {"timed_steps", "target_ci_pct", "max_timed_steps"}
    if settings.get("timed_steps") != AUTO_TIMED_STEPS:
        return {"epochs", "target_ci_pct", "max_timed_steps"}  # epochs only cap an auto window
    return set()


def path_value(value) -> str:
    """A setting as a path word: booleans as YAML writes them (compile~true), a mapping of
    environment variables as env~NAME=value,... (contract/run_env.py: path_word)."""
    if isinstance(value, dict):
        return run_env.path_word(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def settings_segments(settings, defaults) -> str:
    """'/key~value' for each measured setting away from its default, sorted by key; '' if none."""
    unread = unread_settings(settings)
    return "".join(
        layout.setting_segment(key, path_value(settings[key]))
        for key in sorted(defaults)
        if key not in unread and key in settings and settings[key] != defaults[key]
    )


def run_path(settings, training_defaults) -> str:
    """<framework>/model~M/dataset~D/gpus~N[/key~value...]: the run's place under results/runs/
    and logs/train/ (the workflow's output pattern is layout.RUN_PATTERN)."""
    framework, model = settings["framework"], settings["model"]
    defaults = measured_defaults(framework, model, training_defaults)
    return layout.run_path(framework, model, settings["dataset"], settings["gpus"],
                           settings_segments(settings, defaults))


def dataset_path(name, config):
    """Generated datasets live under resources/datasets/<format>/<name>; others where configured."""
    spec = config["datasets"][name]
    if spec.get("synthetic") is not None:
        return layout.dataset_dir(spec["format"], name)
    return spec["path"]


# ----------------------------------------------------------------------------- selections the
# workflow makes from the planned runs (workflow/rules/)

# A rule a training job runs under, made from the framework registry by workflow/rules/train.smk.
TrainerRule = namedtuple("TrainerRule", "framework multinode max_batch")


def trainer_rules() -> list:
    """Every rule a training job runs under, in the registry's order: per framework its rule,
    and its rule across nodes where it runs across nodes; then each framework's maximum-batch
    search."""
    made = []
    for framework in frameworks.FRAMEWORKS:
        made.append(TrainerRule(framework, multinode=False, max_batch=False))
        if framework.multinode:
            made.append(TrainerRule(framework, multinode=True, max_batch=False))
    return made + [TrainerRule(framework, multinode=False, max_batch=True) for framework in frameworks.FRAMEWORKS]


def trainer_rule_name(framework: str, multinode: bool, max_batch: bool) -> str:
    """train_<framework>[_multinode] or max_batch_<framework>."""
    if max_batch:
        return f"max_batch_{framework}"
    return f"train_{framework}{'_multinode' if multinode else ''}"


def job_rule(settings, max_batch: bool = False) -> str:
    """The rule a planned job runs under: across nodes its framework's multinode rule; a
    maximum-batch search (`max_batch`, on one node) max_batch_<framework>."""
    return trainer_rule_name(settings["framework"], is_multinode(settings) and not max_batch, max_batch)


def max_batch_runs(runs) -> list[int]:
    """Positions of the runs the maximum-batch search probes: one per configuration, on a single
    GPU (the per-GPU limit does not depend on the GPU count), its first repeat."""
    first_repeat = min((run.get("repeat", 0) for run in runs), default=0)
    return [index for index, run in enumerate(runs)
            if run["gpus"] == 1 and run.get("repeat", 0) == first_repeat]


def gpu_count_pattern(runs, gpus_per_node: int, multinode: bool) -> str:
    """A regex of the `gpus` wildcard values that need several nodes (multinode) or fit on one;
    one that matches nothing when there are none (a rule must still parse)."""
    values = sorted({str(run["gpus"]) for run in runs if (run["gpus"] > gpus_per_node) == multinode}, key=int)
    return "|".join(values) or "(?!)"


def traced_runs(runs, trace: dict) -> list[int]:
    """Positions of the planned runs `trace.select` picks (any entry matching, as `exclude`'s)."""
    return [index for index, run in enumerate(runs)
            if any(matches(run, pattern) for pattern in trace.get("select", []))]


def trace_settings(settings, trace: dict, trace_dir: str) -> dict:
    """The run as a trace run: the steps protocol, `trace.warmup_steps` untraced steps, then
    `trace.steps` traced ones written to `trace_dir` by the ranks `trace.ranks` names."""
    ranks = trace.get("ranks", [0])
    return {**settings, "protocol": "steps", "warmup_steps": trace.get("warmup_steps", 5),
            "timed_steps": trace.get("steps", 5), "trace_dir": trace_dir,
            "trace_ranks": ranks if isinstance(ranks, str) else ",".join(str(rank) for rank in ranks)}


def synthetic_options(spec: dict) -> str:
    """A `synthetic:` entry as the generator scripts' options, quoted for the shell; in key order,
    so that the same entry written in another order is the same job (Snakemake's params trigger
    would generate it again)."""
    import shlex

    return shlex.join(arg for key, value in sorted(spec.items())
                      for arg in (f"--{key.replace('_', '-')}", str(value)))


def unplanned_run_message(target: str, examples: list) -> str:
    """Why `target`, a path a rule's pattern matches, is no run of the plan (a path of the older
    run layout, a GPU count not in the matrix): the layout a run's path has, and a planned one."""
    example = f" (e.g. {examples[0]})" if examples else ""
    return (f"{target} is no run of this sweep's plan: a run's path is "
            f"{layout.run_path('<framework>', '<model>', '<dataset>', '<gpus>')}[/<setting>~<value>...], with "
            f"only the settings away from their defaults, sorted by name{example}; `snakemake -n` "
            "lists the planned runs (docs/outputs.md: results of the older layout are not found)")
