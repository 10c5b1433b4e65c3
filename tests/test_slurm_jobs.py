"""Which queued SLURM jobs a restarted head waits for (scalesweep/plan/cluster/slurm_jobs.py): this user's jobs
with the slurm plugin's comment whose working directory is this folder, and what each left. The
whole restart on the test cluster is tests/test_slurm_restart.py."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from conftest import LOCAL_ENV

# The plugin asks `scontrol show config` for its job-array limit when it is imported: where no
# controller answers (none is up while pytest collects), that waits 10 s, in each worker's
# collection. This module needs none of it.
with mock.patch.dict(os.environ, LOCAL_ENV):
    from snakemake_executor_plugin_slurm.utils import get_job_wildcards

from scalesweep.plan.cluster import slurm_jobs
from scalesweep.plan.cluster.slurm_jobs import QueuedJob

COMMENT = "rule_train_pytorch_wildcards_vit_tiny_synth-folder_1__epochs~2_per_gpu_batch~16"


def test_squeue_lines_are_read_with_a_comment_that_holds_the_separator():
    text = (f"12|RUNNING|/scratch/my sweep|{COMMENT}\n"
            "13|PENDING|/scratch/my sweep|rule_x_wildcards_a|b\n"
            "\n")
    assert slurm_jobs.parse_squeue(text) == [
        QueuedJob("12", "RUNNING", "/scratch/my sweep", COMMENT),
        QueuedJob("13", "PENDING", "/scratch/my sweep", "rule_x_wildcards_a|b"),
    ]


def test_only_the_plugins_jobs_of_this_folder_are_earlier_jobs(tmp_path):
    here, other = tmp_path / "sweep", tmp_path / "other-sweep"
    here.mkdir(), other.mkdir()
    (tmp_path / "link").symlink_to(here)
    queued = [
        QueuedJob("1", "RUNNING", str(here), COMMENT),
        QueuedJob("2", "PENDING", str(tmp_path / "link"), "group_train_wildcards_x"),  # same folder
        QueuedJob("3", "RUNNING", str(other), COMMENT),  # another sweep's identical configuration
        QueuedJob("4", "RUNNING", str(here), "my interactive session"),  # not the plugin's
    ]
    assert [job.job_id for job in slurm_jobs.earlier_jobs(queued, str(here))] == ["1", "2"]


def test_job_comment_is_the_one_the_slurm_plugin_submits():
    values = ["vit_tiny", "synth-folder", "1", "/epochs~2/per_gpu_batch~16"]
    plugin = get_job_wildcards(SimpleNamespace(wildcards=values))
    assert slurm_jobs.job_comment("train_pytorch", values) == f"rule_train_pytorch_wildcards_{plugin}" == COMMENT
    assert slurm_jobs.job_comment("train_pytorch", ["vit_tiny", "d", "1", ""]).endswith("_vit_tiny_d_1_")


def test_a_comment_two_results_share_names_no_result():
    results = slurm_jobs.results_by_comment({
        "results/a_b/c": slurm_jobs.job_comment("train", ["a_b", "c"]),
        "results/a/b_c": slurm_jobs.job_comment("train", ["a", "b_c"]),
        "results/d/e": slurm_jobs.job_comment("train", ["d", "e"]),
    })
    assert results == {"rule_train_wildcards_d_e": "results/d/e"}


def test_each_awaited_job_says_what_became_of_its_work(tmp_path):
    kept, missing = tmp_path / "kept.log", tmp_path / "missing.log"
    kept.write_text("a result")
    jobs = [QueuedJob("7", "RUNNING", "", "rule_a"), QueuedJob("8", "PENDING", "", "rule_b"),
            QueuedJob("9", "RUNNING", "", "rule_make_data_wildcards_x")]
    lines = slurm_jobs.outcome_lines(
        jobs, {"7": ("COMPLETED", "0:0"), "8": ("FAILED", "1:0")},
        {"rule_a": str(kept), "rule_b": str(missing)},
    )
    assert lines == [
        f"scalesweep: job 7 ended COMPLETED: {kept} kept",
        f"scalesweep: job 8 ended FAILED: no {missing}: its configuration runs again",
        "scalesweep: job 9 ended unknown (no accounting record): rule_make_data_wildcards_x",
    ]


def test_a_result_that_appears_late_is_waited_for_up_to_the_latency(tmp_path):
    late = tmp_path / "late.log"
    waits = []

    def sleep(seconds):  # the file shows up after the first wait, as on a slow shared file system
        waits.append(seconds)
        late.write_text("")

    assert slurm_jobs.wait_until_visible([str(late)], 5, sleep) == []
    assert slurm_jobs.wait_until_visible([str(tmp_path / "never")], 0.3) == [str(tmp_path / "never")]
    assert waits == [1.0]


def test_collecting_this_module_waits_for_no_slurm_controller(tmp_path):
    """pytest imports this module in each worker before any cluster is up: the `scontrol` that
    the plugin's import runs must fail at once (an empty SLURM_CONF), not wait for a controller."""
    asked = tmp_path / "asked"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"SLURM_CONF=$SLURM_CONF $*\" >> '{asked}'\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SLURM_CONF", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-p", "no:xdist", __file__], capture_output=True, text=True, env=env,
                            cwd=Path(__file__).parent, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    calls = asked.read_text().splitlines() if asked.exists() else []  # a plugin that asks nothing
    assert all(call.startswith(f"SLURM_CONF={os.devnull} ") for call in calls), calls
