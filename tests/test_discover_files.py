"""Each log file once, however it is reached (scalesweep/logs/discover.py: distinct_files): the
workflow's `<run>.log` link beside its attempt, a folder reached through a link to it; and each
plain log looked at once to find it and once to read it (a call to the metadata server each, on a
parallel file system)."""

import os
from collections import Counter
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


def test_a_folder_of_plain_logs_is_looked_at_once_per_log(tmp_path, monkeypatch, capsys):
    """On a parallel file system every stat is a call to its metadata server: a plain log (a
    regular file, no link) costs one, the odd ones (a link, a dangling link, a named pipe) the
    checks they need, each still named or left out as before."""
    from scalesweep.logs.discover import folder_items

    logs = tmp_path / "logs"
    (logs / "sub").mkdir(parents=True)
    plain = [logs / f"run-{n}.log" for n in range(40)] + [logs / "sub" / f"run-{n}.log" for n in range(40)]
    for path in plain:
        path.write_text("x")
    (logs / "same.log").symlink_to("run-0.log")
    (logs / "gone.log").symlink_to("deleted.attempt-1.log")
    os.mkfifo(logs / "pipe.log")
    looks = []
    for name in ("stat", "lstat"):
        original = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *args, _original=original, **kwargs:
                            looks.append(args[0]) or _original(*args, **kwargs))
    items, refused = folder_items(logs)
    monkeypatch.undo()
    assert sorted(path for path, _ in items) == sorted(map(str, plain))
    assert refused == [f"{logs / 'pipe.log'}: a named pipe (FIFO), not a log file: not read"]
    assert "gone.log: dangling link" in capsys.readouterr().err
    times = Counter(Path(looked) for looked in looks)
    # run-0.log once more: the real path of same.log, the link to it, goes through it
    assert [times[path] for path in plain] == [2] + [1] * (len(plain) - 1)


def test_reading_a_log_looks_at_it_once_before_opening_it(tmp_path, monkeypatch):
    from scalesweep.tidy.rows import tidy_tables

    logs = [tmp_path / f"run-{n}.log" for n in range(20)]
    for path in logs:
        path.write_text(":::SCALESWEEP {broken\n")
    looks = []
    for name in ("stat", "lstat"):
        original = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *args, _original=original, **kwargs:
                            looks.append(Path(args[0])) or _original(*args, **kwargs))
    tables = tidy_tables([(str(path), {"gpus": 1}) for path in logs])
    monkeypatch.undo()
    assert len(tables.refused) == len(logs) and all("corrupt :::SCALESWEEP record" in r for r in tables.refused)
    assert Counter(looks) == Counter(logs)
