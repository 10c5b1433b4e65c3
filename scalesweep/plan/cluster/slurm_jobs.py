"""The SLURM jobs an earlier Snakemake head of this folder left queued or running.

A head killed on a login node (an SSH drop, an OOM kill) leaves its SLURM jobs running: the slurm
executor plugin never re-attaches to them, and the same command again would submit a second job
for every configuration still pending or running (measured on the test cluster: both ran, each
wrote the one result). A restarted head therefore asks `squeue` for this user's jobs whose working
directory is this folder and whose comment has the plugin's form, waits until they have left the
queue, and only then builds its DAG: what they finished is then on disk and is not run again, what
they failed is missing and runs again like any failure. Nothing holds an allocation while waiting.

What is relied on (snakemake-executor-plugin-slurm 2.8.0, `__init__.py` `run_job` and
`submit_string.py` `get_submit_command`; docs/cluster-head.md): every job is submitted with
`--comment rule_<rule>_wildcards_<wildcard values joined by "_", "/" as "_">` (`group_<name>` for
group jobs) and `-D <the head's working directory>`, which `squeue` shows as %k and %Z.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import time
from dataclasses import dataclass


# The plugin's comment begins with one of these (rule jobs; group jobs).
PLUGIN_COMMENT_PREFIXES = ("rule_", "group_")
SQUEUE_FIELDS = "%i|%T|%Z|%k"
# Every state of a job that has not ended (squeue(1), JOB STATE CODES): plain squeue lists only
# pending, running and completing ones, and a suspended or held job may still run and write.
UNENDED_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED",
                  "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
                  "RESV_DEL_HOLD", "SPECIAL_EXIT")


class SlurmQueryError(RuntimeError):
    """squeue did not answer; what was run and what it said."""


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    state: str
    workdir: str
    comment: str


def squeue_command(user: str) -> list[str]:
    return ["squeue", "--noheader", f"--user={user}", f"--states={','.join(UNENDED_STATES)}",
            f"--format={SQUEUE_FIELDS}"]


def parse_squeue(text: str) -> list[QueuedJob]:
    """Jobs from `squeue --format=%i|%T|%Z|%k` lines. The comment comes last and may hold "|"."""
    jobs = []
    for line in text.splitlines():
        fields = line.split("|", 3)
        if len(fields) == 4:
            job_id, state, workdir, comment = (field.strip() for field in fields)
            jobs.append(QueuedJob(job_id, state, workdir, comment))
    return jobs


def queued_jobs(user: str | None = None, timeout_s: float = 60) -> list[QueuedJob]:
    """This user's jobs that have not ended (pending, running, suspended, held...)."""
    command = squeue_command(user or getpass.getuser())
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmQueryError(f"`{' '.join(command)}` failed: {error}") from None
    if result.returncode != 0:
        raise SlurmQueryError(
            f"`{' '.join(command)}` exited with {result.returncode}: {result.stderr.strip()}"
        )
    return parse_squeue(result.stdout)


def same_folder(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def earlier_jobs(queued: list[QueuedJob], workdir: str) -> list[QueuedJob]:
    """The jobs a Snakemake head submitted from `workdir` (the plugin's comment, this folder as
    the job's working directory); jobs of other folders and the user's own jobs are not ours."""
    return [
        job
        for job in queued
        if job.comment.startswith(PLUGIN_COMMENT_PREFIXES) and same_folder(job.workdir, workdir)
    ]


def job_comment(rule: str, wildcard_values) -> str:
    """The comment the plugin gives a rule's job (2.8.0: `get_job_wildcards` joins the values of
    `job.wildcards` in the order of the output pattern with "_" and replaces "/" by "_")."""
    values = "_".join(str(value) for value in wildcard_values).replace("/", "_")
    return f"rule_{rule}_wildcards_{values}" if values else f"rule_{rule}"


def results_by_comment(comments_of_results: dict[str, str]) -> dict[str, str]:
    """{comment: result} from {result: comment}, without comments two results share (values
    joined by "_" can collide, e.g. model a_b + dataset c and model a + dataset b_c): such a job
    is still waited for, only not named by its result."""
    seen: dict[str, list[str]] = {}
    for result, comment in comments_of_results.items():
        seen.setdefault(comment, []).append(result)
    return {comment: results[0] for comment, results in seen.items() if len(results) == 1}


def describe(job: QueuedJob, results: dict[str, str]) -> str:
    return f"job {job.job_id} {job.state}: {results.get(job.comment, job.comment)}"


def waiting_message(jobs: list[QueuedJob], results: dict[str, str]) -> str:
    lines = [
        f"scalesweep: {len(jobs)} SLURM job(s) that an earlier Snakemake submitted from this folder "
        "are still queued or running. Waiting for them instead of submitting their work again "
        "(docs/cluster-head.md); what they finish is kept, what fails runs again:"
    ]
    lines += [f"  {describe(job, results)}" for job in jobs]
    return "\n".join(lines)


def wait_until_gone(jobs: list[QueuedJob], poll_s: float, say, query=queued_jobs,
                    sleep=time.sleep) -> None:
    """Poll squeue until none of `jobs` is queued any more. A failed query is said and retried:
    giving up would submit the jobs' work a second time."""
    waiting = {job.job_id for job in jobs}
    while waiting:
        sleep(poll_s)
        try:
            still = {job.job_id for job in query()}
        except SlurmQueryError as error:
            say(f"scalesweep: {error}; asking again in {poll_s:g} s")
            continue
        for job_id in sorted(waiting - still):
            say(f"scalesweep: SLURM job {job_id} has left the queue")
        waiting &= still


def wait_until_visible(paths: list[str], latency_s: float, sleep=time.sleep) -> list[str]:
    """The paths still missing after waiting up to `latency_s` (a shared file system may show a
    compute node's file to the login node late)."""
    deadline = time.monotonic() + latency_s
    missing = [path for path in paths if not os.path.exists(path)]
    while missing and time.monotonic() < deadline:
        sleep(min(1.0, latency_s))
        missing = [path for path in missing if not os.path.exists(path)]
    return missing


def outcome_lines(jobs: list[QueuedJob], states: dict, results: dict[str, str]) -> list[str]:
    """One line per awaited job: its final state (sacct) and what becomes of its work."""
    lines = []
    for job in jobs:
        state = states.get(job.job_id, ("unknown (no accounting record)", ""))[0]
        result = results.get(job.comment)
        if result is None:
            what = job.comment
        elif os.path.exists(result):
            what = f"{result} kept"
        else:
            what = f"no {result}: its configuration runs again"
        lines.append(f"scalesweep: job {job.job_id} ended {state}: {what}")
    return lines


def wait_for_earlier_jobs(workdir: str, results: dict[str, str], poll_s: float, latency_s: float,
                          say, states, query=queued_jobs) -> list[QueuedJob]:
    """Wait until the jobs an earlier head submitted from `workdir` have left the queue, then
    until the results of those that completed are visible here; say what each one left.
    `results` names the result of a job's comment where known (results_by_comment); `states`
    gives jobs' final states by id (scalesweep/logs/accounting.py: sacct_states, which the
    workflow passes in: accounting reads runs, a later layer than the plan)."""
    jobs = earlier_jobs(query(), workdir)
    if not jobs:
        return []
    say(waiting_message(jobs, results))
    wait_until_gone(jobs, poll_s, say, query)
    final = states([job.job_id for job in jobs])
    may_have_finished = [
        results[job.comment]
        for job in jobs
        if job.comment in results and final.get(job.job_id, ("COMPLETED",))[0] == "COMPLETED"
    ]
    wait_until_visible(may_have_finished, latency_s)
    for line in outcome_lines(jobs, final, results):
        say(line)
    return jobs
