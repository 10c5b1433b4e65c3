"""Training logs -> runs in one structure, whatever printed them.

The format is detected from the text, never configured; each has its own module, so a new
format is a new file and a line in `detect_format`/`parse_log`:

- `scalesweep` (formats/scalesweep.py): our `:::SCALESWEEP {json}` records (docs/records.md);
- `tf-reference-keras2` / `tf-keras3` (formats/keras.py): the reference TensorFlow script's
  Keras epoch lines (docs/metrics.md);
- `ddp-reference` (formats/ddp.py): the reference PyTorch DDP trainer's INFO lines;
- `unknown`: no training lines at all, but a failure signature (failures.py: a job killed at its
  time limit before printing anything) or a Python exception (a trainer that died on import) - a
  failed run, not an unreadable log, named by its path when that is a workflow log
  (run.run_identity).

Every run comes out as a `ParsedRun` (logs/run.py) keyed like docs/records.md and checked against
the record contract (scalesweep/contract/records.py), whatever its format. A run that did not finish is a run with
status failed / oom / timeout and a one-line reason, never numbers that look valid; so is a run
whose log holds a value the contract does not allow (its reason names the log, line and key).
"""

from __future__ import annotations

import codecs
from pathlib import Path

from scalesweep.contract.input_files import not_a_file
from scalesweep.contract.records import RECORD_PREFIX
from scalesweep.logs import invariants
from scalesweep.logs.failures import failure_from_signatures, last_exception, one_line
from scalesweep.logs.formats.ddp import FORMAT as DDP_FORMAT, is_ddp_line, parse_ddp
from scalesweep.logs.formats.keras import (
    EPOCH_TIME_RE,
    KERAS_EPOCH_RE,
    KERAS_HEADER_RE,
    KERAS_PROGRESS_RE,
    parse_keras,
)
from scalesweep.logs.formats.scalesweep import parse_scalesweep
from scalesweep.logs.run import (
    EmptyLogError,
    LogFormatError,
    ParsedRun,
    UNIDENTIFIED,
    checked,
    refused_summary,
    run_identity,
)


def parse_file(path, world_size: int | None = None, images_per_epoch: int | None = None) -> list[ParsedRun]:
    """Parse a log file; `world_size` is needed only for ddp-reference logs whose name lacks it,
    `images_per_epoch` (the dataset's training images) only for Keras logs, which count steps."""
    kind = not_a_file(path)
    if kind:
        raise LogFormatError(path, f"{kind}, not a log file: not read")
    return parse_regular_file(path, world_size, images_per_epoch)


def parse_regular_file(path, world_size: int | None = None, images_per_epoch: int | None = None,
                       ) -> list[ParsedRun]:
    """parse_file of a path its caller found to be a regular file (a named pipe would block the
    read): one look at it fewer, which on a parallel file system is a call to its metadata
    server for every log of a sweep."""
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
    if b"\0" not in sample:  # every log UTF-8 writes: no pair to count
        return None
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
        return [_consistent(run) for run in parse_scalesweep(lines, source, world_size)]
    if fmt == DDP_FORMAT:
        return [_consistent(checked(parse_ddp(lines, source, world_size)))]
    if fmt in ("tf-reference-keras2", "tf-keras3"):
        runs = parse_keras(lines, source, fmt, world_size, images_per_epoch)
        return [_consistent(checked(run)) for run in runs]
    return [_unknown_format_run(lines, source)]


def _consistent(run: ParsedRun) -> ParsedRun:
    """An ok run whose records contradict each other (scalesweep/logs/invariants.py) is failed, the
    first contradiction its reason. A run failed already keeps its reason: the trainer's verdict,
    or the value that broke the contract."""
    if run.problems or run.summary.get("status") != "ok":
        return run
    run.problems = [f"{run.source}: {problem}" for problem in
                    invariants.run_problems(run.header, run.epochs, run.summary,
                                            seconds_measured=run.format != DDP_FORMAT)]
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


def detect_format(lines) -> str | None:
    """The format of numbered log lines, or None; our records win over anything printed beside them."""
    if any(RECORD_PREFIX in line for _, line in lines):
        return "scalesweep"
    if any(is_ddp_line(line) for _, line in lines):
        return DDP_FORMAT
    if not any(KERAS_HEADER_RE.match(line) or KERAS_EPOCH_RE.match(line) for _, line in lines):
        return None
    # Keras 2 closes an epoch line with `- 9s/epoch - 712ms/step`; Keras 3 has no s/epoch field.
    # A log cut before its first epoch line cannot tell: the reference script is the Keras 2 one.
    progress = [KERAS_PROGRESS_RE.search(line) for _, line in lines]
    progress = [match for match in progress if match]
    if progress and not any(EPOCH_TIME_RE.search(match.group("rest")) for match in progress):
        return "tf-keras3"
    return "tf-reference-keras2"
