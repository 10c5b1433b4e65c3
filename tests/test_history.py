"""The sweep history: atomic one-file-per-sweep archives, DuckDB queries, damaged files, two writers."""

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.history import archive, query
from scalesweep.history.query import DamagedArchiveWarning
from scalesweep.history.sides import check_side, load_side
from scalesweep.tidy.table import read_runs_csv

REPO = Path(__file__).resolve().parents[1]


def sweep_runs(driver="535.104.05", start="2026-11-01T08:00:00+00:00", statuses=("ok", "ok", "ok", "oom"),
               model="resnet50", extra=None):
    """Four runs: gpus 1, 2, 4 ok (twice 1 GPU: repeats 0 and 1) and one of 4 GPUs out of memory."""
    gpus, repeats = [1, 1, 2, 4], [0, 1, 0, 0]
    runs = pd.DataFrame({
        "framework": "pytorch", "model": model, "dataset": "tiny-224", "gpus": gpus, "nodes": 1,
        "repeat": repeats, "status": list(statuses),
        "throughput_img_s": [100.0, 102.0, 190.0, float("nan")],
        "steady_epoch_time_s": [10.0, 9.8, 5.3, float("nan")],
        "gpu_model": "NVIDIA H100", "gpu_driver": driver, "cluster": "mn5",
        "start_time": [start, "2026-11-01T09:00:00+00:00", "2026-11-01T10:00:00+00:00", None],
    })
    for key, value in (extra or {}).items():
        runs[key] = value
    return runs


def test_archive_writes_one_named_file_with_the_sweep_columns(tmp_path):
    archived = archive.archive(sweep_runs(), tmp_path, config={"matrix": {"gpus": [1, 2, 4]}}, source=tmp_path)
    assert re.fullmatch(r"20261101T080000Z-[0-9a-f]{12}", archived.sweep_id)  # the first run's start
    assert archived.path == tmp_path / f"sweep-{archived.sweep_id}.parquet"
    assert [p.name for p in tmp_path.iterdir()] == [archived.path.name]  # no temporary file left
    runs = query.archived_runs(tmp_path)
    assert len(runs) == 4 and set(runs["sweep_id"]) == {archived.sweep_id}
    assert runs.loc[0, "sweep_date"] == "2026-11-01T08:00:00+00:00"
    assert json.loads(runs.loc[0, "sweep_config"]) == {"matrix": {"gpus": [1, 2, 4]}}
    assert runs.loc[0, "sweep_source"] == str(tmp_path.resolve())
    # The code version is the runs' own, never the archiving code's: an old runs.csv has none.
    assert "scalesweep_version" not in runs
    assert runs["throughput_img_s"].tolist()[:3] == [100.0, 102.0, 190.0]


def test_the_same_sweep_archived_twice_is_one_file(tmp_path):
    first = archive.archive(sweep_runs(), tmp_path)
    again = archive.archive(sweep_runs(), tmp_path)
    other = archive.archive(sweep_runs(driver="550.54.15"), tmp_path)
    assert again == first and other.path != first.path
    assert len(query.sweep_files(tmp_path)) == 2


def test_a_sweep_without_start_times_is_dated_now(tmp_path):
    runs = sweep_runs().drop(columns="start_time")
    archived = archive.archive(runs, tmp_path)
    assert archived.date[:4] >= "2026" and archived.sweep_id.endswith(archive.content_hash(runs))


def test_selectors_and_where_filter_the_runs(tmp_path):
    archive.archive(sweep_runs(), tmp_path)
    archive.archive(sweep_runs(driver="550.54.15", start="2026-11-02T08:00:00+00:00"), tmp_path)
    assert len(query.archived_runs(tmp_path)) == 8
    assert len(query.archived_runs(tmp_path, selectors=["gpu_driver=550.54.15"])) == 4
    assert len(query.archived_runs(tmp_path, selectors=["gpus=1", "gpu_driver=550.54.15"])) == 2
    assert len(query.archived_runs(tmp_path, selectors=["gpus=1.0,status=ok"])) == 4  # 1.0 matches 1
    assert len(query.archived_runs(tmp_path, where="gpu_model LIKE '%H100%' AND gpus >= 2")) == 4
    assert query.archived_runs(tmp_path, selectors=["gpu_model=A100"]).empty


def test_query_errors_name_the_columns_and_the_quoting_rule(tmp_path):
    archive.archive(sweep_runs(), tmp_path)
    with pytest.raises(ValueError, match="columns: sweep_id, .*gpu_driver"):
        query.archived_runs(tmp_path, selectors=["gpu_moddel=x"])
    with pytest.raises(ValueError, match="single quotes"):
        query.archived_runs(tmp_path, where='gpu_model LIKE "%H100%"')
    with pytest.raises(ValueError, match="expected column=value"):
        query.parse_selectors(["=3"])


def test_sweeps_table_counts_configurations_and_outcomes(tmp_path):
    a = archive.archive(sweep_runs(), tmp_path)
    b = archive.archive(sweep_runs(driver="550.54.15", start="2026-11-02T08:00:00+00:00",
                                   statuses=("ok", "failed", "ok", "ok"), model="vit_h_14"), tmp_path)
    table = query.sweeps_table(tmp_path)
    assert table["sweep_id"].tolist() == [a.sweep_id, b.sweep_id]  # oldest first
    # gpus 1 (two repeats), 2, 4: three configurations, four runs
    assert table[["configurations", "runs", "ok", "failed"]].values.tolist() == [[3, 4, 3, 1], [3, 4, 3, 1]]
    assert table["cluster"].tolist() == ["mn5", "mn5"] and table["hardware"].tolist() == ["NVIDIA H100"] * 2
    only_b = query.sweeps_table(tmp_path, where="model = 'vit_h_14'")
    assert only_b["sweep_id"].tolist() == [b.sweep_id]
    assert query.sweeps_table(tmp_path / "none").empty


def test_files_with_different_columns_and_types_are_read_together(tmp_path):
    archive.archive(sweep_runs(extra={"precision": "bf16"}), tmp_path)
    # An older sweep: provenance read as numbers, no precision axis, an empty column.
    old = sweep_runs(start="2026-10-01T08:00:00+00:00").assign(gpu_driver=535.0, container_image=None)
    archive.archive(old, tmp_path)
    runs = query.archived_runs(tmp_path)
    assert len(runs) == 8
    assert sorted(runs["precision"].dropna().unique()) == ["bf16"]
    assert set(runs["gpu_driver"]) == {"535.104.05", "535.0"}



def test_a_sweep_archived_before_the_requested_batch_keeps_its_batch_axis(tmp_path):
    # Archived before requested_per_gpu_batch: its per_gpu_batch column was the asked batch.
    archive.archive(sweep_runs(start="2026-10-01T08:00:00+00:00", extra={"per_gpu_batch": [64, 128, 64, 64]}),
                    tmp_path)
    assert query.archived_runs(tmp_path)["requested_per_gpu_batch"].tolist() == [64, 128, 64, 64]
    assert query.sweeps_table(tmp_path)["configurations"].tolist() == [4]
    # Beside a later sweep whose halved run asked for 128 and ran 64.
    archive.archive(sweep_runs(extra={"per_gpu_batch": [128, 128, 64, 128],
                                      "requested_per_gpu_batch": [128, 128, 128, 128]}), tmp_path)
    runs = query.archived_runs(tmp_path).sort_values(["sweep_date", "gpus", "repeat"])
    assert runs["requested_per_gpu_batch"].tolist() == [64, 128, 64, 64, 128, 128, 128, 128]
    assert query.sweeps_table(tmp_path)["configurations"].tolist() == [4, 3]

def write_damaged(folder: Path) -> tuple[Path, Path]:
    garbage = folder / "sweep-20250101T000000Z-00000000.parquet"
    garbage.write_bytes(b"not a parquet file at all")
    good = archive.archive(sweep_runs(start="2025-06-01T00:00:00+00:00"), folder).path
    cut = folder / "sweep-20250102T000000Z-11111111.parquet"
    cut.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])  # a copy cut short
    return garbage, cut


def test_damaged_files_are_skipped_with_a_warning_naming_each(tmp_path):
    archive.archive(sweep_runs(), tmp_path)
    garbage, cut = write_damaged(tmp_path)
    with pytest.warns(DamagedArchiveWarning) as caught:
        runs = query.archived_runs(tmp_path)
    messages = " ".join(str(w.message) for w in caught)
    assert str(garbage) in messages and str(cut) in messages
    assert len(runs) == 8 and runs["sweep_id"].nunique() == 2
    with pytest.warns(DamagedArchiveWarning) as caught:
        assert len(query.sweeps_table(tmp_path)) == 2
    assert len(caught) == 2  # each damaged file named once


ARCHIVER = """
import sys, time
import pandas as pd
sys.path.insert(0, {repo!r})
from scalesweep.history import archive
writer, count, folder, go = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
while time.time() < go:  # both writers start at the same moment
    time.sleep(0.001)
for number in range(count):
    runs = pd.DataFrame({{"framework": "pytorch", "model": "m", "gpus": [1, 2], "status": "ok",
                         "throughput_img_s": [100.0, 190.0], "writer": writer, "number": number}})
    archive.archive(runs, folder)
# Both archive the very same sweep last: one file, whoever renames it into place last.
archive.archive(pd.DataFrame({{"framework": ["pytorch"], "model": "m", "gpus": 1, "status": "ok",
                              "throughput_img_s": 100.0, "writer": "both", "number": -1}}), folder)
"""


@pytest.mark.slow
def test_two_archiving_processes_at_once_lose_nothing(tmp_path):
    folder = tmp_path / "shared-history"
    folder.mkdir()
    garbage, _ = write_damaged(folder)
    script = ARCHIVER.format(repo=str(REPO))
    import time

    go = time.time() + 3.0
    writers = [subprocess.Popen([sys.executable, "-c", script, name, "20", str(folder), str(go)])
               for name in ("a", "b")]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = query.archived_runs(folder, where="writer IS NOT NULL")
    assert any(str(garbage) in str(w.message) for w in caught)
    written = runs.groupby("writer")["number"].apply(lambda n: sorted(set(n))).to_dict()
    assert written == {"a": list(range(20)), "b": list(range(20)), "both": [-1]}
    assert len(runs) == 81  # 2 writers x 20 sweeps x 2 runs, and the shared sweep once
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary left


def test_load_side_from_folder_csv_parquet_id_and_selectors(tmp_path):
    hist = tmp_path / "history"
    a = archive.archive(sweep_runs(), hist)
    archive.archive(sweep_runs(driver="550.54.15", start="2026-11-02T08:00:00+00:00"), hist)
    results = tmp_path / "results"
    (results / "tidy").mkdir(parents=True)
    sweep_runs().to_csv(results / "tidy" / "runs.csv", index=False)
    assert len(load_side(str(results), hist).runs) == 4
    assert len(load_side(str(results / "tidy" / "runs.csv"), hist).runs) == 4
    assert load_side(str(a.path), hist).sweeps == [a.sweep_id]
    assert load_side(a.sweep_id[:12], hist).sweeps == [a.sweep_id]
    assert len(load_side("gpu_driver=550.54.15", hist).sweeps) == 1
    assert len(load_side("cluster=mn5", hist).sweeps) == 2  # every matching sweep
    assert len(load_side(a.sweep_id, hist, where="gpus = 1").runs) == 2
    with pytest.raises(ValueError, match="ambiguous"):
        load_side("2026", hist)
    with pytest.raises(ValueError, match="no archived sweep '1999'"):
        load_side("1999", hist)
    with pytest.raises(ValueError, match="matches 'cluster=jureca'"):
        load_side("cluster=jureca", hist)


def test_provenance_is_read_as_text_from_runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    sweep_runs().assign(cuda_version="12.10", gpu_driver="550.540").to_csv(path, index=False)
    runs = read_runs_csv(path)
    assert runs["cuda_version"].tolist() == ["12.10"] * 4 and runs["gpu_driver"].iloc[0] == "550.540"


def test_history_stage_writes_the_json_that_names_the_file(tmp_path):
    results = tmp_path / "results"
    (results / "tidy").mkdir(parents=True)
    sweep_runs().to_csv(results / "tidy" / "runs.csv", index=False)
    named = tmp_path / "archived.json"
    line = archive.write_history(results / "tidy" / "runs.csv", tmp_path / "history", {"a": 1}, named)
    archived = json.loads(named.read_text())
    assert line == f"archived 4 new runs as {archived['sweep_id']}: {archived['file']}"
    assert archived["runs"] == 4 and Path(archived["file"]).is_file()
    assert query.archived_runs(tmp_path / "history").loc[0, "sweep_source"] == str(results.resolve())


# ----------------------------------------------------------------------------- hostile input (issue 19)

def runs_with_ids(**kwargs):
    return sweep_runs(**kwargs).assign(run_id=["r1", "r2", "r3", "r4"])


def test_a_copied_archive_file_adds_no_run_and_no_sweep(tmp_path):
    archived = archive.archive(runs_with_ids(), tmp_path)
    (tmp_path / "sweep-copy.parquet").write_bytes(archived.path.read_bytes())  # a user's backup copy
    assert len(query.archived_runs(tmp_path)) == 4
    table = query.sweeps_table(tmp_path)
    assert table[["sweep_id", "runs"]].values.tolist() == [[archived.sweep_id, 4]]
    again = archive.archive(runs_with_ids(), tmp_path)
    assert (again.sweep_id, again.runs) == (archived.sweep_id, 0)  # nothing new: nothing written
    assert len(query.sweep_files(tmp_path)) == 2


@pytest.mark.parametrize("name, neighbour", [("hist[1]", "hist1"), ("h*", "h2"), ("h?", "hx")])
def test_a_history_folder_named_with_glob_characters_reads_only_its_own_files(tmp_path, name, neighbour):
    own = archive.archive(sweep_runs(driver="own"), tmp_path / name)
    # DuckDB reads a path as a glob: hist[1]/sweep-X.parquet would be hist1/sweep-X.parquet.
    other = archive.archive(sweep_runs(driver="neighbour"), tmp_path / neighbour).path
    other.rename(other.with_name(own.path.name))
    runs = query.archived_runs(tmp_path / name)
    assert len(runs) == 4 and set(runs["gpu_driver"]) == {"own"}
    assert query.sweeps_table(tmp_path / name)["sweep_id"].tolist() == [own.sweep_id]
    assert load_side(str(own.path), tmp_path / name).sweeps == [own.sweep_id]


def test_archiving_again_rewrites_a_damaged_file_of_the_same_sweep(tmp_path):
    archived = archive.archive(sweep_runs(), tmp_path)
    whole = archived.path.read_bytes()
    archived.path.write_bytes(whole[: len(whole) // 2])  # a write cut short
    with pytest.warns(DamagedArchiveWarning, match=re.escape(str(archived.path))):
        again = archive.archive(sweep_runs(), tmp_path)
    assert again == archived and query.unreadable(archived.path) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no file skipped any more
        assert len(query.archived_runs(tmp_path)) == 4


def write_foreign(folder: Path) -> Path:
    import duckdb

    foreign = folder / "sweep-20200101T000000Z-abcdefabcdef.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS x, 'a' AS y) TO '{foreign}' (FORMAT parquet)")
    return foreign


def test_a_foreign_parquet_file_named_like_an_archive_is_skipped_with_a_warning(tmp_path):
    archived = archive.archive(sweep_runs(), tmp_path)
    foreign = write_foreign(tmp_path)
    with pytest.warns(query.ForeignFileWarning) as caught:
        table = query.sweeps_table(tmp_path)
    assert table["sweep_id"].tolist() == [archived.sweep_id]
    assert [str(w.message) for w in caught] == [
        f"sweep history: skipping {foreign}: a Parquet file named like an archive but none (no sweep_id column)"]
    assert query.unreadable(foreign) == "not a sweep archive (no sweep_id column)"
    result = scalesweep_cli("history", "--history", tmp_path)
    assert result.returncode == 0 and archived.sweep_id in result.stdout
    assert result.stderr.splitlines() == [f"scalesweep history: warning: {caught[0].message}"]


def test_a_history_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path, monkeypatch):
    import errno
    import tempfile

    folder = tmp_path / "read-only"
    folder.mkdir()

    def refused(*args, **kwargs):  # what a folder without write permission gives (root writes anyway)
        raise PermissionError(errno.EACCES, "Permission denied", str(folder))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    with pytest.raises(ValueError) as caught:
        archive.archive(sweep_runs(), folder)
    assert str(caught.value) == (f"history folder {folder}: cannot be written (Permission denied): "
                                 "history_dir must name a folder you can write")
    assert list(folder.iterdir()) == []


def scalesweep_cli(*args):
    return subprocess.run([sys.executable, "-m", "scalesweep", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True)


def write_sweep_file(folder: Path, runs: pd.DataFrame, sweep_id: str) -> Path:
    """An archive file written the way another process's archive() writes it, unseen by this one."""
    path = folder / f"{query.FILE_PREFIX}{sweep_id}{query.FILE_SUFFIX}"
    archive.write_parquet_atomic(archive.archive_frame(runs, sweep_id, "2026-11-01T08:00:00+00:00", None, None), path)
    return path


def test_archiving_sees_files_added_and_replaced_since_it_last_read_the_history(tmp_path):
    # Archiving reads only the files added since this process last read the history (each sweep
    # read every file: quadratic); what it read before counts only while the file is unchanged.
    first = archive.archive(runs_with_ids(), tmp_path)
    added = runs_with_ids().assign(run_id=["r5", "r6", "r7", "r8"])
    other = write_sweep_file(tmp_path, added, "20261101T080000Z-0000000000aa")
    again = archive.archive(added, tmp_path)
    assert (again.sweep_id, again.runs) == ("20261101T080000Z-0000000000aa", 0)  # the added file's runs are held
    # The first sweep's file replaced by one holding other runs: r1-r4 are no longer held.
    write_sweep_file(tmp_path, runs_with_ids().assign(run_id=["x1", "x2", "x3", "x4"]), first.sweep_id)
    anew = archive.archive(runs_with_ids().head(2), tmp_path)
    assert anew.runs == 2 and anew.path not in (first.path, other)
    assert sorted(query.archived_runs(tmp_path)["run_id"]) == sorted(
        ["r1", "r2", "r5", "r6", "r7", "r8", "x1", "x2", "x3", "x4"])


def test_the_reading_database_is_kept_while_files_are_only_added(tmp_path):
    archive.archive(sweep_runs(), tmp_path)
    query.archived_runs(tmp_path)
    reader = query._reader["connection"]
    archive.archive(sweep_runs(driver="550.54.15"), tmp_path)
    assert sorted(set(query.archived_runs(tmp_path)["gpu_driver"])) == ["535.104.05", "550.54.15"]
    assert query._reader["connection"] is reader  # the footers read before are read from its cache
    archive.archive(sweep_runs(), tmp_path / "other")
    query.archived_runs(tmp_path / "other")
    assert query._reader["connection"] is not reader  # another folder: a database confined to it


@pytest.mark.parametrize("filters", [("--where", "gpu_moddel = 'x'"), ("gpu_moddel=x",)])
def test_a_filter_naming_an_unknown_column_is_one_line_listing_the_columns(tmp_path, filters):
    archive.archive(sweep_runs(), tmp_path)
    result = scalesweep_cli("history", "--history", tmp_path, *filters)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("scalesweep history: no column 'gpu_moddel' in the runs (columns: sweep_id, ")
    assert "gpu_model" in line and "Binder Error" not in line


def test_a_file_replaced_within_the_same_second_is_read_anew(tmp_path):
    # Reads share one DuckDB database and its Parquet footer cache: a file replaced since the last
    # read (here keeping its old modification time) is read anew, footer and rows.
    archived = archive.archive(sweep_runs(), tmp_path)
    assert query.archived_runs(tmp_path)["throughput_img_s"].tolist()[:3] == [100.0, 102.0, 190.0]
    before = archived.path.stat()
    shorter = sweep_runs().head(2).assign(throughput_img_s=[50.0, 51.0])
    archive.write_parquet_atomic(archive.archive_frame(shorter, archived.sweep_id, "2026-11-01", None, None),
                                 archived.path)
    import os

    os.utime(archived.path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert query.archived_runs(tmp_path)["throughput_img_s"].tolist() == [50.0, 51.0]


@pytest.mark.parametrize("filters", [("--where", "gpu_moddel = 'x'"), ("gpu_moddel=x",)])
def test_a_compare_filter_naming_an_unknown_column_is_one_line_listing_the_columns(tmp_path, filters):
    a = archive.archive(sweep_runs(), tmp_path / "h")
    b = archive.archive(sweep_runs(driver="550.54.15"), tmp_path / "h")
    if filters[0] == "--where":
        sides = [a.sweep_id, b.sweep_id, *filters]
    else:  # a selector as the candidate side
        sides = [a.sweep_id, filters[0]]
    result = scalesweep_cli("compare", *sides, "--history", tmp_path / "h", "--out", tmp_path / "cmp")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("scalesweep compare: no column 'gpu_moddel' in the runs (columns: ")
    assert "gpu_model" in line and "Binder Error" not in line
    assert not (tmp_path / "cmp" / "compare.csv").exists()


def test_compare_of_sweeps_with_no_configuration_in_common_is_one_line(tmp_path):
    a = archive.archive(sweep_runs(), tmp_path / "h")
    b = archive.archive(sweep_runs(model="vit_h_14", driver="550.54.15"), tmp_path / "h")
    result = scalesweep_cli("compare", a.sweep_id, b.sweep_id, "--history", tmp_path / "h", "--out", tmp_path / "cmp")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"scalesweep compare: {a.sweep_id} and {b.sweep_id} have no configuration in common (baseline 3, "
        "e.g. pytorch resnet50 tiny-224 gpus=1; candidate 3, e.g. pytorch vit_h_14 tiny-224 gpus=1): a "
        "configuration is its axes (framework, model, dataset, gpus), compared only where both ran it"]
    assert not (tmp_path / "cmp" / "compare.csv").exists()


def test_a_side_without_runs_says_so_and_where_says_how_many_it_left_out(tmp_path):
    empty = tmp_path / "runs.csv"
    sweep_runs().head(0).to_csv(empty, index=False)
    with pytest.raises(ValueError, match=f"^{re.escape(str(empty))}: holds no runs$"):
        load_side(str(empty), tmp_path / "h")
    archived = archive.archive(sweep_runs(), tmp_path / "h")
    with pytest.raises(ValueError, match=r": none of its 4 runs meets --where 'gpus > 8'$"):
        load_side(archived.sweep_id, tmp_path / "h", where="gpus > 8")


def test_a_side_naming_no_sweep_lists_the_newest_archived_ids(tmp_path):
    ids = [archive.archive(sweep_runs(start=f"2026-10-0{day}T08:00:00+00:00"), tmp_path).sweep_id
           for day in range(1, 8)]
    with pytest.raises(ValueError) as caught:
        check_side("20991231", tmp_path)
    newest = ", ".join(reversed(ids[-5:]))
    assert str(caught.value) == (f"no archived sweep '20991231' in {tmp_path}: archived: {newest} and 2 older "
                                 "(`scalesweep history` lists them)")
    with pytest.raises(ValueError, match="no archived run in .* matches 'cluster=jureca': archived: "):
        check_side("cluster=jureca", tmp_path)
    check_side(ids[0][:12], tmp_path)  # a unique prefix, selectors that match, a path: fine
    check_side("cluster=mn5", tmp_path)
    check_side(str(tmp_path), tmp_path)
    with pytest.raises(ValueError, match="the history holds no sweep$"):
        check_side("2026", tmp_path / "empty")
