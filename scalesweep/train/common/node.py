"""What a run's header says about where it ran: host, SLURM job, container, node load, hardware,
CPU threads, library versions, and the process's peak memory.

Standard library only: imported inside TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import datetime
import os
import resource
import shutil
import socket
import subprocess
import sys

from scalesweep.contract.hardware import usable_cpu_count  # noqa: F401  (the trainers' thread counts)

_GIB = 1024**3


def utc_now_iso(timestamp: float | None = None) -> str:
    """ISO 8601 UTC time of `timestamp` (seconds since the epoch; now when None)."""
    moment = (
        datetime.datetime.now(datetime.timezone.utc)
        if timestamp is None
        else datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc)
    )
    return moment.isoformat(timespec="seconds")


def provenance(start_timestamp: float | None = None, environ=None) -> dict:
    """Header keys saying where and when the run happened (null where SLURM or a container is
    absent)."""
    env = os.environ if environ is None else environ
    return {
        "hostname": socket.gethostname(),
        "slurm_job_id": env.get("SLURM_JOB_ID") or None,
        "slurm_nodelist": env.get("SLURM_JOB_NODELIST") or None,
        "slurm_cluster_name": env.get("SLURM_CLUSTER_NAME") or None,
        "container_image": container_image(env),
        "start_time": utc_now_iso(start_timestamp),
        # the code that runs, as the workflow computed it (git may be absent in a container)
        "scalesweep_version": env.get("SCALESWEEP_VERSION") or None,
        **node_load(env),
    }


def node_load(environ=None, loadavg=os.getloadavg, cpu_count=os.cpu_count) -> dict:
    """What else ran on the node as the run started: the 1-minute load average and the CPUs it
    is spread over; under SLURM whether the job holds only part of the node's CPUs, i.e. others
    may share it (SLURM_CPUS_ON_NODE below the node's CPUs; null outside SLURM)."""
    env = os.environ if environ is None else environ
    try:
        load = round(loadavg()[0], 2)
    except OSError:  # not every system has a load average
        load = None
    cpus = cpu_count()
    held = env.get("SLURM_CPUS_ON_NODE")
    shared = None
    if held and held.isdigit() and cpus:
        shared = int(held) < cpus
    return {"load_avg_1m": load, "node_cpus": cpus, "node_shared": shared}


def container_image(environ=None) -> str | None:
    """The Apptainer/Singularity image this process runs in (both runtimes export its path)."""
    env = os.environ if environ is None else environ
    return env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER") or None


NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits")


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of NVIDIA_SMI_QUERY's output -> [{"name", "driver", "memory_mib"}], one per GPU."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 3 or not fields[0]:
            continue
        memory = int(fields[2]) if fields[2].isdigit() else None
        gpus.append({"name": fields[0], "driver": fields[1] or None, "memory_mib": memory})
    return gpus


def nvidia_gpus(run=subprocess.run) -> list[dict]:
    """The node's NVIDIA GPUs from nvidia-smi; [] without it (CPU nodes, containers without --nv)."""
    if shutil.which(NVIDIA_SMI_QUERY[0]) is None:
        return []
    try:
        done = run(list(NVIDIA_SMI_QUERY), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else []


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU's model name (Linux), or None."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip() or None
    except OSError:
        return None
    return None


def device_provenance(run=subprocess.run) -> dict:
    """Header keys on the node's hardware: GPU models and driver (nvidia-smi), CPU model; the GPU
    keys list every GPU of the node, `devices` the ones the run used."""
    gpus = nvidia_gpus(run)
    drivers = sorted({gpu["driver"] for gpu in gpus if gpu["driver"]})
    return {
        "gpu_models": [gpu["name"] for gpu in gpus],
        "gpu_driver": ", ".join(drivers) or None,
        "cpu_model": cpu_model(),
    }


def thread_fields(intra_op_threads: int | None, environ=None) -> dict:
    """Header keys on the CPU threads the process computes with: the framework's intra-op pool
    (`intra_op_threads`, as the framework reports it) and OMP_NUM_THREADS as the launcher set it
    (null when unset): a rank given more threads than its share of the cores slows every rank."""
    env = os.environ if environ is None else environ
    return {"omp_num_threads": intra_op_threads, "omp_num_threads_env": env.get("OMP_NUM_THREADS")}


def nccl_version_from_env(environ=None) -> str | None:
    """NGC images export the NCCL they ship as NCCL_VERSION; frameworks without an API for it
    (TensorFlow) record that."""
    env = os.environ if environ is None else environ
    return env.get("NCCL_VERSION") or None


def python_version() -> str:
    return ".".join(str(part) for part in sys.version_info[:3])


def peak_host_rss_gb() -> float:
    """Peak resident memory of this process in GiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    peak_bytes = peak if sys.platform == "darwin" else peak * 1024
    return round(peak_bytes / _GIB, 3)
