"""What SLURM's accounting says about runs: why failed runs failed (TIMEOUT, OUT_OF_MEMORY,
NODE_FAIL, exit codes), and the energy every job used where energy accounting is configured.

A run killed by SLURM often cannot say why in its own log (at the time limit the trainer only sees
SIGTERM); `sacct` knows. Used after a sweep with failures to give each failed row its real status.

Energy: sacct's `ConsumedEnergyRaw` is the "total energy consumed by all tasks in a job, in joules"
(sacct man page), measured by the site's AcctGatherEnergyType plugin over the whole node: CPUs and
memory too, not only the GPUs, and only for an exclusive allocation the job's own. Empty where the
cluster does not account energy.
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


def sacct_output(job_ids, fields: str) -> str:
    """`sacct -X -n -P --format=<fields>` of these jobs; "" where sacct is missing or fails (a
    laptop run) or no job is known."""
    job_ids = sorted({str(int(j)) for j in job_ids if pd.notna(j) and str(j).strip()})
    if not job_ids:
        return ""
    try:
        result = subprocess.run(
            ["sacct", "-X", "-n", "-P", f"--format={fields}", "-j", ",".join(job_ids)],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def sacct_states(job_ids):
    """Accounting records of these jobs; {} where sacct is missing or fails (a laptop run)."""
    return parse_sacct(sacct_output(job_ids, "JobID,State,ExitCode"))


SLURM_ENERGY_SOURCE = "sacct ConsumedEnergyRaw (whole node: CPUs, memory, GPUs)"


def parse_sacct_energy(text):
    """{job id: joules} from `sacct -X -n -P --format=JobID,ConsumedEnergyRaw` output; jobs
    without a number (no energy accounting: an empty field) are left out."""
    energies = {}
    for line in text.splitlines():
        job_id, _, joules = line.partition("|")
        if joules.strip().isdigit():
            energies[job_id.strip()] = float(joules.strip())
    return energies


def sacct_energy(job_ids):
    """Joules each job used by SLURM's energy accounting; {} without sacct or accounting."""
    return parse_sacct_energy(sacct_output(job_ids, "JobID,ConsumedEnergyRaw"))


def with_slurm_energy(runs, energies):
    """runs with `slurm_energy_j` and `slurm_energy_source` of every row whose job is known."""
    jobs = runs["slurm_job_id"].map(lambda job: str(int(job)) if pd.notna(job) else None)
    joules = jobs.map(lambda job: energies.get(job, float("nan")))
    return runs.assign(slurm_energy_j=joules.astype(float),
                       slurm_energy_source=joules.notna().map({True: SLURM_ENERGY_SOURCE, False: None}))


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
