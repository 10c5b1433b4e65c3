"""The knobs of a scaling study as axes (issue 29, point 3): `matrix.env` (environment variables
per run) and DistributedDataParallel's `bucket_cap_mb`, `gradient_as_bucket_view`, `static_graph`:
the schema and the plan's checks, the run paths, the launcher's command run by a real shell with
real torchrun ranks, the header, settings_hash, and the runs table -> tables -> figures."""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scalesweep import pipeline
from scalesweep.analysis.tables import TABLES
from scalesweep.contract import frameworks, layout, run_env
from scalesweep.plan import checks, launch, matrix
from scalesweep.plan import config as config_files
from scalesweep.plan.analysis_settings import DEFAULTS
from scalesweep.report import plotkit
from scalesweep.tidy import provenance, rows
from scalesweep.tidy.table import group_keys, read_runs

ROOT = Path(__file__).resolve().parents[1]
SHELL_SYNTAX = "$(touch x)"


def tiny_config(**matrix_axes):
    config = yaml.safe_load((ROOT / "tests" / "configs" / "tiny.yaml").read_text())
    config["matrix"].update(matrix_axes)
    config_files.validate_config(config)
    return config


def planned(config):
    runs, _ = matrix.plan(config, check_paths=False)
    settings = [matrix.run_settings(run, config) for run in runs]
    return settings, [matrix.run_path(s, config_files.training_defaults()) for s in settings]


# ---------------------------------------------------------------- the plan


def check_planned(config, settings):
    checks.check_planned(config, settings, check_paths=False, training_defaults=config_files.training_defaults())


def test_env_axis_gives_a_run_per_mapping_at_its_own_path():
    config = tiny_config(framework=["pytorch"], env=[{}, {"NCCL_ALGO": "Ring"}], gpus=[2])
    settings, paths = planned(config)
    assert [s["env"] for s in settings] == [{}, {"NCCL_ALGO": "Ring"}]
    base = "pytorch/model~vit_tiny/dataset~synth-folder/gpus~2"
    assert paths == [f"{base}/epochs~2/per_gpu_batch~16", f"{base}/env~NCCL_ALGO=Ring/epochs~2/per_gpu_batch~16"]


def test_shell_syntax_in_a_value_is_an_inert_path_word():
    word = run_env.path_word({"NCCL_ALGO": "Ring", "X": SHELL_SYNTAX, "P": "a/b~c+d%e"})
    assert word == "NCCL_ALGO=Ring,P=a+2Fb+7Ec+2Bd+25e,X=+24+28touch+20x+29"
    assert re.fullmatch(layout.SETTINGS_WILDCARD, f"/env~{word}")


def test_env_words_are_quoted_for_the_shell_and_named_for_the_trainer():
    config = tiny_config(framework=["pytorch"], gpus=[2], env=[{"NCCL_ALGO": "Ring", "X": SHELL_SYNTAX}])
    (settings,), _ = planned(config)
    command = launch.job_command(settings, {"runtime": "none"}, "/repo", "/work", "/venv/bin/python")
    assert "env NCCL_ALGO=Ring 'X=$(touch x)' env " in command
    assert "--env-names NCCL_ALGO,X" in command


def test_ddp_options_reach_the_command_and_leave_default_commands_unchanged():
    default = tiny_config(framework=["pytorch"], gpus=[2])
    (plain,), _ = planned(default)
    assert "--bucket-cap-mb" not in launch.trainer_args(plain)  # measured runs keep their command
    knobbed = tiny_config(framework=["pytorch"], gpus=[2], bucket_cap_mb=[100],
                          gradient_as_bucket_view=[True], static_graph=[True])
    (settings,), (path,) = planned(knobbed)
    args = launch.trainer_args(settings)
    assert args[args.index("--bucket-cap-mb") + 1] == "100"
    assert "--gradient-as-bucket-view" in args and "--static-graph" in args
    assert "/bucket_cap_mb~100/" in path and "/gradient_as_bucket_view~true/" in path
    assert path.endswith("/static_graph~true")


def test_ddp_option_for_tensorflow_is_refused_naming_the_key():
    config = tiny_config(bucket_cap_mb=[25, 100])
    settings, _ = planned(config)
    with pytest.raises(checks.ConfigError) as error:
        check_planned(config, settings)
    assert str(error.value).startswith("config key 'matrix.bucket_cap_mb': 100 for a tensorflow run "
                                       "(cnn_small), whose trainer has no such option (only pytorch's has)")
    config["exclude"] = [{"framework": "tensorflow", "bucket_cap_mb": 100}]
    check_planned(config, planned(config)[0])


@pytest.mark.parametrize("env, message", [
    ({"1BAD": "x"}, "matrix.env[0]"),
    ({"NCCL_ALGO": 1.5}, "matrix.env[0].NCCL_ALGO"),
    ({"NCCL_ALGO": ["Ring"]}, "matrix.env[0].NCCL_ALGO"),
])
def test_schema_refuses_bad_env_entries_naming_them(env, message):
    config = yaml.safe_load((ROOT / "tests" / "configs" / "tiny.yaml").read_text())
    config["matrix"]["env"] = [env]
    with pytest.raises(checks.ConfigError, match=re.escape(message)):
        config_files.validate_config(config)


def test_an_env_too_long_for_a_folder_name_is_refused():
    config = tiny_config(framework=["pytorch"], env=[{"NCCL_SOCKET_IFNAME": "$" * 100}])
    with pytest.raises(checks.ConfigError, match=r"matrix.env\[0\].*longer than a file name"):
        check_planned(config, planned(config)[0])


def test_the_registry_default_is_the_schema_default():
    assert config_files.training_defaults()["bucket_cap_mb"] == frameworks.DDP_BUCKET_CAP_MB


def test_settings_hash_changes_with_a_knob_but_not_with_its_default():
    header = {"framework": "pytorch", "model": "vit_tiny", "gpus": 2, "per_gpu_batch": 16}
    before = provenance.settings_hash(header, {})
    at_defaults = {**header, "bucket_cap_mb": 25.0, "gradient_as_bucket_view": False, "static_graph": False}
    assert provenance.settings_hash(at_defaults, {"env": {}}) == before
    assert provenance.settings_hash({**header, "env": {"NCCL_ALGO": "Ring"}}, {}) != before
    assert provenance.settings_hash({**header, "bucket_cap_mb": 100.0}, {}) != before


# ---------------------------------------------------------------- a real launch


def trainer_environment():
    """The test's environment without launch or SLURM variables that would change the layout."""
    launch_keys = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in launch_keys and not k.startswith("SLURM_")}
    return {**env, "OMP_NUM_THREADS": "2"}


def header_of(stdout):
    prefix = ":::SCALESWEEP "
    return next(json.loads(line[line.index(prefix) + len(prefix):]) for line in stdout.splitlines()
                if prefix in line and '"header"' in line)


@pytest.mark.slow
def test_launched_ranks_see_their_env_and_ddp_is_built_with_the_bucket(tmp_path):
    """The launcher's own command, run by bash in a folder where `touch x` would leave a file:
    two torchrun ranks train, the header (rank 0's) has the variables as the process saw them
    and the bucket size read back from DistributedDataParallel."""
    config = tiny_config(framework=["pytorch"], gpus=[2], bucket_cap_mb=[100],
                         env=[{"NCCL_ALGO": "Ring", "X": SHELL_SYNTAX}])
    config["training"].update(protocol="steps", warmup_steps=1, timed_steps=2)
    (settings,), _ = planned(config)
    data = tmp_path / "data"
    from scalesweep.train.datasets import make_imagefolder

    make_imagefolder.make_imagefolder(str(data), 2, 16, 2, size=32, seed=0)
    settings = {**settings, "data_path": str(data)}
    command = launch.job_command(settings, {"runtime": "none"}, str(ROOT), str(tmp_path), sys.executable)
    run = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env=trainer_environment())
    assert run.returncode == 0, run.stderr[-3000:]
    header = header_of(run.stdout)
    assert header["env"] == {"NCCL_ALGO": "Ring", "X": SHELL_SYNTAX}
    assert header["world_size"] == 2 and header["bucket_cap_mb"] == 100.0
    assert header["gradient_as_bucket_view"] is False and header["static_graph"] is False
    assert not (tmp_path / "x").exists() and not (ROOT / "x").exists()


# ---------------------------------------------------------------- runs table -> tables -> figures


def crafted_log(path, gpus, seconds, env, bucket):
    def line(kind, **fields):
        return ":::SCALESWEEP " + json.dumps({"record": kind, "schema": 1, **fields})

    images = 10 * 16 * gpus
    header = line("header", framework="pytorch", model="vit_tiny", dataset="synth-folder", gpus=gpus,
                  device_kind="cpu", world_size=gpus, nodes=1, per_gpu_batch=16, global_batch=16 * gpus,
                  protocol="steps", epochs=2, warmup_steps=2, timed_steps=10, images_per_epoch=images,
                  bucket_cap_mb=bucket, **({"env": env} if env else {}))
    windows = [line("epoch", epoch=1, images=2 * 16 * gpus, seconds=1.0, throughput_img_s=32.0 * gpus,
                    steps=2, phase="warmup"),
               line("epoch", epoch=2, images=images, seconds=seconds, throughput_img_s=images / seconds,
                    steps=10, phase="timed")]
    summary = line("summary", status="ok", reason=None, epochs=2, total_time_s=None, wall_time_s=30.0)
    path.write_text("\n".join([header, *windows, summary]) + "\n")
    return path


@pytest.mark.slow
def test_new_axes_are_group_keys_of_the_tables_and_labels_of_the_figures(tmp_path):
    items = []
    for env in ({}, {"NCCL_ALGO": "Ring"}):
        for bucket in (25, 100):
            for gpus, seconds in ((1, 10.0), (2, 12.0)):
                log = tmp_path / f"{len(items)}.log"
                axes = {"framework": "pytorch", "model": "vit_tiny", "dataset": "synth-folder", "gpus": gpus,
                        "env": copy.deepcopy(env), "bucket_cap_mb": bucket}
                items.append((crafted_log(log, gpus, seconds, env, bucket), axes))
    rows.write_tidy_tables(items, tmp_path / "epochs.csv", tmp_path / "runs.csv")
    runs = read_runs(tmp_path / "runs.csv")
    assert {"env", "bucket_cap_mb"} <= set(group_keys(runs))
    assert set(runs["env"]) == {"none", "NCCL_ALGO=Ring"}
    assert list(runs.groupby("gpus")["settings_hash"].nunique()) == [4, 4]

    outputs = {name: tmp_path / f"{name}.csv" for name in TABLES}
    list(pipeline.tables_figures_findings(tmp_path / "runs.csv", outputs, DEFAULTS, tmp_path / "figures",
                                          tmp_path / "findings.md"))
    scaling = pd.read_csv(outputs["scaling"], keep_default_na=False)
    groups = scaling[scaling["gpus"] == 2][["env", "bucket_cap_mb"]]
    assert sorted(map(tuple, groups.astype(str).values)) == [
        ("NCCL_ALGO=Ring", "100"), ("NCCL_ALGO=Ring", "25"), ("none", "100"), ("none", "25")]
    plotted, varying = plotkit.plot_table(pd.read_csv(outputs["scaling"]))
    assert {"env", "bucket_cap_mb"} <= set(varying)
    assert any("env=NCCL_ALGO=Ring" in label and "bucket_cap_mb=100" in label for label in plotted["label"])
    assert (tmp_path / "figures" / "speedup_all.png").exists()
