"""The cluster path on a real SLURM (tests/cluster/: slurmctld, slurmdbd on mariadb, two slurmd
with 4 fake GPUs each): the slurm executor plugin submits one job per configuration, a 2-node
PyTorch DDP run spans node1 and node2, a configuration made to fail is recorded with its reason,
and the same command again resubmits exactly that configuration.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():
    """Start (or find running) the test cluster; the script is idempotent."""
    if os.geteuid() != 0 and subprocess.run(["sinfo"], capture_output=True).returncode != 0:
        pytest.skip("starting the test cluster needs root: sudo bash tests/cluster/slurm-up.sh")
    up = subprocess.run(["bash", str(REPO / "tests/cluster/slurm-up.sh")], capture_output=True,
                        text=True, timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]


def sweep(workdir, config=REPO / "tests/configs/slurm.yaml", profile=REPO / "profiles/local-slurm", more=()):
    """The command a user types, run from the sweep's working directory, with `more` (targets,
    options) first: --configfile takes every word after it. Returns the process and Snakemake's
    complete log of that invocation (the plugin writes its submissions there)."""
    before = set((workdir / ".snakemake" / "log").glob("*.log"))
    result = subprocess.run(
        [str(SNAKEMAKE), *more, "--executor", "slurm", "--profile", str(profile),
         "--snakefile", str(REPO / "Snakefile"), "--configfile", str(config)],
        cwd=workdir, capture_output=True, text=True, timeout=900,
    )
    (log,) = set((workdir / ".snakemake" / "log").glob("*.log")) - before
    return result, log.read_text() + result.stdout + result.stderr


# The plugin's log folder of the run made to fail: rule, then its wildcards joined by "_" (the
# settings wildcard, "/epochs~2/per_gpu_batch~16", with its slashes as "_" too).
LATE_FOLDER_JOB = "rule_train_pytorch/vit_tiny_late-folder_1__epochs~2_per_gpu_batch~16"


def submissions(output):
    """{slurm job id: rule/wildcards} from the plugin's 'submitted with SLURM jobid' lines."""
    found = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/(\S+)/\d+\.log\)", output)
    return {int(jobid): where for jobid, where in found}


def sacct(jobids):
    """{job id: (state, node list)} of the jobs' allocations, from accounting."""
    result = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--format=JobID,State,NodeList",
         "-j", ",".join(map(str, jobids))],
        capture_output=True, text=True, check=True,
    )
    rows = [line.split("|") for line in result.stdout.splitlines() if line]
    return {int(jobid): (state.split()[0], nodes) for jobid, state, nodes in rows}


def header_of(log):
    for line in Path(log).read_text().splitlines():
        if ":::SCALESWEEP " in line and '"header"' in line:
            return json.loads(line.split(":::SCALESWEEP ", 1)[1])
    raise AssertionError(f"no header record in {log}")


@pytest.fixture(scope="module")
def first_sweep(cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm-sweep")
    # Not empty (the workflow refuses to submit a sweep reading an empty folder) but no image
    # folder yet: its run fails in the trainer.
    (workdir / "data" / "late-folder").mkdir(parents=True)
    (workdir / "data" / "late-folder" / "COPYING-IN-PROGRESS").write_text("")
    # Asked to predict 4 GPUs, beyond its nodes of one: the sweep runs the network probe.
    config = yaml.safe_load((REPO / "tests/configs/slurm.yaml").read_text())
    config["analysis"] = {"predict_gpus": [4]}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result, output = sweep(workdir, config=workdir / "config.yaml")
    return workdir, result, output


def test_failed_configuration_fails_the_sweep_but_not_the_others(first_sweep):
    workdir, result, output = first_sweep
    assert result.returncode != 0, output[-3000:]
    jobs = submissions(output)
    trains = {jobid: where for jobid, where in jobs.items() if where.startswith("rule_train")}
    assert len(trains) == 4, output[-3000:]
    states = sacct(jobs)
    failed = [trains[j] for j in trains if states[j][0] != "COMPLETED"]
    assert failed == [LATE_FOLDER_JOB], (failed, states)
    assert all(states[j][0] == "FAILED" for j in trains if "late-folder" in trains[j])
    assert all(state == "COMPLETED" for j, (state, _) in states.items() if "late-folder" not in jobs[j])


def test_two_node_run_spans_node1_and_node2_with_world_size_two(first_sweep):
    workdir, _, output = first_sweep
    jobs = submissions(output)
    multinode = [j for j, where in jobs.items() if where.startswith("rule_train_pytorch_multinode")]
    assert len(multinode) == 1
    assert sacct(multinode)[multinode[0]] == ("COMPLETED", "node[1-2]")
    header = header_of(workdir / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16/train.log")
    assert header["world_size"] == 2 and header["nodes"] == 2


def test_the_sweep_probes_the_network_across_both_nodes_for_its_predictions(first_sweep):
    """The sweep predicts beyond its node of one GPU, so it runs the network probe as a 2-node
    job (docs/prediction.md)."""
    workdir, _, output = first_sweep
    jobs = submissions(output)
    probes = [j for j, where in jobs.items() if where.startswith("rule_probe_network")]
    assert len(probes) == 1, output[-3000:]
    assert sacct(probes)[probes[0]] == ("COMPLETED", "node[1-2]")
    network = pd.read_csv(workdir / "results/tables/network.csv").iloc[0]
    # Two node ranks; the names may both read node1 (the job step inherits the batch node's).
    assert (network["nodes"], network["ranks"], network["backend"]) == (2, 2, "gloo")
    # The sweep's one PyTorch model's fp32 gradients, whole (under the CPU cap), in one DDP bucket.
    assert (network["model"], network["buckets"]) == ("vit_tiny@32", 1)
    assert network["bytes"] == network["gradient_bytes"] > 0


def test_two_node_run_measures_where_its_steps_go(first_sweep):
    """The step breakdown across nodes: the parts add up to the step, the all-reduce probe ran
    between the two nodes' processes, and the human line with `other` is in the log."""
    workdir, _, _ = first_sweep
    log = workdir / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16/train.log"
    assert "step breakdown:" in log.read_text() and " + other " in log.read_text()
    runs = pd.read_csv(workdir / "results/tidy/runs.csv").set_index(["framework", "dataset", "gpus"])
    run = runs.loc[("pytorch", "synth-folder", 2)]
    parts = run[["data_wait_s", "compute_s", "sync_wait_s", "sync_comm_s", "other_s"]].sum()
    assert parts == pytest.approx(run["breakdown_step_s"])
    assert run["allreduce_s"] > 0 and run["busbw_gb_s"] > 0 and run["flops_per_image"] > 0
    one = runs.loc[("pytorch", "synth-folder", 1)]
    # (the test cluster runs jobs side by side on 2 cores: no timing is asserted here)
    assert pd.isna(one["allreduce_s"]) and one["sync_exposed_s"] == 0.0


def test_failure_is_recorded_with_its_reason_in_runs_csv(first_sweep):
    workdir, _, _ = first_sweep
    runs = pd.read_csv(workdir / "results/tidy/runs.csv")
    assert len(runs) == 4
    failed = runs[runs["status"] != "ok"]
    assert failed[["dataset", "gpus"]].values.tolist() == [["late-folder", 1]]
    assert failed["status"].iloc[0] == "failed"
    assert isinstance(failed["reason"].iloc[0], str) and failed["reason"].iloc[0]
    assert failed["throughput_img_s"].isna().all()
    assert not (workdir / "results/runs/pytorch/model~vit_tiny/dataset~late-folder/gpus~1/epochs~2/per_gpu_batch~16/train.log").exists()


def test_rerun_submits_exactly_the_failed_configuration(first_sweep):
    workdir, _, first_output = first_sweep
    fixed = workdir / "data" / "late-folder"
    shutil.rmtree(fixed)
    shutil.copytree(workdir / "resources/datasets/imagefolder/synth-folder", fixed)
    result, output = sweep(workdir, config=workdir / "config.yaml")  # the same command again
    assert result.returncode == 0, output[-3000:]
    jobs = submissions(output)
    assert list(jobs.values()) == [LATE_FOLDER_JOB], jobs
    assert set(jobs).isdisjoint(submissions(first_output))
    assert [state for state, _ in sacct(jobs).values()] == ["COMPLETED"]
    runs = pd.read_csv(workdir / "results/tidy/runs.csv")
    assert len(runs) == 4 and (runs["status"] == "ok").all()
    assert (workdir / "results/tables/scaling.csv").exists()
    assert any((workdir / "results/figures").glob("*.png"))


def test_time_limit_is_recorded_as_timeout_from_accounting(cluster, tmp_path):
    config = REPO / "tests/configs/slurm-timeout.yaml"
    result, output = sweep(tmp_path, config)
    assert result.returncode != 0
    (jobid,) = [j for j, where in submissions(output).items() if where.startswith("rule_train")]
    assert sacct([jobid])[jobid][0] == "TIMEOUT"
    runs = pd.read_csv(tmp_path / "results/tidy/runs.csv")
    assert runs["status"].tolist() == ["timeout"]
    assert runs["reason"].iloc[0].startswith("SLURM state TIMEOUT")
    assert runs["throughput_img_s"].isna().all()


def scontrol_job(jobid):
    """{field: value} of `scontrol show job` (ended jobs stay there for MinJobAge, 120 s)."""
    shown = subprocess.run(["scontrol", "show", "job", str(jobid)], capture_output=True, text=True,
                           check=True).stdout
    return dict(field.split("=", 1) for field in shown.split() if "=" in field)


def test_sbatch_gets_the_workflows_and_the_users_slurm_extra(cluster, tmp_path):
    """The train rules set slurm_extra themselves (--exclusive here), which a profile's
    default-resources slurm_extra and --set-resources would replace: the one job submitted gets
    the workflow's, the config's, the profile's and the command line's options, in that order."""
    folder = tmp_path / "data" / "given-folder"
    subprocess.run([sys.executable, str(REPO / "scripts/make_imagefolder.py"), "--out", str(folder),
                    "--classes", "2", "--train-per-class", "16", "--val-per-class", "4", "--size", "32"],
                   check=True, capture_output=True)
    config = yaml.safe_load((REPO / "tests/configs/slurm.yaml").read_text())
    config["matrix"] = {"framework": ["pytorch"], "model": ["vit_tiny"], "dataset": ["given-folder"], "gpus": [1]}
    del config["exclude"]
    config["models"] = {"pytorch": config["models"]["pytorch"]}
    config["datasets"] = {"given-folder": {"format": "imagefolder", "path": "data/given-folder", "resolution": 32}}
    config["cluster"].update(exclusive="always", slurm_extra="--nice=7")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    profile = yaml.safe_load((REPO / "profiles/local-slurm/config.yaml").read_text())
    profile["default-resources"]["slurm_extra"] = "'--mail-type=END'"
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile/config.yaml").write_text(yaml.safe_dump(profile))
    target = "results/runs/pytorch/model~vit_tiny/dataset~given-folder/gpus~1/epochs~2/per_gpu_batch~16/train.log"

    result, output = sweep(tmp_path, tmp_path / "config.yaml", tmp_path / "profile",
                           [target, "--set-resources", "train_pytorch:slurm_extra='--no-requeue'"])

    assert result.returncode == 0, output[-3000:]
    (jobid,) = submissions(output)
    job = scontrol_job(jobid)
    assert (job["OverSubscribe"], job["Nice"], job["MailType"], job["Requeue"]) == ("NO", "7", "END", "0")
    line = subprocess.run(["sacct", "-X", "-n", "-P", "--format=SubmitLine", "-j", str(jobid)],
                          capture_output=True, text=True, check=True).stdout
    assert re.search(r" --exclusive --nice=7 --mail-type=END --no-requeue( |$)", line), line
    assert header_of(tmp_path / target)["world_size"] == 1
