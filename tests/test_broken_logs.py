"""Hostile and broken logs (tests/data/broken/, one case per file, outcomes in EXPECTED.csv).

Every file gives a row: a failed one with a reason naming the log, the line where the format has
lines per value, and the key; never an ok row with a number from a bad value. `analyze` on the
corpus and valid logs writes the valid runs, lists the refused logs and exits 1.
"""

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.logs.read import parse_log
from scalesweep.logs.run import LogFormatError
from scalesweep.tidy import rows
from scalesweep.tidy.table import METRIC_COLUMNS

REPO = Path(__file__).resolve().parents[1]
BROKEN = REPO / "tests" / "data" / "broken"
LOGS = REPO / "tests" / "data" / "logs"
HEADER = (
    ':::SCALESWEEP {"record": "header", "schema": 1, "framework": "pytorch", "model": "resnet18", '
    '"world_size": 2, "epochs": 1}'
)

with open(BROKEN / "EXPECTED.csv", newline="") as handle:
    EXPECTED = list(csv.DictReader(handle))


def test_every_corpus_file_has_its_expected_outcome_and_no_other():
    listed = {row["file"] for row in EXPECTED}
    on_disk = {path.name for path in BROKEN.iterdir() if path.name != "EXPECTED.csv"}
    assert listed == on_disk


@pytest.mark.parametrize("expected", EXPECTED, ids=lambda row: f"{row['file']}[{row['run']}]")
def test_broken_log_outcome(expected):
    log = BROKEN / expected["file"]
    result = rows.tidy_tables([(log, {})])
    row = result.runs.iloc[int(expected["run"])]
    assert row["status"] == expected["status"]
    if expected["reason"]:
        pattern = expected["reason"].replace("{log}", re.escape(str(log)))
        assert re.search(pattern, row["reason"]), row["reason"]
        assert "\n" not in row["reason"]
    else:
        assert pd.isna(row["reason"])
    assert (row["reason"] in result.refused) == (expected["refused"] == "yes")
    if row["status"] == "failed":
        for column in METRIC_COLUMNS:
            assert math.isnan(row[column]), column
    else:
        assert row["steady_epoch_time_s"] > 0 and row["throughput_img_s"] > 0


def test_bad_values_leave_every_refused_run_out_of_the_epochs_table():
    logs = [BROKEN / name for name in sorted({row["file"] for row in EXPECTED if row["refused"] == "yes"})]
    result = rows.tidy_tables([(log, {}) for log in logs])
    assert len(result.refused) == len(logs)
    assert result.epochs.empty
    assert set(result.runs["status"]) == {"failed"}


def test_header_keys_outside_the_contract_reach_no_column():
    """A header's `status`, `steady_epoch_time_s` and `repeat` keys are not header keys: skipped."""
    result = rows.tidy_tables([(BROKEN / "header_status_and_metric_keys.log", {})])
    row = result.runs.iloc[0]
    assert (row["status"], row["reason"], row["repeat"]) == ("failed", "boom", 0)
    assert math.isnan(row["steady_epoch_time_s"])


def deep_record_log(depth: int) -> str:
    payload = '{"record": "epoch", "schema": 1, "epoch": 1, "x": ' + "[" * depth + "]" * depth + "}"
    return HEADER + "\n:::SCALESWEEP " + payload + "\n"


@pytest.mark.parametrize("depth, message", [(100_000, "nested too deeply"), (500, "nested deeper than 32 levels")])
def test_deep_nesting_is_a_bad_line_not_a_recursion_error(depth, message):
    with pytest.raises(LogFormatError, match=rf"^deep\.log:2: .*{message}"):
        parse_log(deep_record_log(depth), source="deep.log")


def analyze(*args):
    return subprocess.run(
        [sys.executable, "-m", "scalesweep", "analyze", *map(str, args)],
        cwd=REPO, capture_output=True, text=True,
    )


def test_analyze_writes_the_valid_runs_and_lists_every_refused_log(tmp_path):
    deep = tmp_path / "deep.log"
    deep.write_text(deep_record_log(100_000))
    valid = [LOGS / "scalesweep_ok.log", *(LOGS / f"tf_keras2_resnet50_{n}gpus.log" for n in (1, 2, 4))]
    result = analyze(BROKEN, deep, *valid, "--out", tmp_path / "out")

    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    refused_files = sorted({row["file"] for row in EXPECTED if row["refused"] == "yes"})
    listed = [line.strip() for line in result.stderr.splitlines()[1:]]
    assert result.stderr.splitlines()[0] == (
        f"scalesweep analyze: refused {len(refused_files) + 1} input(s):"
    )
    for name in refused_files:
        assert sum(line.startswith(str(BROKEN / name)) for line in listed) == 1, name
    assert any(line.startswith(f"{deep}:2: ") and "nested too deeply" in line for line in listed)

    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    ok = runs[runs["status"] == "ok"].set_index("log")
    # The valid logs alongside, hand-checked in test_tidy.py: 9 s and 115.2 img/s; the Keras
    # 1-GPU reference: median of 20, 21, 20, 22 s.
    assert ok.loc[str(LOGS / "scalesweep_ok.log"), "steady_epoch_time_s"] == 9.0
    assert ok.loc[str(LOGS / "scalesweep_ok.log"), "throughput_img_s"] == pytest.approx(1024 / 9)
    assert ok.loc[str(LOGS / "tf_keras2_resnet50_1gpus.log"), "steady_epoch_time_s"] == 20.5
    ok_in_corpus = {row["file"] for row in EXPECTED if row["status"] == "ok"}
    assert {Path(log).name for log in ok.index if Path(log).parent == BROKEN} == ok_in_corpus
    assert len(runs) == len(EXPECTED) + 1 + len(valid)
    assert (tmp_path / "out" / "tables" / "scaling.csv").stat().st_size > 0


def test_a_record_written_by_json_with_a_repeated_key_is_refused_whatever_the_order():
    for first, second in [(8.0, -5), (-5, 8.0)]:
        line = ('{"record": "epoch", "schema": 1, "epoch": 1, "images": 64, '
                f'"seconds": {json.dumps(first)}, "seconds": {json.dumps(second)}}}')
        with pytest.raises(LogFormatError, match=r"^x\.log:2: corrupt .*'seconds' appears twice"):
            parse_log(HEADER + "\n:::SCALESWEEP " + line, source="x.log")
