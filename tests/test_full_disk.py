"""A full or read-only disk during the failure handler (issue 28, point 5): Snakemake's `onerror`
still prints the closing lines (runs ok and failed, each failure's reason), names the file it
could not write and why, and damages nothing already written: runs.csv is the previous one,
whole, or the new one, whole. On real file systems: a small tmpfs filled to the last byte, and
one mounted read-only (we are root; without root these tests are skipped)."""

import errno
import os
import shutil
import subprocess

import pandas as pd
import pytest
import yaml

from conftest import TINY, snakemake
from scalesweep.contract import atomic, layout

FAILED_RUN = "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16/train.log"
FAILED_ATTEMPTS = "logs/train/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2/epochs~2/per_gpu_batch~16.attempt-*.log"


def mount_tmpfs(folder, size="16m"):
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)


def unmount(folder):
    subprocess.run(["umount", "--lazy", str(folder)], check=True)


def fill(folder):
    """Write one file until the file system has no byte left (ENOSPC), as a full disk is."""
    chunk = b"\0" * 65536
    with open(folder / "filler", "wb", buffering=0) as filler:
        while True:
            try:
                filler.write(chunk)
            except OSError as error:
                assert error.errno == errno.ENOSPC
                break
    while True:  # the last few bytes
        try:
            with open(folder / "filler", "ab", buffering=0) as filler:
                filler.write(b"\0")
        except OSError:
            return


def remount_read_only_when_started(folder, attempts, timeout_s=600):
    """A thread that remounts `folder` read-only as soon as a new attempt log matching
    `attempts` appears (the job has started; its trainer crashes seconds later, after importing
    torch), as a file system does that turns read-only on an I/O error. `.done` says it did."""
    import threading
    import time

    before = set(attempts.parent.glob(attempts.name))

    def watch():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if set(attempts.parent.glob(attempts.name)) - before:
                subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
                thread.done = True
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.done = False
    thread.start()
    return thread


@pytest.fixture
def small_disk(tmp_path):
    folder = tmp_path / "disk"
    mount_tmpfs(folder, "1m")
    yield folder
    unmount(folder)


def test_tables_that_belong_together_are_replaced_together_or_not_at_all(small_disk):
    epochs, runs = small_disk / "epochs.csv", small_disk / "runs.csv"
    epochs.write_text("epoch\n1\n")
    runs.write_text("status\nok\n")
    small = pd.DataFrame({"epoch": [1, 2]})
    large = pd.DataFrame({"status": ["failed"] * 200_000})  # about 1.4 MB: more than the disk holds
    with pytest.raises(OSError) as caught:
        atomic.write_csvs({epochs: small, runs: large})
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(runs)
    # the first table fitted, yet neither replaced the one before it, and no temporary is left
    assert (epochs.read_text(), runs.read_text()) == ("epoch\n1\n", "status\nok\n")
    assert sorted(path.name for path in small_disk.iterdir()) == ["epochs.csv", "runs.csv"]


@pytest.mark.slow
@pytest.mark.parametrize(("disk", "mounted"), [("full", "results"), ("read-only", "results/tidy")])
def test_the_failure_handler_survives_a_full_or_read_only_disk(tiny_sweep, tmp_path, monkeypatch, disk, mounted):
    # A full disk holds all of results/. A read-only one holds only the tables: on a read-only
    # results/ Snakemake 9.27.1 itself ends with a traceback before any handler runs (its
    # DAG.cleanup_workdir removes the failed job's empty output folder; docs/hostile-cases.md).
    sweep = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, sweep, symlinks=True)
    (sweep / FAILED_RUN).unlink()
    # the folder moves onto a file system of its own, which then fills up (or turns read-only)
    disk_folder = sweep / mounted
    shutil.move(disk_folder, tmp_path / "saved")
    mount_tmpfs(disk_folder)
    try:
        shutil.copytree(tmp_path / "saved", disk_folder, symlinks=True, dirs_exist_ok=True)
        tidy = sweep / "results" / "tidy"
        before = {name: (tidy / name).read_bytes() for name in ("epochs.csv", "runs.csv")}
        if disk == "full":
            fill(disk_folder)
        else:  # once the job runs: Snakemake refuses outputs it cannot write before any job starts
            remounted = remount_read_only_when_started(disk_folder, sweep / FAILED_ATTEMPTS)
        monkeypatch.setenv("SCALESWEEP_FAIL_INJECT", "crash")
        # the history elsewhere: a read-only one is refused before any job (test_history_place.py)
        config = tmp_path / "c.yaml"
        settings = {**yaml.safe_load(TINY.read_text()), "history_dir": str(tmp_path / "h")}
        config.write_text(yaml.safe_dump(settings, sort_keys=False))  # in order: key order reaches params
        result = snakemake(sweep, "--cores", "2", "--keep-going", configfile=config)
        if disk == "read-only":
            remounted.join()
            assert remounted.done, "the job ended before its file system was made read-only: inconclusive"
        after = {name: (tidy / name).read_bytes() for name in before}
        left = sorted(path.name for path in tidy.iterdir())
    finally:
        unmount(disk_folder)
    why = "No space left on device" if disk == "full" else "Read-only file system"
    assert result.returncode != 0, result.stderr[-4000:]
    lines = result.stderr.splitlines()
    # the first file the failure path writes is its marker (scalesweep/tidy/after_failure.py)
    assert (f"scalesweep: {layout.WRITTEN_AFTER_FAILURE}: not written ({why}): the tidy tables, and the tables, "
            "figures and findings made from them, are those of before this sweep") in lines, result.stderr[-4000:]
    assert "scalesweep: 4 runs: 3 ok, 1 failed (not written to results/tidy/runs.csv)" in lines
    (failed,) = [line for line in lines if line.startswith("  failed: pytorch vit_tiny synth-folder gpus=2: ")]
    assert "injected crash" in failed
    assert "  the same command again runs only the 1 configuration(s) without a result" in lines
    # nothing already written was damaged: the tables are those of before, whole; no temporary left
    assert after == before and left == ["epochs.csv", "runs.csv"]


def runs_of_two_models():
    return pd.DataFrame([
        {"framework": "tensorflow", "model": model, "dataset": "c", "gpus": gpus, "nodes": 1,
         "repeat": 0, "per_gpu_batch": 64, "status": "ok", "epochs": 3,
         "steady_epoch_time_s": 100.0 * factor / gpus ** 0.9, "throughput_img_s": 500.0 * gpus ** 0.9 / factor,
         "total_time_s": 300.0 * factor / gpus ** 0.8}
        for model, factor in (("a", 1.0), ("b", 2.0)) for gpus in (1, 2, 4)])


@pytest.mark.slow
def test_a_rebuild_the_disk_stops_part_way_leaves_no_mix_of_old_and_new(small_disk):
    """The tables fit, the figures do not: the new tables beside the findings of before would
    tell two different sweeps; the derived files go, runs.csv stays, and the line says so."""
    from scalesweep import pipeline
    from scalesweep.analysis import tables
    from scalesweep.plan.analysis_settings import AnalysisSettings

    runs_csv = small_disk / "tidy" / "runs.csv"
    runs_csv.parent.mkdir()
    runs_of_two_models().to_csv(runs_csv, index=False)
    measured = runs_csv.read_bytes()
    outputs = tables.outputs_in(small_disk / "tables")
    figures_dir, findings = small_disk / "figures", small_disk / "findings.md"
    for old in [*outputs.values(), figures_dir / "time_all.png", findings]:
        old.parent.mkdir(parents=True, exist_ok=True)
        old.write_text("of the sweep before")
    fill(small_disk)
    filler = small_disk / "filler"
    os.truncate(filler, filler.stat().st_size - 120_000)  # room for the tables, not the figures

    line = pipeline.rebuild_tables_and_figures(runs_csv, outputs, AnalysisSettings.from_config(),
                                               figures_dir, findings)
    assert line.startswith("scalesweep: tables, figures and findings not all rebuilt: ")
    assert "No space left on device" in line and "removed them" in line, line
    assert not any(path.exists() for path in [*outputs.values(), findings, figures_dir])
    assert runs_csv.read_bytes() == measured
