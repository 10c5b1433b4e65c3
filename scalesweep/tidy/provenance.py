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

# A sweep's own columns in the history archive (scalesweep/history.py): its id, date, config,
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
    # the image file's SHA-256 (scalesweep/images.py): the same path may hold a rebuilt image
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


# What `-dirty` looks at: the code that launches, trains and tabulates. config/ is an input that
# settings_hash already records; results, logs and docs change nothing a run computes.
CODE_PATHS = ("scalesweep", "scripts", "workflow", "Snakefile", "envs", "pyproject.toml")
VERSION_ENV = "SCALESWEEP_VERSION"  # set by the workflow, read by the trainers (scripts/runlog.py)


def code_version(repo: Path = REPO) -> str:
    """The checkout's commit, `-dirty` when CODE_PATHS hold uncommitted changes; in an unpacked
    offline bundle the commit it was made from (bundle_version); the installed package's version
    without either (a copy without .git, say)."""
    recorded = bundle_version(repo)
    if recorded is not None:
        return recorded
    try:
        commit = _git(repo, "rev-parse", "--short=12", "HEAD")
        changed = _git(repo, "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
        return commit + ("-dirty" if changed else "")
    except (OSError, subprocess.SubprocessError):
        return scalesweep_version()


# An offline bundle (envs/bundle.sh, scalesweep/bundle.py) carries no .git: it records the code
# version it was made from and the SHA-256 of each code file in this file at its top.
BUNDLE_MANIFEST = "bundle.json"


def bundle_version(folder: Path) -> str | None:
    """The code version an unpacked bundle recorded, `-dirty` when a code file it holds was
    changed or removed since; None where `folder` is no bundle. ValueError naming the file when
    the record cannot be read: a run would otherwise record a version it did not run."""
    path = Path(folder) / BUNDLE_MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        version, files = str(manifest["code_version"]), dict(manifest["files"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a readable bundle record ({error!r}); "
                         "unpack the bundle again or remove the file") from None
    edited = any(file_sha256(Path(folder) / name) != digest for name, digest in files.items())
    return version + "-dirty" if edited and not version.endswith("-dirty") else version


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 in hex; None where it is missing."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _git(repo: Path, *args) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          timeout=10, check=True)
    return done.stdout.strip()


def run_id(header: dict, epochs: list, summary: dict | None, log=None) -> str:
    """16 hex digits naming one run by what made it: its log's header (host, SLURM job, start
    time), its epochs and summary. The same run read again, from a copy or in a later sweep's
    runs.csv, has the same id; another run never does (its start time or its numbers differ).
    A row without a header (no log, an unreadable one) is named by its log and axes."""
    made = {"header": header, "epochs": epochs, "summary": summary} if header else {"log": log}
    canonical = json.dumps(made, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
