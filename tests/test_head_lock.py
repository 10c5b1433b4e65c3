"""The lock a killed head leaves (scalesweep/plan/cluster/head_lock.py): whether the head that took it still runs
here, ran elsewhere or is gone, and the exact commands to go on with, printed when the workflow
is parsed."""

import os
import socket
import subprocess
import time

import pytest

from conftest import LOCAL_ENV, REPO, SNAKEMAKE, TINY
from scalesweep.plan.cluster import head_lock

ARGV = ["/opt/venv/bin/snakemake", "--profile", "mn5", "--configfile", "config/my sweep.yaml"]


def lock(workdir):
    (workdir / head_lock.LOCKS).mkdir(parents=True, exist_ok=True)
    (workdir / head_lock.LOCKS / "0.input.lock").write_text("results/tidy/runs.csv\n")


def test_no_lock_no_advice(tmp_path):
    assert head_lock.lock_advice(tmp_path, "login1", ARGV) is None


def test_unlock_goes_before_options_that_take_every_word_after_them():
    unlock, again = head_lock.commands(ARGV)
    assert unlock == "/opt/venv/bin/snakemake --unlock --profile mn5 --configfile 'config/my sweep.yaml'"
    assert again == "/opt/venv/bin/snakemake --profile mn5 --configfile 'config/my sweep.yaml'"
    assert head_lock.commands(["/x/snakemake/__main__.py", "-n"])[0] == "snakemake --unlock -n"
    assert head_lock.unlocking([ARGV[0], "--unlock"]) and not head_lock.unlocking(ARGV)


@pytest.fixture
def other_process(tmp_path):
    """A process that runs in the folder, as a head would."""
    process = subprocess.Popen(["sleep", "300"], cwd=tmp_path)
    yield process
    process.kill()
    process.wait()


def test_the_head_that_took_the_lock_is_running_here_gone_or_elsewhere(tmp_path, other_process):
    lock(tmp_path)
    head_lock.write_head_record(tmp_path, "login1", other_process.pid)
    record = head_lock.head_record(tmp_path, head_lock.lock_files(tmp_path))
    assert head_lock.head_state(record, "login1", tmp_path) == "running"
    assert head_lock.head_state(record, "login2", tmp_path) == "elsewhere"
    assert head_lock.head_state(record, "login1", tmp_path / "sub") == "gone"  # another folder's
    other_process.kill()
    other_process.wait()
    assert head_lock.head_state(record, "login1", tmp_path) == "gone"
    assert head_lock.head_state(None, "login1", tmp_path) == "unknown"


def test_a_record_older_than_the_lock_is_an_earlier_heads(tmp_path):
    head_lock.write_head_record(tmp_path, "login1", 123, started=1.0)
    lock(tmp_path)
    lock_time = os.stat(tmp_path / head_lock.LOCKS / "0.input.lock").st_mtime
    os.utime(tmp_path / head_lock.HEAD_RECORD, (lock_time - 1, lock_time - 1))
    assert head_lock.head_record(tmp_path, head_lock.lock_files(tmp_path)) is None


def test_the_advice_for_a_dead_head_is_the_exact_commands(tmp_path, other_process):
    lock(tmp_path)
    head_lock.write_head_record(tmp_path, "login1", other_process.pid)
    running = head_lock.lock_advice(tmp_path, "login1", ARGV)
    assert "still running" in running and "Do not --unlock" in running
    other_process.kill()
    other_process.wait()

    gone = head_lock.lock_advice(tmp_path, "login1", ARGV)
    assert f"(process {other_process.pid} on login1, started " in gone and "is no longer running" in gone
    unlock, again = head_lock.commands(ARGV)
    assert f"  2. {unlock}\n  3. {again}\n" in gone
    assert "waits for the SLURM jobs still queued or running" in gone
    assert f"ssh login1 ps -p {other_process.pid}" in head_lock.lock_advice(tmp_path, "login2", ARGV)


def test_snakemake_prints_the_advice_while_parsing_and_not_when_unlocking(tmp_path):
    lock(tmp_path)
    head_lock.write_head_record(tmp_path, "a-login-node-elsewhere", 4242)
    argv = [str(SNAKEMAKE), "-n", "--snakefile", str(REPO / "Snakefile"), "--configfile", str(TINY),
            "--replace-workflow-config"]
    env = {**os.environ, **LOCAL_ENV}

    dry_run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    unlock = subprocess.run([argv[0], "--unlock", *argv[1:]], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)

    assert dry_run.returncode == 0, dry_run.stderr[-3000:]
    assert "ran on another machine: check there" in dry_run.stderr
    assert f"  2. {head_lock.commands(argv)[0]}" in dry_run.stderr
    assert unlock.returncode == 0 and "scalesweep: this folder is locked" not in unlock.stderr
    assert not head_lock.lock_files(tmp_path)


def dry_run(workdir, *prefix):
    argv = [str(SNAKEMAKE), "-n", "--snakefile", str(REPO / "Snakefile"), "--configfile", str(TINY),
            "--replace-workflow-config"]
    return subprocess.run([*prefix, *argv], cwd=workdir, env={**os.environ, **LOCAL_ENV},
                          capture_output=True, text=True, timeout=300)


def test_round4_a_lock_without_its_head_record_is_advised_not_a_traceback(tmp_path):
    # The advice built every state's sentence up front, and those name the record: a lock whose
    # head wrote no record (--no-hooks, a head killed before onstart) was a TypeError at parse.
    lock(tmp_path)
    result = dry_run(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "TypeError" not in result.stderr
    assert "scalesweep: this folder is locked (.snakemake/locks). Check that no other Snakemake runs" in result.stderr


def test_round4_a_dead_heads_process_id_taken_by_a_later_process_is_gone(tmp_path, other_process):
    # The record says the head started an hour before the process that now has its id (and runs
    # in the folder): another process, not the head.
    lock(tmp_path)
    head_lock.write_head_record(tmp_path, "login1", other_process.pid, started=time.time() - 3600)
    assert "is no longer running" in head_lock.lock_advice(tmp_path, "login1", ARGV)
    head_lock.write_head_record(tmp_path, "login1", other_process.pid)  # the head itself
    assert "still running" in head_lock.lock_advice(tmp_path, "login1", ARGV)
    assert abs(head_lock.process_started(other_process.pid) - time.time()) < 60


def test_round4_snakemake_calls_a_head_whose_pid_a_later_process_took_gone(tmp_path, other_process):
    """The same case through the workflow: Snakemake parsing in the folder gives the dead head's
    advice, not "still running", though a process with the record's id runs there."""
    lock(tmp_path)
    head_lock.write_head_record(tmp_path, socket.gethostname(), other_process.pid, started=time.time() - 3600)
    result = dry_run(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"(process {other_process.pid} on {socket.gethostname()}, started " in result.stderr
    assert "is no longer running" in result.stderr and "still running" not in result.stderr


def test_round4_a_folder_named_like_a_lock_is_no_lock_snakemake_stops_at(tmp_path):
    (tmp_path / head_lock.LOCKS / "0.input.lock").mkdir(parents=True)
    (tmp_path / head_lock.LOCKS / "notes.lock").write_text("not Snakemake's\n")
    assert head_lock.lock_files(tmp_path) == [] and head_lock.lock_advice(tmp_path, "login1", ARGV) is None
    result = dry_run(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "scalesweep: this folder is locked" not in result.stderr


def test_round4_an_unreadable_lock_is_refused_in_one_message_before_snakemakes_traceback(tmp_path):
    from test_hostile_cli import without_read_override

    lock(tmp_path)
    (tmp_path / head_lock.LOCKS / "0.input.lock").chmod(0)
    result = dry_run(tmp_path, *without_read_override())
    said = result.stdout + result.stderr  # Snakemake prints a parse error on stdout
    assert result.returncode == 1
    assert "Traceback" not in said and "PermissionError" not in said
    assert "0.input.lock cannot be read (Permission denied)" in said
    assert "with --unlock (it removes .snakemake/locks/)" in said
    assert "scalesweep: this folder is locked" not in said  # the advice that misled
