"""Where, on what and with what a run ran: its header record -> flat provenance columns of runs.csv.

The header (docs/records.md) nests versions and lists devices; a runs table and the sweep history
need one value per cell, so that two sweeps can be compared field by field (`provenance_diff` in
scalesweep/compare.py). None of these columns is a configuration axis: they are listed in
scalesweep/scaling.py NON_KEY_COLUMNS, and two sweeps' configurations match on the axes alone.
"""

import functools
import hashlib
import json
import math
import subprocess
from importlib import metadata
from pathlib import Path

PROVENANCE_COLUMNS = (
    "gpu_model",
    "gpu_driver",
    "cpu_model",
    "framework_version",
    "cuda_version",
    "cudnn_version",
    "nccl_version",
    "container_image",
    # the image file's SHA-256 (scalesweep/images.py): the same path may hold a rebuilt image
    "container_digest",
    "cluster",
    "slurm_nodelist",
    "start_time",
    "scalesweep_version",
    "settings_hash",
)

# Header keys that define what a run computed and how it was measured: two runs with the same
# values ran the same experiment. Versions, devices and places are provenance columns of their own,
# and the repeat index only asks for another measurement of the same settings.
SETTINGS_KEYS = (
    "framework", "model", "dataset", "resolution", "gpus", "device_kind", "world_size", "nodes",
    "per_gpu_batch", "requested_per_gpu_batch", "global_batch", "learning_rate", "precision",
    "compile", "channels_last", "num_workers", "epochs", "images_per_epoch", "protocol",
    "warmup_steps", "timed_steps", "max_batch_limit", "oom_policy",
)  # fmt: skip
NOT_SETTINGS = frozenset({"repeat"})

# The header's name of each framework's own version in `versions`.
FRAMEWORK_VERSION_KEYS = {"pytorch": "torch", "tensorflow": "tensorflow"}

REPO = Path(__file__).resolve().parents[1]


def run_provenance(header: dict, axes: dict | None = None) -> dict:
    """The PROVENANCE_COLUMNS of one run from its parsed header and its sweep axes.

    Missing keys (logs of the reference scripts, old trainers) give None, never an error.
    """
    versions = header.get("versions") or {}
    framework = header.get("framework") or (axes or {}).get("framework")
    return {
        "gpu_model": gpu_model(header.get("gpu_models")),
        "gpu_driver": _text(header.get("gpu_driver")),
        "cpu_model": _text(header.get("cpu_model")),
        "framework_version": _text(versions.get(FRAMEWORK_VERSION_KEYS.get(framework, ""))),
        "cuda_version": _text(versions.get("cuda")),
        "cudnn_version": _text(versions.get("cudnn")),
        "nccl_version": _text(versions.get("nccl")),
        "container_image": _text(header.get("container_image")),
        # known to the workflow, not to the trainer: tidy.with_digests fills it in
        "container_digest": None,
        # SLURM's cluster name where the trainer ran under SLURM, else the machine itself
        "cluster": _text(header.get("slurm_cluster_name") or header.get("hostname")),
        "slurm_nodelist": _text(header.get("slurm_nodelist")),
        "start_time": _text(header.get("start_time")),
        "scalesweep_version": scalesweep_version(),
        "settings_hash": settings_hash(header, axes or {}),
    }


def gpu_model(models) -> str | None:
    """The node's GPU model(s), each once in order of appearance: 'NVIDIA H100 64GB HBM2e'."""
    names = [str(name).strip() for name in models or () if name and str(name).strip()]
    return " + ".join(dict.fromkeys(names)) or None


def settings_hash(header: dict, axes: dict) -> str:
    """16 hex digits of a SHA-256 over the run's effective settings (canonical JSON).

    The header says what actually ran (the batch after an out-of-memory halving, say); the sweep
    axes fill in what the header does not carry. The repeat index is left out, so repeats of one
    configuration share their hash, and a changed setting changes it.
    """
    settings = {key: value for key, value in axes.items() if key not in NOT_SETTINGS}
    settings.update({key: header[key] for key in SETTINGS_KEYS if header.get(key) is not None})
    canonical = json.dumps(
        {key: _canonical(value) for key, value in settings.items()}, sort_keys=True, default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _canonical(value):
    """One spelling per value: 4, 4.0 and numpy's int64(4) hash alike."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _text(value) -> str | None:
    """Versions arrive as strings or numbers (cuDNN's 91002): one type for the column."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


@functools.lru_cache(maxsize=1)
def scalesweep_version() -> str:
    """The git commit of this checkout (`-dirty` with uncommitted changes), else the installed
    package's version: the code that tabulated (and normally launched) the sweep."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=10,
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return metadata.version("scalesweep")
    except metadata.PackageNotFoundError:
        return "unknown"
