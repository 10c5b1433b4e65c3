"""Config values that every job would refuse, refused before the first job with the key named.

The schema checks types and ranges; these are what it cannot see and a job would trip over at
its start, after its GPU hours were booked: a number that YAML reads as a float (`32.0` reaches
the trainer as `--per-gpu-batch 32.0`), a name that is not text, a NUL byte (no command line can
carry one), a dataset path the trainers would read as an option, a matrix too large to expand, a
synthetic dataset smaller than one step, a bind list longer than one argument may be, a history
folder that is a file or cannot be written (permissions, a read-only file system), a sweep to
compare with that is blank or the history lacks. (A history folder inside a folder the workflow
owns is refused once every rule is defined: scalesweep/history_place.py.)
"""

import math
import os
from pathlib import Path

from scalesweep.matrix import ConfigError, value_kind

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


def check_text(config) -> None:
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


def check_planned(config, all_settings, workdir=".", check_paths=True) -> None:
    """What needs the planned runs (and, with check_paths, the file system)."""
    check_steps_fit(config, all_settings)
    if check_paths:
        check_history_dir(config, workdir)
        check_compare_with(config, workdir)


def check_history_dir(config, workdir=".") -> None:
    folder = Path(workdir) / config["history_dir"]
    if folder.exists() and not folder.is_dir():
        raise ConfigError("history_dir", f"'{config['history_dir']}' is a file, not a folder")
    existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "read-only file system" if os.statvfs(existing).f_flag & os.ST_RDONLY else "permission denied"
        raise ConfigError("history_dir", f"'{config['history_dir']}': {existing} cannot be written "
                                         f"({why}): the sweep archives its runs there")


def check_compare_with(config, workdir=".") -> None:
    """The sweep to compare with is in the history (or a folder) before any run starts."""
    from scalesweep import history  # DuckDB: imported only when a comparison is asked for

    if config["compare_with"] is None:
        return
    try:
        history.check_side(str(config["compare_with"]), config["history_dir"], workdir)
    except ValueError as error:
        raise ConfigError("compare_with", str(error)) from None
