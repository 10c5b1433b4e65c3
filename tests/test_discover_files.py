"""Each log file once, however it is reached (scalesweep/logs/discover.py: distinct_files): the
workflow's `<run>.log` link beside its attempt, a folder reached through a link to it."""

import os
from pathlib import Path

from scalesweep.logs.discover import distinct_files


def test_a_file_reached_by_a_link_or_through_a_linked_folder_is_listed_once(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.attempt-1.log").write_text("x")
    (real / "b.log").write_text("y")
    (real / "a.log").symlink_to("a.attempt-1.log")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    listed = [real / "a.attempt-1.log", real / "a.log", tmp_path / "alias" / "b.log", real / "b.log",
              tmp_path / "alias" / "a.log"]
    assert distinct_files(listed) == [real / "a.attempt-1.log", tmp_path / "alias" / "b.log"]


def test_relative_paths_are_the_files_they_name_from_the_working_folder(tmp_path, monkeypatch):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "c.log").write_text("z")
    monkeypatch.chdir(tmp_path)
    listed = [Path("c.log"), Path("logs/c.log"), Path("logs/../logs/c.log"), tmp_path / "logs" / "c.log"]
    assert distinct_files(listed) == [Path("c.log"), Path("logs/c.log")]
    assert os.path.realpath("logs/c.log") == str(tmp_path / "logs" / "c.log")
