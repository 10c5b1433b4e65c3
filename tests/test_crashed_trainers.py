"""A trainer that dies before or while starting (an import error under an older interpreter,
unreadable data, too few images for one step) is a failed run whose reason is its exception,
through `python -m scalesweep analyze` and through the workflow's tidy alike."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO
from scalesweep.logs.read import parse_file, parse_log
from scalesweep.logs.run import LogFormatError, UNIDENTIFIED, run_identity
from scalesweep.tidy import rows


def record(kind, **fields):
    return ":::SCALESWEEP " + json.dumps({"record": kind, "schema": 1, **fields})


SUBSCRIPT = "TypeError: 'type' object is not subscriptable"
# Python 3.8 running code written for 3.9+: the import of the harness fails, no record printed.
IMPORT_CRASH = f"""\
Traceback (most recent call last):
  File "/repo/scripts/train_tf.py", line 30, in <module>
    from scalesweep.train.common import harness
  File "/repo/scalesweep/train/common/harness.py", line 120, in <module>
    def subset(indices: list[int]) -> list[int]:
{SUBSCRIPT}
"""
# The same under torchrun: each rank's traceback, then torchrun's own, which only says a worker failed.
TORCHRUN_IMPORT_CRASH = "".join(f"[rank0]: {line}\n" for line in IMPORT_CRASH.splitlines()) + """\
E1124 09:00:00.000000 123 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: 1)
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/repo/scripts/train_torch.py FAILED
"""
CIFAR_ERROR = ("CifarFormatError: /data/cifar/data_batch_1: not a readable CIFAR-10 pickle "
               "(UnpicklingError: invalid load key, 'x'.)")
DATA_TRACEBACK = f"""\
Traceback (most recent call last):
  File "/repo/scalesweep/train/common/harness.py", line 213, in run
    backend.setup(args)
  File "/repo/scalesweep/train/datasets/cifar.py", line 72, in load_batch
    raise CifarFormatError(...)
scalesweep.train.datasets.cifar.{CIFAR_ERROR}
"""
HEADER = record("header", framework="tensorflow", model="resnet50v2", dataset="cifar128", gpus=2,
                world_size=2, per_gpu_batch=16, global_batch=32, epochs=2, protocol="epochs")
FAILED = record("summary", status="failed", reason=CIFAR_ERROR, epochs=0)
# The harness closes the log with a failure summary even when the header never got out.
DATA_CRASH_BEFORE_HEADER = DATA_TRACEBACK + FAILED + "\n"
DATA_CRASH_AFTER_HEADER = HEADER + "\n" + DATA_TRACEBACK + FAILED + "\n"
DATA_CRASH_WITHOUT_SUMMARY = HEADER + "\n" + DATA_TRACEBACK
TOO_FEW = ("ValueError: 16 training images in resources/datasets/cifar10/tiny give no full step of "
           "32 images on each of 1 processes: lower --per-gpu-batch or use more images")
TOO_FEW_IMAGES = "\n".join([
    record("header", framework="pytorch", model="vit_tiny", dataset="tiny", gpus=1, world_size=1,
           per_gpu_batch=32, global_batch=32, epochs=2, images_per_epoch=0, protocol="epochs"),
    record("summary", status="failed", reason=TOO_FEW, epochs=0),
]) + "\n"

TF_RUN = ("tensorflow", "resnet50v2", "cifar128", 2)
CASES = {
    "import-crash": (IMPORT_CRASH, TF_RUN, SUBSCRIPT),
    "torchrun-import-crash": (TORCHRUN_IMPORT_CRASH, ("pytorch", "vit_tiny", "tiny", 4), SUBSCRIPT),
    "data-crash-before-header": (DATA_CRASH_BEFORE_HEADER, TF_RUN, CIFAR_ERROR),
    "data-crash-after-header": (DATA_CRASH_AFTER_HEADER, TF_RUN, CIFAR_ERROR),
    "data-crash-without-summary": (DATA_CRASH_WITHOUT_SUMMARY, TF_RUN, f"scalesweep.train.datasets.cifar.{CIFAR_ERROR}"),
    "too-few-images": (TOO_FEW_IMAGES, ("pytorch", "vit_tiny", "tiny", 1), TOO_FEW),
}


def workflow_log(root, run, attempt=1):
    """Where the workflow keeps a run's attempt log: logs/train/<framework>/model~/dataset~/gpus~N."""
    framework, model, dataset, gpus = run
    folder = root / "logs" / "train" / framework / f"model~{model}" / f"dataset~{dataset}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"gpus~{gpus}.attempt-{attempt}.log"


def analyze(*args, cwd):
    return subprocess.run([sys.executable, "-m", "scalesweep", "analyze", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def axes_of(row):
    return row["framework"], row["model"], row["dataset"], int(row["gpus"])


@pytest.mark.parametrize("case", CASES)
def test_workflow_tidy_gives_a_failed_row_with_the_exception(tmp_path, case):
    text, run, reason = CASES[case]
    log = workflow_log(tmp_path, run)
    log.write_text(text)
    axes = dict(zip(("framework", "model", "dataset", "gpus"), run))
    tables = rows.tidy_tables([(str(log), axes)])
    (row,) = tables.runs.to_dict("records")
    assert (row["status"], row["reason"]) == ("failed", reason)
    assert axes_of(row) == run and tables.refused == [] and tables.epochs.empty


def test_analyze_gives_each_crashed_run_a_failed_row_identified_by_its_path(tmp_path):
    logs = {case: workflow_log(tmp_path / case, run) for case, (_, run, _) in CASES.items()}
    for case, log in logs.items():
        log.write_text(CASES[case][0])
    # One finished run beside them, so the tables have something to measure.
    done = analyze(*logs.values(), REPO / "tests" / "data" / "logs" / "scalesweep_ok.log",
                   "--out", tmp_path / "out", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "refused" not in done.stderr
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    for case, log in logs.items():
        (row,) = runs[runs["log"] == str(log)].to_dict("records")
        assert (row["status"], row["reason"]) == ("failed", CASES[case][2]), case
        assert axes_of(row) == CASES[case][1], case


def test_a_stray_crash_log_is_a_failed_run_that_says_it_is_unidentified(tmp_path):
    stray = tmp_path / "crash.out"
    stray.write_text(IMPORT_CRASH)
    (run,) = parse_file(stray)
    assert run.header == {} and run.summary["status"] == "failed"
    assert run.summary["reason"] == f"{SUBSCRIPT} ({UNIDENTIFIED})"
    (row,) = rows.runs_table([(str(stray), {})])[1].to_dict("records")
    assert row["status"] == "failed" and row["reason"].startswith(SUBSCRIPT)


def test_run_identity_reads_workflow_paths_only():
    assert run_identity("logs/train/pytorch/model~vit_h_14/dataset~tiny-224/gpus~8.attempt-3.log") == {
        "framework": "pytorch", "model": "vit_h_14", "dataset": "tiny-224", "gpus": 8}
    assert run_identity("/w/results/runs/tensorflow/model~cnn_small/dataset~c/gpus~1/repeat~2/train.log") == {
        "framework": "tensorflow", "model": "cnn_small", "dataset": "c", "gpus": 1}
    assert run_identity("logs/train/pytorch/model~vit_h_14/gpus~8.log") == {}  # no dataset
    assert run_identity("pytorch/model~m/dataset~d/gpus~x.log") == {}
    assert run_identity("runs/vit_8gpus.log") == {}


def test_a_log_without_any_exception_or_record_is_still_refused(tmp_path):
    log = workflow_log(tmp_path, TF_RUN)
    log.write_text("module load singularity\nsome text\n")
    with pytest.raises(LogFormatError, match="no known format"):
        parse_file(log)


def test_an_ok_summary_before_any_header_is_still_a_broken_log():
    with pytest.raises(LogFormatError, match=r"x\.log:1: summary record before any header"):
        parse_log(record("summary", status="ok"), source="x.log")
