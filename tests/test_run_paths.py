"""Where a run's result lives, through the real workflow (issue 21, item 1): after a finished tiny
sweep, an axis added at its default and a protocol switch schedule only runs not yet measured, and
switching back reruns nothing."""


import base64
import json

import pytest
import yaml

from conftest import TINY, snakemake
from test_workflow import job_counts

TRAIN_RULES = ("train_tensorflow", "train_pytorch", "train_pytorch_multinode")


def edited_config(folder, **changes):
    """tests/configs/tiny.yaml with `changes` merged into its sections, written into `folder`."""
    config = yaml.safe_load(TINY.read_text())
    for section, values in changes.items():
        config[section].update(values)
    path = folder / "edited.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))  # tiny.yaml's key order: the data rules' params keep it
    return path


def trainings(dryrun):
    """The training jobs a dry run schedules, by rule (none: {})."""
    counts = job_counts(dryrun.stdout) if "Job stats" in dryrun.stdout else {}
    return {rule: count for rule, count in counts.items() if rule in TRAIN_RULES}


def measured(folder):
    """{result path: (bytes, mtime)} of every finished run under folder."""
    return {str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted((folder / "results/runs").rglob("train.log"))}


@pytest.mark.slow
def test_an_added_repeat_axis_schedules_only_the_new_repeats(sweep_copy):
    at_default = edited_config(sweep_copy, matrix={"repeat": [0]})
    preview = snakemake(sweep_copy, "-n", configfile=at_default)
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert trainings(preview) == {}
    assert "scalesweep: 0 configurations to run (4 already measured) of 4;" in preview.stderr

    two = edited_config(sweep_copy, matrix={"repeat": [0, 1]})
    preview = snakemake(sweep_copy, "-n", configfile=two)
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert trainings(preview) == {"train_tensorflow": 2, "train_pytorch": 2}
    assert "scalesweep: 4 configurations to run (4 already measured) of 8;" in preview.stderr
    outputs = [line.split()[1] for line in preview.stdout.splitlines() if line.strip().startswith("output:")]
    assert sorted(out for out in outputs if out.startswith("results/runs/")) == [
        f"results/runs/{run}/epochs~2/per_gpu_batch~16/repeat~1/train.log" for run in (
            "pytorch/model~vit_tiny/dataset~synth-folder/gpus~1",
            "pytorch/model~vit_tiny/dataset~synth-folder/gpus~2",
            "tensorflow/model~cnn_small/dataset~synth-cifar/gpus~1",
            "tensorflow/model~cnn_small/dataset~synth-cifar/gpus~2",
        )]


@pytest.mark.slow
def test_a_protocol_switch_leaves_the_measured_runs_and_switching_back_reruns_nothing(sweep_copy):
    before = measured(sweep_copy)
    assert len(before) == 4
    steps = edited_config(sweep_copy, training={"protocol": "steps", "warmup_steps": 1, "timed_steps": 3})
    preview = snakemake(sweep_copy, "-n", configfile=steps)
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert trainings(preview) == {"train_tensorflow": 2, "train_pytorch": 2}
    ran = snakemake(sweep_copy, "--cores", "2", configfile=steps)
    assert ran.returncode == 0, ran.stderr[-4000:]
    after = measured(sweep_copy)
    # the epochs runs untouched (bytes and times), the steps runs beside them
    assert {path: after[path] for path in before} == before
    assert sorted(set(after) - set(before)) == sorted(
        path.replace("/epochs~2/per_gpu_batch~16/", "/per_gpu_batch~16/protocol~steps/timed_steps~3/warmup_steps~1/")
        for path in before)
    back = snakemake(sweep_copy, "-n")
    assert back.returncode == 0, back.stderr[-3000:]
    assert trainings(back) == {}
    assert "scalesweep: 0 configurations to run (4 already measured) of 4;" in back.stderr


def older_version_record(result: str) -> dict:
    """Snakemake's record (format 6, as 9.27 writes it) of a result that an earlier version of the
    workflow made: another command, another shell, its dataset among the inputs."""
    framework = result.split("/")[2]
    dataset = {"tensorflow": "cifar10/synth-cifar", "pytorch": "imagefolder/synth-folder"}[framework]
    return {
        "rule": f"train_{framework}", "input": [f"resources/datasets/{dataset}"], "log": [],
        "shellcmd": "python train.py --an-option-of-an-older-version",
        "params": ["'python train.py --an-option-of-an-older-version'"],
        "code": "{{ {params.command}; }} > {log:q} 2>&1", "record_format_version": 6,
        "conda_env": None, "container_img_url": None,
        "software_stack_hash": "d41d8cd98f00b204e9800998ecf8427e", "job_hash": 1,
        "starttime": 0.0, "endtime": 1.0, "incomplete": False, "external_jobid": None,
        "input_checksums": {},
    }


@pytest.mark.slow
def test_results_made_by_an_older_command_or_rule_text_are_kept(sweep_copy):
    """What an upgrade of scalesweep leaves: Snakemake's records of the finished runs name another
    command (a new trainer option, a command prefix), another rule text and other inputs.
    Snakemake's params, code and input triggers would train every run again; the workflow keeps
    them (restart.smk: measured_results_are_final)."""
    before = measured(sweep_copy)
    assert len(before) == 4
    records = sweep_copy / ".snakemake" / "metadata"
    records.mkdir(parents=True, exist_ok=True)
    for result in before:
        name = base64.urlsafe_b64encode(result.encode()).decode()
        (records / name).write_text(json.dumps(older_version_record(result)))
    preview = snakemake(sweep_copy, "-n")
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert trainings(preview) == {}
    assert "scalesweep: 0 configurations to run (4 already measured) of 4;" in preview.stderr
    assert measured(sweep_copy) == before


MISSING_RUN = "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16/train.log"


@pytest.mark.slow
def test_a_dataset_made_again_trains_exactly_the_missing_run(sweep_copy):
    """One run's result is gone and its dataset is generated again (its generator's options
    changed). The missing run trains; the three measured runs, one of them on that dataset, do
    not; and the dry run says so. (With ancient() dataset inputs Snakemake 9.27.1 left the missing
    run out of the plan and the sweep ended with the stale tables.)"""
    before = measured(sweep_copy)
    (sweep_copy / MISSING_RUN).unlink()
    config = yaml.safe_load(TINY.read_text())
    config["datasets"]["synth-folder"]["synthetic"] = dict(
        reversed(list(config["datasets"]["synth-folder"]["synthetic"].items())), seed=1)
    changed = sweep_copy / "regenerated.yaml"
    changed.write_text(yaml.safe_dump(config))  # every key sorted, the entry's order reversed
    preview = snakemake(sweep_copy, "-n", configfile=changed)
    assert preview.returncode == 0, preview.stderr[-3000:]
    counts = job_counts(preview.stdout)
    assert counts.get("make_synthetic_imagefolder") == 1 and "make_synthetic_cifar" not in counts
    assert trainings(preview) == {"train_pytorch": 1}
    assert counts.get("tidy") == 1
    ran = snakemake(sweep_copy, "--cores", "2", configfile=changed)
    assert ran.returncode == 0, ran.stderr[-4000:]
    after = measured(sweep_copy)
    assert {path: after[path] for path in before if path != MISSING_RUN} == {
        path: value for path, value in before.items() if path != MISSING_RUN}
    assert MISSING_RUN in after
    runs = (sweep_copy / "results/tidy/runs.csv").read_text()
    assert runs.count(",ok,") == 4


@pytest.mark.slow
def test_a_config_with_its_keys_in_another_order_runs_nothing(sweep_copy):
    sorted_config = sweep_copy / "sorted.yaml"
    sorted_config.write_text(yaml.safe_dump(yaml.safe_load(TINY.read_text())))
    preview = snakemake(sweep_copy, "-n", configfile=sorted_config)
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert "Nothing to be done" in preview.stdout + preview.stderr
