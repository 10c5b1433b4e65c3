"""Every on-disk path of a sweep, spelled once.

The rules, the package and the scripts build the paths they read and write from here, so a
folder renamed or a file added is one edit (tests/test_layout.py: no results/, logs/ or
resources/ path literal elsewhere). Paths are relative to the workflow's directory (Snakemake's
`--directory`, the folder `analyze --out` names), as strings: Snakemake's outputs are strings.

Standard library only (Python 3.8): scripts/run_attempt.py imports it on the machine that runs a
job, inside the course's containers too.
"""

from __future__ import annotations

import posixpath

RESULTS = "results"
LOGS = "logs"
RESOURCES = "resources"

# results/: what a sweep measured and what the analysis made of it.
RUNS = f"{RESULTS}/runs"
MAX_BATCH_RUNS = f"{RESULTS}/max_batch"
TIDY = f"{RESULTS}/tidy"
TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
TRACES = f"{RESULTS}/traces"
COMPARE = f"{RESULTS}/compare"
FINDINGS = f"{RESULTS}/findings.md"
HISTORY_FIGURE = f"{RESULTS}/throughput_history.png"
DEFAULT_HISTORY = f"{RESULTS}/history"
# Written by the failure path beside the tidy tables it wrote outside Snakemake's bookkeeping: an
# input of the tidy rule, so the next invocation tidies the current matrix's runs again.
WRITTEN_AFTER_FAILURE = f"{TIDY}/written_after_failure.json"

# resources/: inputs the workflow can make again (generated datasets, pulled images).
DATASETS = f"{RESOURCES}/datasets"
CONTAINERS = f"{RESOURCES}/containers"

RESULT_LOG = "train.log"
MAX_BATCH_LOG = "max_batch.log"
ATTEMPT_SUFFIX = ".attempt-{number}.log"


def under(root: str, path: str) -> str:
    """`path` (one of this module's) below another workflow directory `root` ('' or '.': here)."""
    return path if root in ("", ".") else posixpath.join(str(root), path)


def run_result(run_path: str) -> str:
    """A finished run's log: the attempt that succeeded, published whole."""
    return f"{RUNS}/{run_path}/{RESULT_LOG}"


def max_batch_result(run_path: str) -> str:
    return f"{MAX_BATCH_RUNS}/{run_path}/{MAX_BATCH_LOG}"


def attempt_log(stage: str, run_path: str) -> str:
    """The rule's log of a run (`stage`: train or max_batch): a link to its latest attempt."""
    return f"{LOGS}/{stage}/{run_path}.log"


def numbered_attempt(log: str, number: int) -> str:
    """Attempt `number` of the rule's log `log`: <run>.attempt-N.log beside it."""
    stem = log[: -len(".log")] if log.endswith(".log") else log
    return stem + ATTEMPT_SUFFIX.format(number=number)


def tidy_table(name: str) -> str:
    """results/tidy/<name>.csv: runs or epochs."""
    return f"{TIDY}/{name}.csv"


def table(name: str) -> str:
    """results/tables/<name>.csv (archived.json is `archived_marker()`)."""
    return f"{TABLES}/{name}.csv"


def archived_marker() -> str:
    """The file naming where the history rule archived this sweep."""
    return f"{TABLES}/archived.json"


def trace_dir(run_path: str) -> str:
    return f"{TRACES}/{run_path}"


def dataset_dir(dataset_format: str, name: str) -> str:
    """A generated dataset's folder."""
    return f"{DATASETS}/{dataset_format}/{name}"


def rule_log(*parts: str) -> str:
    """logs/<part>/.../<last>.log: a rule's own log (tables, figures, data/cifar10/<name>, ...)."""
    return f"{LOGS}/{'/'.join(parts)}.log"
