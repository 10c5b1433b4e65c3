"""What every log format parses into: `ParsedRun` (keys of docs/records.md), the run being read
(`Draft`), the errors, the record contract applied to a parsed run, what a log's path says
(`run_identity`, `gpus_from_filename`) and the small value readers the formats, the log
discovery and the tidy rows share."""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path

from scalesweep.contract import records
from scalesweep.contract import frameworks, layout
from scalesweep.logs.failures import one_line


# `counted`: the trainer counted the images (our records, the DDP reference's sampler sizes);
# `dataset`: the dataset's size, given or known (the TF reference script's CIFAR-10);
# `estimate`: Keras steps x global batch, an upper bound (the last batch is partial).
IMAGE_SOURCES = ("counted", "dataset", "estimate")
# The reference TF script trains on the CIFAR-10 training set, whole (docs/trainers.md).
CIFAR10_TRAIN_IMAGES = 50_000
# Digits of a count in a human-format log: a longer digit run is no count (records.MAX_COUNT),
# and Python refuses to convert an integer of more than 4,300 digits at all.
DIGITS = r"\d{1,15}"


class LogFormatError(ValueError):
    """A log that cannot be read as any known format; the message names the source and line."""

    def __init__(self, source, message, line=None):
        where = str(source) if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {message}")
        self.source = str(source)
        self.line = line


class EmptyLogError(LogFormatError):
    """A log with nothing in it: the job died before printing, a failed run rather than bad input."""


@dataclass
class ParsedRun:
    """One training run: keys of docs/records.md wherever the log holds the information.

    `summary` is set for every parsed run: the log's own summary record, or one derived from the
    log (`status` ok for a complete reference run, failed/oom/timeout for an unfinished one).
    `problems` lists the values that break the record contract, each naming the log, line (where
    the format has lines per value) and key; a run with problems is `failed`, its first problem the
    reason, and the bad keys are left out of header, epochs and summary.
    """

    format: str
    source: str
    header: dict
    epochs: list[dict]
    summary: dict | None = None
    problems: list[str] = field(default_factory=list)
    # Where the epochs' image counts come from (IMAGE_SOURCES): only an `estimate` is not a count.
    images_source: str = "counted"


@dataclass
class Draft:
    """A run being read, with the log lines that belong to it (for failure signatures)."""

    header: dict = field(default_factory=dict)
    epochs: list[dict] = field(default_factory=list)
    summary: dict | None = None
    lines: list[tuple[int, str]] = field(default_factory=list)
    header_line: int | None = None
    problems: list[str] = field(default_factory=list)


UNIDENTIFIED = (
    "run unidentified: no header record, and the path is not a workflow run's "
    + layout.attempt_log("train", layout.run_path("<framework>", "...", "...", "N"))
)
# A run's log or result in the workflow: <framework>/model~M/dataset~D/gpus~N[/more~axes]
# then `.attempt-K.log` or `.log` (logs/train/), or `/train.log` (results/runs/).
_RUN_FILES = (layout.RESULT_LOG, layout.MAX_BATCH_LOG)
_IDENTITY_AXES = layout.CORE_AXES


def run_identity(source) -> dict:
    """framework, model, dataset and gpus of the run a workflow log path names, else {}."""
    parts = list(Path(str(source)).parts)
    if parts and parts[-1] in _RUN_FILES:
        parts.pop()
    elif parts:
        parts[-1] = layout.log_run_name(parts[-1])
    for index in range(len(parts) - 1, -1, -1):
        axes = parts[index + 1:]
        if frameworks.find(parts[index]) and axes and all(layout.AXIS_SEPARATOR in axis for axis in axes):
            values = dict(axis.split(layout.AXIS_SEPARATOR, 1) for axis in axes)
            if all(values.get(key) for key in _IDENTITY_AXES) and re.fullmatch(DIGITS, values["gpus"]):
                return {"framework": parts[index], "model": values["model"],
                        "dataset": values["dataset"], "gpus": int(values["gpus"])}
    return {}


_GPUS_IN_NAME = (
    re.compile(rf"(?<![A-Za-z0-9])({DIGITS})[-_]?gpus?(?![A-Za-z])", re.IGNORECASE),  # vit_4gpus, 8gpu
    re.compile(rf"(?<![A-Za-z0-9])gpus?[-_=~]?({DIGITS})(?!\d)", re.IGNORECASE),  # gpus~2 (Paramspace)
)
_G_IN_NAME = re.compile(rf"(?<![A-Za-z0-9])g({DIGITS})(?![A-Za-z0-9])", re.IGNORECASE)  # ddp-n2-g8


_NODES_IN_NAME = re.compile(rf"(?<![A-Za-z0-9])({DIGITS})[-_]?nodes?(?![A-Za-z])", re.IGNORECASE)  # 2nodes


class AmbiguousName(ValueError):
    """A log's name gives more than one GPU or node count."""


def shape_from_filename(name) -> tuple[int | None, int | None]:
    """(total GPUs, nodes) written in a log's name; None for what it does not say.

    `vit_4gpus.log`, `ddp-n2-g8.out`, `run_g8_x`, `8gpu`: the GPU count is the total. A name
    with a node count and a GPU count, as the course book's jobs are named (`--job-name=
    ddp_tiny_2nodes_4gpus`, `--output=R-%x.%j.out`: 2 nodes with `--gres=gpu:4` each), gives the
    GPUs per node: R-ddp_tiny_2nodes_4gpus.31337.out is 8 GPUs on 2 nodes. A name with two
    different counts of either is AmbiguousName, naming the file and how to give the count.
    The file name is read first; folder names only where they spell out `gpu(s)`, since a bare
    `g4` folder may mean anything.
    """
    path = Path(str(name))
    nodes = _one_count(path.name, [_NODES_IN_NAME], "node")
    gpus = _one_count(path.name, [*_GPUS_IN_NAME, _G_IN_NAME], "GPU")
    if gpus is None:
        for folder in reversed(path.parent.parts):
            gpus = _one_count(folder, list(_GPUS_IN_NAME), "GPU")
            if gpus is not None:
                break
    if gpus is not None and nodes is not None:
        return gpus * nodes, nodes
    return gpus, nodes


def _one_count(text: str, patterns, what: str) -> int | None:
    counts = {int(match.group(1)) for pattern in patterns for match in pattern.finditer(text)}
    if len(counts) > 1:
        raise AmbiguousName(
            f"the name gives {len(counts)} {what} counts ({', '.join(map(str, sorted(counts)))}): "
            "give the run's world size (analyze --world-size FILE=N, or a world_size column in "
            "the folder's manifest.csv)")
    return counts.pop() if counts else None


def gpus_from_filename(name) -> int | None:
    """The total GPU count a log's name gives (shape_from_filename), None when it gives none."""
    return shape_from_filename(name)[0]


def finished_summary(epochs: list[dict], **extra) -> dict:
    seconds = [epoch["seconds"] for epoch in epochs if epoch.get("seconds") is not None]
    return {
        "status": "ok",
        "reason": None,
        "epochs": len(epochs),
        "train_time_s": sum(seconds) if len(seconds) == len(epochs) else None,
        **extra,
    }


def keep_valid(draft: Draft, kind: str, record: dict, where: str, required: bool = True) -> dict:
    """`record` without the keys that break the contract; each of those a problem of the run."""
    found = records.problems(kind, record, required=required)
    draft.problems.extend(f"{where}: {message}" for _, message in found)
    return records.drop_bad_keys(record, found)


def refused_summary(problems: list[str], epochs: int) -> dict:
    """The verdict on a run whose log breaks the contract: failed, the first problem the reason."""
    more = len(problems) - 1
    reason = problems[0] + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
    return {"status": "failed", "reason": one_line(reason), "epochs": epochs}


def checked(run: ParsedRun) -> ParsedRun:
    """A run parsed from a human-format log, checked against the same record contract.

    Those logs print no value per line in one place, so problems name the epoch instead; no key is
    required, since the reference scripts do not print everything a record holds.
    """
    draft = Draft()
    run.header = keep_valid(draft, "header", run.header, f"{run.source}: header", required=False)
    run.epochs = [
        keep_valid(draft, "epoch", epoch, f"{run.source}: epoch {epoch.get('epoch')}", required=False)
        for epoch in run.epochs
    ]
    summary = keep_valid(draft, "summary", run.summary, f"{run.source}: summary", required=False)
    if draft.problems:
        summary = refused_summary(draft.problems, len(run.epochs))
    run.summary, run.problems = summary, draft.problems
    return run


def registry_model(name: str, framework: str) -> str:
    """A reference log's model name as the framework's registry entry spells it: its
    `model_aliases` (`vit` -> `vit_h_14`), else matched case-insensitively, with the `v2` suffix
    the reference script leaves out of its header (` Model ResNet50` is ResNet50V2)."""
    lowered = name.strip().lower()
    entry = frameworks.find(framework)
    if entry is None:
        return lowered
    alias = entry.model_aliases.get(lowered)
    if alias:
        return alias
    known = entry.models
    for candidate in (lowered, lowered + "v2"):
        if candidate in known:
            return candidate
    return lowered


_DURATION_PART_RE = re.compile(
    r"(\d+(?:\.\d+)?)\s*(h|hours?|min|minutes?|m|ms|us|s|sec|secs|seconds?)?\b", re.IGNORECASE
)
_DURATION_UNITS = {"h": 3600, "hour": 3600, "hours": 3600, "ms": 1e-3, "us": 1e-6}
_DURATION_UNITS.update({"m": 60, "min": 60, "minute": 60, "minutes": 60})


def parse_duration(text: str) -> float | None:
    """Seconds in `702 s`, `702.5s`, `11m 42s`, `1h 2m 3s`, `0:11:42` (a bare number is seconds)."""
    text = text.strip()
    clock = re.match(rf"^({DIGITS}):(\d{{2}}):(\d{{2}}(?:\.\d+)?)$", text)
    if clock:
        hours, minutes, seconds = clock.groups()
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    parts = _DURATION_PART_RE.findall(text)
    if not parts:
        return None
    return sum(float(value) * _DURATION_UNITS.get(unit.lower(), 1.0) for value, unit in parts)


def as_number(text) -> float | None:
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def as_metric(text) -> float | None:
    value = as_number(text)
    return value if value is not None and math.isfinite(value) else None


def as_count(text) -> int | None:
    if text is None:
        return None
    cleaned = str(text).strip().replace(",", "").replace("_", "")
    return int(cleaned) if re.fullmatch(DIGITS, cleaned) else None


def as_rate(images, seconds) -> float | None:
    return images / seconds if images and seconds and seconds > 0 else None


def whole_number(value) -> int | None:
    """A config or log value that is a whole number up to records.MAX_COUNT (an int, a numpy int,
    4.0 from a CSV column with gaps), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):  # exactly, where float() would round past 2**53
        number = int(value)
    else:
        try:
            real = float(value)
        except (TypeError, ValueError, OverflowError):
            return None
        if not math.isfinite(real) or not real.is_integer():
            return None
        number = int(real)
    return number if abs(number) <= records.MAX_COUNT else None
