"""SLURM accounting verdicts for failed runs (pure parts; the real sacct is used in test_slurm.py)."""

import math

import pandas as pd

from scalesweep import accounting


def test_states_map_to_runs_statuses():
    assert accounting.status_from_sacct("TIMEOUT", "0:0") == ("timeout", "SLURM state TIMEOUT (exit code 0:0)")
    assert accounting.status_from_sacct("OUT_OF_MEMORY", "0:125")[0] == "oom"
    assert accounting.status_from_sacct("NODE_FAIL", "0:0") == ("failed", "SLURM state NODE_FAIL (exit code 0:0)")
    assert accounting.status_from_sacct("CANCELLED by 0", "0:15")[1].startswith("SLURM state CANCELLED")


def test_parse_sacct_output():
    text = "12|TIMEOUT|0:0\n13|FAILED|1:0\n14|CANCELLED by 0|0:15\n"
    assert accounting.parse_sacct(text) == {
        "12": ("TIMEOUT", "0:0"), "13": ("FAILED", "1:0"), "14": ("CANCELLED by 0", "0:15"),
    }


def test_refine_changes_only_failed_rows_with_a_known_job():
    runs = pd.DataFrame({
        "status": ["ok", "failed", "failed", "failed"],
        "reason": [None, "terminated by SIGTERM", "no log", "crash"],
        "slurm_job_id": [11, 12, math.nan, 99],
    })
    refined = accounting.refine_failures(runs, {"11": ("TIMEOUT", "0:0"), "12": ("TIMEOUT", "0:0")})
    assert refined["status"].tolist() == ["ok", "timeout", "failed", "failed"]
    assert refined["reason"][1] == "SLURM state TIMEOUT (exit code 0:0); log: terminated by SIGTERM"
    assert refined["reason"][3] == "crash"


def test_no_sacct_means_no_change(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert accounting.sacct_states([12]) == {}
