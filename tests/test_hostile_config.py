"""Hostile input, round 3: config paths and values (`~` and `$HOME`, relative paths with
`snakemake --directory`, names that would escape results/, YAML tags, absurd sizes and limits).

Each config goes through `scalesweep check-config` (the command's `main`: what the workflow runs
when it is parsed) and, where the workflow adds something, through Snakemake in tmp_path.
docs/hostile-cases.md lists each case with its outcome.
"""

import copy
import os
import time
from pathlib import Path

import pytest
import yaml

from conftest import TINY, snakemake
from scalesweep import cli
from scalesweep.plan import checks

BASE = yaml.safe_load(TINY.read_text())


def config_file(tmp_path, edit=None, text=None) -> Path:
    path = tmp_path / "c.yaml"
    if text is None:
        config = copy.deepcopy(BASE)
        edit(config)
        text = yaml.safe_dump(config, allow_unicode=True, sort_keys=False)
    path.write_text(text)
    return path


def check_config(path, capsys):
    """(exit status, stdout, stderr) of `python -m scalesweep check-config PATH`."""
    status = cli.main(["check-config", str(path)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def synthetic_cifar_as_path(path):
    def edit(config):
        config["datasets"]["synth-cifar"] = {"format": "cifar10", "resolution": 32, "path": path}
    return edit


# ------------------------------------------------------------------ ~ and $HOME

HOME = os.path.expanduser("~")


@pytest.mark.parametrize("key, edit", [
    ("datasets.synth-cifar.path", synthetic_cifar_as_path("~/cifar")),
    ("datasets.synth-cifar.path", synthetic_cifar_as_path("$HOME/cifar")),
    ("history_dir", lambda c: c.update(history_dir="~/cifar")),
    ("history_dir", lambda c: c.update(history_dir="${HOME}/cifar")),
    ("compare_with", lambda c: c.update(compare_with="~/cifar")),
    ("container.binds[0]", lambda c: c.update(container={"runtime": "apptainer", "binds": ["$HOME/cifar"],
                                                          "images": {"pytorch": "/i.sif", "tensorflow": "/i.sif"}})),
    ("container.python.pytorch", lambda c: c.update(container={"python": {"pytorch": "~/cifar"}})),
])
def test_a_path_only_a_shell_would_expand_is_refused_naming_the_key_and_the_full_path(tmp_path, capsys, key, edit):
    status, out, err = check_config(config_file(tmp_path, edit), capsys)
    assert status == 1 and out == ""
    assert err.startswith(f"error: config key '{key}': '")
    assert "which is not expanded here: write the full path" in err and f"({HOME}/cifar)" in err


@pytest.mark.parametrize("path, refused", [
    ("$SCRATCH/data", True), ("/gpfs/${USER}/data", True), ("/data/$_x", True),
    # command substitution and a lone '$' are names as written: the commands quote them
    ("/data/$(touch x)", False), ("/data/price$", False), ("/data/$1", False), ("/data/a b's", False),
])
def test_only_a_shell_variable_counts_as_unexpanded(path, refused):
    assert (checks.unexpanded_path_problem(path) is not None) == refused


@pytest.mark.slow  # Snakemake parses the workflow
def test_a_history_dir_under_tilde_makes_no_folder_named_tilde(tmp_path):
    """The workflow refuses it when parsed: before, the archive went into ./~/hist."""
    path = config_file(tmp_path, lambda c: c.update(history_dir="~/hist"))
    result = snakemake(tmp_path, "--cores", "1", configfile=path, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "config key 'history_dir': '~/hist' starts with '~', which is not expanded here" in result.stderr
    assert not (tmp_path / "~").exists() and not (tmp_path / "results").exists()


# ------------------------------------------------------------------ relative paths with --directory

@pytest.mark.slow  # Snakemake parses the workflow
def test_relative_dataset_paths_are_read_from_the_directory_snakemake_runs_in(tmp_path):
    """`snakemake --directory run`: a relative dataset path is the run folder's; a dataset that
    sits beside the command's folder instead is listed as missing, naming the folder looked in."""
    (tmp_path / "data" / "cifar").mkdir(parents=True)  # beside the command, not in --directory
    (tmp_path / "data" / "cifar" / "data_batch_1").write_bytes(b"x")
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    path = config_file(tmp_path, synthetic_cifar_as_path("data/cifar"))
    missing = snakemake(tmp_path, "-n", "--directory", run_folder, configfile=path, timeout=300)
    assert missing.returncode == 0, missing.stderr[-3000:]
    assert f"  datasets.synth-cifar.path: 'data/cifar' does not exist in {run_folder}" in missing.stderr.splitlines()
    (run_folder / "data").symlink_to(tmp_path / "data")
    found = snakemake(tmp_path, "-n", "--directory", run_folder, configfile=path, timeout=300)
    assert found.returncode == 0 and "data/cifar" not in found.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / ".snakemake").exists()


# ------------------------------------------------------------------ names that would leave results/

def set_at(keys, value):
    def edit(config):
        target = config
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return edit


def unused_dataset(name):
    """A dataset entry the matrix does not name: its name still becomes a folder where a rule
    generates or lists it, so it is checked as the matrix's names are."""
    def edit(config):
        config["datasets"][name] = dict(config["datasets"]["synth-cifar"])
    return edit


@pytest.mark.parametrize("name", ["../x", "a/b", "/abs", "..", "a\nb", ".hidden", "-rf"])
@pytest.mark.parametrize("where, edit, key", [
    ("matrix dataset", lambda name: set_at(["matrix", "dataset", 0], name), "matrix.dataset[0]"),
    ("matrix model", lambda name: set_at(["matrix", "model", 0], name), "matrix.model[0]"),
    ("datasets key", unused_dataset, "datasets"),
    ("models key", lambda name: set_at(["models", "tensorflow", name], {"per_gpu_batch": 16}), "models.tensorflow"),
])
def test_a_name_that_would_leave_its_folder_is_refused_naming_the_key(tmp_path, capsys, name, where, edit, key):
    status, _, err = check_config(config_file(tmp_path, edit(name)), capsys)
    assert status == 1
    assert err.startswith(f"error: config key '{key}': {name!r} does not match ")


def test_a_nul_byte_in_a_name_is_refused(tmp_path, capsys):
    status, _, err = check_config(config_file(tmp_path, set_at(["matrix", "dataset", 0], "a\0b")), capsys)
    assert status == 1 and "config key 'matrix.dataset[0]': holds a NUL byte" in err


def test_an_env_value_with_slashes_stays_one_folder_of_the_run_path(tmp_path, capsys):
    """`matrix.env` values become a run path word: '/' is written +2F, never a folder."""
    from scalesweep.contract import run_env

    word = run_env.path_word({"X": "../../../etc"})
    assert "/" not in word and word == "X=..+2F..+2F..+2Fetc"
    status, out, _ = check_config(config_file(tmp_path, set_at(["matrix", "env"], [{"X": "../../../etc"}])), capsys)
    assert status == 0 and "4 configurations to run" in out


# ------------------------------------------------------------------ YAML tags

@pytest.mark.parametrize("tagged, tag", [
    ("!!python/object/apply:os.system ['touch {marker}']", "tag:yaml.org,2002:python/object/apply:os.system"),
    ("!!python/object:argparse.Namespace {{}}", "tag:yaml.org,2002:python/object:argparse.Namespace"),
    ("!!python/name:os.system", "tag:yaml.org,2002:python/name:os.system"),
    ("!custom [cnn_small]", "!custom"),
])
def test_a_yaml_tag_is_refused_naming_file_line_and_column_and_runs_nothing(tmp_path, capsys, tagged, tag):
    marker = tmp_path / "executed"
    text = TINY.read_text().replace("  model: [cnn_small, vit_tiny]", "  model: " + tagged.format(marker=marker))
    path = config_file(tmp_path, text=text)
    status, _, err = check_config(path, capsys)
    assert status == 1
    assert err == f"error: {path}, line 5, column 10: could not determine a constructor for the tag '{tag}'\n"
    assert not marker.exists()


@pytest.mark.parametrize("tagged, message", [
    ("  epochs: !!float 2", "config key 'training.epochs': 2.0 is not a whole number as a job reads it"),
    ("  epochs: !!str 2", "config key 'training.epochs': '2' is not of type 'integer'"),
])
def test_a_standard_tag_that_changes_a_type_is_refused_by_the_key(tmp_path, capsys, tagged, message):
    path = config_file(tmp_path, text=TINY.read_text().replace("  epochs: 2", tagged))
    status, _, err = check_config(path, capsys)
    assert status == 1 and err.startswith(f"error: {message}")


# ------------------------------------------------------------------ absurd sizes and limits

def repeats(count):
    return set_at(["matrix", "repeat"], list(range(count)))


@pytest.mark.parametrize("edit, message", [
    (set_at(["matrix", "gpus"], [10**12]), "training images give no full step of 16000000000000 images "
                                           "(16 per GPU x 1000000000000 GPUs"),
    (set_at(["matrix", "gpus"], [-4]), "config key 'matrix.gpus[0]': -4 is less than the minimum of 0"),
    (lambda c: (c["matrix"].update(gpus=list(range(1, 1001))), repeats(1000)(c)),
     "config key 'matrix': 8,000,000 combinations (2 framework x 2 model x 2 dataset x 1000 gpus x 1000 "
     "repeat) are more than 100,000: split the sweep"),
    (set_at(["datasets", "synth-cifar", "synthetic", "train_images"], 10**14),
     "config key 'datasets.synth-cifar.synthetic': these sizes make 3.07e+17 bytes of images, more than 1e+12"),
    (set_at(["datasets", "synth-folder", "synthetic", "size"], 10**6),
     "config key 'datasets.synth-folder.synthetic': these sizes make 4.32e+14 bytes of images"),
    (set_at(["datasets", "synth-cifar", "resolution"], 10**9),
     "config key 'datasets.synth-cifar.resolution': 1000000000 is greater than the maximum of 8192"),
    (set_at(["models", "tensorflow", "cnn_small", "per_gpu_batch"], 10**14),
     "config key 'datasets.synth-cifar.synthetic': 128 training images give no full step of "
     "100000000000000 images"),
])
def test_an_absurd_size_is_refused_quickly_naming_the_key(tmp_path, capsys, edit, message):
    path = config_file(tmp_path, edit)
    started = time.monotonic()
    status, _, err = check_config(path, capsys)
    assert status == 1 and err.startswith("error: config key ") and message in err, err
    assert time.monotonic() - started < 60  # a hang guard, not a timing goal: it takes about a second


def test_a_million_values_in_one_list_is_refused_before_it_is_parsed(tmp_path, capsys):
    """The YAML parser took 64 s over this 3 MB file before its values were counted."""
    text = TINY.read_text().replace("  gpus: [1, 2]", "  gpus: [1, 2]\n  repeat: [" + ", ".join(["0"] * 10**6) + "]")
    path = config_file(tmp_path, text=text)
    started = time.monotonic()
    status, _, err = check_config(path, capsys)
    assert status == 1
    assert err == (f"error: {path}: {path.stat().st_size:,} bytes; a config is a few kilobytes, and one over "
                   "1,000,000 bytes is refused before it is parsed\n")
    assert time.monotonic() - started < 30  # a hang guard, not a timing goal: it takes milliseconds


@pytest.mark.parametrize("edit", [set_at(["training", "epochs"], 10**12), set_at(["matrix", "repeat"], [10**12])])
def test_a_huge_limit_a_job_cannot_exceed_is_previewed_with_its_booked_hours(tmp_path, capsys, edit):
    """10^12 epochs end at the job's time limit, as any long run does, and a repeat number is a
    label: the preview shows the GPU-hours booked at the time limits, which is what they cost."""
    status, out, _ = check_config(config_file(tmp_path, edit), capsys)
    assert status == 0
    assert "4 configurations to run" in out
    assert "GPU-hours they book at their time limits (60 min): 6.0" in out
