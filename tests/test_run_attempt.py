"""scripts/run_attempt.py (scalesweep/train/attempt.py), the train rules' shell: numbered
attempts, a result only from the latest attempt and never half-written, and no training left
running once the Snakemake that started it (or the runner itself) is gone. The processes here are real; `sleep` stands in for a trainer."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from processes import default_signal_actions, processes_with, wait_for
from scalesweep.train import attempt as run_attempt

# The program the train rules run, and the one the runner starts again as its guard.
RUNNER = Path(__file__).resolve().parents[1] / "scripts" / "run_attempt.py"


def test_the_guard_is_the_runner_s_own_program():
    assert Path(run_attempt.PROGRAM) == RUNNER and RUNNER.is_file()


def test_every_attempt_claims_its_own_numbered_log(tmp_path):
    log = str(tmp_path / "gpus~2.log")
    assert [run_attempt.claim_attempt(log) for _ in range(3)] == [
        str(tmp_path / f"gpus~2.attempt-{n}.log") for n in (1, 2, 3)
    ]


def test_older_attempt_cannot_overwrite_the_newer_attempts_result(tmp_path):
    log, result = str(tmp_path / "run.log"), str(tmp_path / "run" / "train.log")
    older = run_attempt.claim_attempt(log)
    run_attempt.point_log_at(log, older)
    newer = run_attempt.claim_attempt(log)
    run_attempt.point_log_at(log, newer)
    Path(older).write_text("older attempt\n")
    Path(newer).write_text("newer attempt\n")

    assert run_attempt.publish(newer, log, result)
    assert not run_attempt.publish(older, log, result)
    assert Path(result).read_text() == "newer attempt\n"
    assert os.readlink(log) == "run.attempt-2.log"


def test_publishing_replaces_the_result_whole_instead_of_writing_into_it(tmp_path):
    """A reader of the old result keeps reading all of it: the new one is renamed over it, never
    truncated and rewritten in place; no temporary file stays behind."""
    log, result = str(tmp_path / "run.log"), tmp_path / "run" / "train.log"
    result.parent.mkdir()
    result.write_text("old result\n" * 1000)
    attempt = run_attempt.claim_attempt(log)
    run_attempt.point_log_at(log, attempt)
    Path(attempt).write_text("new result\n" * 2000)
    with open(result) as reader:
        assert run_attempt.publish(attempt, log, str(result))
        assert reader.read() == "old result\n" * 1000
    assert result.read_text() == "new result\n" * 2000
    assert sorted(p.name for p in result.parent.iterdir()) == ["train.log"]


def runner_argv(tmp_path, command):
    return [sys.executable, str(RUNNER), f"--log={tmp_path / 'run.log'}",
            f"--result={tmp_path / 'run' / 'train.log'}", f"--command={command}"]


def test_a_successful_attempt_becomes_the_result_and_a_failed_one_does_not(tmp_path):
    ok = subprocess.run(runner_argv(tmp_path, "echo trained; echo to stderr >&2"), timeout=60)
    assert ok.returncode == 0
    result = tmp_path / "run" / "train.log"
    assert result.read_text() == "trained\nto stderr\n"
    assert (tmp_path / "run.attempt-1.log").read_text() == result.read_text()

    failed = subprocess.run(runner_argv(tmp_path, "echo half; exit 3"), timeout=60)
    assert failed.returncode == 3
    assert os.readlink(tmp_path / "run.log") == "run.attempt-2.log"
    assert (tmp_path / "run.attempt-2.log").read_text() == "half\n"
    assert result.read_text() == "trained\nto stderr\n"  # left as it was: Snakemake deletes it


def test_a_stale_attempt_that_succeeds_late_leaves_the_newer_result(tmp_path):
    """An attempt left running (an orphan of a killed head, a duplicate SLURM job) finishes after a
    newer attempt: its log is kept, the result stays the newer attempt's."""
    gate = tmp_path / "gate"
    older = subprocess.Popen(runner_argv(tmp_path, f"while [ ! -e {gate} ]; do sleep 0.1; done; echo older"))
    wait_for(lambda: os.path.lexists(tmp_path / "run.log"), 30, "the older attempt's link")
    newer = subprocess.run(runner_argv(tmp_path, "echo newer"), timeout=60)
    assert newer.returncode == 0
    gate.touch()
    assert older.wait(timeout=60) == run_attempt.STALE_EXIT
    assert (tmp_path / "run" / "train.log").read_text() == "newer\n"
    assert "a newer attempt" in (tmp_path / "run.attempt-1.log").read_text()


def stand_in_training(marker):
    """Two processes that would run for long, as torchrun and a worker would, each with `marker`
    in its command line."""
    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"
    return f"{sleeper} & {sleeper}; wait"


def start_under_head(tmp_path, command):
    """The runner as a Snakemake job's shell runs it: the child of a head process (here a Python
    process standing in for Snakemake) that can be killed alone."""
    return subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
         *runner_argv(tmp_path, command)],
        start_new_session=True, preexec_fn=default_signal_actions,
    )


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM])
def test_a_head_that_dies_leaves_no_training_running(tmp_path, signum):
    marker = f"marker-{uuid.uuid4().hex}"
    head = start_under_head(tmp_path, stand_in_training(marker))
    wait_for(lambda: len(processes_with(marker)) == 2, 30, "the training's two processes")

    head.send_signal(signum)
    head.wait(timeout=30)

    wait_for(lambda: not processes_with(marker, exact=False), 30, "no process of the attempt")  # the runner and its guard too
    attempt = (tmp_path / "run.attempt-1.log").read_text()
    assert f"the Snakemake that started it (process {head.pid}) is gone" in attempt
    assert not (tmp_path / "run" / "train.log").exists()


@pytest.mark.parametrize("training", ["in-its-group", "in-its-own-session"])
def test_a_killed_runner_leaves_no_training_running(tmp_path, training):
    """SIGKILL to the runner itself (e.g. to the head's whole process group): the guard in the
    training's group stops it, and (round 4) the processes below it in sessions of their own."""
    marker = f"marker-{uuid.uuid4().hex}"
    make = stand_in_training if training == "in-its-group" else training_in_its_own_session
    runner = subprocess.Popen(runner_argv(tmp_path, make(marker)))
    wait_for(lambda: len(processes_with(marker)) == 2, 30, "the training's two processes")

    runner.kill()
    runner.wait(timeout=30)

    wait_for(lambda: not processes_with(marker, exact=False), 30, "no process of the attempt")
    assert not (tmp_path / "run" / "train.log").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_runner_told_to_stop_stops_the_training_and_publishes_nothing(tmp_path, signum):
    marker = f"marker-{uuid.uuid4().hex}"
    runner = subprocess.Popen(runner_argv(tmp_path, stand_in_training(marker)))
    wait_for(lambda: len(processes_with(marker)) == 2, 30, "the training's two processes")

    runner.send_signal(signum)

    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    assert not processes_with(marker)
    assert f"stopped the training: signal {signal.Signals(signum).name}" in (
        tmp_path / "run.attempt-1.log").read_text()
    assert not (tmp_path / "run" / "train.log").exists()


def training_in_its_own_session(marker):
    """A stand-in trainer that leaves the attempt's process group (setsid, as torchrun's workers
    start in sessions of their own): a signal to the group never reaches it."""
    sleeper = f"setsid {sys.executable} -c 'import time; time.sleep(300)' {marker}"
    return f"{sleeper} & {sleeper}; wait"


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGKILL])
def test_round4_a_head_killed_alone_stops_a_trainer_in_its_own_session(tmp_path, signum):
    # Round 4: SIGHUP to the head's pid alone, the trainer in a session of its own: the runner
    # stopped its group and the trainer trained on, beside the rerun after --unlock.
    marker = f"marker-{uuid.uuid4().hex}"
    head = start_under_head(tmp_path, training_in_its_own_session(marker))
    wait_for(lambda: len(processes_with(marker)) == 2, 30, "the training's two processes")
    assert all(os.getsid(pid) == pid for pid in processes_with(marker))  # really outside the group

    head.send_signal(signum)
    head.wait(timeout=30)

    wait_for(lambda: not processes_with(marker, exact=False), 60, "no process of the attempt")
    assert f"the Snakemake that started it (process {head.pid}) is gone" in (tmp_path / "run.attempt-1.log").read_text()
    assert not (tmp_path / "run" / "train.log").exists()

