"""Why a run ended without a summary of its own: failure signatures (out of memory, time limit,
node failure, cancellation) and the last Python exception in a log, as one-line reasons."""

from __future__ import annotations

import re


UNFINISHED_CAUSES = "run killed, timed out or crashed?"
TRUNCATED_REASON = f"log ends before the summary record ({UNFINISHED_CAUSES})"
REASON_LIMIT = 300
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


def unfinished_summary(lines, epochs: int, why: str) -> dict:
    """Summary of a run whose log (numbered `lines`, `epochs` epochs read) stops early: the
    failure signature if any, else `why`."""
    failure = failure_from_signatures(lines)
    if failure is not None:
        status, reason = failure
    else:
        # The trainer's exception is the cause; "the log ends early" only its consequence.
        status, reason = "failed", last_exception(lines) or why
    return {"status": status, "reason": one_line(reason), "epochs": epochs}
