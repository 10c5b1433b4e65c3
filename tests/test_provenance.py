"""Provenance columns of runs.csv from the header record, the settings hash, the trainer hooks."""

import json
import sys
import time
from pathlib import Path

import pytest

from scalesweep.analysis import scaling
from scalesweep.tidy import provenance
from scalesweep.tidy.provenance import PROVENANCE_COLUMNS, run_provenance, settings_hash
from scalesweep.tidy.rows import runs_table
from scalesweep.tidy.table import group_keys


from scalesweep.train.common import node  # noqa: E402

from scalesweep.train.common import faults  # noqa: E402

GPU_HEADER = {
    "record": "header", "schema": 1, "framework": "pytorch", "model": "vit_h_14",
    "dataset": "tiny-224", "resolution": 224, "gpus": 8, "device_kind": "gpu", "world_size": 8,
    "nodes": 2, "per_gpu_batch": 64, "global_batch": 512, "learning_rate": 0.08,
    "precision": "bf16", "compile": False, "epochs": 5, "protocol": "epochs",
    "versions": {"python": "3.10.12", "torch": "2.4.0a0", "cuda": "12.5", "cudnn": 90100,
                 "nccl": "2.22.3"},
    "gpu_models": ["NVIDIA H100", "NVIDIA H100", "NVIDIA H100", "NVIDIA H100"],
    "gpu_driver": "550.54.15", "cpu_model": "Intel(R) Xeon(R) Platinum 8460Y+",
    "hostname": "as01r1b01", "slurm_job_id": "123", "slurm_nodelist": "as01r1b[01-02]",
    "slurm_cluster_name": "mn5", "container_image": "/gpfs/images/pytorch_24.07.sif",
    "start_time": "2026-11-14T10:02:17+00:00", "scalesweep_version": "3ec7d5d1a2b3",
    "load_avg_1m": 92.5, "node_cpus": 80, "node_shared": False,
}  # fmt: skip


def test_header_maps_to_flat_columns():
    found = run_provenance(GPU_HEADER, {"framework": "pytorch", "gpus": 8})
    assert set(found) == set(PROVENANCE_COLUMNS)
    assert found["gpu_model"] == "NVIDIA H100"  # four GPUs of one model: named once
    assert (found["gpu_driver"], found["cpu_model"]) == ("550.54.15", "Intel(R) Xeon(R) Platinum 8460Y+")
    assert (found["framework_version"], found["cuda_version"]) == ("2.4.0a0", "12.5")
    assert (found["cudnn_version"], found["nccl_version"]) == ("90100", "2.22.3")  # numbers as text
    assert found["container_image"] == "/gpfs/images/pytorch_24.07.sif"
    assert (found["cluster"], found["slurm_nodelist"]) == ("mn5", "as01r1b[01-02]")
    assert found["start_time"] == "2026-11-14T10:02:17+00:00"
    # the version the run's header carries, whatever code tabulates it later
    assert found["scalesweep_version"] == "3ec7d5d1a2b3"
    # 92.5 runnable processes on 80 CPUs as it started: busy; the job held the whole node
    assert (found["load_avg_1m"], found["node_load"], found["node_shared"]) == (92.5, "busy", False)
    assert len(found["settings_hash"]) == 16


def test_cluster_is_the_host_without_slurm_and_missing_keys_give_none():
    header = {"framework": "tensorflow", "hostname": "laptop", "gpu_models": [],
              "versions": {"tensorflow": "2.21.0", "cuda": None}}
    found = run_provenance(header)
    assert found["cluster"] == "laptop"
    assert found["framework_version"] == "2.21.0"
    assert found["gpu_model"] is None and found["cuda_version"] is None
    assert run_provenance({})["cluster"] is None  # a reference-script log: no header keys at all


def test_mixed_gpu_models_are_listed_each_once_in_order():
    assert provenance.gpu_model(["NVIDIA A100", "NVIDIA H100", "NVIDIA A100"]) == "NVIDIA A100 + NVIDIA H100"


def test_settings_hash_ignores_repeat_and_spelling_but_not_settings():
    axes = {"framework": "pytorch", "model": "vit_h_14", "gpus": 8, "repeat": 0}
    base = settings_hash(GPU_HEADER, axes)
    assert settings_hash(GPU_HEADER, {**axes, "repeat": 3}) == base
    assert settings_hash({**GPU_HEADER, "learning_rate": 0.08 * 1.0, "gpus": 8.0}, axes) == base
    assert settings_hash({**GPU_HEADER, "learning_rate": 0.04}, axes) != base
    assert settings_hash({**GPU_HEADER, "precision": "fp32"}, axes) != base
    # Versions and places are provenance of their own, not settings.
    assert settings_hash({**GPU_HEADER, "gpu_driver": "535.0", "hostname": "x"}, axes) == base
    # An axis the header does not carry still counts.
    assert settings_hash(GPU_HEADER, {**axes, "base_lr": 0.02}) != base


def test_header_values_win_over_the_asked_axes():
    # The halve policy trained with 32 where 64 was asked: the hash is of what ran.
    ran = {**GPU_HEADER, "per_gpu_batch": 32}
    assert settings_hash(ran, {"per_gpu_batch": 64}) == settings_hash(ran, {"per_gpu_batch": 32})


def _log(path: Path, header: dict, throughput: float) -> Path:
    lines = [header,
             {"record": "epoch", "schema": 1, "epoch": 1, "images": 512, "seconds": 4.0},
             {"record": "epoch", "schema": 1, "epoch": 2, "images": 512, "seconds": 512 / throughput},
             {"record": "summary", "schema": 1, "status": "ok", "total_time_s": 9.0}]
    path.write_text("\n".join(":::SCALESWEEP " + json.dumps(line) for line in lines) + "\n")
    return path


def test_runs_csv_carries_provenance_and_it_never_splits_a_scaling_group(tmp_path):
    eight = {**GPU_HEADER, "epochs": 2}
    one = {**eight, "gpus": 1, "world_size": 1, "nodes": 1, "global_batch": 64,
           "hostname": "as01r1b05", "slurm_nodelist": "as01r1b05", "start_time": "2026-11-14T09:00:00+00:00"}
    logs = [(_log(tmp_path / "g1.log", one, 100.0), {"gpus": 1, "repeat": 0}),
            (_log(tmp_path / "g8.log", eight, 640.0), {"gpus": 8, "repeat": 0})]
    _, runs = runs_table(logs)
    assert list(runs["slurm_nodelist"]) == ["as01r1b05", "as01r1b[01-02]"]
    assert list(runs["cluster"]) == ["mn5", "mn5"]
    assert runs["settings_hash"].nunique() == 2  # other GPU counts: other settings
    table = scaling.scaling_table(runs)
    assert len(table) == 2 and table["baseline_gpus"].tolist() == [1, 1]
    assert table["speedup"].tolist() == pytest.approx([1.0, 6.4])
    assert not set(PROVENANCE_COLUMNS) & set(group_keys(runs))


def test_a_failed_run_keeps_the_provenance_of_its_header(tmp_path):
    log = tmp_path / "oom.log"
    lines = [GPU_HEADER, {"record": "summary", "schema": 1, "status": "oom", "reason": "CUDA out of memory"}]
    log.write_text("\n".join(":::SCALESWEEP " + json.dumps(line) for line in lines) + "\n")
    _, runs = runs_table([(log, {})])
    assert runs.loc[0, "status"] == "oom" and runs.loc[0, "gpu_driver"] == "550.54.15"


def test_runlog_records_the_slurm_cluster_name():
    assert node.provenance(0.0, {"SLURM_CLUSTER_NAME": "mn5"})["slurm_cluster_name"] == "mn5"
    assert node.provenance(0.0, {})["slurm_cluster_name"] is None


def test_step_delay_setting():
    assert faults.injected_delay_s(faults.STEP_DELAY_ENV, {}) == 0.0
    assert faults.injected_delay_s(faults.STEP_DELAY_ENV, {faults.STEP_DELAY_ENV: "0.25"}) == 0.25
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(ValueError, match=faults.STEP_DELAY_ENV):
            faults.injected_delay_s(faults.STEP_DELAY_ENV, {faults.STEP_DELAY_ENV: bad})


def test_inject_step_delay_spends_the_set_time(monkeypatch):
    monkeypatch.setenv(faults.STEP_DELAY_ENV, "0.2")
    started, cpu_started = time.perf_counter(), time.process_time()
    faults.inject_step_delay()
    assert 0.2 <= time.perf_counter() - started < 1.0
    assert time.process_time() - cpu_started > 0.01  # busy, not asleep (a sleep takes ~0.1 ms of CPU)


HALVED = {**GPU_HEADER, "gpus": 2, "world_size": 2, "nodes": 1, "per_gpu_batch": 128, "global_batch": 256,
          "requested_per_gpu_batch": 256, "oom_policy": "halve", "learning_rate": 0.02, "epochs": 2}


@pytest.mark.parametrize("axes", [{"gpus": 2, "repeat": 0, "per_gpu_batch": 256}, {"gpus": 2, "repeat": 0}],
                         ids=["batch axis", "no batch axis"])
def test_an_oom_halved_run_says_what_ran_and_what_was_asked_whether_or_not_the_batch_is_an_axis(
        tmp_path, axes):
    _, runs = runs_table([(_log(tmp_path / "halved.log", HALVED, 100.0), axes)])
    row = runs.iloc[0]
    assert (row["per_gpu_batch"], row["requested_per_gpu_batch"], row["global_batch"]) == (128, 256, 256)
    # The hash runs.csv carried before requested_per_gpu_batch: one precedence rule changed no hash.
    assert row["settings_hash"] == "03a85722cb91ef93"


def test_a_halving_at_one_gpu_count_does_not_split_its_series(tmp_path):
    one = {**HALVED, "gpus": 1, "world_size": 1, "per_gpu_batch": 256, "global_batch": 256}
    logs = [(_log(tmp_path / "g1.log", one, 100.0), {"gpus": 1}),
            (_log(tmp_path / "g2.log", HALVED, 150.0), {"gpus": 2})]
    _, runs = runs_table(logs)
    table = scaling.scaling_table(runs)
    assert table["requested_per_gpu_batch"].tolist() == [256, 256]
    assert table["speedup"].tolist() == pytest.approx([1.0, 1.5])
