"""A run the history holds twice (a copied archive file, a run archived again by a later sweep,
one file naming a run twice) is read once, from its oldest sweep, before any filter applies;
and the history's answers follow files added after a first query."""

import shutil

import pandas as pd
import pytest

from scalesweep.history import archive, query

DRIVER_A, DRIVER_B = "535.104.05", "550.54.15"


def runs(run_ids, driver=DRIVER_A, extra=None):
    frame = pd.DataFrame({
        "run_id": list(run_ids), "framework": "pytorch", "model": "resnet50", "dataset": "tiny-224",
        "gpus": [1 + n for n in range(len(run_ids))], "nodes": 1, "repeat": 0, "status": "ok",
        "throughput_img_s": [100.0 + n for n in range(len(run_ids))], "gpu_model": "NVIDIA H100",
        "gpu_driver": driver, "cluster": "mn5",
    })
    for key, value in (extra or {}).items():
        frame[key] = value
    return frame


def write_sweep(folder, frame, sweep_id, name=None):
    """An archive file as archive() writes one, without its check that each run is new."""
    path = folder / (name or f"{query.FILE_PREFIX}{sweep_id}{query.FILE_SUFFIX}")
    archive.write_parquet_atomic(archive.archive_frame(frame, sweep_id, "2026-11-01T08:00:00+00:00", None, None), path)
    return path


OLD, NEW = "20261101T080000Z-00000000000a", "20261102T080000Z-00000000000b"


@pytest.mark.parametrize("extra", [None, {"filename": "run.log", "file_row_number": 7}],
                         ids=["plain", "runs-with-duckdb-row-place-names"])
def test_a_run_archived_again_is_its_oldest_sweeps_row_and_filters_apply_after(tmp_path, extra):
    # r3 and r4 archived again by the newer sweep with another driver: their oldest rows say
    # DRIVER_A, so a filter on DRIVER_B must not find them through the newer copies.
    write_sweep(tmp_path, runs(["r1", "r2", "r3", "r4"], DRIVER_A, extra), OLD)
    write_sweep(tmp_path, runs(["r3", "r4", "r5", "r6"], DRIVER_B, extra), NEW)
    every = query.archived_runs(tmp_path)
    assert sorted(zip(every["run_id"], every["sweep_id"], every["gpu_driver"])) == [
        ("r1", OLD, DRIVER_A), ("r2", OLD, DRIVER_A), ("r3", OLD, DRIVER_A), ("r4", OLD, DRIVER_A),
        ("r5", NEW, DRIVER_B), ("r6", NEW, DRIVER_B)]
    assert sorted(query.archived_runs(tmp_path, selectors=[f"gpu_driver={DRIVER_B}"])["run_id"]) == ["r5", "r6"]
    assert sorted(query.archived_runs(tmp_path, where=f"gpu_driver = '{DRIVER_B}'")["run_id"]) == ["r5", "r6"]
    assert sorted(query.archived_runs(tmp_path, selectors=[f"sweep_id={NEW}"])["run_id"]) == ["r5", "r6"]
    listing = query.sweeps_table(tmp_path)
    assert listing[["sweep_id", "runs"]].values.tolist() == [[OLD, 4], [NEW, 2]]
    if extra:  # the runs' own columns of those names are read as they are
        assert set(every["filename"]) == {"run.log"} and set(every["file_row_number"]) == {7}


def test_a_run_named_twice_in_one_file_and_a_copied_file_are_each_read_once(tmp_path):
    original = write_sweep(tmp_path, runs(["r1", "r2", "r2", "r3"]), OLD)
    shutil.copyfile(original, tmp_path / "sweep-backup.parquet")  # same sweep id inside
    every = query.archived_runs(tmp_path)
    assert sorted(every["run_id"]) == ["r1", "r2", "r3"]
    # Of r2's four rows the first of the first file by name is kept (gpus 2, not 3).
    assert every.set_index("run_id").loc["r2", "gpus"] == 2


def test_copies_archived_after_a_first_query_are_found(tmp_path):
    original = write_sweep(tmp_path, runs(["r1", "r2"]), OLD)
    assert len(query.archived_runs(tmp_path)) == 2  # the process now reads this history
    shutil.copyfile(original, tmp_path / "sweep-copy.parquet")
    write_sweep(tmp_path, runs(["r2", "r3"], DRIVER_B), NEW)
    assert sorted(query.archived_runs(tmp_path)["run_id"]) == ["r1", "r2", "r3"]
    assert sorted(query.archived_runs(tmp_path, selectors=[f"gpu_driver={DRIVER_B}"])["run_id"]) == ["r3"]
    (tmp_path / "sweep-copy.parquet").unlink()
    assert sorted(query.archived_runs(tmp_path)["run_id"]) == ["r1", "r2", "r3"]


def test_runs_without_ids_are_all_kept_beside_runs_with_ids(tmp_path):
    write_sweep(tmp_path, runs(["r1", "r2"]).drop(columns=["run_id"]), OLD)
    write_sweep(tmp_path, runs(["r1", None]), NEW)
    every = query.archived_runs(tmp_path)
    assert len(every) == 4 and every["run_id"].isna().sum() == 3


# ----------------------------------------------------------------------------- two selections, one reading

def test_two_selections_read_together_are_each_what_it_reads_alone(tmp_path):
    from scalesweep.history.sides import load_side, load_sides

    write_sweep(tmp_path, runs(["r1", "r2", "r3"], DRIVER_A), OLD)
    # r4's cluster is missing (NULL): no selection on the cluster holds it, and it breaks none
    write_sweep(tmp_path, runs(["r3", "r4", "r5"], DRIVER_B).assign(cluster=["mn5", None, "leonardo"]), NEW)
    specs = {"baseline": f"gpu_driver={DRIVER_A},cluster=mn5", "candidate": "cluster=mn5,gpus=1",
             "third": "cluster=leonardo"}
    together = load_sides(specs, tmp_path)
    alone = [load_side(spec, tmp_path, role=role) for role, spec in specs.items()]
    for one, other in zip(together, alone):
        assert one.label == other.label
        pd.testing.assert_frame_equal(one.runs, other.runs)
    assert [sorted(side.runs["run_id"]) for side in together] == [["r1", "r2", "r3"], ["r1"], ["r5"]]
    # r3 is the older sweep's (gpus 3): its newer copy's gpus=1 and sweep id select it on neither side
    by_gpus, by_sweep = load_sides({"a": "gpus=1", "b": f"sweep_id={NEW}"}, tmp_path)
    assert by_gpus.runs["run_id"].tolist() == ["r1"] and sorted(by_sweep.runs["run_id"]) == ["r4", "r5"]


def test_a_selection_that_fails_is_named_as_when_read_alone(tmp_path):
    from scalesweep.history.sides import load_sides

    write_sweep(tmp_path, runs(["r1", "r2"]), OLD)
    with pytest.raises(ValueError, match=f"no archived run in {tmp_path} matches 'cluster=nowhere'"):
        load_sides({"baseline": "cluster=nowhere", "candidate": "gpu_moddel=x"}, tmp_path)
    with pytest.raises(ValueError, match="no column 'gpu_moddel' in the runs"):
        load_sides({"baseline": "cluster=mn5", "candidate": "gpu_moddel=x"}, tmp_path)
