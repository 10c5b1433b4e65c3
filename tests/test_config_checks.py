"""Config that would silently differ from what was written is refused (or warned about) when the
workflow is parsed, and every message names the file and line or the key, in one line."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SNAKEMAKE, TINY, snakemake
from scalesweep.plan import checks, matrix, preview
from scalesweep.plan.config import (
    ConfigFileError,
    check_files,
    files_used,
    load_strict,
    sources,
    validate_config,
)

from scalesweep.train.datasets import make_cifar, make_imagefolder  # noqa: E402

@pytest.fixture
def config():
    config = yaml.safe_load(TINY.read_text())
    validate_config(config)
    return config


def refusal(config):
    with pytest.raises(checks.ConfigError) as error:
        matrix.plan(config, check_paths=False)
    return str(error.value)


def write(path, text):
    path.write_text(text)
    return path


# --- reading the files -----------------------------------------------------------------------


def test_a_key_written_twice_is_refused_with_both_lines(tmp_path):
    path = write(tmp_path / "c.yaml", "matrix:\n  gpus: [1]\ntraining: {}\nmatrix:\n  gpus: [2]\n")
    with pytest.raises(ConfigFileError) as error:
        load_strict(path)
    assert str(error.value) == (
        f"{path}, line 4, column 1: duplicate key 'matrix' (first at line 1); "
        "YAML would silently keep only the last one"
    )


def test_a_nested_duplicate_is_found_too_but_merge_keys_may_be_overridden(tmp_path):
    nested = write(tmp_path / "n.yaml", "training:\n  epochs: 2\n  seed: 0\n  epochs: 3\n")
    duplicate = r"line 4, column 3: duplicate key 'epochs' \(first at line 2\)"
    with pytest.raises(ConfigFileError, match=duplicate):
        load_strict(nested)
    merged = write(tmp_path / "m.yaml", "base: &b {epochs: 2, seed: 0}\ntraining:\n  <<: *b\n  epochs: 3\n")
    assert load_strict(merged)["training"] == {"epochs": 3, "seed": 0}


def test_a_syntax_error_names_file_line_and_column(tmp_path):
    path = write(tmp_path / "c.yaml", "matrix:\n  gpus: [1, 2\n  model: [cnn_small]\n")
    with pytest.raises(ConfigFileError) as error:
        load_strict(path)
    assert str(error.value) == (
        f"{path}, line 3, column 8: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 2, column 9)"
    )


def test_tab_indentation_is_named_with_its_position(tmp_path):
    path = write(tmp_path / "c.yaml", "matrix:\n\tgpus: [1]\n")
    with pytest.raises(ConfigFileError) as error:
        load_strict(path)
    assert str(error.value).startswith(f"{path}, line 2, column 1: found character '\\t' that cannot start any token")


def test_json_is_read_as_snakemake_reads_it_and_duplicates_refused(tmp_path):
    good = write(tmp_path / "c.json", '{\n\t"matrix": {"gpus": [1]}\n}')
    assert load_strict(good) == {"matrix": {"gpus": [1]}}
    twice = write(tmp_path / "d.json", '{"a": 1, "a": 2}')
    with pytest.raises(ConfigFileError) as error:
        load_strict(twice)
    assert str(error.value) == f"{twice}: duplicate key 'a' in one JSON object; only the last would count"


@pytest.mark.parametrize("text, kind", [("", "empty"), ("- 1\n", "a list"), ("3\n", "a number")])
def test_a_top_level_that_is_not_keys_is_refused(tmp_path, text, kind):
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigFileError) as error:
        load_strict(path)
    assert str(error.value) == f"{path}: the top level must be keys (matrix:, datasets:, ...), not {kind}"


def test_files_used_are_the_default_then_the_command_line_ones_unless_replaced(tmp_path):
    default = write(tmp_path / "config.yaml", "{}")
    assert files_used(default, ["/a.yaml"], replaced=False) == [str(default), "/a.yaml"]
    assert files_used(default, ["/a.yaml"], replaced=True) == ["/a.yaml"]
    assert files_used(default, [], replaced=False) == [str(default)]
    assert files_used(default, [], replaced=True) == []  # --config ... --replace-workflow-config
    assert files_used(tmp_path / "none.yaml", ["/a.yaml"], replaced=False) == ["/a.yaml"]


def test_sources_name_the_files_and_command_line_keys():
    assert sources(["a.yaml", "b.yaml"]) == "(config files: a.yaml, b.yaml)"
    assert sources(["a.yaml"], {"training": {}}) == "(config files: a.yaml; --config: training)"


# --- schema errors in one line ----------------------------------------------------------------


def schema_message(config):
    with pytest.raises(checks.ConfigError) as error:
        validate_config(config)
    return str(error.value)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["matrix"].update(gpus=[1, -1]), "config key 'matrix.gpus[1]': -1 is less than the minimum of 0"),
        (lambda c: c.update(matirx={}),
         "unknown top-level key 'matirx' (allowed: matrix, trace, exclude, training, models, datasets, analysis, "
         "cluster, container, hardware, site, history_dir, compare_with); did you mean 'matrix'?"),
        (lambda c: c.update(foo=1, bar=2),
         "unknown top-level keys 'foo', 'bar' (allowed: matrix, trace, exclude, training, models, datasets, "
         "analysis, cluster, container, hardware, site, history_dir, compare_with)"),
        (lambda c: c["training"].update(epoch=3),
         "config key 'training': unknown key 'epoch' (allowed: epochs, precision, num_workers, compile, "
         "channels_last, env, bucket_cap_mb, gradient_as_bucket_view, static_graph, seed, protocol, warmup_steps, timed_steps, target_ci_pct, max_timed_steps, oom_policy, "
         "max_batch_limit); "
         "did you mean 'epochs'?"),
        (lambda c: c.pop("matrix"), "missing required top-level key 'matrix'"),
        (lambda c: c["datasets"]["synth-cifar"].pop("format"),
         "config key 'datasets.synth-cifar': missing required key 'format'"),
        (lambda c: c["datasets"].update(x={"format": "cifar10", "resolution": 32}),
         "config key 'datasets.x': needs 'path' or 'synthetic'"),
        (lambda c: c["matrix"].update(framework=["jax"]),
         "config key 'matrix.framework[0]': unknown framework 'jax' (known: tensorflow, pytorch)"),
        (lambda c: c["matrix"].update(framework=["pytorh"]),
         "config key 'matrix.framework[0]': unknown framework 'pytorh' (known: tensorflow, pytorch); "
         "did you mean 'pytorch'?"),
        (lambda c: c.update(models={"tensorflw": {"cnn_small": {"epochs": 2}}}),
         "config key 'models.tensorflw': unknown framework 'tensorflw' (known: tensorflow, pytorch); "
         "did you mean 'tensorflow'?"),
        (lambda c: c.setdefault("container", {}).update(images={"pytorch": "a.sif", "jax": "b.sif"}),
         "config key 'container.images.jax': unknown framework 'jax' (known: tensorflow, pytorch)"),
        (lambda c: c.setdefault("container", {}).update(python={"torch": "/usr/bin/python3"}),
         "config key 'container.python.torch': unknown framework 'torch' (known: tensorflow, pytorch); "
         "did you mean 'pytorch'?"),
        (lambda c: c.update(exclude="x" * 100),
         "config key 'exclude': 'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx' is not of type 'array'"),
    ],
)
def test_schema_errors_name_the_key_and_the_allowed_values_in_one_line(edit, message):
    raw = yaml.safe_load(TINY.read_text())
    edit(raw)
    assert schema_message(raw) == message


def test_a_model_the_framework_lacks_is_refused_with_its_key_and_a_guess():
    raw = yaml.safe_load(TINY.read_text())
    raw["models"] = {"pytorch": {"vit_tiyn": {"per_gpu_batch": 8}}}
    validate_config(raw)
    with pytest.raises(checks.ConfigError) as error:
        matrix.plan(raw)
    assert str(error.value) == "config key 'models.pytorch.vit_tiyn': not a pytorch model; did you mean 'vit_tiny'?"


# --- exclude ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exclude, message",
    [
        ([{"framwork": "pytorch"}],
         "config key 'exclude[0].framwork': 'framwork' is not an axis of the matrix "
         "(axes: framework, model, dataset, gpus); did you mean 'framework'?"),
        ([{"gpus": 1}, {"precision": "bf16"}],
         "config key 'exclude[1].precision': 'precision' is not an axis of the matrix "
         "(axes: framework, model, dataset, gpus)"),
        ([{"gpus": "2"}],
         "config key 'exclude[0].gpus': '2' is a string, but matrix.gpus holds numbers: [1, 2]"),
        ([{"framework": "pytorch", "gpus": [1, "2"]}],
         "config key 'exclude[0].gpus[1]': '2' is a string, but matrix.gpus holds numbers: [1, 2]"),
        ([{"model": None}],
         "config key 'exclude[0].model': None is empty, but matrix.model holds strings: "
         "['cnn_small', 'vit_tiny']"),
    ],
)
def test_exclude_entries_that_could_never_match_are_refused(config, exclude, message):
    config["exclude"] = exclude
    assert refusal(config) == message


def test_exclude_values_the_matrix_lacks_and_entries_removing_nothing_are_warned_about(config):
    config["exclude"] = [
        {"gpus": 8},
        {"framework": "pytorch", "gpus": [2, 4]},
        {"framework": "tensorflow", "model": "vit_tiny"},
        {"framework": "pytorch", "gpus": 1},
    ]
    runs, excluded = matrix.plan(config, check_paths=False)
    assert [(r["framework"], r["gpus"]) for r in runs] == [("tensorflow", 1), ("tensorflow", 2)]
    assert matrix.exclude_warnings(config, excluded) == [
        "exclude[0].gpus: 8 is not a value of matrix.gpus [1, 2], so it matches nothing",
        "exclude[1].gpus[1]: 4 is not a value of matrix.gpus [1, 2], so it matches nothing",
        "exclude[2] removes nothing: every combination it matches is already left out by an earlier rule",
    ]


def test_nothing_to_run_names_the_rules_that_removed_everything(config):
    config["exclude"] = [{"framework": "pytorch"}, {"gpus": [1, 2]}]
    # 16 combinations: model-framework removes 8, dataset-format 4, exclude[0] the 2 pytorch
    # runs left, exclude[1] the 2 tensorflow ones.
    assert refusal(config) == (
        "config key 'matrix': every combination is excluded: nothing to run (16 combinations; "
        "model-framework removed 8, dataset-format removed 4, exclude[0] {'framework': 'pytorch'} "
        "removed 2, exclude[1] {'gpus': [1, 2]} removed 2)"
    )


# --- datasets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dataset, message",
    [
        ({"format": "cifar10", "resolution": 32, "path": "data/cifar", "synthetic": {"train_images": 64}},
         "config key 'datasets.d': has both 'path' and 'synthetic': a synthetic dataset is generated "
         "under resources/datasets/ and never reads the path; keep one of them"),
        ({"format": "cifar10", "resolution": 32, "path": ""},
         "config key 'datasets.d.path': is empty (it would read the working directory); give the dataset's folder"),
        ({"format": "cifar10", "resolution": 32, "path": "  "},
         "config key 'datasets.d.path': is empty (it would read the working directory); give the dataset's folder"),
        ({"format": "cifar10", "resolution": 32, "synthetic": {"classes": 8, "train_images": 64}},
         "config key 'datasets.d.synthetic.classes': not an option of cifar10 datasets "
         "(theirs: train_images, test_images, seed); classes is an option of imagefolder datasets"),
        ({"format": "imagefolder", "resolution": 32,
          "synthetic": {"classes": 4, "train_per_class": 8, "val_per_class": 2, "train_images": 64}},
         "config key 'datasets.d.synthetic.train_images': not an option of imagefolder datasets "
         "(theirs: classes, train_per_class, val_per_class, size, seed); "
         "train_images is an option of cifar10 datasets"),
        ({"format": "imagefolder", "resolution": 32, "synthetic": {"classes": 4, "train_per_class": 8}},
         "config key 'datasets.d.synthetic': imagefolder datasets need classes, train_per_class, "
         "val_per_class, size; missing: val_per_class, size"),
    ],
)
def test_dataset_specs_a_job_would_trip_over_are_refused(config, dataset, message):
    config["datasets"]["d"] = dataset
    assert refusal(config) == message


def script_options(sizes):
    return [arg for option, value in sizes.items() for arg in (f"--{option.replace('_', '-')}", str(value))]


@pytest.mark.parametrize(
    "fmt, parse_args", [("cifar10", make_cifar.parse_args), ("imagefolder", make_imagefolder.parse_args)]
)
def test_synthetic_options_are_exactly_what_the_generators_take(fmt, parse_args):
    options = checks.SYNTHETIC_OPTIONS[fmt]
    everything = {option: 8 for option in options["required"] + options["optional"]}
    parsed = vars(parse_args(["--out", "x", *script_options(everything)]))
    assert set(parsed) - {"out", "force"} == set(everything)
    for option in options["required"]:
        with pytest.raises(SystemExit):
            parse_args(["--out", "x", *script_options({k: v for k, v in everything.items() if k != option})])
    for option in options["optional"]:
        parse_args(["--out", "x", *script_options({k: v for k, v in everything.items() if k != option})])


# --- epochs -----------------------------------------------------------------------------------


def warnings_of(config):
    runs, excluded = matrix.plan(config, check_paths=False)
    settings = [matrix.run_settings(run, config) for run in runs]
    return matrix.config_warnings(config, excluded, settings)


def test_one_epoch_under_protocol_epochs_is_warned_about_naming_the_key(config):
    config["training"]["epochs"] = 1
    assert warnings_of(config) == [
        "4 of 4 runs have fewer than 2 epochs under protocol epochs (training.epochs: 1): epoch 1 is "
        "start-up, so they measure no steady-state time or throughput; use epochs >= 2 or protocol: steps"
    ]
    config["training"]["protocol"] = "steps"
    assert warnings_of(config) == []


def test_epochs_warning_counts_only_the_runs_with_one_epoch(config):
    config["models"]["pytorch"]["vit_tiny"]["epochs"] = 1
    assert warnings_of(config) == [
        "2 of 4 runs have fewer than 2 epochs under protocol epochs (models.pytorch.vit_tiny.epochs: 1): "
        "epoch 1 is start-up, so they measure no steady-state time or throughput; use epochs >= 2 or "
        "protocol: steps"
    ]
    config["matrix"]["epochs"] = [1, 3]
    assert warnings_of(config)[0].startswith(
        "4 of 8 runs have fewer than 2 epochs under protocol epochs (matrix.epochs[0]: 1)"
    )


def test_preview_prints_each_warning_on_its_own_line():
    lines = preview.warning_lines(["a", "b"]).splitlines()
    assert lines[-2:] == ["scalesweep: warning: a", "scalesweep: warning: b"]


def test_the_shipped_configs_plan_without_warnings():
    for name in ("config.yaml", "mn5.yaml"):
        runs, warnings = check_files([REPO / "config" / name])
        assert runs and warnings == [], name


# --- through Snakemake ------------------------------------------------------------------------


def dry_run(tmp_path, text, *args):
    result = snakemake(tmp_path, "-n", *args, configfile=write(tmp_path / "c.yaml", text), timeout=120)
    return result, result.stdout + result.stderr


def tiny_with(edit):
    config = yaml.safe_load(TINY.read_text())
    edit(config)
    return yaml.safe_dump(config, sort_keys=False)


def test_dryrun_refuses_a_duplicate_key_naming_file_and_line(tmp_path):
    result, output = dry_run(tmp_path, TINY.read_text() + "exclude: [{framework: pytorch}]\n")
    assert result.returncode != 0
    assert (f"{tmp_path / 'c.yaml'}, line 29, column 1: duplicate key 'exclude' (first at line 8); "
            "YAML would silently keep only the last one") in output
    assert "Job stats" not in output


def test_dryrun_names_an_unknown_key_without_dumping_the_schema(tmp_path):
    result, output = dry_run(tmp_path, TINY.read_text() + "matirx: {}\n")
    assert result.returncode != 0
    assert (
        "unknown top-level key 'matirx' (allowed: matrix, trace, exclude, training, models, datasets, "
        f"analysis, cluster, container, hardware, site, history_dir, compare_with); did you mean 'matrix'? "
        f"(config files: {tmp_path / 'c.yaml'})"
    ) in output
    assert "Failed validating" not in output and len(output.splitlines()) < 10


def test_dryrun_names_the_rules_when_nothing_is_left(tmp_path):
    result, output = dry_run(tmp_path, tiny_with(lambda c: c.update(exclude=[{"gpus": [1, 2]}])))
    assert result.returncode != 0
    assert ("every combination is excluded: nothing to run (16 combinations; model-framework removed 8, "
            "dataset-format removed 4, exclude[0] {'gpus': [1, 2]} removed 4)") in output


def test_dryrun_prints_the_warnings_in_the_preview(tmp_path):
    def edit(config):
        config["exclude"] = [{"gpus": 4}]
        config["training"]["epochs"] = 1

    result, output = dry_run(tmp_path, tiny_with(edit))
    assert result.returncode == 0, output[-2000:]
    assert ("scalesweep: warning: exclude[0].gpus: 4 is not a value of matrix.gpus [1, 2], "
            "so it matches nothing") in output
    assert ("scalesweep: warning: 4 of 4 runs have fewer than 2 epochs under protocol epochs "
            "(training.epochs: 1)") in output


def plain_snakemake(workdir, *args):
    """Snakemake without --replace-workflow-config: the workdir's config/config.yaml is the default."""
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "-n", *args],
        cwd=workdir, capture_output=True, text=True, timeout=120,
    )


def test_errors_list_the_config_files_actually_used(tmp_path):
    default = tmp_path / "config" / "config.yaml"
    default.parent.mkdir()
    default.write_text(TINY.read_text())
    bad = write(tmp_path / "bad.yaml", "matrix:\n  model: [resnet5]\n")
    merged = plain_snakemake(tmp_path, "--configfile", str(bad))
    assert (f"config key 'matrix.model[0]': unknown model 'resnet5' (known: cnn_small, mobilenetv3small, "
            f"resnet101v2, resnet152v2, resnet18, resnet50, resnet50v2, vit_h_14, vit_tiny) "
            f"(config files: config/config.yaml, {bad})") in merged.stdout + merged.stderr
    replaced = snakemake(tmp_path, "-n", configfile=write(tmp_path / "bad2.yaml", tiny_with(
        lambda c: c["matrix"].update(model=["resnet5"]))), timeout=120)
    assert f"(config files: {tmp_path / 'bad2.yaml'})" in replaced.stdout + replaced.stderr


def test_a_broken_default_config_is_named_with_line_and_column(tmp_path):
    default = tmp_path / "config" / "config.yaml"
    default.parent.mkdir()
    default.write_text(TINY.read_text().replace("gpus: [1, 2]", "gpus: [1, 2"))
    result = plain_snakemake(tmp_path)
    assert result.returncode != 0
    assert ("config/config.yaml, line 8, column 8: expected ',' or ']', but got ':' "
            "(while parsing a flow sequence at line 7, column 9)") in result.stdout + result.stderr
    # Replaced by --configfile ... --replace-workflow-config, the default is not even read.
    replaced = snakemake(tmp_path, "-n", timeout=120)
    assert replaced.returncode == 0, replaced.stderr[-2000:]


@pytest.mark.parametrize("text, kind", [("- a\n", "a list"), ("42\n", "a number")])
def test_a_command_line_config_that_is_not_keys_is_named_by_configcheck(tmp_path, text, kind):
    """Snakemake refuses it before any workflow code runs, naming no file (its CLI loads
    --configfile files); `python -m scalesweep check-config` names it."""
    broken = write(tmp_path / "c.yaml", text)
    result = snakemake(tmp_path, "-n", configfile=broken, timeout=120)
    assert result.returncode != 0
    assert "Config file must be given as JSON or YAML with keys at top level." in result.stdout + result.stderr
    check = subprocess.run([sys.executable, "-m", "scalesweep", "check-config", str(broken)],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert check.returncode == 1
    assert check.stderr == f"error: {broken}: the top level must be keys (matrix:, datasets:, ...), not {kind}\n"


def test_a_broken_command_line_config_is_named_by_configcheck(tmp_path):
    """Snakemake reads --configfile before any workflow code and names no file, line or column;
    `python -m scalesweep check-config` does."""
    broken = write(tmp_path / "c.yaml", TINY.read_text().replace("gpus: [1, 2]", "gpus: [1, 2"))
    result = snakemake(tmp_path, "-n", configfile=broken, timeout=120)
    assert "Config file is not valid JSON or YAML" in result.stdout + result.stderr
    check = subprocess.run([sys.executable, "-m", "scalesweep", "check-config", str(broken)],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert check.returncode == 1
    assert check.stderr == (f"error: {broken}, line 8, column 8: expected ',' or ']', but got ':' "
                            "(while parsing a flow sequence at line 7, column 9)\n")
