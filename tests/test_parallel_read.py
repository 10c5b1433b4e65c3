"""Logs read in several processes (tidy/rows.py, tidy_tables' `processes`): the same tables as
read in one, in the same order, refusals included."""

import pandas as pd
import pytest

import bench_analysis  # benchmarks/: logs as the trainers print them
from scalesweep.tidy import rows


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    folder = tmp_path_factory.mktemp("logs")
    runs = bench_analysis.plan_runs(40)
    bench_analysis.write_logs(folder, runs)
    (folder / "broken.log").write_text(":::SCALESWEEP {not json\n")
    logs = [(folder / run.file, run.config) for run in runs]
    return logs + [(folder / "broken.log", {}), (None, {"framework": "pytorch", "gpus": 2})]


@pytest.mark.slow  # two fresh interpreters import pandas
def test_logs_read_in_two_processes_give_the_tables_read_in_one(items, monkeypatch):
    alone = rows.tidy_tables(items, processes=1)
    monkeypatch.setattr(rows, "PARALLEL_READ_MIN_LOGS", 10)
    apart = rows.tidy_tables(items, processes=2)
    pd.testing.assert_frame_equal(alone.runs, apart.runs)
    pd.testing.assert_frame_equal(alone.epochs, apart.epochs)
    assert alone.refused == apart.refused and len(alone.refused) == 1
    assert (alone.runs["status"] == "failed").sum() >= 2  # the broken log and the missing one


def test_a_few_logs_are_read_in_this_process(items, monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("a process pool for a few logs")

    monkeypatch.setattr(rows, "ProcessPoolExecutor", no_pool)
    assert len(rows.tidy_tables(items, processes=4).runs) == len(items)
