"""What SLURM's accounting says about failed runs: TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, exit codes.

A run killed by SLURM often cannot say why in its own log (at the time limit the trainer only sees
SIGTERM); `sacct` knows. Used after a sweep with failures to give each failed row its real status.
"""

import subprocess

import pandas as pd

# sacct job states -> runs.csv status. Anything else that is not COMPLETED is a plain failure.
STATUS_OF_STATE = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "OUT_OF_MEMORY": "oom"}


def status_from_sacct(state, exit_code):
    """(status, reason) for a job's accounting record, e.g. ('timeout', 'SLURM state TIMEOUT ...')."""
    state = state.split()[0]  # "CANCELLED by 0" -> "CANCELLED"
    status = STATUS_OF_STATE.get(state, "failed")
    return status, f"SLURM state {state} (exit code {exit_code})"


def parse_sacct(text):
    """{job id: (state, exit code)} from `sacct -X -n -P --format=JobID,State,ExitCode` output."""
    states = {}
    for line in text.splitlines():
        if line.count("|") == 2:
            job_id, state, exit_code = line.split("|")
            states[job_id.strip()] = (state.strip(), exit_code.strip())
    return states


def sacct_states(job_ids):
    """Accounting records of these jobs; {} where sacct is missing or fails (a laptop run)."""
    job_ids = sorted({str(int(j)) for j in job_ids if pd.notna(j) and str(j).strip()})
    if not job_ids:
        return {}
    try:
        result = subprocess.run(
            ["sacct", "-X", "-n", "-P", "--format=JobID,State,ExitCode", "-j", ",".join(job_ids)],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_sacct(result.stdout) if result.returncode == 0 else {}


def refine_failures(runs, states):
    """runs with each failed row's status and reason taken from its job's accounting record.

    Only rows that are not ok and whose job is known change; the log's own reason is kept after
    SLURM's, since it often says what the program was doing when it was stopped.
    """
    runs = runs.copy()
    for index, row in runs.iterrows():
        job_id = row.get("slurm_job_id")
        if row["status"] == "ok" or pd.isna(job_id) or str(int(job_id)) not in states:
            continue
        state, exit_code = states[str(int(job_id))]
        if state.startswith("COMPLETED"):
            continue
        status, reason = status_from_sacct(state, exit_code)
        runs.at[index, "status"] = status
        logged = row.get("reason")
        runs.at[index, "reason"] = reason + (f"; log: {logged}" if isinstance(logged, str) and logged else "")
    return runs
