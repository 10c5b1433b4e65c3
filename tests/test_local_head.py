"""A local sweep whose head gets SIGHUP (a dropped login) during a training: no process of the sweep
survives it (the process table says so), and after --unlock the same command trains that
configuration once more, in a new attempt whose log is the result."""

import os
import signal
import subprocess

import pytest
import yaml

from conftest import LOCAL_ENV, REPO, SNAKEMAKE
from processes import default_signal_actions, processes_in, wait_for

pytestmark = pytest.mark.slow

RUN = "pytorch/model~vit_tiny/dataset~synth-folder/gpus~1/epochs~2/per_gpu_batch~16"
# Every timed step of the first training busy-waits this long (scalesweep/train/common/faults.py):
# it is still training when the head is killed.
SLOW_STEPS = {"SCALESWEEP_INJECT_STEP_DELAY_S": "2"}


def write_config(workdir):
    config = yaml.safe_load((REPO / "tests/configs/tiny.yaml").read_text())
    config["matrix"] = {"framework": ["pytorch"], "model": ["vit_tiny"], "dataset": ["synth-folder"], "gpus": [1]}
    config["models"] = {"pytorch": config["models"]["pytorch"]}
    config["datasets"] = {"synth-folder": config["datasets"]["synth-folder"]}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def command(workdir, *first):
    return [str(SNAKEMAKE), *first, "--cores", "2", "--snakefile", str(REPO / "Snakefile"),
            "--configfile", str(workdir / "config.yaml"), "--replace-workflow-config"]


def start_head(workdir):
    """The sweep's head in a session of its own, its first training slowed (SLOW_STEPS), its
    output in head.out."""
    with open(workdir / "head.out", "w") as out:
        return subprocess.Popen(command(workdir), cwd=workdir, env={**os.environ, **LOCAL_ENV, **SLOW_STEPS},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=default_signal_actions)


def stop_head(head, workdir, signum):
    """`signum` to the head, then wait until no process of the sweep is left."""
    head.send_signal(signum)
    head.wait(timeout=60)
    wait_for(lambda: not processes_in(workdir), 120, "every process of the sweep to end")


def test_sighup_to_the_head_leaves_no_trainer_and_the_rerun_trains_once(tmp_path):
    write_config(tmp_path)
    attempt_1 = tmp_path / f"logs/train/{RUN}.attempt-1.log"
    head = start_head(tmp_path)
    try:
        # the header, not an epoch record: its two slow epochs are then the margin a busy machine
        # has before the training could end on its own
        wait_for(lambda: attempt_1.exists() and '"record": "header"' in attempt_1.read_text(), 600,
                 "the header record")
        training = processes_in(tmp_path)
        assert sum("train_torch.py" in line for line in training.values()) >= 2, training  # torchrun, worker

        stop_head(head, tmp_path, signal.SIGHUP)
    finally:
        if head.poll() is None:
            head.kill()
    # stopped, not left to finish: the trainer's summary (it writes one on SIGTERM) is no success
    assert '"status": "ok"' not in attempt_1.read_text()
    assert not (tmp_path / f"results/runs/{RUN}/train.log").exists()
    assert "stopped the training: the Snakemake that started it" in attempt_1.read_text()

    env = {**os.environ, **LOCAL_ENV}
    subprocess.run(command(tmp_path, "--unlock"), cwd=tmp_path, env=env, check=True, capture_output=True)
    rerun = subprocess.run(command(tmp_path), cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=900)

    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert rerun.stderr.count("rule train_pytorch:") == 1
    logs = sorted(p.name for p in attempt_1.parent.glob("per_gpu_batch~16.attempt-*.log"))
    assert logs == ["per_gpu_batch~16.attempt-1.log", "per_gpu_batch~16.attempt-2.log"]
    attempt_2 = attempt_1.with_name("per_gpu_batch~16.attempt-2.log")
    assert (tmp_path / f"results/runs/{RUN}/train.log").read_bytes() == attempt_2.read_bytes()
    assert os.readlink(tmp_path / f"logs/train/{RUN}.log") == attempt_2.name
