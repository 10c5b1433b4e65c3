"""SLURM accounting verdicts for failed runs (pure parts; the real sacct is used in test_slurm.py)."""

import math

import pandas as pd

from scalesweep.logs import accounting


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


def test_slurm_energy_is_read_per_job_with_its_source():
    # sacct -X -n -P --format=JobID,ConsumedEnergyRaw: joules, empty without energy accounting.
    assert accounting.parse_sacct_energy("12|183422\n13|\n14|0\n") == {"12": 183422.0, "14": 0.0}
    runs = pd.DataFrame({"status": ["ok", "failed", "ok"], "slurm_job_id": [12, 13, math.nan]})
    runs = accounting.with_slurm_energy(runs, {"12": 183422.0})
    assert runs["slurm_energy_j"].tolist()[0] == 183422.0 and runs["slurm_energy_j"][1:].isna().all()
    assert runs["slurm_energy_source"].tolist() == [
        "sacct ConsumedEnergyRaw (whole node: CPUs, memory, GPUs)", None, None]


def test_tidy_stage_asks_sacct_for_every_runs_energy(tmp_path, monkeypatch):
    from scalesweep.tidy import rows

    sacct = tmp_path / "bin" / "sacct"
    sacct.parent.mkdir()
    # A stand-in sacct: the energy query answers for job 77; the state query finds nothing.
    sacct.write_text('#!/bin/sh\ncase "$*" in *ConsumedEnergyRaw*) echo "77|5400";; esac\n')
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{sacct.parent}:/usr/bin:/bin")
    log = tmp_path / "run.log"
    log.write_text("\n".join(":::SCALESWEEP " + line for line in (
        '{"record": "header", "schema": 1, "framework": "pytorch", "model": "resnet50", "gpus": 1, '
        '"world_size": 1, "per_gpu_batch": 8, "slurm_job_id": "77"}',
        '{"record": "epoch", "schema": 1, "epoch": 1, "images": 80, "seconds": 2.0}',
        '{"record": "epoch", "schema": 1, "epoch": 2, "images": 80, "seconds": 1.0}',
        '{"record": "summary", "schema": 1, "status": "ok"}')) + "\n")
    rows.write_tidy_tables([(log, {})], tmp_path / "epochs.csv", tmp_path / "runs.csv", ask_slurm=True)
    row = pd.read_csv(tmp_path / "runs.csv").iloc[0]
    assert (row["slurm_energy_j"], row["slurm_energy_source"]) == (5400.0, accounting.SLURM_ENERGY_SOURCE)
