"""The sweep matrix: config -> one row per configuration, with explicit exclusion rules.

Pure functions of the (schema-validated) config dict, shared by the Snakefile and the tests. The
JSON schema (workflow/schemas/config.schema.yaml) checks types and names; the checks here are the
ones a schema cannot express (cross references between keys, files that must exist).
"""

import itertools
import math
from pathlib import Path

from scalesweep.catalog import DATASET_FORMATS, FRAMEWORK_SHORT, MODEL_DEFAULTS, MODELS

CORE_AXES = ("framework", "model", "dataset", "gpus")

# Axes a user may add to the matrix, and the short tag each adds to a run's name. Every extra axis
# sets a trainer option (or, for repeat, asks for an independent measurement): an axis that set
# nothing would give identical runs under different labels, so the schema refuses unknown ones.
EXTRA_AXES = {
    "repeat": "r",
    "per_gpu_batch": "b",
    "precision": "",
    "epochs": "e",
    "num_workers": "w",
    "compile": "compile",
    "channels_last": "cl",
    "base_lr": "lr",
}


class ConfigError(ValueError):
    """A config problem found before any job runs; the message names the key."""

    def __init__(self, key, message):
        super().__init__(f"config key '{key}': {message}")
        self.key = key


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


def matches(run, pattern):
    """True when every key of the exclude pattern equals the run's value (lists mean any of)."""
    for key, wanted in pattern.items():
        allowed = wanted if isinstance(wanted, list) else [wanted]
        if run.get(key) not in allowed:
            return False
    return True


def exclusion_reason(run, config):
    """Why a combination of the matrix is not run, or None when it is.

    The rules, in order (documented in the README): a model belongs to one framework; a framework
    reads only its dataset formats; TensorFlow's MirroredStrategy runs on a single node; then the
    user's own `exclude` patterns.
    """
    framework, model = run["framework"], run["model"]
    if model not in MODELS[framework]:
        return f"model-framework: {model} is not a {framework} model"
    fmt = dataset_format(config, run["dataset"])
    if fmt not in DATASET_FORMATS[framework]:
        return f"dataset-format: {framework} does not read {fmt} datasets ({run['dataset']})"
    gpus_per_node = config["cluster"]["gpus_per_node"]
    if framework == "tensorflow" and run["gpus"] > gpus_per_node:
        return (
            f"tensorflow-single-node: MirroredStrategy runs on one node; {run['gpus']} GPUs "
            f"need {nodes_for(run['gpus'], gpus_per_node)} nodes of {gpus_per_node}"
        )
    for index, pattern in enumerate(config.get("exclude", [])):
        if matches(run, pattern):
            return f"exclude[{index}]: {pattern}"
    return None


def check_references(config):
    """Cross-key checks the schema cannot do; raises ConfigError naming the key."""
    matrix = config["matrix"]
    known_models = sorted({m for models in MODELS.values() for m in models})
    for index, model in enumerate(matrix["model"]):
        if model not in known_models:
            raise ConfigError(
                f"matrix.model[{index}]", f"unknown model '{model}' (known: {', '.join(known_models)})"
            )
    for index, dataset in enumerate(matrix["dataset"]):
        if dataset not in config["datasets"]:
            raise ConfigError(
                f"matrix.dataset[{index}]",
                f"dataset '{dataset}' is not defined under 'datasets' "
                f"(defined: {', '.join(sorted(config['datasets'])) or 'none'})",
            )
    gpus_per_node = config["cluster"]["gpus_per_node"]
    for index, gpus in enumerate(matrix["gpus"]):
        if gpus > gpus_per_node and gpus % gpus_per_node:
            raise ConfigError(
                f"matrix.gpus[{index}]",
                f"{gpus} GPUs span nodes but are not a multiple of "
                f"cluster.gpus_per_node={gpus_per_node}",
            )
    container = config["container"]
    if container["runtime"] != "none":
        for framework in matrix["framework"]:
            if framework not in container["images"]:
                raise ConfigError(
                    f"container.images.{framework}",
                    f"runtime is {container['runtime']} but no image is set for {framework}",
                )
    for framework, overrides in config.get("models", {}).items():
        for model in overrides:
            if model not in MODELS[framework]:
                raise ConfigError(f"models.{framework}.{model}", f"not a {framework} model")


def check_dataset_paths(config, datasets, workdir="."):
    """Datasets that are not generated must exist before any job is submitted."""
    for name in datasets:
        spec = config["datasets"][name]
        if spec.get("synthetic") is None and not (Path(workdir) / spec["path"]).exists():
            raise ConfigError(
                f"datasets.{name}.path", f"'{spec['path']}' does not exist (dataset '{name}')"
            )


def plan(config, workdir=".", check_paths=True):
    """(runs, excluded): the configurations to run and the (combination, reason) pairs left out."""
    check_references(config)
    runs, excluded = [], []
    for run in expand_matrix(config["matrix"]):
        reason = exclusion_reason(run, config)
        if reason is None:
            runs.append(run)
        else:
            excluded.append((run, reason))
    if not runs:
        raise ConfigError("matrix", "every combination is excluded: nothing to run")
    if check_paths:
        check_dataset_paths(config, sorted({run["dataset"] for run in runs}), workdir)
    return runs, excluded


def run_settings(run, config):
    """Everything a trainer needs for one configuration: axes first, then defaults."""
    framework, model = run["framework"], run["model"]
    model_defaults = {
        **MODEL_DEFAULTS[framework][model],
        **config.get("models", {}).get(framework, {}).get(model, {}),
    }
    dataset = config["datasets"][run["dataset"]]
    gpus_per_node = config["cluster"]["gpus_per_node"]
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
        "cpus_per_task": config["cluster"]["cpus_per_gpu"] * max(1, min(run["gpus"], gpus_per_node)),
        "repeat": 0,
    }
    settings.setdefault("time_limit_min", config["cluster"]["time_limit_min"])
    settings.update(run)
    return settings


def dataset_path(name, config):
    """Generated datasets live under resources/datasets/<format>/<name>; others where configured."""
    spec = config["datasets"][name]
    if spec.get("synthetic") is not None:
        return f"resources/datasets/{spec['format']}/{name}"
    return spec["path"]


def run_name(run, config):
    """A short readable name, e.g. tf-resnet50v2-cifar128-g4 (used for job names and logs)."""
    parts = [FRAMEWORK_SHORT[run["framework"]], run["model"], run["dataset"], f"g{run['gpus']}"]
    for axis, value in run.items():
        if axis in CORE_AXES:
            continue
        tag = EXTRA_AXES[axis]
        if isinstance(value, bool):
            parts.append(tag if value else f"no{tag}")
        else:
            parts.append(f"{tag}{value}")
    return "-".join(str(part) for part in parts)
