"""Tables are replaced whole or not at all, and readable by the group like any file the user
writes (a temporary file is private until given the umask's mode)."""

import os
import stat

import pandas as pd
import pytest

from scalesweep.contract import atomic
from scalesweep.history.archive import write_parquet_atomic
from scalesweep.tidy import rows


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_tidy_tables_history_and_text_get_the_users_mode(tmp_path, umask_022):
    frame = pd.DataFrame({"framework": ["pytorch"], "gpus": [2]})
    epochs, runs = rows.write_tidy(frame, frame, tmp_path / "tidy")
    archive = tmp_path / "sweep.parquet"
    write_parquet_atomic(frame, archive)
    atomic.write_text("note\n", tmp_path / "summary.txt")
    assert [mode(path) for path in (epochs, runs, archive, tmp_path / "summary.txt")] == [0o644] * 4
    os.umask(0o077)
    atomic.write_csv(frame, tmp_path / "private.csv")
    assert mode(tmp_path / "private.csv") == 0o600


def test_a_write_that_fails_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("framework\npytorch\n")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic.replaced_whole(path) as temporary:
            temporary.write_text("framework\n")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "framework\npytorch\n"
    assert [p.name for p in tmp_path.iterdir()] == ["runs.csv"]
