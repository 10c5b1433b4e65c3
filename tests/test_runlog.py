"""The record writer both trainers share (scalesweep/train/common/runlog.py): record lines, epoch
and summary records, SIGTERM. Standard library only, so everything runs in this process: no
framework import.
"""

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scalesweep.train.common import measure, runlog  # noqa: E402

PREFIX = ":::SCALESWEEP "


# ---------------------------------------------------------------------------------------------
# Record lines
# ---------------------------------------------------------------------------------------------


def test_emit_writes_one_prefixed_json_line_with_schema():
    stream = io.StringIO()
    runlog.emit({"record": "epoch", "loss": float("nan"), "nested": [float("inf"), 1.5]}, stream)
    line = stream.getvalue()
    assert line.startswith(PREFIX) and line.endswith("}\n") and line.count("\n") == 1
    record = json.loads(line[len(PREFIX) :])
    assert record == {"record": "epoch", "schema": 1, "loss": None, "nested": [None, 1.5]}


def test_records_stay_whole_in_a_log_other_processes_write_to_at_once(tmp_path):
    # Every rank, torchrun and C++ libraries (which write a line in pieces) share one O_APPEND
    # log; under PYTHONUNBUFFERED=1 `print` wrote a record and its newline in two calls, and
    # another process's text landed between them (a corrupt record, seen in CI).
    log = tmp_path / "attempt.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    records = ("from scalesweep.train.common import runlog\n"
               "for i in range(3000):\n"
               "    print('a human line', i)\n"
               "    runlog.emit({'record': 'epoch', 'epoch': i, 'reason': 'x' * 600})\n")
    pieces = ("import os, sys\n"
              "for i in range(20000):\n"
              "    os.write(1, b'[W piece')\n"
              "    os.write(1, b' of a line]\\n')\n")
    with open(log, "ab") as out:
        writers = [subprocess.Popen([sys.executable, "-c", code], stdout=out, env=env) for code in (records, pieces)]
        assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    lines = [line for line in log.read_text().splitlines() if PREFIX in line]
    epochs = [json.loads(line[line.index(PREFIX) + len(PREFIX):])["epoch"] for line in lines]
    assert epochs == list(range(3000))


def test_emit_refuses_a_record_without_kind():
    with pytest.raises(ValueError, match="'record' kind"):
        runlog.format_record({"loss": 1.0})


def test_epoch_record_without_step_timings_has_null_step_keys():
    record = runlog.epoch_record(3, 512, 2.0, np.float32(1.25), 0.5)
    assert record["throughput_img_s"] == 256.0 and record["loss"] == 1.25
    assert (record["steps"], record["step_time_median_s"], record["step_time_p90_s"], record["phase"]) == (
        None, None, None, None)


def test_epoch_record_carries_step_statistics_and_phase():
    stats = measure.step_statistics([0.5, 0.25, 0.75])
    record = runlog.epoch_record(2, 96, 1.5, step_stats=stats, phase="timed")
    assert record["steps"] == 3 and record["step_time_median_s"] == 0.5
    assert record["step_time_p90_s"] == pytest.approx(0.7) and record["phase"] == "timed"


# ---------------------------------------------------------------------------------------------
# Step statistics on recorded timings
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------


def test_summarize_takes_medians_from_epoch_two_on():
    epochs = [runlog.epoch_record(i, 100, seconds) for i, seconds in [(1, 30.0), (2, 2.0), (3, 4.0), (4, 3.0)]]
    summary = runlog.summarize(epochs)
    assert summary["epochs"] == 4
    assert summary["train_time_s"] == pytest.approx(39.0)
    assert summary["steady_epoch_time_s"] == pytest.approx(3.0)
    assert summary["throughput_img_s"] == pytest.approx(100 / 3.0)


def test_summarize_has_no_steady_state_with_one_epoch():
    summary = runlog.summarize([runlog.epoch_record(1, 100, 5.0)])
    assert summary["steady_epoch_time_s"] is None and summary["throughput_img_s"] is None
    assert runlog.summarize([])["train_time_s"] == 0


def test_summary_of_the_steps_protocol_reads_the_timed_window():
    windows = [runlog.epoch_record(1, 48, 25.0, phase="warmup"), runlog.epoch_record(2, 112, 8.0, phase="timed")]
    summary = runlog.summary_record("ok", windows, None, oom_retries=2)
    assert summary["throughput_img_s"] == 14.0 and summary["steady_epoch_time_s"] == 8.0
    assert summary["total_time_s"] is None and summary["oom_retries"] == 2


def test_summary_record_needs_a_reason_unless_ok():
    with pytest.raises(ValueError, match="needs a reason"):
        runlog.summary_record("failed", [], 1.0)
    with pytest.raises(ValueError, match="ok, oom or failed"):
        runlog.summary_record("crashed", [], 1.0, reason="x")
    record = runlog.summary_record("oom", [], 1.0, reason="first line\nsecond line")
    assert record["reason"] == "first line" and record["peak_host_rss_gb"] > 0
    assert record["oom_retries"] == 0


# ---------------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Failure injection and the maximum-batch search
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------------------------


def test_sigterm_becomes_an_exception():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        runlog.raise_on_sigterm()
        with pytest.raises(runlog.Terminated, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


