"""Configs whose jobs would all fail are refused before the first job, naming the key; hostile
config files (other encodings, YAML alias bombs, huge matrices) end in one line, fast and in
little memory; and a fuzz of configs never crashes, hangs or builds a command from a value a
job would refuse."""

import copy
import resource
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TINY, snakemake
from scalesweep.plan import checks, launch, matrix
from scalesweep.plan.config import ConfigFileError, check_files, load_strict, validate_config

BASE = yaml.safe_load(TINY.read_text())


def edited(edit):
    config = copy.deepcopy(BASE)
    edit(config)
    return config


def check(tmp_path, config=None, text=None, name="c.yaml"):
    """check_files on a file holding `config` (or raw `text`): what check-config and
    the workflow run when parsed."""
    path = tmp_path / name
    if text is None:
        path.write_text(yaml.safe_dump(config, allow_unicode=True))
    else:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return check_files([path])


def renamed_dataset(old, new):
    def edit(config):
        config["datasets"][new] = config["datasets"].pop(old)
        config["matrix"]["dataset"] = [new if d == old else d for d in config["matrix"]["dataset"]]
    return edit


def real_dataset(path):
    def edit(config):
        config["datasets"]["real"] = {"format": "imagefolder", "resolution": 32, "path": path}
        config["matrix"]["dataset"].append("real")
    return edit


REFUSED = [
    ("float-batch", lambda c: c["models"]["pytorch"]["vit_tiny"].update(per_gpu_batch=32.0),
     "models.pytorch.vit_tiny.per_gpu_batch", "32.0 is not a whole number as a job reads it: write 32"),
    ("float-gpus", lambda c: c["matrix"].update(gpus=[1, 2.0]), "matrix.gpus[1]", "write 2 without a decimal point"),
    ("float-epochs", lambda c: c["training"].update(epochs=2.5), "training.epochs", "2.5 is not of type 'integer'"),
    ("negative-seed", lambda c: c["training"].update(seed=-1), "training.seed", "less than the minimum of 0"),
    ("name-with-newline", renamed_dataset("synth-folder", "a\nb"), "matrix.dataset[1]", "does not match"),
    ("path-like-an-option", real_dataset("--help"), "datasets.real.path", "starts with '-'"),
    ("nul-in-a-path", real_dataset("a\0b"), "datasets.real.path", "NUL byte"),
    ("too-few-images", lambda c: c["datasets"]["synth-folder"]["synthetic"].update(classes=2, train_per_class=8),
     "datasets.synth-folder.synthetic", "16 training images give no full step of 32 images"),
    ("capped-below-one-step", lambda c: c["datasets"]["synth-cifar"].update(max_train_images=20),
     "datasets.synth-cifar.synthetic", "20 training images give no full step of 32 images"),
    ("bind-list-too-long", lambda c: c.update(container={
        "runtime": "apptainer", "binds": ["/gpfs/projects/x" * 10] * 2000,
        "images": {"tensorflow": "tf.sif", "pytorch": "torch.sif"}}), "container.binds", "bind their common parent"),
]


@pytest.mark.parametrize(("case", "edit", "key", "message"), REFUSED, ids=[case[0] for case in REFUSED])
def test_values_every_job_would_refuse_are_refused_naming_the_key(tmp_path, case, edit, key, message):
    with pytest.raises(checks.ConfigError) as error:
        check(tmp_path, edited(edit))
    assert error.value.key == key
    assert message in str(error.value)
    assert "\n" not in str(error.value).replace("a\\nb", "")


def test_a_name_yaml_reads_as_a_number_is_refused_asking_for_quotes(tmp_path):
    text = TINY.read_text().replace("synth-folder:", "2024:").replace("synth-folder]", "'2024']")
    with pytest.raises(checks.ConfigError, match=r"'datasets.2024': the name 2024 is read as a number.*'2024'"):
        check(tmp_path, text=text)


def test_a_file_in_another_encoding_is_named_with_its_line(tmp_path):
    text = ("# Données\n" + TINY.read_text()).encode("latin-1", errors="replace")
    with pytest.raises(ConfigFileError, match=r"c.yaml, line 1: not UTF-8 text \(byte 0xe9\)"):
        check(tmp_path, text=text)


def alias_bomb(levels=9, width=9):
    """A few hundred bytes of YAML standing for width**levels values."""
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + f"\nmatrix: {{gpus: *l{levels}}}\n"


def test_yaml_aliases_that_expand_beyond_any_config_are_refused_at_once(tmp_path):
    bomb = alias_bomb()
    assert len(bomb) < 800
    began = time.perf_counter()
    with pytest.raises(ConfigFileError, match=r"holds more than 100,000 values \(YAML aliases expanded\)"):
        check(tmp_path, text=bomb)
    assert time.perf_counter() - began < 10


def test_a_matrix_too_large_to_expand_is_refused_with_its_size_before_expanding(tmp_path):
    config = edited(lambda c: c["matrix"].update(repeat=list(range(2000)), per_gpu_batch=list(range(1, 1001))))
    began = time.perf_counter()
    with pytest.raises(checks.ConfigError, match=r"'matrix': 32,000,000 combinations \(.*1000 per_gpu_batch x 2000 repeat\)"):
        check(tmp_path, config)
    assert time.perf_counter() - began < 10


def test_a_history_dir_that_is_a_file_is_refused_when_the_workflow_is_parsed(tmp_path):
    (tmp_path / "history").write_text("not a folder")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(edited(lambda c: c.update(history_dir="history"))))
    result = snakemake(tmp_path, "-n", configfile=config)
    assert result.returncode != 0
    assert "config key 'history_dir': 'history' is a file, not a folder" in result.stdout + result.stderr


# ------------------------------------------------------------------------------------ the fuzz

HOSTILE_VALUES = st.one_of(
    st.integers(-3, 3), st.integers(2**31, 2**40), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([32.0, 2.0, -0.0, 1e300, True, False, None, "", "-x", "a\0b", "a\nb", "$(touch X)",
                     "données", "2024.10", "~", "*", "../..", [], {}, [1, 2.0], {"a": 1}]),
    st.text(max_size=12),
)
# Every leaf and mapping of the tiny config, as key paths.
PATHS = [path for path, key, _ in checks.walk(BASE) if key is None] + [
    (*path, key) for path, key, _ in checks.walk(BASE) if key is not None]


def replaced(config, path, value):
    """`config` with the value at `path` replaced; unchanged where an earlier mutation removed
    the path."""
    config = copy.deepcopy(config)
    target = config
    try:
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    except (TypeError, KeyError, IndexError):
        pass
    return config


@st.composite
def mutated_configs(draw):
    config = BASE
    for _ in range(draw(st.integers(1, 3))):
        config = replaced(config, draw(st.sampled_from(PATHS)), draw(HOSTILE_VALUES))
    return config


def dag_commands(config):
    """What building the DAG makes of a config that passed: every job's command and resources."""
    runs, _ = matrix.plan(config, check_paths=False)
    for run in runs:
        settings = matrix.run_settings(run, config)
        launch.job_command(settings, config["container"], "/repo", "/work", "/venv/bin/python")
        launch.slurm_resources(settings, config["cluster"])
    return runs


# 500 configs, 1 to 3 of the 59 key paths changed in each: every path about 17 times. Each config
# costs ~0.1 s, nearly all of it Snakemake's validate parsing the schema file again (its pure-Python
# YAML loader), so 2,000 took 4 minutes of make test for the same paths.
@pytest.mark.slow
@settings(max_examples=500, deadline=10_000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutated_configs())
def test_config_fuzz_ends_in_a_plan_or_one_line_naming_the_key(tmp_path, config):
    try:
        check(tmp_path, config)
    except (checks.ConfigError, ConfigFileError) as error:
        assert str(error) and "Traceback" not in str(error)
        return
    runs = dag_commands(copy.deepcopy(configcheck_filled(tmp_path)))
    assert runs
    # The process's peak memory grew by less than 1 GiB over the fuzz (ru_maxrss is in KiB and
    # holds every earlier test's peak too: the growth is what the fuzz used).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    BASELINE_PEAK_KIB.setdefault("first", peak)
    assert peak - BASELINE_PEAK_KIB["first"] < 1024 * 1024


BASELINE_PEAK_KIB = {}


def configcheck_filled(tmp_path):
    """The config as the checks left it (schema defaults filled in)."""
    config = load_strict(tmp_path / "c.yaml")
    validate_config(config)
    return config


def test_a_compare_with_naming_no_archived_sweep_is_refused_when_the_workflow_is_parsed(tmp_path):
    from test_history import sweep_runs

    from scalesweep.history import archive

    archived = archive.archive(sweep_runs(), tmp_path / "history")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(edited(lambda c: c.update(history_dir="history", compare_with="2025"))))
    result = snakemake(tmp_path, "-n", configfile=config)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (f"config key 'compare_with': no archived sweep '2025' in {tmp_path / 'history'}: archived: "
            f"{archived.sweep_id} (`scalesweep history` lists them)") in result.stdout + result.stderr


def test_a_history_dir_that_cannot_be_written_is_refused_naming_the_folder(tmp_path, monkeypatch):
    import os

    config = edited(lambda c: c.update(history_dir="shared/history"))
    (tmp_path / "shared").mkdir()
    writable = os.access  # root may write anywhere: the folder's permission bits, as a user sees them
    monkeypatch.setattr(os, "access", lambda path, mode: writable(path, mode) and Path(path).name != "shared")
    with pytest.raises(checks.ConfigError) as caught:
        checks.check_history_dir(config, tmp_path)
    assert str(caught.value) == (f"config key 'history_dir': 'shared/history': {tmp_path / 'shared'} cannot be "
                                 "written (permission denied): the sweep archives its runs there")
