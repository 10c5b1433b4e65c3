"""Where, on what and with what a run ran: its header record -> flat provenance columns of runs.csv.

The header (docs/records.md) nests versions and lists devices; a runs table and the sweep history
need one value per cell, so that two sweeps can be compared field by field (`provenance_diff` in
scalesweep/history/compare.py). None of these columns is a configuration axis: they are listed in
scalesweep/tidy/table.py's NON_KEY_COLUMNS, and two sweeps' configurations match on the axes
alone. (The code version a run records comes from the workflow: scalesweep/plan/code_version.py.)
"""

import hashlib
import json
import math

from scalesweep.contract import frameworks, run_env

# A sweep's own columns in the history archive (scalesweep/history/archive.py): its id, date, config,
# where it was archived from and on which host.
SWEEP_COLUMNS = ("sweep_id", "sweep_date", "sweep_config", "sweep_source", "sweep_host")
PROVENANCE_COLUMNS = (
    "gpu_model",
    "gpu_driver",
    "cpu_model",
    "framework_version",
    "cuda_version",
    "cudnn_version",
    "nccl_version",
    "container_image",
    # the image file's SHA-256 (scalesweep/plan/containers.py): the same path may hold a rebuilt image
    "container_digest",
    "cluster",
    "slurm_nodelist",
    "start_time",
    "scalesweep_version",
    "settings_hash",
    "load_avg_1m",
    "node_load",
    "node_shared",
)
# Provenance that differs between any two runs, so a diff of it says nothing.
UNCOMPARED = frozenset({"start_time", "load_avg_1m"})

# Header keys that define what a run computed and how it was measured: two runs with the same
# values ran the same experiment. Versions, devices and places are provenance columns of their own,
# and the repeat index only asks for another measurement of the same settings.
SETTINGS_KEYS = (
    "framework", "model", "dataset", "resolution", "gpus", "device_kind", "world_size", "nodes",
    "per_gpu_batch", "requested_per_gpu_batch", "global_batch", "learning_rate", "precision",
    "compile", "channels_last", "num_workers", "epochs", "images_per_epoch", "protocol",
    "warmup_steps", "timed_steps", "max_batch_limit", "oom_policy", "env", "bucket_cap_mb",
    "gradient_as_bucket_view", "static_graph",
)  # fmt: skip
NOT_SETTINGS = frozenset({"repeat"})
# Settings added after runs were hashed, at the value every earlier run had: left out of the hash
# there, so a run measured before the key existed and its rerun now still share their hash.
LATER_SETTINGS_DEFAULTS = {"env": ({}, run_env.NO_ENV), "bucket_cap_mb": (frameworks.DDP_BUCKET_CAP_MB,),
                           "gradient_as_bucket_view": (False,), "static_graph": (False,)}

def framework_version_key(framework) -> str:
    """The key of the header's `versions` holding the framework's own version; '' for a framework
    no registry entry has (contract/frameworks.py)."""
    known = frameworks.find(framework)
    return known.version_key if known else ""


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
        "framework_version": _text(versions.get(framework_version_key(framework))),
        "cuda_version": _text(versions.get("cuda")),
        "cudnn_version": _text(versions.get("cudnn")),
        "nccl_version": _text(versions.get("nccl")),
        "container_image": _text(header.get("container_image")),
        # known to the workflow, not to the trainer: rows.with_digests fills it in
        "container_digest": None,
        # SLURM's cluster name where the trainer ran under SLURM, else the machine itself
        "cluster": _text(header.get("slurm_cluster_name") or header.get("hostname")),
        "slurm_nodelist": _text(header.get("slurm_nodelist")),
        "start_time": _text(header.get("start_time")),
        # The code that ran the run, as the workflow told the trainer (docs/records.md); never
        # the version at tidy time, which a later edit would stamp on every earlier run.
        "scalesweep_version": _text(header.get("scalesweep_version")),
        "settings_hash": settings_hash(header, axes or {}),
        **node_load(header),
    }


def node_load(header: dict) -> dict:
    """What else ran on the node at the run's start: the header's load average, `busy` when it
    exceeds the node's CPUs (more runnable processes than CPUs: the run had to share them), and
    whether SLURM gave the job only part of the node. Null where the header does not say. The
    1-minute average still holds the sweep's previous job for a while after it ended."""
    load, cpus, shared = (header.get(key) for key in ("load_avg_1m", "node_cpus", "node_shared"))
    busy = None
    if isinstance(load, (int, float)) and isinstance(cpus, int) and cpus > 0:
        busy = "busy" if load > cpus else "quiet"
    return {"load_avg_1m": load, "node_load": busy, "node_shared": None if shared is None else bool(shared)}


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
    asked = {key: value for key, value in axes.items() if key not in NOT_SETTINGS}
    settings = without_later_defaults(what_ran(header, asked, SETTINGS_KEYS))
    canonical = json.dumps(
        {key: _canonical(value) for key, value in settings.items()}, sort_keys=True, default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def without_later_defaults(settings: dict) -> dict:
    """`settings` without the LATER_SETTINGS_DEFAULTS keys at their defaults."""
    return {key: value for key, value in settings.items()
            if not any(_canonical(value) == default for default in LATER_SETTINGS_DEFAULTS.get(key, ()))}


def what_ran(header: dict, axes: dict, keys) -> dict:
    """A run's settings by the one precedence rule of runs.csv and settings_hash: the axes say what
    the config asked, the header what ran, so each of `keys` the header carries wins over the axis
    (the per-GPU batch after an out-of-memory halving); the axes fill in the rest."""
    return {**axes, **{key: header[key] for key in keys if header.get(key) is not None}}


def requested_batch(header: dict, axes: dict):
    """The per-GPU batch the config asked for: the axis where the batch is one, else what the
    trainer was asked (the header's requested_per_gpu_batch), else what ran (logs older than that
    key and the reference scripts' logs never halve)."""
    for value in (axes.get("per_gpu_batch"), header.get("requested_per_gpu_batch")):
        if value is not None:
            return value
    return header.get("per_gpu_batch")


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


def run_id(header: dict, epochs: list, summary: dict | None, log=None) -> str:
    """16 hex digits naming one run by what made it: its log's header (host, SLURM job, start
    time), its epochs and summary. The same run read again, from a copy or in a later sweep's
    runs.csv, has the same id; another run never does (its start time or its numbers differ).
    A row without a header (no log, an unreadable one) is named by its log and axes."""
    made = {"header": header, "epochs": epochs, "summary": summary} if header else {"log": log}
    canonical = json.dumps(made, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
