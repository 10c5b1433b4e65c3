"""Training logs -> runs in one structure, whatever printed them.

The format is detected from the text, never configured:

- `scalesweep`: our `:::SCALESWEEP {json}` records (docs/records.md), human lines ignored;
- `tf-reference-keras2` / `tf-keras3`: the reference TensorFlow script (docs/metrics.md), a
  ` Model ResNet50 2 GPUs` header block then Keras `verbose=2` epoch lines; one file may hold
  several runs (the reference ran 1/2/4 GPUs one after another in one job);
- `ddp-reference`: the reference PyTorch DDP trainer's INFO lines (docs/metrics.md); its world
  size is not in the log and comes from the caller or the file name;
- `unknown`: no training lines at all, but a failure signature (a job killed at its time limit
  before printing anything) or a Python exception (a trainer that died on import) - a failed
  run, not an unreadable log, named by its path when that is a workflow log (run_identity).

Every run comes out as a `ParsedRun` keyed like docs/records.md and checked against the record
contract (scalesweep/records.py), whatever its format. A run that did not finish is a run with
status failed / oom / timeout and a one-line reason, never numbers that look valid; so is a run
whose log holds a value the contract does not allow (its reason names the log, line and key).
"""

import codecs
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from scalesweep import invariants, records
from scalesweep.catalog import MODELS
from scalesweep.records import FIRST_STEADY_EPOCH, RECORD_PREFIX, SCHEMA, STATUSES  # noqa: F401

UNFINISHED_CAUSES = "run killed, timed out or crashed?"
TRUNCATED_REASON = f"log ends before the summary record ({UNFINISHED_CAUSES})"
# `counted`: the trainer counted the images (our records, the DDP reference's sampler sizes);
# `dataset`: the dataset's size, given or known (the TF reference script's CIFAR-10);
# `estimate`: Keras steps x global batch, an upper bound (the last batch is partial).
IMAGE_SOURCES = ("counted", "dataset", "estimate")
# The reference TF script trains on the CIFAR-10 training set, whole (docs/trainers.md).
CIFAR10_TRAIN_IMAGES = 50_000
REASON_LIMIT = 300
# Digits of a count in a human-format log: a longer digit run is no count (records.MAX_COUNT),
# and Python refuses to convert an integer of more than 4,300 digits at all.
_N = r"\d{1,15}"

# Reference model names -> catalog names; the rest are matched case-insensitively, with the `v2`
# suffix the reference script leaves out of its header (` Model ResNet50` is ResNet50V2).
MODEL_ALIASES = {"pytorch": {"vit": "vit_h_14"}, "tensorflow": {}}


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
class _Draft:
    """A run being read, with the log lines that belong to it (for failure signatures)."""

    header: dict = field(default_factory=dict)
    epochs: list[dict] = field(default_factory=list)
    summary: dict | None = None
    lines: list[tuple[int, str]] = field(default_factory=list)
    header_line: int | None = None
    problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Public entry points


def parse_file(path, world_size: int | None = None, images_per_epoch: int | None = None) -> list[ParsedRun]:
    """Parse a log file; `world_size` is needed only for ddp-reference logs whose name lacks it,
    `images_per_epoch` (the dataset's training images) only for Keras logs, which count steps."""
    raw = Path(path).read_bytes()
    encoding = wide_encoding(raw)
    if encoding:
        raise LogFormatError(path, f"{encoding} encoded (re-save as UTF-8, e.g. iconv -f {encoding} -t UTF-8)")
    # Logs of crashed jobs can hold stray bytes (killed mid-write, binary progress output):
    # replacing them keeps every readable line instead of losing the whole run.
    text = raw.decode("utf-8", errors="replace")
    return parse_log(text, source=str(path), world_size=world_size, images_per_epoch=images_per_epoch)


# Byte order marks, UTF-32's first: UTF-32LE's starts with UTF-16LE's.
_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
              (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
# Without a byte order mark: in UTF-16 text of Latin script every other byte is 0 (a log saved by
# Windows PowerShell's `>`); a stray NUL of a crashed job's binary output is no such pattern.
_WIDE_SAMPLE = 4096
_WIDE_NUL_SHARE = 0.5


def wide_encoding(raw: bytes) -> str | None:
    """"UTF-16" or "UTF-32" when the bytes of a log are text in one of those (a byte order mark,
    or every other byte NUL), which read as UTF-8 would give no line of any format; else None."""
    for bom, name in _WIDE_BOMS:
        if raw.startswith(bom):
            return name
    sample = raw[:_WIDE_SAMPLE]
    pairs = list(zip(sample[0::2], sample[1::2]))
    # A character and a NUL, in either order (little or big endian); NUL blocks (a file
    # preallocated and never written) are neither.
    little = sum(1 for first, second in pairs if first and not second)
    big = sum(1 for first, second in pairs if second and not first)
    return "UTF-16" if pairs and max(little, big) >= _WIDE_NUL_SHARE * len(pairs) else None


def parse_log(text: str, source: str = "<string>", world_size: int | None = None,
              images_per_epoch: int | None = None) -> list[ParsedRun]:
    """All runs in one log text, in the order they ran."""
    if not text.strip():
        raise EmptyLogError(source, "empty log")
    lines = list(enumerate(text.splitlines(), start=1))
    fmt = detect_format(lines)
    if fmt == "scalesweep":
        return [_consistent(run) for run in _parse_scalesweep(lines, source, world_size)]
    if fmt == "ddp-reference":
        return [_consistent(_checked(_parse_ddp(lines, source, world_size)))]
    if fmt in ("tf-reference-keras2", "tf-keras3"):
        runs = _parse_keras(lines, source, fmt, world_size, images_per_epoch)
        return [_consistent(_checked(run)) for run in runs]
    return [_unknown_format_run(lines, source)]


def _consistent(run: ParsedRun) -> ParsedRun:
    """An ok run whose records contradict each other (scalesweep/invariants.py) is failed, the
    first contradiction its reason. A run failed already keeps its reason: the trainer's verdict,
    or the value that broke the contract."""
    if run.problems or run.summary.get("status") != "ok":
        return run
    run.problems = [f"{run.source}: {problem}" for problem in
                    invariants.run_problems(run.header, run.epochs, run.summary)]
    if run.problems:
        run.summary = refused_summary(run.problems, len(run.epochs))
    return run


def _unknown_format_run(lines, source) -> ParsedRun:
    """A log with no training lines is still a run when it shows how the job died: a failure
    signature, or the exception of a trainer that died before its first record (an import error,
    an interpreter too old for the code). The run is the one its path names, if it has the
    workflow's shape (run_identity); else the reason says it is unidentified."""
    failure = failure_from_signatures(lines)
    if failure is None and last_exception(lines):
        failure = "failed", last_exception(lines)
    if failure is None:
        raise LogFormatError(
            source,
            "no known format (expected ':::SCALESWEEP {json}' records, the TensorFlow reference "
            "header ' Model <name> <n> GPUs' with Keras epoch lines, or the PyTorch reference "
            "'INFO - ### model_name' / '[EPOCH: n]' lines)",
        )
    status, reason = failure
    identity = run_identity(source)
    if not identity:
        reason += f" ({UNIDENTIFIED})"
    return ParsedRun("unknown", source, identity, [], {"status": status, "reason": one_line(reason), "epochs": 0})


UNIDENTIFIED = (
    "run unidentified: no header record, and the path is not a workflow run's "
    "logs/train/<framework>/model~.../dataset~.../gpus~N.log"
)
# A run's log or result in the workflow: <framework>/model~M/dataset~D/gpus~N[/more~axes]
# then `.attempt-K.log` or `.log` (logs/train/), or `/train.log` (results/runs/).
_RUN_FILES = ("train.log", "max_batch.log")
_LOG_SUFFIX_RE = re.compile(r"(?:\.attempt-\d+)?\.log$")
_IDENTITY_AXES = ("model", "dataset", "gpus")


def run_identity(source) -> dict:
    """framework, model, dataset and gpus of the run a workflow log path names, else {}."""
    parts = list(Path(str(source)).parts)
    if parts and parts[-1] in _RUN_FILES:
        parts.pop()
    elif parts:
        parts[-1] = _LOG_SUFFIX_RE.sub("", parts[-1])
    for index in range(len(parts) - 1, -1, -1):
        axes = parts[index + 1:]
        if parts[index] in MODELS and axes and all("~" in axis for axis in axes):
            values = dict(axis.split("~", 1) for axis in axes)
            if all(values.get(key) for key in _IDENTITY_AXES) and re.fullmatch(_N, values["gpus"]):
                return {"framework": parts[index], "model": values["model"],
                        "dataset": values["dataset"], "gpus": int(values["gpus"])}
    return {}


def detect_format(lines) -> str | None:
    """The format of numbered log lines, or None; our records win over anything printed beside them."""
    if any(RECORD_PREFIX in line for _, line in lines):
        return "scalesweep"
    if any(_is_ddp_line(line) for _, line in lines):
        return "ddp-reference"
    if not any(_KERAS_HEADER_RE.match(line) or _KERAS_EPOCH_RE.match(line) for _, line in lines):
        return None
    # Keras 2 closes an epoch line with `- 9s/epoch - 712ms/step`; Keras 3 has no s/epoch field.
    # A log cut before its first epoch line cannot tell: the reference script is the Keras 2 one.
    progress = [_KERAS_PROGRESS_RE.search(line) for _, line in lines]
    progress = [match for match in progress if match]
    if progress and not any(_EPOCH_TIME_RE.search(match.group("rest")) for match in progress):
        return "tf-keras3"
    return "tf-reference-keras2"


_GPUS_IN_NAME = (
    re.compile(rf"(?<![A-Za-z0-9])({_N})[-_]?gpus?(?![A-Za-z])", re.IGNORECASE),  # vit_4gpus, 8gpu
    re.compile(rf"(?<![A-Za-z0-9])gpus?[-_=~]?({_N})(?!\d)", re.IGNORECASE),  # gpus~2 (Paramspace)
)
_G_IN_NAME = re.compile(rf"(?<![A-Za-z0-9])g({_N})(?![A-Za-z0-9])", re.IGNORECASE)  # ddp-n2-g8


def gpus_from_filename(name) -> int | None:
    """GPU count written in a log's name (`vit_4gpus.log`, `ddp-n2-g8.out`, `run_g8_x`, `8gpu`).

    The file name is read first; folder names only where they spell out `gpu(s)`, since a bare
    `g4` folder may mean anything. None when nothing says.
    """
    path = Path(str(name))
    for pattern in (*_GPUS_IN_NAME, _G_IN_NAME):
        match = pattern.search(path.name)
        if match:
            return int(match.group(1))
    for folder in reversed(path.parent.parts):
        for pattern in _GPUS_IN_NAME:
            match = pattern.search(folder)
            if match:
                return int(match.group(1))
    return None


# ---------------------------------------------------------------------------------------------
# Failure signatures (used when a log has no summary of its own)

_OOM_RE = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|ResourceExhaustedError"
    r"|OOM when allocating|oom[-_]kill|\bMemoryError\b"
)
# TF's "Allocator (GPU_0_bfc) ran out of memory trying to allocate ... this is not a failure" is
# a warning, so a bare "out of memory" is deliberately not a signature.
_TIMEOUT_RE = re.compile(r"DUE TO TIME LIMIT")
_NODE_FAIL_RE = re.compile(r"DUE TO NODE FAILURE")
_CANCELLED_RE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT")
_LINE_PREFIX_RE = re.compile(
    r"^(?:\d+: )?(?:\[rank\d+\]: ?)?(?:\[\d{1,2}/\d{1,2}/\d{4} [\d:]+(?: [AP]M)?\]\s*[A-Z]+\s*-\s?)?"
)


def failure_from_signatures(lines) -> tuple[str, str] | None:
    """(status, one-line reason) from error lines in numbered log lines, or None.

    Out of memory wins over the rest: a rank that ran out of memory can leave the others hanging
    until the time limit, and the configuration is what does not fit.
    """
    checks = (
        ("oom", _OOM_RE, ""),
        ("timeout", _TIMEOUT_RE, ""),
        ("failed", _NODE_FAIL_RE, "NODE_FAIL: "),
        ("failed", _CANCELLED_RE, "cancelled: "),
    )
    for status, pattern, label in checks:
        hits = [line for _, line in lines if pattern.search(line)]
        if hits:
            return status, one_line(label + _strip_line_prefix(hits[-1]))
    return None


# torchrun ends a failed worker's log with its own traceback, whose exception only says a
# worker failed: the worker's exception is the cause.
_LAUNCHER_ERRORS = ("ChildFailedError",)
# A compile error (SyntaxError) is printed with its file and line but no "Traceback" line.
_BARE_ERROR_RE = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception)(?::|$)")


def last_exception(lines) -> str | None:
    """The exception line closing the last Python traceback in numbered log lines (a launcher's
    wrapper skipped), else the last bare `SomethingError: ...` line, else None."""
    found, bare, in_traceback = [], None, False
    for _, raw in lines:
        line = _strip_line_prefix(raw)
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and line.strip() and not line[0].isspace():
            found.append(line.strip())
            in_traceback = False
        elif _BARE_ERROR_RE.match(line):
            bare = line.strip()
    causes = [error for error in found if not error.split(":")[0].endswith(_LAUNCHER_ERRORS)]
    return (causes or found or [bare])[-1]


def one_line(text: str, limit: int = REASON_LIMIT) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _strip_line_prefix(line: str) -> str:
    """The message without srun `--label`, torchrun `[rankN]:` or logging prefixes."""
    return line[_LINE_PREFIX_RE.match(line).end():]


def _unfinished_summary(draft: _Draft, why: str) -> dict:
    """Summary of a run whose log stops early: the failure signature if any, else `why`."""
    failure = failure_from_signatures(draft.lines)
    if failure is not None:
        status, reason = failure
    else:
        # The trainer's exception is the cause; "the log ends early" only its consequence.
        status, reason = "failed", last_exception(draft.lines) or why
    return {"status": status, "reason": one_line(reason), "epochs": len(draft.epochs)}


def _finished_summary(epochs: list[dict], **extra) -> dict:
    seconds = [epoch["seconds"] for epoch in epochs if epoch.get("seconds") is not None]
    return {
        "status": "ok",
        "reason": None,
        "epochs": len(epochs),
        "train_time_s": sum(seconds) if len(seconds) == len(epochs) else None,
        **extra,
    }


# ---------------------------------------------------------------------------------------------
# scalesweep records


def iter_records(lines, source="<string>"):
    """(line number, record) of every `:::SCALESWEEP` record among numbered lines, each checked
    as a record (JSON object with a kind, no duplicate key, schema 1); (line number, None) for a
    human line. LogFormatError names the line of a corrupt record."""
    for number, line in lines:
        position = line.find(RECORD_PREFIX)
        if position < 0:
            yield number, None
        else:
            yield number, _load_record(line[position + len(RECORD_PREFIX):], source, number)


def _parse_scalesweep(lines, source, world_size) -> list[ParsedRun]:
    writers = invariants.writers_problem(line[: line.find(RECORD_PREFIX)] for _, line in lines
                                         if RECORD_PREFIX in line)
    if writers:
        raise LogFormatError(source, writers)
    drafts: list[_Draft] = []
    prelude: list[tuple[int, str]] = []
    texts = dict(lines)
    for number, record in iter_records(lines, source):
        if record is None:
            (drafts[-1].lines if drafts else prelude).append((number, texts[number]))
            continue
        kind = record.pop("record")
        record.pop("schema")
        if kind == "header":
            drafts.append(_Draft(header=record, lines=[] if drafts else prelude, header_line=number))
            continue
        if kind not in ("epoch", "summary"):
            continue  # a record kind added after schema 1's parser: not ours to judge
        if not drafts and not _died_before_header(kind, record):
            raise LogFormatError(source, f"{kind} record before any header record", number)
        if not drafts:
            drafts.append(_Draft(header=run_identity(source), lines=prelude))
        _add_record(drafts[-1], kind, record, source, number)
    if not drafts:
        raise LogFormatError(source, "':::SCALESWEEP' records but no header record")
    overlap = invariants.overlapping_runs([(draft.header, draft.epochs) for draft in drafts])
    if overlap:
        first, second = (drafts[index] for index in overlap)
        message = (f"the runs of the header records on lines {first.header_line} and "
                   f"{second.header_line} ran at the same time (start_time "
                   f"{records.shown(first.header.get('start_time'))} and "
                   f"{records.shown(second.header.get('start_time'))}): one run printed by two "
                   "processes, or two jobs writing one log; one writer per log")
        raise LogFormatError(source, message, second.header_line)
    return [_finish_scalesweep(draft, source, world_size) for draft in drafts]


def _died_before_header(kind: str, record: dict) -> bool:
    """A failure summary with no header before it: the trainer died before it could say what it
    ran (reading its data, building its model); the harness still closes the log."""
    return kind == "summary" and record.get("status") in STATUSES and record.get("status") != "ok"


def _load_record(payload: str, source, number) -> dict:
    try:
        record = _RECORD_DECODER.decode(payload)
    except RecursionError:
        raise LogFormatError(source, f"corrupt {RECORD_PREFIX} record: nested too deeply", number) from None
    except ValueError as error:  # bad JSON, a duplicate key, an integer of over 4,300 digits
        raise LogFormatError(source, f"corrupt {RECORD_PREFIX} record: {error}", number) from None
    if not isinstance(record, dict) or not isinstance(record.get("record"), str):
        raise LogFormatError(
            source, f"{RECORD_PREFIX} record is not an object with a 'record' kind", number
        )
    brackets = payload.count("[") + payload.count("{")  # a bound on the depth, at C speed
    if brackets > records.MAX_DEPTH and records.depth(record) > records.MAX_DEPTH:
        message = f"{RECORD_PREFIX} record nested deeper than {records.MAX_DEPTH} levels"
        raise LogFormatError(source, message, number)
    schema = record.get("schema")
    if not records.is_integer(schema) or schema != SCHEMA:
        message = f"record schema {records.shown(schema)}, this parser reads schema {SCHEMA}"
        raise LogFormatError(source, message, number)
    return record


def _object_without_duplicate_keys(pairs) -> dict:
    # With a repeated key json keeps the last value: `"seconds": 8.0, "seconds": -5` would read as
    # a valid-looking -5 (or 8) depending on the order a writer happened to use.
    record = dict(pairs)
    if len(record) < len(pairs):
        seen = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"key {records.shown(repeated)} appears twice in one object")
    return record


_RECORD_DECODER = json.JSONDecoder(object_pairs_hook=_object_without_duplicate_keys)


def _add_record(draft: _Draft, kind: str, record: dict, source, number) -> None:
    if draft.summary is not None:
        raise LogFormatError(source, f"{kind} record after the summary record", number)
    if kind == "summary":
        if record.get("status") not in STATUSES:
            status = records.shown(record.get("status"))
            message = f"summary status {status} is not one of {', '.join(STATUSES)}"
            raise LogFormatError(source, message, number)
        draft.summary = _keep_valid(draft, "summary", record, f"{source}:{number}: summary record")
        return
    epoch = record.get("epoch")
    if not records.is_count(epoch):
        message = f"epoch record needs a 1-based integer 'epoch' (at most 2**53), got {records.shown(epoch)}"
        raise LogFormatError(source, message, number)
    if any(seen["epoch"] == epoch for seen in draft.epochs):
        raise LogFormatError(source, f"epoch {epoch} recorded twice in one run", number)
    draft.epochs.append(_keep_valid(draft, "epoch", record, f"{source}:{number}: epoch {epoch} record"))


def _keep_valid(draft: _Draft, kind: str, record: dict, where: str, required: bool = True) -> dict:
    """`record` without the keys that break the contract; each of those a problem of the run."""
    found = records.problems(kind, record, required=required)
    draft.problems.extend(f"{where}: {message}" for _, message in found)
    return records.drop_bad_keys(record, found)


def _finish_scalesweep(draft: _Draft, source, world_size) -> ParsedRun:
    if records.is_count(world_size):
        draft.header.setdefault("world_size", world_size)
    if _failed_by_trainer(draft):
        # The trainer's own verdict is the reason; a header with nothing to measure (0 images
        # per epoch: too few images for one step) is its symptom, not a broken log.
        found = records.problems("header", draft.header, required=bool(draft.header_line))
        draft.header = records.drop_bad_keys(draft.header, found)
    else:
        where = f"{source}:{draft.header_line}: header record"
        draft.header = _keep_valid(draft, "header", draft.header, where)
    summary = draft.summary
    if draft.problems:
        summary = refused_summary(draft.problems, len(draft.epochs))
    elif summary is None:
        summary = _unfinished_summary(draft, TRUNCATED_REASON)
    else:
        asked = draft.header.get("epochs")
        if summary["status"] == "ok" and isinstance(asked, int) and len(draft.epochs) < asked:
            reason = f"summary says ok but only {len(draft.epochs)} of {asked} epoch records were logged"
            summary = {**summary, "status": "failed", "reason": reason}
    return ParsedRun("scalesweep", source, draft.header, draft.epochs, summary, draft.problems)


def _failed_by_trainer(draft: _Draft) -> bool:
    return draft.summary is not None and draft.summary["status"] != "ok"


def refused_summary(problems: list[str], epochs: int) -> dict:
    """The verdict on a run whose log breaks the contract: failed, the first problem the reason."""
    more = len(problems) - 1
    reason = problems[0] + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
    return {"status": "failed", "reason": one_line(reason), "epochs": epochs}


def _checked(run: ParsedRun) -> ParsedRun:
    """A run parsed from a human-format log, checked against the same record contract.

    Those logs print no value per line in one place, so problems name the epoch instead; no key is
    required, since the reference scripts do not print everything a record holds.
    """
    draft = _Draft()
    run.header = _keep_valid(draft, "header", run.header, f"{run.source}: header", required=False)
    run.epochs = [
        _keep_valid(draft, "epoch", epoch, f"{run.source}: epoch {epoch.get('epoch')}", required=False)
        for epoch in run.epochs
    ]
    summary = _keep_valid(draft, "summary", run.summary, f"{run.source}: summary", required=False)
    if draft.problems:
        summary = refused_summary(draft.problems, len(run.epochs))
    run.summary, run.problems = summary, draft.problems
    return run


# ---------------------------------------------------------------------------------------------
# TensorFlow reference script: header block + Keras verbose=2 epoch lines

_KERAS_HEADER_RE = re.compile(rf"^\s*Model\s+(?P<model>\S+)\s+(?P<gpus>{_N})\s+GPUs?\s*$")
_KERAS_BATCH_RE = re.compile(rf"^\s*Batch_size\s*:\s*({_N})\s*$", re.IGNORECASE)
_KERAS_REPLICAS_RE = re.compile(rf"^\s*Num_replicas\s*:\s*({_N})\s*$", re.IGNORECASE)
_KERAS_EPOCH_RE = re.compile(rf"^\s*Epoch\s+({_N})\s*/\s*({_N})\s*$")
# `13/13 - 9s - <fields>`: Keras prints the elapsed time as whole seconds (`%.0fs`).
_KERAS_PROGRESS_RE = re.compile(
    rf"(?:^|\s)(?P<step>{_N})/(?P<steps>{_N}) - (?P<elapsed>\d+(?:\.\d+)?(?:s|ms|us)) *(?P<rest>(?:- .*)?)$"
)
_EPOCH_TIME_RE = re.compile(r"(?:^|- )\d+(?:\.\d+)?(?:s|ms|us)/epoch\b")
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(s|ms|us)(?:/(epoch|step|sample))?$")
_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_KERAS_METRICS = {
    "loss": "loss",
    "accuracy": "accuracy",
    "acc": "accuracy",
    "val_loss": "val_loss",
    "val_accuracy": "val_accuracy",
    "val_acc": "val_accuracy",
}


def _parse_keras(lines, source, fmt, world_size, images_per_epoch=None) -> list[ParsedRun]:
    drafts: list[_Draft] = []
    prelude: list[tuple[int, str]] = []
    pending_epoch = None  # the number of an `Epoch k/E` line still waiting for its progress line
    for number, line in lines:
        header = _KERAS_HEADER_RE.match(line)
        if header:
            drafts.append(_Draft(header=_keras_header(header), lines=[] if drafts else prelude))
            pending_epoch = None
            continue
        (drafts[-1].lines if drafts else prelude).append((number, line))
        if _KERAS_BATCH_RE.match(line) and drafts:
            drafts[-1].header["global_batch"] = int(_KERAS_BATCH_RE.match(line).group(1))
        elif _KERAS_REPLICAS_RE.match(line) and drafts:
            drafts[-1].header["world_size"] = int(_KERAS_REPLICAS_RE.match(line).group(1))
        elif _KERAS_EPOCH_RE.match(line):
            if not drafts:  # epoch lines without the script's header: still a run, less known
                drafts.append(_Draft(header={"framework": "tensorflow"}, lines=prelude))
            pending_epoch = _keras_epoch_line(drafts[-1], _KERAS_EPOCH_RE.match(line), source, number)
        elif _KERAS_PROGRESS_RE.search(line) and drafts:
            draft = drafts[-1]
            # Keras prints no `Epoch 1/1` line for a one-epoch fit; any other progress line with
            # no epoch waiting is model.evaluate() output, not training.
            first_of_one = pending_epoch is None and not draft.epochs and "epochs" not in draft.header
            if pending_epoch is None and not first_of_one:
                continue
            if first_of_one:
                draft.header["epochs"] = 1
            draft.epochs.append(_keras_epoch(pending_epoch or 1, _KERAS_PROGRESS_RE.search(line)))
            pending_epoch = None
    return [_finish_keras(draft, source, fmt, world_size, images_per_epoch) for draft in drafts]


def _keras_header(match) -> dict:
    return {
        "framework": "tensorflow",
        "model": catalog_model(match.group("model"), "tensorflow"),
        "gpus": int(match.group("gpus")),
        "protocol": "epochs",
    }


def _keras_epoch_line(draft: _Draft, match, source, number) -> int:
    epoch, asked = int(match.group(1)), int(match.group(2))
    if any(seen["epoch"] == epoch for seen in draft.epochs):
        message = f"'Epoch {epoch}/{asked}' appears twice in one run (one header block per run expected)"
        raise LogFormatError(source, message, number)
    draft.header.setdefault("epochs", asked)
    return epoch


def _keras_epoch(epoch: int, match) -> dict:
    """An epoch from a Keras progress line; images and throughput are filled in by _finish_keras."""
    steps = int(match.group("steps"))
    fields = [token.strip() for token in match.group("rest")[1:].split(" - ") if token.strip()]
    times = {}
    metrics = {}
    for token in fields:
        duration = _DURATION_RE.match(token)
        if duration and duration.group(3):
            times[duration.group(3)] = _duration(duration)
        elif ":" in token:
            name, _, value = token.partition(":")
            if name.strip() in _KERAS_METRICS:
                metrics[_KERAS_METRICS[name.strip()]] = _metric(value)
    elapsed = _duration(_DURATION_RE.match(match.group("elapsed")))
    return {
        "epoch": epoch,
        "steps": steps,
        "images": None,
        "seconds": _keras_epoch_seconds(elapsed, times, steps),
        "throughput_img_s": None,
        "loss": metrics.pop("loss", None),
        "accuracy": metrics.pop("accuracy", None),
        **metrics,
    }


def _duration(match) -> tuple[float, float]:
    """(seconds, half the printed unit): Keras rounds every duration with `%.0f`."""
    unit = _UNIT_SECONDS[match.group(2)]
    return float(match.group(1)) * unit, 0.5 * unit


def _keras_epoch_seconds(elapsed, times: dict, steps: int) -> float:
    """The most precise epoch time a Keras line gives, of (seconds, resolution) candidates.

    Keras 2 prints `9s/epoch - 712ms/step` where the step time is the epoch time divided by the
    steps, so steps x 712 ms (+-6.5 ms for 13 steps) beats the whole-second epoch field. Keras 3
    prints no epoch field and its elapsed time in whole seconds (`0s` for a short epoch); its
    step time is the mean of steps 2..n, so steps x it counts the first step as an average one,
    still far closer than +-0.5 s unless the step time itself is in whole seconds.
    """
    candidates = [elapsed]
    if "epoch" in times:
        candidates.insert(0, times["epoch"])
    if "step" in times:
        seconds, resolution = times["step"]
        candidates.insert(1, (seconds * steps, resolution * steps))
    best = min(candidates, key=lambda candidate: candidate[1])
    return round(best[0], 6)


def _finish_keras(draft: _Draft, source, fmt, world_size, images_per_epoch=None) -> ParsedRun:
    header = draft.header
    if "world_size" not in header:
        # 0 GPUs is the CPU baseline: its replica count is unknown unless Num_replicas says.
        replicas = header.get("gpus") or world_size
        if replicas:
            header["world_size"] = replicas
    global_batch, replicas = header.get("global_batch"), header.get("world_size")
    if global_batch and replicas and global_batch % replicas == 0:
        # An uneven split (TF allows one) has no per-GPU batch: a fraction is no batch size.
        header["per_gpu_batch"] = global_batch // replicas
    steps = [epoch.pop("steps") for epoch in draft.epochs]
    images, images_source = keras_epoch_images(steps, global_batch, images_per_epoch, source)
    for epoch in draft.epochs:
        epoch["images"] = images
        epoch["throughput_img_s"] = _rate(images, epoch["seconds"])
    if draft.epochs and images:
        header["images_per_epoch"] = images
    asked = header.get("epochs")
    if asked is not None and len(draft.epochs) >= asked:
        summary = _finished_summary(draft.epochs)
    else:
        why = f"log ends after {len(draft.epochs)} of {asked or '?'} epochs ({UNFINISHED_CAUSES})"
        summary = _unfinished_summary(draft, why)
    return ParsedRun(fmt, source, header, draft.epochs, summary, images_source=images_source)


def keras_epoch_images(steps: list[int], global_batch, dataset_images, source) -> tuple[int | None, str]:
    """(images of one epoch, IMAGE_SOURCES entry) of a Keras run from its epochs' step counts.

    Keras counts the last, partial batch as a whole step, so steps x global batch only bounds the
    images from above (53,248 for CIFAR-10's 50,000 at 13 x 4096) and differs between GPU counts
    for the same dataset. The dataset's size is the count: `dataset_images` when given, else
    CIFAR-10's 50,000, what the reference script trains on, when the steps agree with it. Given
    images that the steps contradict are an error naming the log.
    """
    if not global_batch or not steps:
        return None, "estimate"
    if dataset_images is not None:
        expected = -(-dataset_images // global_batch)  # Keras' steps, the last batch partial
        if any(count != expected for count in steps):
            raise LogFormatError(
                source,
                f"images per epoch {dataset_images} give {expected} steps of global batch "
                f"{global_batch}, the log shows {sorted(set(steps))}: wrong --images-per-epoch?",
            )
        return dataset_images, "dataset"
    if all(count == -(-CIFAR10_TRAIN_IMAGES // global_batch) for count in steps):
        return CIFAR10_TRAIN_IMAGES, "dataset"
    return max(steps) * global_batch, "estimate"


# ---------------------------------------------------------------------------------------------
# PyTorch DDP reference trainer: `[date] INFO - ` lines

_DDP_PREFIX_RE = re.compile(
    r"\[\d{1,2}/\d{1,2}/\d{4} \d{1,2}:\d{2}:\d{2}(?: ?[AP]M)?\]\s*"
    r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s*-\s?"
)
_DDP_ARG_RE = re.compile(r"^###\s*(?P<body>.+?)\s*$")
_DDP_EPOCH_RE = re.compile(rf"^\[EPOCH\s*:?\s*({_N})\s*\]\s*(.*)$", re.IGNORECASE)
_DDP_FINISHED_RE = re.compile(r"^Training finished", re.IGNORECASE)
_DDP_TOTAL_TIME_RE = re.compile(r"^Complete training time\s*:?\s*(.+)$", re.IGNORECASE)
_DDP_THROUGHPUT_RE = re.compile(r"^Training throughput\s*:?\s*([\d.]+)\s*imgs?/s", re.IGNORECASE)
_DDP_MEMORY_RE = re.compile(r"^GPU memory reserved\s*:?\s*([\d.]+)\s*([KMGT]i?B)?", re.IGNORECASE)
_DDP_EPOCH_FIELD_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<value>[-+\d.eE]+|nan|inf)"
)
# The reference prints `Accuracy` on its validation line, so a bare accuracy is a validation one.
_DDP_EPOCH_FIELDS = {
    "training throughput": "throughput_img_s",
    "train throughput": "throughput_img_s",
    "validation throughput": "val_throughput_img_s",
    "accuracy": "val_accuracy",
    "validation accuracy": "val_accuracy",
    "val accuracy": "val_accuracy",
    "training accuracy": "accuracy",
    "train accuracy": "accuracy",
    "loss": "loss",
    "training loss": "loss",
    "train loss": "loss",
    "validation loss": "val_loss",
}
_PRECISIONS = {"none": "fp32", "fp32": "fp32", "no": "fp32", "bf16": "bf16", "fp16": "fp16"}
_MEMORY_UNITS_GB = {"KB": 1 / 1024**2, "KIB": 1 / 1024**2, "MB": 1 / 1024, "MIB": 1 / 1024}


def _ddp_message(line: str) -> str:
    prefix = _DDP_PREFIX_RE.search(line)
    return (line[prefix.end():] if prefix else line).strip()


def _is_ddp_line(line: str) -> bool:
    message = _ddp_message(line)
    return bool(re.match(r"^###\s*model_name\b", message) or _DDP_EPOCH_RE.match(message))


def _parse_ddp(lines, source, world_size) -> ParsedRun:
    world = world_size if world_size is not None else gpus_from_filename(source)
    if world is None or world < 1:
        raise LogFormatError(
            source,
            "ddp-reference logs do not state the world size: pass world_size (from the manifest "
            "or the run's config) or name the file like vit_4gpus.log / ddp-n2-g8.out",
        )
    draft = _Draft(lines=list(lines))
    args: dict = {}
    epochs: dict[int, dict] = {}
    final: dict = {}
    for number, line in lines:
        message = _ddp_message(line)
        if _DDP_ARG_RE.match(message):
            key, value = _split_key_value(_DDP_ARG_RE.match(message).group("body"))
            args[key] = value
        elif _DDP_EPOCH_RE.match(message):
            match = _DDP_EPOCH_RE.match(message)
            _add_ddp_epoch_fields(epochs, int(match.group(1)), match.group(2), source, number)
        elif _DDP_FINISHED_RE.match(message):
            final["finished"] = True
        elif _DDP_TOTAL_TIME_RE.match(message):
            final["total_time_s"] = parse_duration(_DDP_TOTAL_TIME_RE.match(message).group(1))
        elif _DDP_THROUGHPUT_RE.match(message):
            final["throughput_img_s"] = _number(_DDP_THROUGHPUT_RE.match(message).group(1))
        elif _DDP_MEMORY_RE.match(message):
            match = _DDP_MEMORY_RE.match(message)
            # The reference prints its own GB figure; kept as printed unless the unit says MB/KB.
            to_gb = _MEMORY_UNITS_GB.get((match.group(2) or "").upper(), 1.0)
            memory = _number(match.group(1))  # `[\d.]+` also matches `1.2.3`
            final["memory_gb"] = None if memory is None else memory * to_gb
    draft.header = _ddp_header(args, world)
    draft.epochs = _ddp_epochs(epochs, draft.header.get("images_per_epoch"))
    return ParsedRun("ddp-reference", source, draft.header, draft.epochs, _ddp_summary(draft, final))


def _split_key_value(body: str) -> tuple[str, str]:
    """`model_name: vit` and `Total number of parameters 631021000` alike -> (key, value)."""
    if ":" in body:
        key, _, value = body.partition(":")
    else:
        key, _, value = body.rpartition(" ")
    key = re.sub(r"\(.*?\)", "", key)
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_"), value.strip()


def _add_ddp_epoch_fields(epochs: dict, epoch: int, body: str, source, number) -> None:
    fields = {}
    for part in body.split("|"):
        match = _DDP_EPOCH_FIELD_RE.match(part)
        name = " ".join(match.group("name").lower().split()) if match else None
        if name in _DDP_EPOCH_FIELDS:
            target = _DDP_EPOCH_FIELDS[name]
            # A diverged loss prints `nan`: no metric, as the record writer has it; a throughput
            # keeps its value, for the record contract to refuse.
            read = _number if "throughput" in target else _metric
            fields[target] = read(match.group("value"))
    entry = epochs.setdefault(epoch, {})
    if "throughput_img_s" in fields and "throughput_img_s" in entry:
        message = f"epoch {epoch} reports its training throughput twice (one run per file expected)"
        raise LogFormatError(source, message, number)
    entry.update(fields)


def _ddp_header(args: dict, world: int) -> dict:
    header = {
        "framework": "pytorch",
        "world_size": world,
        "protocol": "epochs",
        "reference_args": dict(args),
    }
    if "model_name" in args:
        header["model"] = catalog_model(args["model_name"], "pytorch")
    if "dataset" in args:
        header["dataset"] = os.path.basename(args["dataset"].rstrip("/")) or args["dataset"]
    renamed = (("batch_size", "per_gpu_batch"), ("num_epochs", "epochs"), ("resolution", "resolution"))
    for key, target in renamed:
        value = _integer(args.get(key))
        if value is not None:
            header[target] = value
    if "per_gpu_batch" in header:
        header["global_batch"] = header["per_gpu_batch"] * world
    if "mixed_precision" in args:
        header["precision"] = _PRECISIONS.get(args["mixed_precision"].lower(), args["mixed_precision"])
    parameters = _integer(args.get("total_number_of_parameters"))
    if parameters is not None:
        header["parameters"] = parameters
    samples = args.get("total_training_samples", "").replace(",", "")
    counts = [int(number) for number in re.findall(rf"(?<!\d){_N}(?!\d)", samples)]
    if counts:
        # `Total training samples (batches)` counts one rank's share (the DistributedSampler's).
        header["samples_per_rank"] = counts[0]
        header["images_per_epoch"] = counts[0] * world
        if len(counts) > 1:
            header["batches_per_rank"] = counts[1]
    return header


def _ddp_epochs(epochs: dict, images_per_epoch) -> list[dict]:
    """Epochs that finished training (reported a throughput), images = samples per rank x world."""
    finished = []
    for number in sorted(epochs):
        entry = epochs[number]
        if "throughput_img_s" not in entry:
            continue
        throughput = entry.pop("throughput_img_s")
        seconds = images_per_epoch / throughput if images_per_epoch and throughput else None
        # Throughput before seconds: it is what the log printed, the seconds follow from it, and
        # the record check reports a bad value's keys in this order.
        finished.append(
            {
                "epoch": number,
                "images": images_per_epoch,
                "throughput_img_s": throughput,
                "seconds": seconds,
                "loss": entry.pop("loss", None),
                "accuracy": entry.pop("accuracy", None),
                **entry,
            }
        )
    return finished


def _ddp_summary(draft: _Draft, final: dict) -> dict:
    done, asked = len(draft.epochs), draft.header.get("epochs")
    if not final.get("finished"):
        why = f"log ends before 'Training finished!' after {done} of {asked or '?'} epochs"
        return _unfinished_summary(draft, f"{why} ({UNFINISHED_CAUSES})")
    if asked is not None and done < asked:
        return {
            "status": "failed",
            "reason": f"'Training finished!' but only {done} of {asked} epochs reported a throughput",
            "epochs": done,
        }
    return _finished_summary(
        draft.epochs,
        total_time_s=final.get("total_time_s"),
        throughput_img_s=final.get("throughput_img_s"),
        memory_gb=final.get("memory_gb"),
    )


# ---------------------------------------------------------------------------------------------
# Small value helpers


def catalog_model(name: str, framework: str) -> str:
    """A reference log's model name as the catalog spells it (`ResNet50` -> `resnet50v2`)."""
    lowered = name.strip().lower()
    alias = MODEL_ALIASES.get(framework, {}).get(lowered)
    if alias:
        return alias
    known = MODELS.get(framework, ())
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
    clock = re.match(rf"^({_N}):(\d{{2}}):(\d{{2}}(?:\.\d+)?)$", text)
    if clock:
        hours, minutes, seconds = clock.groups()
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    parts = _DURATION_PART_RE.findall(text)
    if not parts:
        return None
    return sum(float(value) * _DURATION_UNITS.get(unit.lower(), 1.0) for value, unit in parts)


def _number(text) -> float | None:
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def _metric(text) -> float | None:
    value = _number(text)
    return value if value is not None and math.isfinite(value) else None


def _integer(text) -> int | None:
    if text is None:
        return None
    cleaned = str(text).strip().replace(",", "").replace("_", "")
    return int(cleaned) if re.fullmatch(_N, cleaned) else None


def _rate(images, seconds) -> float | None:
    return images / seconds if images and seconds and seconds > 0 else None
