"""Config problems found before the first job, each a ConfigError naming the key.

The schema checks types and ranges (scalesweep/plan/config.py reads the files and applies it);
these are what it cannot see and a job would trip over at its start, after its GPU hours were
booked: a number that YAML reads as a float (`32.0` reaches the trainer as `--per-gpu-batch
32.0`), a name that is not text, a NUL byte (no command line can carry one), a dataset path the
trainers would read as an option, a matrix too large to expand, a synthetic dataset smaller than
one step, a bind list longer than one argument may be, a history folder that is a file or cannot
be written (permissions, a read-only file system); and the cross references between keys: models,
datasets and GPU counts the matrix names, the images and interpreters of its frameworks, exclude
entries that would match nothing, synthetic sizes of another format. (A sweep to compare with
that is blank or the history lacks is refused by scalesweep/history/sides.py, which reads the
history; a history folder inside a folder the workflow owns, once every rule is defined, by
scalesweep/plan/history_place.py.)
"""

import difflib
import math
import os
import re
from pathlib import Path

from scalesweep.contract import frameworks, layout, run_env
from scalesweep.plan.launch import starts_process_per_gpu


class ConfigError(ValueError):
    """A config problem found before any job runs; the message names the key (an empty key: the
    message says where itself)."""

    def __init__(self, key, message):
        super().__init__(f"config key '{key}': {message}" if key else message)
        self.key = key


def did_you_mean(names, candidates):
    """'; did you mean 'framework'?' for near misses of known names, else ''."""
    close = [difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1) for name in names]
    guesses = [f"'{match[0]}'" for match in close if match]
    return f"; did you mean {' or '.join(guesses)}?" if guesses else ""


def value_kind(value):
    """What a YAML value is, in words: 'a number', 'a string', 'a boolean', 'a list', ..."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    kinds = {str: "a string", list: "a list", dict: "a mapping", type(None): "empty"}
    return kinds.get(type(value), type(value).__name__)


# More combinations than this are refused before the matrix is expanded (each is a dict in
# memory, and a sweep this size is a typo far more often than a plan).
MAX_COMBINATIONS = 100_000
# Linux refuses a single exec argument longer than MAX_ARG_STRLEN (32 pages: 131,072 bytes);
# the container's --bind list is one argument.
MAX_ARGUMENT_BYTES = 131_072


def key_path(path) -> str:
    """'datasets.d.path' / 'matrix.gpus[1]' from a walk's path of keys and indices."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) and not isinstance(part, bool) else (
            f".{part}" if text else str(part))
    return text


def walk(value, path=()):
    """(path, key or None, value) for every mapping key and every value below `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield path, key, None
            yield from walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (*path, index))
    else:
        yield path, None, value


# What a bus bandwidth across nodes or a per-hop latency may be before it is refused as a
# typo or a broken measurement: no GPU's links carry more than NVLink 5's 1.8 TB/s (both
# directions, NVIDIA's Blackwell datasheet), and a hop of 10 ms is a wide-area link, not a
# cluster's network.
MAX_BUSBW_GB_S = 1800.0
MAX_LATENCY_S = 0.01


def link_problem(busbw_gb_s, latency_s) -> str:
    """'' when a bus bandwidth (GB/s) and a latency (s) can be a network's, else what is wrong,
    naming the value: for a config key, a command-line option and network.csv alike."""
    if not (isinstance(busbw_gb_s, (int, float)) and math.isfinite(busbw_gb_s) and 0 < busbw_gb_s <= MAX_BUSBW_GB_S):
        return f"busbw_gb_s must be a bus bandwidth in (0, {MAX_BUSBW_GB_S:g}] GB/s, got {busbw_gb_s!r}"
    if not (isinstance(latency_s, (int, float)) and math.isfinite(latency_s) and 0 <= latency_s <= MAX_LATENCY_S):
        return f"latency must be a time in [0, {MAX_LATENCY_S:g}] s, got {latency_s!r} s"
    return ""


def uneven_counts(counts, gpus_per_node) -> list:
    """The counts that span nodes but do not fill them (none without a node size)."""
    if not gpus_per_node:
        return []
    return [count for count in counts if count > gpus_per_node and count % gpus_per_node]


def check_prediction_settings(config) -> None:
    """The numbers the predictor reads from the config (analysis.*), refused before any job: GPU
    counts that span nodes of the analysis' node size without filling them (the prediction would
    put a partial node in its ring) and a what-if network no network has."""
    analysis = config.get("analysis") or {}
    node = analysis.get("gpus_per_node") or (config.get("cluster") or {}).get("gpus_per_node")
    for key, counts in (("matrix.gpus", (config.get("matrix") or {}).get("gpus") or []),
                        ("analysis.predict_gpus", analysis.get("predict_gpus") or [])):
        for index, gpus in enumerate(counts):
            if uneven_counts([gpus], node):
                raise ConfigError(f"{key}[{index}]", f"{gpus} GPUs span nodes but are not a multiple of "
                                                     f"the prediction's gpus_per_node={node} (analysis.gpus_per_node)")
    network = analysis.get("network")
    if network:
        latency_us = network.get("latency_us") or 0
        problem = link_problem(network.get("busbw_gb_s"), latency_us / 1e6)
        if problem:
            key = "busbw_gb_s" if problem.startswith("busbw") else "latency_us"
            raise ConfigError(f"analysis.network.{key}", problem.replace(f"{latency_us / 1e6!r} s", f"{latency_us!r} us"))


def check_names_and_nul_bytes(config) -> None:
    """Names are text, and no value holds a NUL byte."""
    for path, key, value in walk(config):
        if key is not None and not isinstance(key, str):
            raise ConfigError(key_path((*path, str(key))),
                              f"the name {key!r} is read as {value_kind(key)}, not text: "
                              f"write it in quotes ('{key}')")
        if isinstance(value, str) and "\0" in value:
            raise ConfigError(key_path(path), "holds a NUL byte, which no command line can carry")


def strict_integer(checker, instance) -> bool:
    """JSON Schema counts 32.0 as an integer; a trainer's option parser does not."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def check_matrix_size(matrix: dict) -> None:
    sizes = {axis: len(values) for axis, values in matrix.items() if isinstance(values, list)}
    combinations = math.prod(sizes.values())
    if combinations > MAX_COMBINATIONS:
        product = " x ".join(f"{n} {axis}" for axis, n in sizes.items() if n > 1)
        raise ConfigError("matrix", f"{combinations:,} combinations ({product}) are more than "
                                    f"{MAX_COMBINATIONS:,}: split the sweep")


def config_paths(config):
    """(key, path) of every config value that names a file or folder on disk."""
    for name, spec in config["datasets"].items():
        if "path" in spec:
            yield f"datasets.{name}.path", spec["path"]
    yield "history_dir", config.get("history_dir")
    yield "compare_with", config.get("compare_with")
    container = config.get("container", {})
    for index, bind in enumerate(container.get("binds", [])):
        yield f"container.binds[{index}]", bind
    for section in ("images", "python"):
        for framework, path in container.get(section, {}).items():
            yield f"container.{section}.{framework}", path


# `$HOME`, `${SCRATCH}`: what a user expects a shell to expand. A `$(...)` or a lone `$` is taken
# as written: the commands quote every path, so such a name is a plain (odd) file name.
SHELL_VARIABLE = re.compile(r"\$\{?[A-Za-z_]")


def unexpanded_path_problem(path: str) -> str | None:
    """Why `path` holds what only a shell expands (`~`, `$VAR`), or None. The workflow passes a
    path on as it is written: a `~` would become a folder named `~` in the working folder, a
    `$HOME` a folder named `$HOME`, and which shell should expand it differs between the login
    node, a job and a container."""
    if path.startswith("~"):
        return (f"'{path}' starts with '~', which is not expanded here: write the full path "
                f"({os.path.expanduser(path)})")
    if SHELL_VARIABLE.search(path):
        return (f"'{path}' holds '$', which is not expanded here: write the full path "
                f"({os.path.expandvars(path)})")
    return None


def check_unexpanded_paths(config) -> None:
    for key, path in config_paths(config):
        problem = unexpanded_path_problem(path) if isinstance(path, str) else None
        if problem:
            raise ConfigError(key, problem)


def check_dataset_path_shapes(config) -> None:
    for name, spec in config["datasets"].items():
        path = str(spec.get("path", ""))
        if path.startswith("-"):
            raise ConfigError(f"datasets.{name}.path", f"'{path}' starts with '-', which the trainers "
                                                       f"would read as an option: write ./{path}")


def synthetic_train_images(spec: dict):
    """Training images a synthetic dataset will hold (after max_train_images), or None."""
    sizes = spec.get("synthetic")
    if sizes is None:
        return None
    images = sizes["train_images"] if spec["format"] == "cifar10" else sizes["classes"] * sizes["train_per_class"]
    cap = spec.get("max_train_images") or 0
    return min(images, cap) if cap else images


def images_per_step(settings: dict) -> int:
    """Images one step takes from the dataset: the global batch (the CPU baseline has one)."""
    return settings["per_gpu_batch"] * max(1, settings["gpus"])


def check_steps_fit(config, all_settings) -> None:
    """A synthetic dataset gives every run at least one full step (the trainers refuse less)."""
    for settings in all_settings:
        images = synthetic_train_images(config["datasets"][settings["dataset"]])
        if images is not None and images < images_per_step(settings) and not settings.get("find_max_batch"):
            raise ConfigError(
                f"datasets.{settings['dataset']}.synthetic",
                f"{images} training images give no full step of {images_per_step(settings)} images "
                f"({settings['per_gpu_batch']} per GPU x {settings['gpus']} GPUs: {settings['framework']} "
                f"{settings['model']}): generate more images or lower the per-GPU batch",
            )


def check_bind_length(config) -> None:
    container = config["container"]
    if container["runtime"] == "none":
        return
    length = len(",".join(container["binds"]).encode())
    if length > MAX_ARGUMENT_BYTES // 2:  # the launcher adds the repository, data and workdir
        raise ConfigError("container.binds", f"{len(container['binds'])} binds make one --bind argument of "
                                             f"{length:,} bytes; a command line argument may hold "
                                             f"{MAX_ARGUMENT_BYTES:,}: bind their common parent folders")


def check_planned(config, all_settings, workdir=".", check_paths=True, *, training_defaults) -> None:
    """What needs the planned runs (and, with check_paths, the file system). The sweep to compare
    with needs the history: scalesweep/history/sides.py checks it (check_compare_with).
    `training_defaults`: the schema's (config.training_defaults), what a trainer-only setting is
    compared with."""
    check_steps_fit(config, all_settings)
    check_run_envs(config, all_settings)
    check_bucket_sizes(config, all_settings)
    check_trace_ranks(config, all_settings)
    check_trainer_only_settings(config, all_settings, training_defaults)
    if check_paths:
        check_history_dir(config, workdir)


# Linux's NAME_MAX: the longest file name (one run path folder).
MAX_NAME_BYTES = 255


def setting_key(config_dict, setting) -> str:
    """Where a setting's value comes from: the matrix axis, else `training:`."""
    return f"matrix.{setting}" if setting in config_dict["matrix"] else f"training.{setting}"


def check_trainer_only_settings(config_dict, all_settings, defaults) -> None:
    """A trainer-only setting off its default for a run whose framework's trainer lacks it: it
    would measure the same thing as its neighbour at the default, under another run path."""
    for settings in all_settings:
        framework = frameworks.get(settings["framework"])
        for setting in frameworks.trainer_only_settings():
            if setting not in defaults or frameworks.takes(framework, setting):
                continue
            if settings.get(setting, defaults[setting]) != defaults[setting]:
                takers = [f.name for f in frameworks.FRAMEWORKS if frameworks.takes(f, setting)]
                raise ConfigError(
                    setting_key(config_dict, setting),
                    f"{settings[setting]!r} for a {framework.name} run ({settings['model']}), whose "
                    f"trainer has no such option (only {', '.join(takers)}'s has); leave it at "
                    f"{defaults[setting]!r} there, e.g. exclude: [{{framework: {framework.name}, "
                    f"{setting}: {settings[setting]}}}]",
                )


def env_key(config_dict, env) -> str:
    """The config key a run's environment variables come from: its `matrix.env` entry, else
    `training.env` (a matrix axis replaces the training setting whole)."""
    axis = config_dict["matrix"].get("env")
    return f"matrix.env[{axis.index(env)}]" if axis and env in axis else "training.env"


# Variables the launcher sets for each trainer process itself: a value asked in `env` would be
# overridden (or would break torchrun's rendezvous), while the run path named the asked value.
LAUNCHER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")


def check_run_envs(config_dict, all_settings) -> None:
    """Every environment a planned run starts with, wherever it comes from (`matrix.env` or
    `training.env`): refused here what would fail the job or lose its measurement."""
    checked = []
    for settings in all_settings:
        env = settings.get("env") or {}
        if env in checked:
            continue
        checked.append(env)
        key = env_key(config_dict, env)
        check_env_path_word(key, env)
        for name, value in env.items():
            problem = env_value_problem(name, run_env.value_text(value))
            if problem:
                raise ConfigError(f"{key}.{name}", problem)


def check_env_path_word(key, env) -> None:
    """The run path folder `env~...` (contract/run_env.py) fits in a file name: a name too long
    for it failed the job when it made its log folder."""
    word = "env~" + run_env.path_word(env)
    if len(word.encode("utf-8")) > MAX_NAME_BYTES:
        raise ConfigError(
            key,
            f"its run path folder is {len(word.encode('utf-8'))} bytes, longer than a file "
            f"name may be ({MAX_NAME_BYTES}): shorten the names or values ({word[:60]}...)",
        )


def env_value_problem(name: str, value: str) -> str | None:
    """Why a run's variable `name`=`value` would fail its job or lose its measurement, or None."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        # The trainer records what it saw in its header; the record contract refuses a control
        # character there, so the run trained and its log was then refused.
        return f"{value!r} holds a control character (a newline?), which a run's log cannot record: remove it"
    if value.startswith("~") or SHELL_VARIABLE.search(value):
        return (f"{value!r} holds '{value[0] if value.startswith('~') else '$'}', which is not expanded "
                "(each value is passed as written, never through a shell): write the value in full")
    if name in LAUNCHER_VARIABLES:
        return "is set by the launcher for each trainer process; leave it out of env"
    return None


def check_bucket_sizes(config_dict, all_settings) -> None:
    """DDP's bucket_cap_mb becomes int(MiB * 2**20) bytes: one under a byte makes buckets of none."""
    for settings in all_settings:
        size = settings.get("bucket_cap_mb")
        if size is not None and size * 2**20 < 1:
            raise ConfigError(setting_key(config_dict, "bucket_cap_mb"),
                              f"{size!r} MiB is less than one byte (DDP sizes its buckets in whole "
                              f"bytes): give at least {1 / 2**20:.2g} (25 is DDP's default)")


def check_trace_ranks(config_dict, all_settings) -> None:
    """`trace.ranks` names only ranks every traced run has: its world size is planned (one
    process per GPU under torchrun; TensorFlow's one process traces every replica, so it reads
    no ranks)."""
    trace = config_dict.get("trace", {})
    ranks = trace.get("ranks", [0])
    if isinstance(ranks, str):
        return
    for settings in all_settings:
        if not starts_process_per_gpu(settings) or not any(matches(settings, p) for p in trace.get("select", [])):
            continue
        world = settings["gpus"]  # torchrun: one process, one rank, per GPU
        beyond = sorted(rank for rank in ranks if rank >= world)
        if beyond:
            raise ConfigError("trace.ranks", f"rank {beyond[0]} is not a rank of the traced run {settings['framework']} "
                                              f"{settings['model']} on {settings['gpus']} GPUs (ranks 0-{world - 1}): "
                                              "name ranks every traced run has, or 'all'")


def check_finite_numbers(config) -> None:
    """YAML's .nan and .inf are numbers to the schema, and NaN passes every bound (a peak of .inf
    TFLOP/s made every MFU 0.0 %, a bucket of .nan MiB a job's error): no setting is infinite."""
    for path, _, value in walk(config):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(key_path(path), f"is {value} (YAML's {'.nan' if math.isnan(value) else '.inf'}): "
                                              "give a finite number")


def matches(run, pattern):
    """True when every key of the exclude pattern equals the run's value (lists mean any of)."""
    for key, wanted in pattern.items():
        allowed = wanted if isinstance(wanted, list) else [wanted]
        if run.get(key) not in allowed:
            return False
    return True


def check_history_dir(config, workdir=".") -> None:
    folder = Path(workdir) / config["history_dir"]
    if folder.exists() and not folder.is_dir():
        raise ConfigError("history_dir", f"'{config['history_dir']}' is a file, not a folder")
    existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "read-only file system" if os.statvfs(existing).f_flag & os.ST_RDONLY else "permission denied"
        raise ConfigError("history_dir", f"'{config['history_dir']}': {existing} cannot be written "
                                         f"({why}): the sweep archives its runs there")


# ----------------------------------------------------------------------------- cross references

# The options of scripts/make_cifar.py and scripts/make_imagefolder.py a `synthetic:` entry may
# set, by dataset format (tests/test_config_checks.py checks them against the scripts' parsers).
SYNTHETIC_OPTIONS = {
    "cifar10": {"required": (), "optional": ("train_images", "test_images", "seed")},
    "imagefolder": {"required": ("classes", "train_per_class", "val_per_class", "size"), "optional": ("seed",)},
}


def exclude_values(wanted):
    """(key suffix, value) for each value an exclude entry gives one axis (a list means any of)."""
    if isinstance(wanted, list):
        return [(f"[{index}]", value) for index, value in enumerate(wanted)]
    return [("", wanted)]


def check_exclude(config, axes):
    """An exclude entry naming no axis of the matrix, or a value of another kind than the axis's
    (gpus: '2' for gpus: [1, 2]), would match nothing without a word: refuse both. `axes`: the
    matrix's axes in the order a message lists them (matrix.axis_names)."""
    matrix = config["matrix"]
    for index, pattern in enumerate(config.get("exclude", [])):
        for axis, wanted in pattern.items():
            key = f"exclude[{index}].{axis}"
            if axis not in matrix:
                raise ConfigError(
                    key,
                    f"'{axis}' is not an axis of the matrix (axes: {', '.join(axes)})"
                    + did_you_mean([axis], axes),
                )
            kinds = sorted({value_kind(value) for value in matrix[axis]})
            for suffix, value in exclude_values(wanted):
                if value_kind(value) not in kinds:
                    plurals = " and ".join(kind.split(" ")[-1] + "s" for kind in kinds)
                    raise ConfigError(
                        key + suffix,
                        f"{value!r} is {value_kind(value)}, but matrix.{axis} holds {plurals}: {matrix[axis]}",
                    )


def framework_keys(config):
    """(config key, framework name) of every place a config names a framework: the matrix's
    values and the keys of `models`, `container.images` and `container.python`."""
    keys = [(f"matrix.framework[{index}]", name) for index, name in enumerate(config["matrix"]["framework"])]
    container = config.get("container", {})
    for section, mapping in (("models", config.get("models", {})), ("container.images", container.get("images", {})),
                             ("container.python", container.get("python", {}))):
        keys += [(f"{section}.{name}", name) for name in mapping]
    return keys


def check_frameworks(config):
    """Every framework the config names has a registry entry (scalesweep/contract/frameworks.py):
    the schema accepts any name, so that a new framework is one entry there."""
    for key, name in framework_keys(config):
        if frameworks.find(name) is None:
            raise ConfigError(
                key, f"unknown framework '{name}' (known: {', '.join(frameworks.NAMES)})"
                + did_you_mean([name], frameworks.NAMES))


def check_references(config):
    """Cross-key checks the schema cannot do; raises ConfigError naming the key."""
    matrix = config["matrix"]
    known_models = frameworks.all_model_names()
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
        models = frameworks.get(framework).models
        for model in overrides:
            if model not in models:
                raise ConfigError(f"models.{framework}.{model}",
                                  f"not a {framework} model" + did_you_mean([model], models))


# A synthetic dataset is written to disk whole by the data stage before any job trains: sizes
# past this many bytes (raw pixels: ImageNet's training set is about 150 GB) are a typo that
# would fill the file system, not a benchmark.
MAX_SYNTHETIC_BYTES = 10**12


def synthetic_bytes(fmt, sizes) -> int:
    """Raw pixel bytes a synthetic dataset holds (3 bytes a pixel; CIFAR-10's images are 32 px)."""
    if fmt == "cifar10":
        return (sizes.get("train_images", 0) + sizes.get("test_images", 0)) * 32 * 32 * 3
    images = sizes["classes"] * (sizes["train_per_class"] + sizes["val_per_class"])
    return images * sizes["size"] ** 2 * 3


def check_synthetic(key, fmt, sizes):
    """A synthetic entry sets only options its format's generator has, all it requires, and
    sizes a disk can hold."""
    options = SYNTHETIC_OPTIONS[fmt]
    allowed = options["required"] + options["optional"]
    for option in sizes:
        if option not in allowed:
            owners = [other for other, o in SYNTHETIC_OPTIONS.items() if option in o["required"] + o["optional"]]
            belongs = f"; {option} is an option of {', '.join(owners)} datasets" if owners else ""
            raise ConfigError(
                f"{key}.{option}",
                f"not an option of {fmt} datasets (theirs: {', '.join(allowed)}){belongs}",
            )
    missing = [option for option in options["required"] if option not in sizes]
    if missing:
        raise ConfigError(
            key, f"{fmt} datasets need {', '.join(options['required'])}; missing: {', '.join(missing)}"
        )
    size = synthetic_bytes(fmt, sizes)
    if size > MAX_SYNTHETIC_BYTES:
        raise ConfigError(key, f"these sizes make {size:.3g} bytes of images, more than "
                               f"{MAX_SYNTHETIC_BYTES:.0e} (the data stage writes them all before any "
                               "job): lower them")


def check_datasets(config):
    """What the schema lets through but would silently differ or fail in a job: a path beside
    synthetic (ignored), an empty path (the working directory), synthetic sizes of another format."""
    for name, spec in config["datasets"].items():
        key = f"datasets.{name}"
        if "path" in spec and "synthetic" in spec:
            raise ConfigError(
                key,
                "has both 'path' and 'synthetic': a synthetic dataset is generated under "
                f"{layout.DATASETS}/ and never reads the path; keep one of them",
            )
        if "path" in spec and not str(spec["path"]).strip():
            raise ConfigError(
                f"{key}.path", "is empty (it would read the working directory); give the dataset's folder"
            )
        if "synthetic" in spec:
            check_synthetic(f"{key}.synthetic", spec["format"], spec["synthetic"])


def check_trainer_pythons(config, frameworks, workdir="."):
    """`container.python` interpreters of the frameworks that run must exist and be executable
    (runtime none only: inside a container the image's python runs)."""
    container = config.get("container", {})
    if container.get("runtime", "none") != "none":
        return
    for framework in frameworks:
        python = container.get("python", {}).get(framework)
        if python is not None and not os.access(Path(workdir) / python, os.X_OK):
            raise ConfigError(
                f"container.python.{framework}", f"'{python}' is not an executable interpreter"
            )
