"""The sweep matrix: expansion, explicit exclusion rules, validation naming the key."""

import copy
from pathlib import Path

import shlex
import sys

import pytest
import yaml
from snakemake.utils import validate

from scalesweep.plan import checks, launch, matrix
from scalesweep.plan import config as config_files

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def load_config(name="config.yaml"):
    config = yaml.safe_load((REPO / "config" / name).read_text())
    validate(config, str(SCHEMA))
    return config


@pytest.fixture
def config():
    return load_config()


def test_default_sweep_is_both_frameworks_two_models_three_gpu_counts(config):
    runs, excluded = matrix.plan(config)
    combos = {(r["framework"], r["model"], r["gpus"]) for r in runs}
    assert len(runs) == len(combos) == 12
    assert {fw for fw, _, _ in combos} == {"tensorflow", "pytorch"}
    assert {g for _, _, g in combos} == {1, 2, 4}
    assert len(runs) + len(excluded) == 2 * 4 * 2 * 3


def test_every_exclusion_names_its_rule(config):
    _, excluded = matrix.plan(config)
    rules = {reason.split(":")[0] for _, reason in excluded}
    assert rules == {"model-framework", "dataset-format"}
    run, reason = next(
        (r, why) for r, why in excluded if r["framework"] == "tensorflow" and r["model"] == "vit_tiny"
    )
    assert reason == "model-framework: vit_tiny is not a tensorflow model"


def test_tensorflow_beyond_one_node_is_excluded_with_the_reason(config):
    config["matrix"]["gpus"] = [4, 8]
    runs, excluded = matrix.plan(config)
    assert all(r["gpus"] == 4 for r in runs if r["framework"] == "tensorflow")
    assert any(r["gpus"] == 8 for r in runs if r["framework"] == "pytorch")
    reasons = [
        why
        for r, why in excluded
        if (r["framework"], r["model"], r["dataset"], r["gpus"]) == ("tensorflow", "cnn_small", "synth-cifar", 8)
    ]
    assert reasons and all(why.startswith("tensorflow-single-node") for why in reasons)


def test_user_exclude_patterns_match_partially_and_accept_lists(config):
    config["exclude"] = [{"framework": "pytorch", "gpus": [2, 4]}]
    runs, excluded = matrix.plan(config)
    assert {r["gpus"] for r in runs if r["framework"] == "pytorch"} == {1}
    assert sum(why.startswith("exclude[0]") for _, why in excluded) == 4


def test_extra_axes_multiply_the_runs_and_reach_the_settings(config):
    config["matrix"]["repeat"] = [0, 1]
    config["matrix"]["precision"] = ["fp32", "bf16"]
    runs, _ = matrix.plan(config)
    assert len(runs) == 12 * 4
    run = next(r for r in runs if r["repeat"] == 1 and r["precision"] == "bf16")
    settings = matrix.run_settings(run, config)
    assert settings["precision"] == "bf16" and settings["repeat"] == 1


def test_unknown_model_names_the_key(config):
    config["matrix"]["model"].append("resnet5")
    with pytest.raises(checks.ConfigError, match=r"matrix\.model\[4\].*resnet5"):
        matrix.plan(config)


def test_undefined_dataset_names_the_key(config):
    config["matrix"]["dataset"] = ["imagenet"]
    with pytest.raises(checks.ConfigError, match=r"matrix\.dataset\[0\].*imagenet"):
        matrix.plan(config)


def test_gpus_spanning_partial_nodes_are_refused(config):
    config["matrix"]["gpus"] = [1, 6]
    with pytest.raises(checks.ConfigError, match=r"matrix\.gpus\[1\]"):
        matrix.plan(config)


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda c: c["matrix"].update(gpus=[-1]), "gpus"),
        (lambda c: c["matrix"].update(gpus=[1.5]), "gpus"),
        (lambda c: c["matrix"].update(batchsize=[1]), "batchsize"),
    ],
)
def test_schema_refuses_bad_values(config, edit, key):
    raw = copy.deepcopy(config)
    edit(raw)
    with pytest.raises(Exception, match=key):
        validate(raw, str(SCHEMA))


def test_nodes_follow_gpus_per_node():
    assert [matrix.nodes_for(g, 4) for g in (0, 1, 4, 8, 32)] == [1, 1, 1, 2, 8]


def test_local_commands_use_torchrun_per_gpu_and_plain_python_for_cpu_baseline(config):
    config["matrix"]["gpus"] = [0, 2]
    runs, _ = matrix.plan(config)
    by_key = {(r["framework"], r["model"], r["gpus"]): r for r in runs}

    def local(framework, model, gpus):  # what a job runs with runtime none, no SLURM
        return shlex.join(launch.single_node_argv(matrix.run_settings(by_key[framework, model, gpus], config), "py", "."))

    torch2, torch0, tf2 = local("pytorch", "vit_tiny", 2), local("pytorch", "vit_tiny", 0), local("tensorflow", "cnn_small", 2)
    assert torch2.startswith("py -m torch.distributed.run --standalone --nproc-per-node=2 ./scripts/train_torch.py")
    assert torch0.startswith("py ./scripts/train_torch.py")
    assert tf2.startswith("py ./scripts/train_tf.py --model cnn_small")
    assert "--gpus 2" in tf2 and "--per-gpu-batch 32" in tf2


def test_mn5_config_is_valid_and_plans_the_reference_sweep():
    config = load_config("mn5.yaml")
    runs, _ = matrix.plan(config, check_paths=False)
    assert {r["framework"] for r in runs} == {"tensorflow", "pytorch"}


def test_max_batch_runs_are_single_gpu_first_repeats():
    runs = [{"gpus": 1, "repeat": 1}, {"gpus": 2, "repeat": 0}, {"gpus": 1, "repeat": 0},
            {"gpus": 1, "repeat": 0, "precision": "bf16"}, {"gpus": 4, "repeat": 0}]
    assert matrix.max_batch_runs(runs) == [2, 3]
    assert matrix.max_batch_runs([{"gpus": 1}, {"gpus": 2}]) == [0]  # no repeat axis


def test_gpu_count_patterns_split_single_and_multi_node():
    runs = [{"gpus": g} for g in (1, 2, 4, 8, 32, 4)]
    assert matrix.gpu_count_pattern(runs, 4, multinode=False) == "1|2|4"
    assert matrix.gpu_count_pattern(runs, 4, multinode=True) == "8|32"
    assert matrix.gpu_count_pattern([{"gpus": 1}], 4, multinode=True) == "(?!)"  # matches nothing


def test_the_training_rules_are_one_per_framework_one_across_nodes_and_the_searches():
    made = [matrix.trainer_rule_name(rule.framework.name, rule.multinode, rule.max_batch)
            for rule in matrix.trainer_rules()]
    # TensorFlow stays on one node; PyTorch also runs across nodes; each has its search.
    assert made == ["train_tensorflow", "train_pytorch", "train_pytorch_multinode",
                    "max_batch_tensorflow", "max_batch_pytorch"]


def test_a_job_runs_under_its_frameworks_rule_across_nodes_only_when_it_spans_them():
    assert matrix.job_rule({"framework": "pytorch", "nodes": 1}) == "train_pytorch"
    assert matrix.job_rule({"framework": "pytorch", "nodes": 2}) == "train_pytorch_multinode"
    assert matrix.job_rule({"framework": "pytorch", "nodes": 2}, max_batch=True) == "max_batch_pytorch"
    assert matrix.job_rule({"framework": "tensorflow", "nodes": 1}, max_batch=True) == "max_batch_tensorflow"


def test_synthetic_options_are_the_generators_options_quoted():
    assert matrix.synthetic_options({"train_images": 512, "seed": 0}) == "--seed 0 --train-images 512"
    assert matrix.synthetic_options({"seed": 0, "train_images": 512}) == "--seed 0 --train-images 512"
    assert matrix.synthetic_options({"classes": "4; touch x"}) == "--classes '4; touch x'"


def test_container_python_picks_each_frameworks_interpreter_on_the_host_only(config):
    runs, _ = matrix.plan(config)
    settings = {run["framework"]: matrix.run_settings(run, config) for run in runs if run["gpus"] == 2}
    host = {"runtime": "none", "python": {"tensorflow": "/opt/py38/bin/python"}}
    tf_command = launch.job_command(settings["tensorflow"], host, ".", ".", "/venv/bin/python")
    torch_command = launch.job_command(settings["pytorch"], host, ".", ".", "/venv/bin/python")
    # Either starts without another Python's PYTHONHOME, PYTHONPATH, ... (launch.python_env_hygiene).
    hygiene = launch.shell_words(launch.python_env_hygiene()) + " "
    assert tf_command.startswith(hygiene + "/opt/py38/bin/python ./scripts/train_tf.py")
    # Not set for pytorch: the sweep's own interpreter, its 2 processes sharing the job's threads.
    assert torch_command.startswith(
        hygiene + "env OMP_NUM_THREADS=$((${OMP_NUM_THREADS:-1}/2>0?${OMP_NUM_THREADS:-1}/2:1)) "
        "/venv/bin/python -m torch.distributed.run")
    inside = {**host, "runtime": "apptainer", "module": "", "args": [], "binds": [],
              "images": {"tensorflow": "tf.sif", "pytorch": "torch.sif"}}
    assert f" {Path.cwd()}/tf.sif python ./scripts/train_tf.py" in launch.job_command(
        settings["tensorflow"], inside, ".", ".", "/venv/bin/python")


def test_a_container_python_that_does_not_run_is_refused_before_any_job(config, tmp_path):
    config["container"] = {"runtime": "none", "python": {"pytorch": str(tmp_path / "missing" / "python")}}
    with pytest.raises(checks.ConfigError, match=r"container\.python\.pytorch.*is not an executable interpreter"):
        matrix.plan(config)
    config["container"]["python"]["pytorch"] = sys.executable
    assert matrix.plan(config)[0]


def paths_of(config):
    defaults = config_files.training_defaults()
    runs, _ = matrix.plan(config)
    return [matrix.run_path(matrix.run_settings(run, config), defaults) for run in runs]


def test_a_run_path_names_only_the_settings_away_from_their_defaults(config):
    # config.yaml: epochs 3, fp32, seed 0 are the schema's defaults; cnn_small's batch 32 is the
    # registry's, mobilenetv3small's 32 is not (registry: 64)
    paths = paths_of(config)
    assert "tensorflow/model~cnn_small/dataset~synth-cifar/gpus~2" in paths
    assert "tensorflow/model~mobilenetv3small/dataset~synth-cifar/gpus~2/per_gpu_batch~32" in paths
    assert len(set(paths)) == len(paths) == 12


def test_an_axis_at_its_default_keeps_the_measured_runs_where_they_are(config):
    before = paths_of(config)
    config["matrix"]["repeat"] = [0, 1]
    config["matrix"]["precision"] = ["bf16", "fp32"]
    after = paths_of(config)
    assert set(before) < set(after) and len(after) == 48
    assert "pytorch/model~vit_tiny/dataset~synth-folder/gpus~1/precision~bf16/repeat~1" in after
    # settings in key order, whatever order the config lists its axes in
    assert "pytorch/model~resnet18/dataset~synth-folder/gpus~4/per_gpu_batch~32/precision~bf16" in after


def test_a_protocol_switch_moves_the_runs_and_switching_back_finds_the_old_ones(config):
    before = paths_of(config)
    config["training"].update(protocol="steps", timed_steps=20)
    steps = paths_of(config)
    assert "pytorch/model~vit_tiny/dataset~synth-folder/gpus~1/protocol~steps/timed_steps~20" in steps
    assert not set(steps) & set(before)
    # back to epochs with timed_steps left at 20: epochs never reads it, so the runs are the old ones
    config["training"]["protocol"] = "epochs"
    assert paths_of(config) == before


def test_settings_a_protocol_does_not_read_stay_out_of_the_path():
    defaults = matrix.measured_defaults("pytorch", "vit_tiny", config_files.training_defaults())
    run = {"framework": "pytorch", "model": "vit_tiny", "dataset": "d", "gpus": 1, **defaults}
    steps = {**run, "protocol": "steps", "epochs": 9, "target_ci_pct": 0.5}
    assert matrix.run_path(steps, config_files.training_defaults()) == (
        "pytorch/model~vit_tiny/dataset~d/gpus~1/protocol~steps")
    auto = {**steps, "timed_steps": "auto"}  # an adaptive window is capped by the epochs
    assert matrix.run_path(auto, config_files.training_defaults()) == (
        "pytorch/model~vit_tiny/dataset~d/gpus~1/epochs~9/protocol~steps/target_ci_pct~0.5/timed_steps~auto")
    tuned = {**run, "compile": True, "max_batch_limit": 64, "time_limit_min": 5}
    assert matrix.run_path(tuned, config_files.training_defaults()) == (
        "pytorch/model~vit_tiny/dataset~d/gpus~1/compile~true")


def test_every_axis_the_schema_allows_is_a_setting_of_the_run_path():
    """An axis missing here would put runs of different settings into one path."""
    import yaml

    schema = yaml.safe_load(Path(config_files.CONFIG_SCHEMA).read_text())
    axes = set(schema["properties"]["matrix"]["properties"]) - set(matrix.CORE_AXES)
    defaults = matrix.measured_defaults("pytorch", "vit_tiny", config_files.training_defaults())
    assert axes and axes <= set(defaults)
