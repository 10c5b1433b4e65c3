"""A head killed while its SLURM jobs run, and the same command again (docs/cluster-head.md), on the
test cluster: three repeats of one configuration wait at a gate inside their jobs; the head is
SIGKILLed; while it is down repeat 1 finishes and repeat 2 fails; a job of another folder carries
repeat 0's comment. The same command stops at the lock and says what to do; after --unlock it
waits for repeat 0's job instead of submitting it, keeps repeats 0 and 1, runs repeat 2 again, and
the real tidy stage reads all three.

The gate is a stand-in for the interpreter (container.python) that waits for a file, then runs the
real trainer with the real interpreter: the results are real trainings.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from processes import wait_for
from scalesweep.plan.cluster import slurm_jobs
from test_slurm import REPO, SNAKEMAKE, cluster  # noqa: F401  (cluster: the fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

RUN = "pytorch/model~vit_tiny/dataset~synth-folder/gpus~1/epochs~2/per_gpu_batch~16"
REPEATS = {0: RUN, 1: f"{RUN}/repeat~1", 2: f"{RUN}/repeat~2"}
GATE = """#!/bin/sh
# Stands in for the interpreter: waits until the test opens this seed's gate, then fails (exit 3)
# or runs the real interpreter.
seed=$(printf '%s\\n' "$@" | sed -n '/^--seed$/{{n;p;}}')
touch "{gates}/started-$seed"
while [ ! -e "{gates}/open-$seed" ]; do sleep 0.2; done
[ "$(cat "{gates}/open-$seed")" = fail ] && exit 3
exec "{python}" "$@"
"""


def comment_of(repeat):
    """The comment the slurm plugin gives the repeat's job."""
    model, dataset, gpus, *settings = REPEATS[repeat].split("/")[1:]
    values = [part.split("~", 1)[1] for part in (model, dataset, gpus)] + ["/" + "/".join(settings)]
    return slurm_jobs.job_comment("train_pytorch", values)


def write_sweep(workdir):
    gates = workdir / "gates"
    gates.mkdir()
    gate = workdir / "gate-python"
    gate.write_text(GATE.format(gates=gates, python=sys.executable))
    gate.chmod(0o755)
    config = yaml.safe_load((REPO / "tests/configs/slurm.yaml").read_text())
    config["matrix"] = {"framework": ["pytorch"], "model": ["vit_tiny"], "dataset": ["synth-folder"],
                        "gpus": [1], "repeat": sorted(REPEATS)}
    del config["exclude"]
    config["models"] = {"pytorch": config["models"]["pytorch"]}
    config["datasets"] = {"synth-folder": config["datasets"]["synth-folder"]}
    config["container"] = {"python": {"pytorch": str(gate)}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    # profiles/mn5 reruns incomplete outputs: a restart under it is what is tested
    profile = yaml.safe_load((REPO / "profiles/local-slurm/config.yaml").read_text())
    profile["rerun-incomplete"] = True
    (workdir / "profile").mkdir()
    (workdir / "profile/config.yaml").write_text(yaml.safe_dump(profile))
    return gates


def command(workdir, *first):
    return [str(SNAKEMAKE), *first, "--executor", "slurm", "--profile", str(workdir / "profile"),
            "--snakefile", str(REPO / "Snakefile"), "--configfile", str(workdir / "config.yaml")]


def start_head(workdir, name):
    with open(workdir / name, "w") as out:
        return subprocess.Popen(command(workdir), cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def open_gate(gates, repeat, how="open"):
    """Atomically: a half-written gate would read as neither `open` nor `fail`."""
    (gates / f".open-{repeat}").write_text(how)
    os.replace(gates / f".open-{repeat}", gates / f"open-{repeat}")


def jobs_of(workdir):
    """{comment: job id} of this folder's jobs still queued."""
    return {job.comment: job.job_id for job in slurm_jobs.earlier_jobs(slurm_jobs.queued_jobs(), str(workdir))}


def sacct_jobs(workdir, since):
    """[(job id, state, comment)] of every job submitted from `workdir` since `since`."""
    listed = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--starttime", since, "--format=JobID,State,WorkDir,SubmitLine%2000"],
        capture_output=True, text=True, check=True,
    ).stdout
    jobs = []
    for line in listed.splitlines():
        job_id, state, job_workdir, submit_line = line.split("|", 3)
        found = re.search(r"--comment (\S+)", submit_line)
        if found and os.path.realpath(job_workdir) == os.path.realpath(workdir):
            jobs.append((job_id, state.split()[0], found.group(1)))
    return jobs


@pytest.fixture(scope="module")
def restart(cluster, tmp_path_factory):  # noqa: F811
    workdir = tmp_path_factory.mktemp("restart")
    other = tmp_path_factory.mktemp("other-sweep")
    gates = write_sweep(workdir)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    heads, decoys = [], []
    try:
        heads.append(first := start_head(workdir, "head-1.out"))
        wait_for(lambda: all((gates / f"started-{r}").exists() for r in REPEATS), 300, "three jobs at their gates")
        first_jobs = jobs_of(workdir)
        first.send_signal(signal.SIGKILL)
        first.wait()
        open_gate(gates, 1)
        open_gate(gates, 2, "fail")
        wait_for(lambda: {comment_of(1), comment_of(2)}.isdisjoint(jobs_of(workdir)), 300,
                 "repeats 1 and 2 to end while the head is down")
        decoys.append(subprocess.run(
            ["sbatch", "--parsable", "--account=scalesweep", f"--chdir={other}",
             f"--comment={comment_of(0)}", "--wrap=sleep 600"],
            capture_output=True, text=True, check=True).stdout.strip())

        locked = subprocess.run(command(workdir), cwd=workdir, capture_output=True, text=True, timeout=300)
        unlocked = subprocess.run(command(workdir, "--unlock"), cwd=workdir, capture_output=True, text=True,
                                  timeout=300)
        assert unlocked.returncode == 0, unlocked.stderr[-3000:]
        open_gate(gates, 2)  # repeat 2's second job trains
        heads.append(second := start_head(workdir, "head-2.out"))
        wait_for(lambda: "Waiting for them" in (workdir / "head-2.out").read_text(), 300,
                 "the restarted head to wait")
        open_gate(gates, 0)
        assert second.wait(timeout=600) == 0, (workdir / "head-2.out").read_text()[-4000:]
        decoy_state_at_end = {job.job_id: job.state for job in slurm_jobs.queued_jobs()}.get(decoys[0])
        return SimpleNamespace(
            workdir=workdir, first_jobs=first_jobs, locked=locked, decoy=decoys[0],
            decoy_state_at_end=decoy_state_at_end, output=(workdir / "head-2.out").read_text(),
            sacct=sacct_jobs(workdir, since),
        )
    finally:
        for head in heads:
            if head.poll() is None:
                head.kill()
        leftover = [job.job_id for job in slurm_jobs.queued_jobs()
                    if job.workdir.startswith((str(workdir), str(other)))]
        if leftover:
            subprocess.run(["scancel", *leftover], check=False)


def jobs_of_repeat(restart, repeat):
    return [(job_id, state) for job_id, state, comment in restart.sacct if comment == comment_of(repeat)]


def attempts(restart, repeat):
    return sorted(p.name for p in (restart.workdir / "logs/train" / REPEATS[repeat]).parent.glob(
        f"{Path(REPEATS[repeat]).name}.attempt-*.log"))


def result(restart, repeat):
    return restart.workdir / "results/runs" / REPEATS[repeat] / "train.log"


def attempt_log(restart, repeat, number):
    return restart.workdir / "logs/train" / f"{REPEATS[repeat]}.attempt-{number}.log"


def submitted(restart):
    """The plugin's log folders (rule/wildcards) of what the restarted head submitted."""
    return re.findall(r"submitted with SLURM jobid \d+ \(log: \S*/slurm_logs/(\S+)/\d+\.log\)", restart.output)


def runs_csv(restart):
    return pd.read_csv(restart.workdir / "results/tidy/runs.csv").set_index("repeat")


def test_the_lock_after_a_crash_says_what_to_do(restart):
    locked = restart.locked
    assert locked.returncode != 0
    assert "Directory cannot be locked" in locked.stderr
    unlock = " ".join(command(restart.workdir, "--unlock"))
    assert "is no longer running" in locked.stderr, locked.stderr[-3000:]
    assert f"2. {unlock}" in locked.stderr
    assert f"3. {' '.join(command(restart.workdir))}" in locked.stderr
    assert "waits for the SLURM jobs still queued or running" in locked.stderr


def test_a_job_still_running_is_waited_for_not_submitted_again_and_its_result_kept(restart):
    (job,) = jobs_of_repeat(restart, 0)
    assert job == (restart.first_jobs[comment_of(0)], "COMPLETED")
    assert f"job {job[0]} RUNNING: results/runs/{REPEATS[0]}/train.log" in restart.output
    assert not [where for where in submitted(restart) if where.endswith("per_gpu_batch~16")]
    assert attempts(restart, 0) == ["per_gpu_batch~16.attempt-1.log"]
    assert result(restart, 0).read_bytes() == attempt_log(restart, 0, 1).read_bytes()
    runs = runs_csv(restart)
    assert runs.loc[0, "status"] == "ok" and str(runs.loc[0, "slurm_job_id"]) == job[0]


def test_a_result_finished_while_the_head_was_down_is_kept(restart):
    (job,) = jobs_of_repeat(restart, 1)
    assert job == (restart.first_jobs[comment_of(1)], "COMPLETED")
    assert not [where for where in submitted(restart) if "repeat~1" in where]
    assert attempts(restart, 1) == ["repeat~1.attempt-1.log"]
    assert result(restart, 1).read_bytes() == attempt_log(restart, 1, 1).read_bytes()
    assert str(runs_csv(restart).loc[1, "slurm_job_id"]) == job[0]


def test_a_job_that_failed_while_the_head_was_down_runs_again(restart):
    (failed, again) = sorted(jobs_of_repeat(restart, 2), key=lambda job: int(job[0]))
    assert failed == (restart.first_jobs[comment_of(2)], "FAILED") and again[1] == "COMPLETED"
    assert [where for where in submitted(restart) if "repeat~2" in where] == [
        "rule_train_pytorch/vit_tiny_synth-folder_1__epochs~2_per_gpu_batch~16_repeat~2"]
    assert attempts(restart, 2) == ["repeat~2.attempt-1.log", "repeat~2.attempt-2.log"]
    assert result(restart, 2).read_bytes() == attempt_log(restart, 2, 2).read_bytes()
    assert str(runs_csv(restart).loc[2, "slurm_job_id"]) == again[0]


def test_the_restart_ends_with_every_run_through_tidy_and_nothing_measured_twice(restart):
    runs = runs_csv(restart)
    assert sorted(runs.index) == sorted(REPEATS) and (runs["status"] == "ok").all()
    assert len(restart.sacct) == len(REPEATS) + 2  # the dataset's job, and repeat 2 twice
    assert (restart.workdir / "results/tables/scaling.csv").exists()


def test_a_job_of_another_folder_with_the_same_comment_is_not_waited_for(restart):
    assert restart.decoy_state_at_end == "RUNNING"
    assert f"job {restart.decoy} " not in restart.output
