"""Hostile input, round 3: the command line misused (FIFOs, unreadable files and folders, a folder
where a file is expected, tens of thousands of files, --out inside the input) and the history
misused (a mistyped --history, ambiguous or unknown ids, an empty, damaged or read-only history).

Every case runs the real `python -m scalesweep`, with a timeout: a hang fails the test instead of
the suite. docs/hostile-cases.md lists each case with its outcome.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.history import archive
from test_history import sweep_runs
from test_history_place import tmpfs_at

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "data" / "logs"
OK_LOG = LOGS / "scalesweep_ok.log"
KERAS_LOG = LOGS / "tf_keras2_resnet50_1-2-4gpus.log"
# a reader blocked on a FIFO waits forever; every command here ends well within this
HANG = 120


def scalesweep(*args, cwd, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", "scalesweep", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=HANG)


def logs_read(out: Path) -> list[str]:
    return sorted(pd.read_csv(out / "tidy" / "runs.csv")["log"].astype(str))


def logs_folder(tmp_path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(OK_LOG, folder)
    shutil.copy(KERAS_LOG, folder)
    return folder


# ------------------------------------------------------------------ FIFOs and other special files

@pytest.mark.slow  # analyses logs end to end: figures included
@pytest.mark.parametrize("where", ["in the folder", "named", "named as a runs table"])
def test_a_fifo_among_the_inputs_is_refused_by_name_and_the_rest_analysed(tmp_path, where):
    folder = logs_folder(tmp_path)
    fifo = folder / ("runs.csv" if where == "named as a runs table" else "pipe.log")
    os.mkfifo(fifo)
    inputs = [folder] if where == "in the folder" else [fifo, folder / OK_LOG.name]
    result = scalesweep("analyze", *inputs, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    expected = "a log file" if where == "in the folder" else "a log file or runs table"
    assert f"  {fifo}: a named pipe (FIFO), not {expected}: not read" in result.stderr.splitlines()
    # the FIFO is no run (it used to be a failed row "no log"); the logs beside it are all read
    assert str(fifo) not in logs_read(tmp_path / "out")
    assert str(folder / OK_LOG.name) in logs_read(tmp_path / "out")


@pytest.mark.slow  # analyses logs end to end: figures included
def test_a_fifo_named_like_a_manifest_leaves_its_folder_out_and_nothing_hangs(tmp_path):
    folder = logs_folder(tmp_path)
    os.mkfifo(folder / "manifest.csv")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(OK_LOG, other / "kept.log")
    result = scalesweep("analyze", folder, other, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1
    assert (f"{folder / 'manifest.csv'}: a named pipe (FIFO), not a manifest file: not read; "
            f"the logs of {folder} left out") in result.stderr
    assert logs_read(tmp_path / "out") == [str(other / "kept.log")]


@pytest.mark.parametrize("command, expected", [
    (["parse", "{fifo}"], "error: {fifo}: a named pipe (FIFO), not a log file: not read"),
    (["parse", "{folder}"], "error: {folder}: a folder, not a log file: not read"),
    (["check-config", "{fifo}"], "error: {fifo}: a named pipe (FIFO), not a config file: not read"),
    (["check-config", "{folder}"], "error: {folder}: a folder, not a config file: not read"),
    (["compare", "{fifo}", "{ok_table}", "--out", "{out}"],
     "scalesweep compare: {fifo}: a named pipe (FIFO), not a runs table, archive file or results folder: not read"),
    (["check-config", "{tiny}", "--profile", "{profile}"],
     "error: {profile}/config.yaml: a named pipe (FIFO), not a profile's config file: not read (config files: {tiny})"),
    (["analyze", "{ok_log}", "--out", "{out}", "--network", "{fifo}"],
     "scalesweep analyze: --network {fifo}: a named pipe (FIFO), not a network.csv file: not read"),
    (["analyze", "{ok_log}", "--out", "{out}", "--network", "{folder}"],
     "scalesweep analyze: --network {folder}: a folder, not a network.csv file: not read"),
])
def test_a_fifo_or_a_folder_where_a_file_is_expected_is_one_line_naming_it(tmp_path, command, expected):
    names = {"fifo": tmp_path / "pipe.csv", "folder": tmp_path / "a-folder", "ok_log": OK_LOG,
             "ok_table": tmp_path / "runs.csv", "out": tmp_path / "out", "profile": tmp_path / "profile",
             "tiny": REPO / "tests" / "configs" / "tiny.yaml"}
    os.mkfifo(names["fifo"])
    names["profile"].mkdir()
    os.mkfifo(names["profile"] / "config.yaml")
    names["folder"].mkdir()
    sweep_runs().to_csv(names["ok_table"], index=False)
    result = scalesweep(*(word.format(**names) for word in command), cwd=tmp_path)
    assert result.returncode in (1, 2)
    assert result.stderr.strip().splitlines()[-1] == expected.format(**names)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "tidy").exists()  # refused before anything is written


def test_show_given_a_file_or_a_fifo_names_what_it_needs(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    for given in (OK_LOG, tmp_path / "pipe"):
        result = scalesweep("show", given, cwd=tmp_path)
        assert result.returncode == 2
        assert "no scaling table here; give the results folder of a finished sweep" in result.stderr


# ------------------------------------------------------------------ unreadable files and folders

def without_read_override():
    """The command prefix that makes permissions bind this process: root keeps uid 0 but drops
    the capabilities that let it read any file (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop root's read-any-file capabilities")
    drop = "-dac_override,-dac_read_search"
    return ("setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}")


@pytest.mark.slow  # analyses logs end to end: figures included
def test_unreadable_files_and_folders_are_named_and_the_rest_analysed(tmp_path):
    """Decided: an input that cannot be read is named on stderr (exit 1) and everything readable
    is analysed; an unreadable log is a failed row with its reason, an unreadable subfolder (which
    os.walk skipped without a word) is named with its logs left out."""
    folder = tmp_path / "logs"
    (folder / "readable").mkdir(parents=True)
    (folder / "locked").mkdir()
    shutil.copy(OK_LOG, folder / "readable" / "a.log")
    shutil.copy(KERAS_LOG, folder / "locked" / "b.log")
    shutil.copy(OK_LOG, folder / "locked.log")
    (folder / "locked").chmod(0)
    (folder / "locked.log").chmod(0)
    try:
        result = scalesweep("analyze", folder, "--out", tmp_path / "out", cwd=tmp_path,
                            prefix=without_read_override())
    finally:
        (folder / "locked").chmod(0o755)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert f"  {folder / 'locked'}: cannot read the folder (Permission denied): its logs left out" in lines
    assert any(line.startswith(f"  {folder / 'locked.log'}: cannot read: ") and "Permission denied" in line
               for line in lines)
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv").set_index("log")
    assert runs.loc[str(folder / "readable" / "a.log"), "status"] == "ok"
    assert runs.loc[str(folder / "locked.log"), "status"] == "failed"
    assert len(runs) == 2


# ------------------------------------------------------------------ many files, --out inside the input

@pytest.mark.slow
def test_tens_of_thousands_of_files_that_are_no_logs_are_passed_over(tmp_path):
    """A dataset folder given by mistake beside the logs: 40,000 images in 400 folders are
    walked past (no log suffix), the one log is analysed; no hang (HANG) and no refusal."""
    folder = tmp_path / "mixed"
    for index in range(400):
        images = folder / "train" / f"class{index}"
        images.mkdir(parents=True)
        for image in range(100):
            (images / f"{image}.jpeg").write_bytes(b"")
    shutil.copy(OK_LOG, folder / "run.log")
    result = scalesweep("analyze", folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert logs_read(tmp_path / "out") == [str(folder / "run.log")]


@pytest.mark.slow  # analyses logs end to end: figures included
def test_out_inside_the_input_folder_is_not_read_back_as_input(tmp_path):
    folder = logs_folder(tmp_path)
    for _ in range(2):  # the second run walks past the first one's outputs
        result = scalesweep("analyze", folder, "--out", folder / "analysis", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert logs_read(folder / "analysis") == sorted([str(folder / OK_LOG.name)] + [str(folder / KERAS_LOG.name)] * 3)
    assert "refused" not in result.stderr and "duplicate" not in result.stdout


# ------------------------------------------------------------------ the history misused

def two_sweeps(history: Path) -> list[str]:
    """Two archived sweeps whose ids share the prefix '20261101T'."""
    return [archive.archive(sweep_runs(), history).sweep_id,
            archive.archive(sweep_runs(driver="550.54.15", start="2026-11-01T09:30:00+00:00"), history).sweep_id]


@pytest.mark.parametrize("given", ["missing", "a-file"])
def test_a_history_that_is_no_folder_is_refused_not_listed_as_empty(tmp_path, given):
    (tmp_path / "a-file").write_text("x")
    result = scalesweep("history", "--history", tmp_path / given, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"scalesweep history: --history {tmp_path / given}: ")
    assert ("no such folder" if given == "missing" else "is not a folder") in result.stderr


def test_ambiguous_unknown_and_empty_history_ids_are_refused_naming_the_candidates(tmp_path):
    history = tmp_path / "history"
    first, second = two_sweeps(history)
    assert first[:9] == second[:9] == "20261101T"
    ambiguous = scalesweep("compare", "20261101T", second, "--history", history, "--out", tmp_path / "out",
                           cwd=tmp_path)
    assert ambiguous.returncode == 2
    assert (f"scalesweep compare: sweep id '20261101T' is ambiguous in {history}: {first}, {second}"
            in ambiguous.stderr)
    unknown = scalesweep("compare", "20991231", second, "--history", history, "--out", tmp_path / "out",
                         cwd=tmp_path)
    assert unknown.returncode == 2 and f"no archived sweep '20991231' in {history}: archived: " in unknown.stderr
    (tmp_path / "empty").mkdir()
    listing = scalesweep("history", "--history", tmp_path / "empty", cwd=tmp_path)
    assert listing.returncode == 0 and listing.stdout.strip() == f"no archived sweep in {tmp_path / 'empty'} matches"
    empty = scalesweep("compare", "2026", "2027", "--history", tmp_path / "empty", "--out", tmp_path / "out",
                       cwd=tmp_path)
    assert empty.returncode == 2 and empty.stderr.rstrip().endswith("the history holds no sweep")
    assert not (tmp_path / "out").exists()


def damage(history: Path, sweep_id: str) -> dict:
    """The sweep's archive cut to its first 300 bytes, and a garbage file named like an archive;
    returns every file's bytes, to show nothing is deleted or rewritten."""
    target = history / f"sweep-{sweep_id}.parquet"
    target.write_bytes(target.read_bytes()[:300])
    (history / "sweep-20261102T000000Z-aaaaaaaaaaaa.parquet").write_bytes(b"not parquet at all\n" * 10)
    return {path.name: path.read_bytes() for path in history.iterdir()}


def test_a_damaged_history_is_named_and_skipped_never_a_traceback_never_deleted(tmp_path):
    history = tmp_path / "history"
    damaged, intact = two_sweeps(history)
    before = damage(history, damaged)
    listing = scalesweep("history", "--history", history, cwd=tmp_path)
    assert listing.returncode == 0 and intact in listing.stdout and damaged not in listing.stdout
    warned = [line for line in listing.stderr.splitlines() if "skipping damaged file" in line]
    assert len(warned) == 2 and all(line.startswith("scalesweep history: warning: ") for line in warned)
    compared = scalesweep("compare", damaged, intact, "--history", history, "--out", tmp_path / "out", cwd=tmp_path)
    assert compared.returncode == 2 and "Traceback" not in compared.stderr
    assert (f"scalesweep compare: sweep {damaged}: its archive file {history / f'sweep-{damaged}.parquet'} "
            "is damaged (") in compared.stderr  # it used to say "holds no runs"
    assert {path.name: path.read_bytes() for path in history.iterdir()} == before


@pytest.fixture
def read_only_history(tmp_path):
    """Two archived sweeps on a file system then remounted read-only (root: a tmpfs)."""
    with tmpfs_at(tmp_path / "history", "size=4m") as history:
        ids = two_sweeps(history)
        subprocess.run(["mount", "-o", "remount,ro", str(history)], check=True)
        yield history, ids


def test_a_read_only_history_is_listed_and_compared(tmp_path, read_only_history):
    history, (first, second) = read_only_history
    listing = scalesweep("history", "--history", history, cwd=tmp_path)
    assert listing.returncode == 0 and first in listing.stdout and second in listing.stdout
    compared = scalesweep("compare", first, second, "--history", history, "--out", tmp_path / "out", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "gpu_driver: 535.104.05 -> 550.54.15" in compared.stdout
    assert (tmp_path / "out" / "compare.csv").is_file()


def test_the_archive_stage_beside_a_damaged_history_archives_and_names_the_damage(tmp_path):
    """Rule `history`'s function (archive.write_history): the new sweep is archived and the
    figure drawn from the readable sweeps; each damaged file is named, none is touched."""
    from scalesweep.history.query import DamagedArchiveWarning

    history = tmp_path / "history"
    damaged, intact = two_sweeps(history)
    before = damage(history, damaged)
    runs_csv = tmp_path / "results" / "tidy" / "runs.csv"
    runs_csv.parent.mkdir(parents=True)
    sweep_runs(driver="560.28.03").to_csv(runs_csv, index=False)
    with pytest.warns(DamagedArchiveWarning) as caught:
        line = archive.write_history(runs_csv, history, {}, tmp_path / "archived.json",
                                     figure=tmp_path / "throughput_history.png")
    assert line.startswith("archived 4 new runs as ") and "throughput_history: 2 sweeps" in line
    assert {str(history / name) for name in before if name != f"sweep-{intact}.parquet"} == {
        str(warning.message).split("skipping damaged file ")[1].split(": ")[0] for warning in caught}
    after = {path.name: path.read_bytes() for path in history.iterdir()}
    assert len(after) == len(before) + 1 and all(after[name] == data for name, data in before.items())


# ------------------------------------------------------------------ a runs table given back

def test_a_runs_table_given_back_keeps_its_failed_rows_without_a_gpu_count(tmp_path):
    """A failed run whose log was empty has no GPU count: it has no place in a scaling series,
    but a runs.csv written from a runs.csv must still hold it (it used to vanish silently)."""
    from scalesweep.pipeline import collect_runs

    folder = logs_folder(tmp_path)
    (folder / "empty.log").write_text("")
    first, _, _ = collect_runs([folder], tmp_path / "first")
    runs = pd.read_csv(first)
    assert runs["gpus"].isna().sum() == 1 and (runs.loc[runs["gpus"].isna(), "status"] != "ok").all()
    again, _, _ = collect_runs([first], tmp_path / "again")
    rerun = pd.read_csv(again)
    assert len(rerun) == len(runs)
    assert sorted(rerun["log"].astype(str)) == sorted(runs["log"].astype(str))
