"""Logs as clusters write them, and broken ones (issue 28, "Faults and hostile input", round 3):
each case is refused with a message naming the file and the problem, or read to the numbers a
hand computation gives; never a traceback, a silent skip or a wrong number. docs/hostile-cases.md
lists them."""

import gzip
import re

import pandas as pd
import pytest

from epoch_logs import record, write_epochs_log
from scalesweep import pipeline

# A 2-GPU run: epochs of 30, 10 and 12 s for 1,024 images: steady time 11 s, 1024 / 11 img/s.
SECONDS = [30.0, 10.0, 12.0]
STEADY_S = 11.0


def clean(tmp_path, **header):
    return write_epochs_log(tmp_path / "clean.tmp", 2, SECONDS, **header).read_text()


def requeued(text):
    """A requeued job's first attempt (killed in epoch 2) and its second, appended to one log."""
    first = text.splitlines()[:2]
    return "\n".join(first) + "\nslurmstepd: error: *** JOB 31337 CANCELLED DUE TO PREEMPTION ***\n" + text


def cut_mid_line(text):
    return text[: text.rindex(":::SCALESWEEP") + 40]


def swapped_epochs(text):
    lines = text.splitlines()
    return "\n".join([lines[0], lines[2], lines[1], *lines[3:]]) + "\n"


def parts_ten_times_the_step(text):
    return text.replace('"status": "ok"', '"status": "ok", "breakdown_step_s": 0.1, "data_wait_s": 0.5, '
                        '"compute_s": 0.5, "sync_wait_s": 0.0, "sync_comm_s": 0.0, "other_s": 0.0')


# name, how the log is made from a clean one, ("ok", steady time) or ("refused", message pattern)
CASES = [
    ("crlf", lambda t: t.replace("\n", "\r\n"), ("ok", STEADY_S)),
    ("rank_prefixed", lambda t: "\n".join("0: " + line for line in t.splitlines()), ("ok", STEADY_S)),
    ("torchrun_rank_prefixed", lambda t: "\n".join("[rank0]: " + line for line in t.splitlines()), ("ok", STEADY_S)),
    ("very_long_line_before", lambda t: "x" * 2_000_000 + "\n" + t, ("ok", STEADY_S)),
    ("epochs_out_of_order", swapped_epochs, ("ok", STEADY_S)),
    ("requeued_job_appended", requeued, ("ok", STEADY_S)),
    ("record_cut_mid_line", cut_mid_line, ("refused", r"corrupt :::SCALESWEEP record")),
    ("nan_seconds", lambda t: t.replace('"seconds": 10.0', '"seconds": NaN', 1),
     ("refused", r"'seconds' must be a finite number > 0")),
    ("infinite_seconds", lambda t: t.replace('"seconds": 10.0', '"seconds": Infinity', 1),
     ("refused", r"'seconds' must be a finite number > 0")),
    ("clock_going_backwards", lambda t: t.replace('"seconds": 10.0', '"seconds": -10.0', 1),
     ("refused", r"'seconds' must be a finite number > 0 .* got -10\.0")),
    ("future_record_version", lambda t: t.replace('"schema": 1', '"schema": 99'),
     ("refused", r"record schema 99, this parser reads schema 1")),
    ("parts_ten_times_the_step", parts_ten_times_the_step, ("refused", r"add up to 1\.0, not 'breakdown_step_s' 0\.1")),
]


@pytest.mark.parametrize("name, make, expected", CASES, ids=[case[0] for case in CASES])
def test_hostile_log(tmp_path, name, make, expected):
    log = tmp_path / "logs" / f"{name}_2gpus.log"
    log.parent.mkdir()
    log.write_text(make(clean(tmp_path)), newline="")
    runs_csv, refused, _ = pipeline.collect_runs([log.parent], tmp_path / "out")
    runs = pd.read_csv(runs_csv)
    assert len(runs) == 1, runs
    outcome, value = expected
    if outcome == "ok":
        assert refused == []
        assert runs.loc[0, "status"] == "ok"
        assert runs.loc[0, "steady_epoch_time_s"] == pytest.approx(value)
        assert runs.loc[0, "throughput_img_s"] == pytest.approx(1024 / value)
    else:
        assert len(refused) == 1 and refused[0].startswith(str(log)), refused
        assert re.search(value, refused[0]), refused[0]
        assert runs.loc[0, "status"] == "failed" and pd.isna(runs.loc[0, "throughput_img_s"])


def test_a_requeued_jobs_killed_attempt_is_named_and_left_out(tmp_path):
    log = tmp_path / "R-job_2gpus.31337.out"
    log.write_text(requeued(clean(tmp_path)))
    runs_csv, refused, left_out = pipeline.collect_runs([log], tmp_path / "out")
    runs = pd.read_csv(runs_csv)
    assert refused == [] and list(runs["status"]) == ["ok"]
    assert runs.loc[0, "steady_epoch_time_s"] == STEADY_S  # the last attempt's
    assert left_out == [f"{log}: run 1 of the log is an earlier attempt of the same configuration as run 2 "
                        "(a requeued job appends to its log): only the last attempt counts"]


def test_compressed_logs_are_refused_by_name_not_skipped(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "run_2gpus.log.gz").write_bytes(gzip.compress(clean(tmp_path).encode()))
    write_epochs_log(folder / "plain_2gpus.log", 2, SECONDS)
    runs_csv, refused, _ = pipeline.collect_runs([folder], tmp_path / "out")
    assert refused == [f"{folder / 'run_2gpus.log.gz'}: a compressed log is not read: decompress it first "
                       f"(e.g. gunzip -k {folder / 'run_2gpus.log.gz'})"]
    assert len(pd.read_csv(runs_csv)) == 1
    direct, direct_refused, _ = pipeline.collect_runs([folder / "run_2gpus.log.gz"], tmp_path / "out2")
    assert direct is None and "compressed log is not read" in direct_refused[0]


def test_a_record_line_of_a_huge_size_is_refused_or_read_without_a_traceback(tmp_path):
    text = clean(tmp_path).replace('"loss": null', '"loss": null', 1)
    huge = record("epoch", epoch=4, images=1024, seconds=10.0, throughput_img_s=102.4, note="y" * 3_000_000)
    log = tmp_path / "huge_2gpus.log"
    lines = text.splitlines()
    log.write_text("\n".join([*lines[:-1], huge, lines[-1]]) + "\n")
    runs_csv, refused, _ = pipeline.collect_runs([log], tmp_path / "out")
    runs = pd.read_csv(runs_csv)
    assert len(runs) == 1
    assert runs.loc[0, "status"] == "ok" or (refused and refused[0].startswith(str(log)))
