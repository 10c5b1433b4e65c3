"""Every on-disk path of a sweep, spelled once.

The rules, the package and the scripts build the paths they read and write from here, so a
folder renamed or a file added is one edit (tests/test_contract_layout.py: no results/, logs/ or
resources/ path literal elsewhere). Paths are relative to the workflow's directory (Snakemake's
`--directory`), as strings: Snakemake's outputs are strings; `in_results` moves one below another
results folder (the one `analyze --out` names).

Standard library only (Python 3.8): scalesweep/train/attempt.py imports it on the machine that runs
a job, inside the course's containers too.
"""

from __future__ import annotations

import posixpath
import re

RESULTS = "results"
LOGS = "logs"
RESOURCES = "resources"

# results/: what a sweep measured and what the analysis made of it.
RUNS = f"{RESULTS}/runs"
MAX_BATCH_RUNS = f"{RESULTS}/max_batch"
TIDY = f"{RESULTS}/tidy"
TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
# Each figure of the figures stage is written in both: a PNG for slides and a quick look, an SVG
# for print and zoom (vector, its text searchable); the report offers both (docs/outputs.md).
FIGURE_FORMATS = ("png", "svg")
# `scalesweep analyze` has no report to embed the SVG in: it writes the PNG unless asked for both
# (--svg). An SVG is a second draw of the whole figure, a third of the command's drawing time.
ANALYZE_FIGURE_FORMATS = ("png",)
# A figure's file name with wildcards (the report's pattern): {name} the figure, {suffix} the format.
FIGURE_FILE_PATTERN = "{name}.{suffix,%s}" % "|".join(FIGURE_FORMATS)
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
# Local images' digests, kept apart from the pulled images' so the two rules never claim one file.
LOCAL_IMAGE_DIGESTS = f"{CONTAINERS}/local"

DIGEST_SUFFIX = ".sha256"  # sha256sum's format
RESULT_LOG = "train.log"
MAX_BATCH_LOG = "max_batch.log"
ATTEMPT_SUFFIX = ".attempt-{number}.log"
_ATTEMPT_MARK, LOG_SUFFIX = ATTEMPT_SUFFIX.split("{number}")
# The stem (the name less its extension) of a numbered attempt: the run's name and the number.
ATTEMPT_STEM = re.compile(rf"^(?P<run>.+){re.escape(_ATTEMPT_MARK)}(?P<number>\d+)$")
_RULE_LOG_END = re.compile(rf"(?:{re.escape(_ATTEMPT_MARK)}\d+)?{re.escape(LOG_SUFFIX)}$")

# A run's place below runs/, logs/train/, ...: the core axes, then one /key~value folder per
# setting the run measures away from its default (plan/matrix.py decides which).
AXIS_SEPARATOR = "~"
CORE_AXES = ("model", "dataset", "gpus")
# model~{model}/dataset~{dataset}/gpus~{gpus}{settings}
RUN_PATTERN = "/".join(f"{axis}{AXIS_SEPARATOR}{{{axis}}}" for axis in CORE_AXES) + "{settings}"
# The settings wildcard: empty (every setting at its default), or /key~value per setting.
SETTINGS_WILDCARD = f"(/[^/{AXIS_SEPARATOR}]+{AXIS_SEPARATOR}[^/]+)*"


def under(root: str, path: str) -> str:
    """`path` (one of this module's) below another workflow directory `root` ('' or '.': here)."""
    return path if root in ("", ".") else posixpath.join(str(root), path)


def in_results(results_dir, path: str) -> str:
    """`path` (one of this module's below results/) in another results folder, such as the one
    `analyze --out` names: in_results("out", TIDY) is out/tidy."""
    return posixpath.join(str(results_dir), posixpath.relpath(path, RESULTS))


def results_folder_of(tidy_table_path) -> str:
    """The results folder a tidy table (tidy_table's, or moved by in_results) lies in."""
    folder = str(tidy_table_path)
    for _ in posixpath.relpath(tidy_table("runs"), RESULTS).split("/"):
        folder = posixpath.dirname(folder)
    return folder


def setting_segment(key: str, value: str) -> str:
    """The folder level of a setting measured away from its default: /key~value."""
    return f"/{key}{AXIS_SEPARATOR}{value}"


def run_path(framework: str, model: str, dataset: str, gpus, settings: str = "") -> str:
    """<framework>/model~M/dataset~D/gpus~N then `settings` (setting_segment's, joined); called
    with wildcard text ("{model}", ...) it is the rules' pattern."""
    return f"{framework}/" + RUN_PATTERN.format(model=model, dataset=dataset, gpus=gpus, settings=settings)


def run_result(run_path: str) -> str:
    """A finished run's log: the attempt that succeeded, published whole."""
    return f"{RUNS}/{run_path}/{RESULT_LOG}"


def max_batch_result(run_path: str) -> str:
    return f"{MAX_BATCH_RUNS}/{run_path}/{MAX_BATCH_LOG}"


def attempt_log(stage: str, run_path: str) -> str:
    """The rule's log of a run (`stage`: train or max_batch): a link to its latest attempt."""
    return f"{LOGS}/{stage}/{run_path}{LOG_SUFFIX}"


def numbered_attempt(log: str, number: int) -> str:
    """Attempt `number` of the rule's log `log`: <run>.attempt-N.log beside it."""
    stem = log[: -len(LOG_SUFFIX)] if log.endswith(LOG_SUFFIX) else log
    return stem + ATTEMPT_SUFFIX.format(number=number)


def log_run_name(file_name: str) -> str:
    """The run a rule's log or one of its attempts names: gpus~4 of gpus~4.log and
    gpus~4.attempt-2.log (a name that is neither is returned as it is)."""
    return _RULE_LOG_END.sub("", file_name)


def csv_name(name: str) -> str:
    """A table's file name, in whichever folder it is written (analyze --out's too)."""
    return f"{name}.csv"


def tidy_table(name: str) -> str:
    """results/tidy/<name>.csv: runs or epochs."""
    return f"{TIDY}/{csv_name(name)}"


def table(name: str) -> str:
    """results/tables/<name>.csv (archived.json is `archived_marker()`)."""
    return f"{TABLES}/{csv_name(name)}"


def nccl_tests_output(network_csv: str) -> str:
    """<network.csv>.all_reduce_perf.txt: nccl-tests' table beside the probe's row, kept (what it
    measured is not lost when merging fails)."""
    return f"{network_csv}.all_reduce_perf.txt"


def results_table(results_dir: str, name: str) -> str:
    """<results_dir>/tables/<name>.csv: a table of any results folder (a sweep's results/, or the
    folder `analyze --out` names, which holds tables/ directly)."""
    return posixpath.join(results_dir, posixpath.relpath(table(name), RESULTS))


def archived_marker() -> str:
    """The file naming where the history rule archived this sweep."""
    return f"{TABLES}/archived.json"


def figure_names(name: str, formats=FIGURE_FORMATS) -> list:
    """The file names of one figure, one per format (FIGURE_FORMATS: the figures stage's), in
    whichever folder it is written."""
    return [f"{name}.{suffix}" for suffix in formats]


def trace_dir(run_path: str) -> str:
    return f"{TRACES}/{run_path}"


# In a trace folder: the summaries scalesweep/logs/traces.py writes beside the profilers' files
# (rank<R>.pt.trace.json of scalesweep/train/torch_backend/trace.py,
# plugins/profile/<run>/<host>.xplane.pb of scalesweep/train/tf_backend/trace.py).
TRACE_SUMMARY_JSON = "summary.json"
TRACE_SUMMARY_MD = "summary.md"


def trace_summaries(trace_folder: str) -> list[str]:
    """The summary files of a trace folder: JSON, then Markdown."""
    return [f"{trace_folder}/{TRACE_SUMMARY_JSON}", f"{trace_folder}/{TRACE_SUMMARY_MD}"]


# The files of a trace folder the report shows, as its pattern: the summary and each trace file.
TRACE_REPORT_PATTERN = (
    r"{file,summary\.md|rank\d+\.pt\.trace\.json|plugins/profile/[^/]+/[^/]+\.xplane\.pb}"
)


def dataset_dir(dataset_format: str, name: str) -> str:
    """A generated dataset's folder."""
    return f"{DATASETS}/{dataset_format}/{name}"


def pulled_image(name: str) -> str:
    """The SIF a remote image is pulled to (`name`: plan/containers.py's file-safe image name)."""
    return f"{CONTAINERS}/{name}.sif"


def pulled_image_digest(name: str) -> str:
    """The digest file of a pulled image, beside its SIF."""
    return pulled_image(name) + DIGEST_SUFFIX


def local_image_digest(name: str) -> str:
    """The digest file of a local image, which is run where it is."""
    return f"{LOCAL_IMAGE_DIGESTS}/{name}{DIGEST_SUFFIX}"


def comparison_file(name: str) -> str:
    """One of the compare rule's files (history/sides.py: COMPARE_OUTPUTS)."""
    return f"{COMPARE}/{name}"


def rule_log(*parts: str) -> str:
    """logs/<part>/.../<last>.log: a rule's own log (tables, figures, data/cifar10/<name>, ...)."""
    return f"{LOGS}/{'/'.join(parts)}{LOG_SUFFIX}"
