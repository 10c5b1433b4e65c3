"""Faults during a local sweep, round 3: a second head started beside the first (refused, naming
the running one), the head killed with SIGKILL mid-training (it can forward nothing: no trainer
survives it, and the rerun trains that configuration again), and a trainer killed mid-run (its
attempt is a failure, nothing partial looks complete, the rerun trains it again).

SIGHUP of the head is tests/test_local_head.py; two checkouts archiving into one history at once
is tests/test_history.py::test_two_archiving_processes_at_once_lose_nothing.
"""

import os
import signal
import subprocess

import pytest

from conftest import LOCAL_ENV
from processes import processes_in, wait_for
from test_local_head import RUN, command, start_head, stop_head, write_config

pytestmark = pytest.mark.slow


def training_started(workdir):
    attempt_1 = workdir / f"logs/train/{RUN}.attempt-1.log"
    wait_for(lambda: attempt_1.exists() and '"record": "header"' in attempt_1.read_text(), 600, "the header record")
    return attempt_1


def rerun(workdir, *first):
    return subprocess.run(command(workdir, *first), cwd=workdir, env={**os.environ, **LOCAL_ENV},
                          capture_output=True, text=True, timeout=900)


def assert_trained_again_once(workdir, result):
    """The rerun trained the configuration in a second attempt, whose log is the result."""
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stderr.count("rule train_pytorch:") == 1
    attempt_2 = workdir / f"logs/train/{RUN}.attempt-2.log"
    assert (workdir / f"results/runs/{RUN}/train.log").read_bytes() == attempt_2.read_bytes()
    assert '"status": "ok"' in attempt_2.read_text()


def test_a_second_head_is_refused_and_sigkill_of_the_first_leaves_no_trainer_and_a_rerun_trains_again(tmp_path):
    write_config(tmp_path)
    head = start_head(tmp_path)
    try:
        attempt_1 = training_started(tmp_path)
        second = rerun(tmp_path)
        assert second.returncode != 0
        output = second.stdout + second.stderr
        assert (f"scalesweep: this folder is locked by a Snakemake that is still running (process {head.pid} "
                in output), output[-3000:]
        assert "Do not --unlock while it runs." in output and "rule train_pytorch:" not in output
        assert head.poll() is None  # the first head goes on, untouched

        # nothing forwards a SIGKILL: the trainer notices on its own that its head is gone
        stop_head(head, tmp_path, signal.SIGKILL)
    finally:
        if head.poll() is None:
            head.kill()
    assert '"status": "ok"' not in attempt_1.read_text()
    assert not (tmp_path / f"results/runs/{RUN}/train.log").exists()

    locked = rerun(tmp_path)  # the killed head's lock is left: the advice names it as gone
    assert locked.returncode != 0
    assert f"The Snakemake that took it (process {head.pid} " in locked.stdout + locked.stderr
    assert "is no longer running." in locked.stdout + locked.stderr
    subprocess.run(command(tmp_path, "--unlock"), cwd=tmp_path, env={**os.environ, **LOCAL_ENV}, check=True,
                   capture_output=True)
    assert_trained_again_once(tmp_path, rerun(tmp_path))


def test_a_trainer_killed_mid_run_is_a_failed_attempt_and_the_rerun_trains_it_again(tmp_path):
    write_config(tmp_path)
    head = start_head(tmp_path)
    try:
        attempt_1 = training_started(tmp_path)
        # only this sweep's trainers: their working folder is this test's
        workers = [pid for pid, line in processes_in(tmp_path).items() if "train_torch.py" in line]
        assert workers
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        assert head.wait(timeout=600) != 0
    finally:
        if head.poll() is None:
            head.kill()
    head_output = (tmp_path / "head.out").read_text()
    assert "Error in rule train_pytorch" in head_output
    assert '"status": "ok"' not in attempt_1.read_text()
    assert not (tmp_path / f"results/runs/{RUN}/train.log").exists()  # nothing partial looks complete
    assert_trained_again_once(tmp_path, rerun(tmp_path))
