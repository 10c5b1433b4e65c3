"""Where a run ran, as its header says (scalesweep/train/common/node.py): SLURM and container
variables, node load, threads, GPUs from nvidia-smi, the CPU model. Standard library only: no
framework import."""

import os
import stat
from pathlib import Path

from scalesweep.train.common import node

NVIDIA_SMI_OUTPUT = "NVIDIA H100, 535.104.05, 65247\nNVIDIA H100, 535.104.05, 65247\n\n"

def test_provenance_reads_slurm_and_container_variables():
    found = node.provenance(0.0, {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[1-2]",
                                    "APPTAINER_CONTAINER": "/gpfs/images/tf-23.03.sif"})
    assert (found["slurm_job_id"], found["slurm_nodelist"]) == ("42", "gpu[1-2]")
    assert found["container_image"] == "/gpfs/images/tf-23.03.sif"
    assert found["start_time"] == "1970-01-01T00:00:00+00:00"
    bare = node.provenance(environ={})
    assert bare["slurm_job_id"] is None and bare["container_image"] is None
    assert node.container_image({"SINGULARITY_CONTAINER": "/x.sif"}) == "/x.sif"
    assert node.nccl_version_from_env({"NCCL_VERSION": "2.17.1"}) == "2.17.1"

def test_thread_fields_record_the_pool_and_the_variable():
    assert node.thread_fields(12, {"OMP_NUM_THREADS": "3"}) == {"omp_num_threads": 12, "omp_num_threads_env": "3"}
    assert node.thread_fields(None, {}) == {"omp_num_threads": None, "omp_num_threads_env": None}

def test_usable_cpus_are_the_affinity_mask_or_else_the_host_count(monkeypatch):
    monkeypatch.setattr(node.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert node.usable_cpu_count() == 3
    monkeypatch.delattr(node.os, "sched_getaffinity")
    monkeypatch.setattr(node.os, "cpu_count", lambda: 8)
    assert node.usable_cpu_count() == 8

def test_parse_nvidia_smi_rows():
    assert node.parse_nvidia_smi(NVIDIA_SMI_OUTPUT) == [
        {"name": "NVIDIA H100", "driver": "535.104.05", "memory_mib": 65247}] * 2
    assert node.parse_nvidia_smi("No devices were found\n") == []

def fake_nvidia_smi(folder: Path, body: str) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

def test_device_provenance_runs_nvidia_smi_from_the_path(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, f"printf '{NVIDIA_SMI_OUTPUT}'")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = node.device_provenance()
    assert found["gpu_models"] == ["NVIDIA H100", "NVIDIA H100"] and found["gpu_driver"] == "535.104.05"

def test_device_provenance_without_a_working_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert node.nvidia_gpus() == []
    fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert node.device_provenance()["gpu_models"] == [] and node.device_provenance()["gpu_driver"] is None

def test_cpu_model_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert node.cpu_model(str(cpuinfo)) == "Intel(R) Xeon(R) Platinum 8480+"
    assert node.cpu_model(str(tmp_path / "absent")) is None

def test_node_load_says_what_else_ran_and_whether_slurm_shared_the_node():
    load = node.node_load({"SLURM_CPUS_ON_NODE": "20"}, loadavg=lambda: (3.456, 0, 0), cpu_count=lambda: 80)
    assert load == {"load_avg_1m": 3.46, "node_cpus": 80, "node_shared": True}  # 20 of 80 CPUs
    whole = node.node_load({"SLURM_CPUS_ON_NODE": "80"}, loadavg=lambda: (0.1, 0, 0), cpu_count=lambda: 80)
    assert whole["node_shared"] is False
    assert node.node_load({}, loadavg=lambda: (0.1, 0, 0), cpu_count=lambda: 2)["node_shared"] is None

def test_the_header_carries_the_code_version_the_workflow_passed():
    assert node.provenance(environ={"SCALESWEEP_VERSION": "3ec7d5d1a2b3-dirty"})["scalesweep_version"] == \
        "3ec7d5d1a2b3-dirty"
    assert node.provenance(environ={})["scalesweep_version"] is None
