"""The history compacted into stores (scalesweep/history/store.py): compacting loses nothing and
doubles nothing, whatever point it is cut at and however many compact at once; a copy of any
archive file, under any name, of any format, adds no run."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.history import archive, query, store

REPO = Path(__file__).resolve().parents[1]


def sweep(number, with_ids=True, old_format=False):
    """One sweep's three runs; `old_format`: as archived before run ids and the requested batch."""
    frame = pd.DataFrame({
        "run_id": [f"s{number}-r{n}" for n in range(3)], "framework": "pytorch", "model": "resnet50",
        "dataset": "tiny-224", "gpus": [1, 2, 4], "repeat": 0, "per_gpu_batch": 64,
        "requested_per_gpu_batch": [64, 64, None], "status": ["ok", "ok", "oom"],
        "throughput_img_s": [100.0 + number, 190.0 + number, None], "gpu_model": "NVIDIA H100",
        "gpu_driver": f"5{number:02d}.0", "cluster": "mn5",
    })
    if old_format:
        frame = frame.drop(columns=["run_id", "requested_per_gpu_batch"]).assign(legacy_note="older")
    elif not with_ids:
        frame = frame.drop(columns=["run_id"])
    return frame


def write_loose(folder: Path, count: int) -> None:
    """`count` sweep files as archiving writes them, without compacting: a third of them in the
    older format (no run ids, no requested_per_gpu_batch, a column the others lack)."""
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        sweep_id = f"202611{number + 1:02d}T080000Z-{number:012x}"
        frame = archive.archive_frame(sweep(number, old_format=number % 3 == 0), sweep_id,
                                      f"2026-11-{number + 1:02d}T08:00:00+00:00", {"n": number}, None)
        archive.write_parquet_atomic(frame, folder / f"sweep-{sweep_id}.parquet")


def everything(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every archived run (sorted, every column) and the listing: what compacting must keep."""
    runs = query.archived_runs(folder)
    runs = runs.sort_values(["sweep_id", "gpus"]).reset_index(drop=True)
    return runs[sorted(runs.columns)], query.sweeps_table(folder)


def assert_same(before, after):
    pd.testing.assert_frame_equal(before[0], after[0])
    pd.testing.assert_frame_equal(before[1], after[1])


def test_compacting_keeps_every_run_column_and_sweep_and_removes_what_it_replaced(tmp_path):
    folder = tmp_path / "history"
    write_loose(folder, store.COMPACT_AT)
    before = everything(folder)
    assert len(before[0]) == 3 * store.COMPACT_AT and before[0]["run_id"].isna().sum() == 3 * 6
    compacted = archive.compact(folder)
    assert [path.name for path in folder.iterdir()] == [compacted.name]
    assert compacted.name.startswith(store.STORE_PREFIX)
    assert_same(before, everything(folder))
    # The next sweeps stay in their own files until COMPACT_AT of them lie beside the store.
    added = archive.archive(sweep(40), folder)
    assert added.path.name == f"sweep-{added.sweep_id}.parquet" and len(query.sweep_files(folder)) == 2
    assert len(query.archived_runs(folder)) == 3 * store.COMPACT_AT + 3
    assert archive.archive(sweep(40), folder).runs == 0  # held: nothing written


def test_compacted_sweeps_are_found_by_id_and_compared(tmp_path):
    from scalesweep.history.sides import load_side

    folder = tmp_path / "history"
    write_loose(folder, store.COMPACT_AT)
    archive.compact(folder)
    side = load_side("20261102T08", folder)
    assert side.sweeps == ["20261102T080000Z-000000000001"] and len(side.runs) == 3
    assert side.runs["gpu_driver"].unique().tolist() == ["501.0"]
    with pytest.raises(ValueError, match="ambiguous"):
        load_side("202611", folder)


def crash_states(folder: Path, saved: Path):
    """The folder as a compaction cut short leaves it: the store in place and some or all of the
    files it replaced still there (each deletion is the last step, one file at a time)."""
    compacted = archive.compact(folder)
    replaced = sorted(saved.iterdir())
    for kept in (len(replaced), len(replaced) // 2, 1):
        for path in replaced[:kept]:
            shutil.copy2(path, folder / path.name)
        yield compacted, kept
        for path in replaced[:kept]:
            (folder / path.name).unlink(missing_ok=True)


def test_a_compaction_cut_short_at_any_point_loses_nothing_and_doubles_nothing(tmp_path):
    folder, saved = tmp_path / "history", tmp_path / "saved"
    write_loose(folder, store.COMPACT_AT)
    shutil.copytree(folder, saved)
    before = everything(folder)
    for compacted, kept in crash_states(folder, saved):
        assert compacted.exists() and len(query.sweep_files(folder)) == kept + 1
        assert_same(before, everything(folder))
    # Cut before its rename: only a hidden temporary file, which no reader reads.
    (folder / f".{compacted.name}.x.tmp").write_bytes(b"PAR1 half")
    assert_same(before, everything(folder))


def test_a_second_compaction_after_one_cut_short_removes_the_rest(tmp_path):
    folder, saved = tmp_path / "history", tmp_path / "saved"
    write_loose(folder, store.COMPACT_AT)
    shutil.copytree(folder, saved)
    before = everything(folder)
    first = archive.compact(folder)
    for path in saved.iterdir():  # cut short before any deletion
        shutil.copy2(path, folder / path.name)
    assert archive.compact(folder) == first  # the same sweeps: the same store, written again
    assert [path.name for path in folder.iterdir()] == [first.name]
    assert_same(before, everything(folder))


COMPACTOR = """
import sys, time
sys.path.insert(0, {repo!r})
from scalesweep.history import archive
folder, go = sys.argv[1], float(sys.argv[2])
while time.time() < go:
    time.sleep(0.001)
archive.compact(folder)
"""


@pytest.mark.slow
def test_two_compactions_at_once_lose_nothing(tmp_path):
    import time

    folder = tmp_path / "history"
    write_loose(folder, 2 * store.COMPACT_AT)
    before = everything(folder)
    go = time.time() + 2.0
    script = COMPACTOR.format(repo=str(REPO))
    compactors = [subprocess.Popen([sys.executable, "-c", script, str(folder), str(go)]) for _ in range(2)]
    assert [process.wait(timeout=300) for process in compactors] == [0, 0]
    assert_same(before, everything(folder))
    assert not [path for path in folder.iterdir() if path.name.startswith(".")]


def history_listing(folder: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "scalesweep", "history", "--history", str(folder)],
                            cwd=folder.parent, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def copy_under_another_name(original: Path) -> None:
    shutil.copy(original, original.with_name("sweep-backup.parquet"))


def copy_with_a_new_mtime(original: Path) -> None:
    copy = original.with_name(f"sweep-{query.sweep_id_of(original)}-copy.parquet")
    copy.write_bytes(original.read_bytes())
    os.utime(copy, (1e9, 1e9))


def copy_of_the_store(original: Path) -> None:
    compacted = archive.compact(original.parent, at=1)
    shutil.copy(compacted, compacted.with_name(f"{store.STORE_PREFIX}copy.parquet"))


@pytest.mark.parametrize("copy", [copy_under_another_name, copy_with_a_new_mtime, copy_of_the_store])
@pytest.mark.parametrize("with_ids", [True, False], ids=["runs-with-ids", "older-format-without-ids"])
def test_a_copy_of_any_archive_file_adds_no_run_to_the_listing(tmp_path, copy, with_ids):
    """Issue 38: the runs of a copied file were listed twice (18 for 9) where the runs had no
    ids (a sweep archived by an older version): copies are now found by sweep id, not run id."""
    folder = tmp_path / "history"
    write_loose(folder, 3)
    archived = archive.archive(sweep(50, with_ids=with_ids), folder)
    before = everything(folder)
    copy(archived.path)
    assert len(query.sweep_files(folder)) >= 2
    assert_same(before, everything(folder))
    listed = history_listing(folder)
    assert listed.count(archived.sweep_id) == 1
