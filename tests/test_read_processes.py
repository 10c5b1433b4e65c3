"""Logs read by forked processes (`analyze` with many logs, tidy/rows.py: _readings) give the
tables and refusals one process gives, in the same order, and an error one log raises is raised
as it is, not lost in a worker."""

import os
import shutil
import signal
from pathlib import Path

import pandas as pd
import pytest

from scalesweep import pipeline
from scalesweep.contract import hardware
from scalesweep.tidy import rows

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "data" / "logs"
BROKEN = REPO / "tests" / "data" / "broken"


@pytest.fixture
def few_logs_fork(monkeypatch):
    # The real forked processes, started from a handful of logs instead of hundreds, and from a
    # test runner's worker, whose own threads would otherwise keep analyze from forking.
    monkeypatch.setattr(rows, "READ_PROCESS_MIN_LOGS", 2)
    monkeypatch.setattr(hardware, "may_fork_helpers", lambda: True)


def _items():
    logs = sorted(LOGS.iterdir()) + sorted(p for p in BROKEN.iterdir() if p.suffix != ".csv")
    return [(path, {"repeat": position % 3}) for position, path in enumerate(logs)]


def test_forked_reading_gives_the_tables_and_refusals_of_one_process(few_logs_fork):
    one = rows.tidy_tables(_items(), processes=1)
    forked = rows.tidy_tables(_items(), processes=2)
    assert len(one.runs) > 60 and len(one.refused) > 20  # the broken corpus is in it
    pd.testing.assert_frame_equal(forked.runs, one.runs)
    pd.testing.assert_frame_equal(forked.epochs, one.epochs)
    assert forked.refused == one.refused
    assert forked.copies_left_out == one.copies_left_out


def test_collect_runs_writes_the_same_csvs_forked(few_logs_fork, tmp_path):
    folder = tmp_path / "logs"
    shutil.copytree(LOGS, folder)
    serial = pipeline.collect_runs([folder], tmp_path / "one", processes=1)
    forked = pipeline.collect_runs([folder], tmp_path / "forked", processes=2)
    assert forked[1:] == serial[1:]
    for name in ("runs.csv", "epochs.csv"):
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


class UnshownAxis(Exception):
    """An error whose constructor takes two arguments: a pickled copy of it cannot be rebuilt,
    which would leave a pool waiting for a result forever."""

    def __init__(self, key, why):
        super().__init__(f"axis {key}: {why}")


class Unshowable:
    def __str__(self):
        raise UnshownAxis("tag", "cannot be written")


def test_an_error_in_a_forked_reading_is_raised_as_it_is(few_logs_fork):
    items = [(LOGS / "scalesweep_ok.log", {"repeat": repeat}) for repeat in range(5)]
    items[3] = (LOGS / "scalesweep_ok.log", {"repeat": 3, "tag": Unshowable()})
    with pytest.raises(UnshownAxis, match="axis tag: cannot be written"):
        rows.tidy_tables(items, processes=1)
    with pytest.raises(UnshownAxis, match="axis tag: cannot be written"):
        rows.tidy_tables(items, processes=2)


PARENT = os.getpid()


class KilledInAWorker:
    """An axis value whose reading kills a forked reader, as the kernel's out-of-memory killer
    would; in the parent it reads as any value."""

    def __str__(self):
        if os.getpid() != PARENT:
            os.kill(os.getpid(), signal.SIGKILL)
        return "survived"


def test_a_killed_reader_leaves_the_logs_to_the_parent_not_a_pool_waiting_forever(few_logs_fork):
    items = [(path, {"tag": KilledInAWorker() if position == 4 else "x"})
             for position, path in enumerate(sorted(LOGS.iterdir())[:8])]
    forked = rows.tidy_tables(items, processes=2)
    one = rows.tidy_tables(items, processes=1)
    # The parent's own object, not a worker's unpickled copy: the parent read that log again.
    killer = items[4][1]["tag"]
    assert [tag for tag in forked.runs["tag"] if isinstance(tag, KilledInAWorker)] == [killer]
    pd.testing.assert_frame_equal(forked.runs, one.runs)
    assert forked.refused == one.refused
