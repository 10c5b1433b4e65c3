"""Hostile input, round 4: the newest settings (env and DDP knobs, the hardware's peak, the trace's
ranks, dataset names and paths) refused by name before any job, and the commands around them.

Each config goes through `scalesweep check-config` (the command's `main`: what the workflow runs
when it is parsed) and, where the workflow adds something, through Snakemake in tmp_path.
docs/hostile-cases.md lists each case with its outcome.
"""

import os
import subprocess
import sys

import pytest

from conftest import LOCAL_ENV, REPO, SNAKEMAKE, TINY
from test_hostile_config import check_config, config_file


def refused(tmp_path, capsys, edit):
    """The one-line refusal of check-config for the tiny config edited by `edit`."""
    status, out, err = check_config(config_file(tmp_path, edit), capsys)
    assert status == 1 and out == "", err
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in err
    return line


def setting(key, value):
    def edit(config):
        section, name = key.split(".")
        config.setdefault(section, {})[name] = value
    return edit


@pytest.mark.parametrize("key, edit", [
    ("hardware.peak_tflops.bf16", lambda c: c.update(hardware={"peak_tflops": {"bf16": float("inf")}})),
    ("hardware.peak_tflops.fp32", lambda c: c.update(hardware={"peak_tflops": {"fp32": float("nan")}})),
    ("training.bucket_cap_mb", setting("training.bucket_cap_mb", float("nan"))),
    ("training.bucket_cap_mb", setting("training.bucket_cap_mb", float("inf"))),
    ("matrix.bucket_cap_mb[1]", setting("matrix.bucket_cap_mb", [25, float("-inf")])),
])
def test_round4_an_infinite_or_nan_number_is_refused_naming_the_key(tmp_path, capsys, key, edit):
    # .inf TFLOP/s passed the schema's exclusiveMinimum and every MFU read 0.0 %; NaN passes any bound.
    line = refused(tmp_path, capsys, edit)
    assert line.startswith(f"error: config key '{key}': is ") and "give a finite number" in line


@pytest.mark.parametrize("key, edit", [
    ("training.bucket_cap_mb", setting("training.bucket_cap_mb", 1e-9)),
    ("matrix.bucket_cap_mb", setting("matrix.bucket_cap_mb", [25, 1e-7])),
])
def test_round4_a_bucket_smaller_than_a_byte_is_refused(tmp_path, capsys, key, edit):
    line = refused(tmp_path, capsys, edit)
    assert line.startswith(f"error: config key '{key}': ") and "MiB is less than one byte" in line


def env_in(where, env):
    def edit(config):
        if where == "training":
            config["training"]["env"] = env
        else:
            config["matrix"]["env"] = [{}, env]
    return edit


@pytest.mark.parametrize("where, key", [("training", "training.env"), ("matrix", "matrix.env[1]")])
@pytest.mark.parametrize("env, said", [
    ({"N" * 300: "1"}, "longer than a file name may be (255)"),
    ({"NCCL_DEBUG": "INFO\nWARN"}, "holds a control character"),
    ({"PATH": "$PATH:/opt/bin"}, "holds '$', which is not expanded"),
    ({"LD_LIBRARY_PATH": "~/lib"}, "holds '~', which is not expanded"),
    ({"WORLD_SIZE": 8}, "is set by the launcher for each trainer process"),
], ids=["long-name", "newline", "dollar-path", "tilde", "launcher-variable"])
def test_round4_an_env_variable_a_job_would_fail_on_is_refused_from_either_key(tmp_path, capsys, where, key, env, said):
    # training.env was not checked at all (only matrix.env's path word was): the job failed, or
    # trained and had its log refused.
    line = refused(tmp_path, capsys, env_in(where, env))
    name = next(iter(env))
    assert line.startswith(f"error: config key '{key}") and said in line
    if len(name) < 100:
        assert line.startswith(f"error: config key '{key}.{name}': ")


def test_round4_omp_num_threads_asked_in_env_is_what_the_run_runs_with(tmp_path, capsys):
    from scalesweep.plan import launch, matrix
    from scalesweep.plan.config import check_sweep, training_defaults

    path = config_file(tmp_path, env_in("matrix", {"OMP_NUM_THREADS": 3}))
    config, _, settings, _ = check_sweep([path])
    asked = [s for s in settings if s["framework"] == "pytorch" and s["gpus"] == 2 and s["env"]]
    shared = [s for s in settings if s["framework"] == "pytorch" and s["gpus"] == 2 and not s["env"]]
    command = lambda run: launch.job_command(run, config["container"], "/repo", "/work", "python")
    asked_words = command(asked[0])
    assert "env~OMP_NUM_THREADS=3" in matrix.run_path(asked[0], training_defaults())
    assert "OMP_NUM_THREADS=3" in asked_words and "OMP_NUM_THREADS=$((" not in asked_words
    assert "OMP_NUM_THREADS=$((" in command(shared[0])  # the share, as before


def test_round4_trace_ranks_beyond_a_traced_runs_world_size_are_refused(tmp_path, capsys):
    def edit(config):
        config["trace"] = {"select": [{"framework": "pytorch"}], "ranks": [0, 2]}
    line = refused(tmp_path, capsys, edit)
    assert line.startswith("error: config key 'trace.ranks': rank 2 is not a rank of the traced run pytorch ")
    assert "on 1 GPUs (ranks 0-0)" in line or "on 2 GPUs (ranks 0-1)" in line

    def two_gpus_only(config):
        config["matrix"]["gpus"] = [2]
        config["trace"] = {"select": [{"framework": "pytorch"}], "ranks": [0, 1]}
    status, _, err = check_config(config_file(tmp_path, two_gpus_only), capsys)
    assert status == 0, err

    def tensorflow_only(config):  # one process traces every replica: no rank is read
        config["trace"] = {"select": [{"framework": "tensorflow"}], "ranks": [5]}
    status, _, err = check_config(config_file(tmp_path, tensorflow_only), capsys)
    assert status == 0, err


@pytest.mark.parametrize("edit, key", [
    (lambda c: c["matrix"].update(dataset=["synth-cifar\n"]), "matrix.dataset[0]"),
    (lambda c: c["datasets"].update({"other\n": c["datasets"]["synth-cifar"]}), "datasets"),
    (lambda c: c["training"].update(env={"NCCL_ALGO\n": "Ring"}), "training.env"),
])
def test_round4_a_name_ending_in_a_newline_is_refused(tmp_path, capsys, edit, key):
    # Python's re lets the schema's $ match before a final newline: 'synth-cifar\n' was planned,
    # and the record contract refused every run's log after training.
    line = refused(tmp_path, capsys, edit)
    assert line.startswith(f"error: config key '{key}'") and "does not match" in line


def test_round4_an_imagefolder_path_naming_the_train_split_itself_is_refused(tmp_path, capsys):
    data = tmp_path / "imagenet"
    (data / "train" / "n01").mkdir(parents=True)
    (data / "train" / "n01" / "a.jpeg").write_bytes(b"\xff\xd8")

    def path_to(path):
        def edit(config):
            config["datasets"]["synth-folder"] = {"format": "imagefolder", "resolution": 32, "path": str(path)}
        return edit

    status, out, err = check_config(config_file(tmp_path, path_to(data / "train")), capsys)
    assert status == 1 and "Traceback" not in err
    assert (f"datasets.synth-folder.path: '{data / 'train'}' is the train/ split itself; an imagefolder "
            f"dataset is the folder that holds train/ (and val/): give {data}") in err
    status, out, err = check_config(config_file(tmp_path, path_to(data)), capsys)
    assert status == 0, err


def test_round4_analyze_out_on_a_full_disk_names_the_file_not_a_traceback(tmp_path):
    from test_hostile_cli import OK_LOG
    from test_history_place import tmpfs_at

    with tmpfs_at(tmp_path / "small", "size=96k") as out:
        result = subprocess.run([sys.executable, "-m", "scalesweep", "analyze", str(OK_LOG), "--out", str(out)],
                                cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"scalesweep analyze: {out}/") and ": not written (No space left on device); " in last
        assert f"--out {out} holds only what was written before it" in last


def test_round4_an_old_layout_or_unplanned_run_target_is_named_with_the_layout_expected(tmp_path):
    old = "results/runs/pytorch/model~vit_tiny/dataset~synth-cifar/gpus~2/precision~fp32/epochs~2/train.log"
    result = subprocess.run([str(SNAKEMAKE), old, "-n", "--snakefile", str(REPO / "Snakefile"),
                             "--configfile", str(TINY)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={**os.environ, **LOCAL_ENV})
    said = result.stdout + result.stderr
    assert result.returncode == 1 and "KeyError" not in said
    assert f"{old} is no run of this sweep's plan: a run's path is <framework>/model~<model>/" in said
    assert "(e.g. results/runs/tensorflow/model~cnn_small/dataset~synth-cifar/gpus~1/" in said


def test_round4_omp_num_threads_asked_in_env_reaches_the_jobs_command(tmp_path):
    """The same case through `snakemake -n -p`: the job of the run whose path says
    env~OMP_NUM_THREADS=3 exports 3, the others the thread share."""
    path = config_file(tmp_path, env_in("matrix", {"OMP_NUM_THREADS": 3}))
    result = subprocess.run([str(SNAKEMAKE), "-n", "-p", "--snakefile", str(REPO / "Snakefile"), "--configfile",
                             str(path), "--replace-workflow-config"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={**os.environ, **LOCAL_ENV})
    said = result.stdout + result.stderr
    assert result.returncode == 0, said[-3000:]
    commands = [line for line in said.splitlines() if "run_attempt.py" in line]
    asked = [line for line in commands if "env~OMP_NUM_THREADS=3" in line]
    assert asked and all(" OMP_NUM_THREADS=3 " in line and "OMP_NUM_THREADS=$((" not in line for line in asked)
    assert any("OMP_NUM_THREADS=$((" in line for line in commands if "env~" not in line)


def test_round4_a_target_that_made_no_runs_table_closes_without_pointing_at_errors(tmp_path):
    """Through the workflow: a target that succeeds without tidying (a synthetic dataset) ends
    with the line that says so, not "see the errors above"."""
    result = subprocess.run([str(SNAKEMAKE), "resources/datasets/cifar10/synth-cifar", "--cores", "1", "--snakefile",
                             str(REPO / "Snakefile"), "--configfile", str(TINY)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, env={**os.environ, **LOCAL_ENV})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "see the errors above" not in result.stderr
    assert "scalesweep: the targets asked for are made; no runs table yet (" in result.stderr


def test_round4_a_sweep_that_made_no_runs_table_says_so_without_pointing_at_errors(tmp_path):
    from scalesweep.report import outcome

    line = outcome.sweep_outcome(tmp_path / "results")
    assert "see the errors above" not in line
    assert line == (f"scalesweep: the targets asked for are made; no runs table yet ({tmp_path}/results/tidy/runs.csv): "
                    "snakemake without a target tidies every run into it, training only what is missing")
