"""A local sweep's preview speaks of local runs (processes, minutes), not of GPU-hours and SLURM
job shapes; the executor is the one the user gave, though a dry run executes with Snakemake's own."""

import pytest
import yaml

from conftest import TINY, snakemake
from scalesweep.plan import matrix, preview
from scalesweep.plan.config import validate_config

CLUSTER_WORDS = ("GPU-hours", "gres", "cpus_per_task", "node x", "slurm_extra")


def tiny_settings():
    config = yaml.safe_load(TINY.read_text())
    validate_config(config)
    runs, _ = matrix.plan(config, check_paths=False)
    return [matrix.run_settings(run, config) for run in runs]


def test_local_lines_count_processes_and_minutes():
    settings = tiny_settings()
    lines = preview.local_cost_lines(settings[:1], settings)
    shapes = {preview.local_shape(s) for s in settings}
    # PyTorch starts a process per replica, TensorFlow's MirroredStrategy one for all.
    assert shapes == {"1 process", "2 processes", "1 process x 2 replicas"}
    assert lines[1] == "  minutes at their time limits (60 min): at most 60 (all 4 jobs: 240)"
    assert not any(word in line for line in lines for word in CLUSTER_WORDS)


def test_the_cpu_baseline_is_one_process():
    assert preview.local_shape({"gpus": 0, "gpus_per_node": 0, "framework": "pytorch"}) == "1 process (CPU baseline)"


def test_the_executor_is_read_from_the_command_line_or_the_profile(tmp_path):
    profile = tmp_path / "cluster"
    profile.mkdir()
    (profile / "config.yaml").write_text("executor: slurm\njobs: 4\n")
    assert preview.intended_executor(["-n"]) == "local"
    assert preview.intended_executor(["-n", "--executor", "slurm"]) == "slurm"
    assert preview.intended_executor(["-n", "--profile", str(profile)]) == "slurm"
    assert preview.intended_executor(["-n", "--profile", str(profile), "--executor", "local"]) == "local"
    assert preview.intended_executor(["--no-such-option"]) is None


@pytest.mark.slow
def test_make_preview_prints_no_gpu_hours_or_gres(tmp_path):
    """`make preview` is `snakemake -n` with the local executor (tests/conftest.py: snakemake)."""
    result = snakemake(tmp_path, "-n")
    assert result.returncode == 0, result.stderr
    assert "local jobs to run, one after another on the cores given to --cores" in result.stderr
    for word in CLUSTER_WORDS:
        assert word not in result.stdout + result.stderr, word
