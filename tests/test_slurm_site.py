"""MareNostrum 5's profile on the test SLURM cluster (tests/cluster/): the site refuses jobs without
an account, and the slurm plugin (2.8.0) cannot find one by itself, so the profile's declaration
makes the workflow refuse to submit without one; with one, every sbatch call carries it."""

import re
import subprocess

import pytest
import yaml

from mn5site import mn5_profile, run_with_profile
from test_slurm import cluster, submissions  # noqa: F401 (cluster: the fixture that starts it)
from conftest import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# The test cluster's account (tests/cluster/README.md) and the local-slurm profile's pace: its jobs
# last seconds, MareNostrum 5's status checks every 10 s after 40 s would be most of the test.
ACCOUNT = "scalesweep"
TEST_CLUSTER_PACE = ("latency-wait", "max-status-checks-per-second", "slurm-init-seconds-before-status-checks",
                     "seconds-between-status-checks", "jobs")


def cluster_profile(folder, account):
    """profiles/mn5 (its site declaration, QoS acc_debug) with the test cluster's pace."""
    mn5_profile(folder, account=account, configfile=False)
    local = yaml.safe_load((REPO / "profiles" / "local-slurm" / "config.yaml").read_text())
    settings = yaml.safe_load((folder / "config.yaml").read_text())
    settings.update({key: local[key] for key in TEST_CLUSTER_PACE})
    (folder / "config.yaml").write_text(yaml.safe_dump(settings))


def one_run_config(folder):
    """One PyTorch run on a generated dataset: two jobs (the data, the training)."""
    config = yaml.safe_load((REPO / "tests" / "configs" / "slurm.yaml").read_text())
    config["matrix"] = {"framework": ["pytorch"], "model": ["vit_tiny"], "dataset": ["synth-folder"], "gpus": [1]}
    del config["exclude"]
    config["models"] = {"pytorch": config["models"]["pytorch"]}
    config["datasets"] = {"synth-folder": config["datasets"]["synth-folder"]}
    path = folder / "one-run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def plugin_log(workdir):
    return "".join(log.read_text() for log in (workdir / ".snakemake" / "log").glob("*.log"))


def submit_lines(jobids):
    """{job id: the sbatch command line} from accounting."""
    result = subprocess.run(["sacct", "-X", "-n", "-P", "--format=JobID,Account,SubmitLine%2000",
                             "-j", ",".join(map(str, jobids))], capture_output=True, text=True, check=True)
    rows = [line.split("|", 2) for line in result.stdout.splitlines() if line]
    return {int(jobid): (account, line) for jobid, account, line in rows}


def test_without_an_account_nothing_is_submitted(cluster, tmp_path):  # noqa: F811
    cluster_profile(tmp_path / "mn5", account=None)
    result = run_with_profile(tmp_path, "--configfile", str(one_run_config(tmp_path)), timeout=300)
    output = result.stdout + result.stderr + plugin_log(tmp_path)
    assert result.returncode != 0
    assert "MareNostrum 5 refuses jobs without an account (site.account_required)" in output
    assert "`slurm_account: <account>` under `default-resources:`" in output
    assert submissions(output) == {} and "sbatch" not in output


def test_with_an_account_every_sbatch_call_carries_it(cluster, tmp_path):  # noqa: F811
    cluster_profile(tmp_path / "mn5", account=ACCOUNT)
    result = run_with_profile(tmp_path, "--configfile", str(one_run_config(tmp_path)), timeout=600)
    output = result.stdout + result.stderr + plugin_log(tmp_path)
    assert result.returncode == 0, output[-4000:]
    jobs = submissions(output)
    assert sorted(where.split("/")[0] for where in jobs.values()) == [
        "rule_make_synthetic_imagefolder", "rule_train_pytorch"]
    lines = submit_lines(jobs)
    assert set(lines) == set(jobs)
    for jobid, (account, line) in lines.items():
        assert account == ACCOUNT
        assert re.search(rf"(^| )-A '?{ACCOUNT}'?( |$)", line), line
        assert " --qos" in line or "-q " in line, line
    assert (tmp_path / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~1/epochs~2/"
            "per_gpu_batch~16/train.log").exists()
