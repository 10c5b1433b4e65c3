"""`python -m scalesweep analyze`: logs and runs tables in, tidy/tables/figures out."""

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "data" / "logs"


def analyze(*args, cwd=REPO):
    return subprocess.run(
        [sys.executable, "-m", "scalesweep", "analyze", *map(str, args)],
        cwd=cwd, capture_output=True, text=True,
    )


def hand_made_runs():
    """One group, 1/2/4 GPUs; 1000 images per epoch. Hand computations:
    T = 10, 6, 4 s  -> speedup 1, 10/6 = 1.6667, 10/4 = 2.5
    efficiency = speedup / N: 100 %, 83.33 %, 62.5 %
    throughput = 100, 166.67, 250 img/s; ideal = 100, 200, 400 img/s
    total time 60, 40, 32 s -> tts speedup 1, 1.5, 1.875
    """
    rows = []
    for gpus, seconds, total in [(1, 10.0, 60.0), (2, 6.0, 40.0), (4, 4.0, 32.0)]:
        rows.append({
            "framework": "tensorflow", "model": "resnet50v2", "dataset": "cifar128",
            "gpus": gpus, "nodes": 1, "repeat": 0, "per_gpu_batch": 256,
            "global_batch": 256 * gpus, "world_size": gpus, "status": "ok", "reason": "",
            "epochs": 3, "steady_epoch_time_s": seconds, "throughput_img_s": 1000 / seconds,
            "throughput_per_gpu_img_s": 1000 / seconds / gpus, "total_time_s": total,
            "memory_gb": None, "peak_host_rss_gb": 1.0, "protocol": "epochs",
            "log_format": "scalesweep", "log": f"run{gpus}.log",
        })
    return pd.DataFrame(rows)


def test_analyze_hand_made_table_gives_hand_checked_speedups(tmp_path):
    runs_csv = tmp_path / "runs.csv"
    hand_made_runs().to_csv(runs_csv, index=False)
    result = analyze(runs_csv, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(tmp_path / "out" / "tables" / "scaling.csv").set_index("gpus")
    assert table["speedup"].tolist() == pytest.approx([1.0, 10 / 6, 2.5])
    assert table["efficiency_pct"].tolist() == pytest.approx([100.0, 83.3333, 62.5], rel=1e-4)
    assert table["ideal_throughput_img_s"].tolist() == pytest.approx([100.0, 200.0, 400.0])
    assert table["tts_speedup"].tolist() == pytest.approx([1.0, 1.5, 1.875])
    for name in ("tidy/runs.csv", "tidy/epochs.csv", "tables/fits.csv", "tables/sweet_spot.csv",
                 "figures/speedup_all.png", "figures/efficiency_by_model.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0, name


def test_analyze_folder_of_reference_logs(tmp_path):
    """The three reference Keras 2 logs (1/2/4 GPUs) make one scaling series."""
    folder = tmp_path / "reference"
    folder.mkdir()
    for gpus in (1, 2, 4):
        name = f"tf_keras2_resnet50_{gpus}gpus.log"
        (folder / name).write_text((LOGS / name).read_text())
    result = analyze(folder, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(tmp_path / "out" / "tables" / "scaling.csv")
    assert table["gpus"].tolist() == [1, 2, 4]
    assert table["speedup"].iloc[0] == 1.0
    assert (table["speedup"].iloc[1:] > 1).all()


def test_manifest_gives_the_world_size_of_ddp_logs(tmp_path):
    folder = tmp_path / "ddp"
    folder.mkdir()
    (folder / "first.log").write_text((LOGS / "ddp_vit_4gpus.log").read_text())
    (folder / "manifest.csv").write_text("file,gpus,nodes\nfirst.log,8,2\n")
    result = analyze(folder, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    assert runs.loc[0, "gpus"] == 8 and runs.loc[0, "nodes"] == 2


def test_missing_path_is_a_clear_error(tmp_path):
    result = analyze(tmp_path / "nope.log", "--out", tmp_path / "out")
    assert result.returncode == 2
    assert "nope.log" in result.stderr and "Traceback" not in result.stderr


def test_empty_and_truncated_logs_become_failed_rows_not_numbers(tmp_path):
    result = analyze(LOGS / "empty.log", LOGS / "scalesweep_truncated.log",
                     LOGS / "scalesweep_ok.log", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    failed = runs[runs["status"] != "ok"]
    assert len(failed) == 2
    assert failed["steady_epoch_time_s"].isna().all() and failed["reason"].notna().all()


# --- broken input: each refused input listed, the rest written, exit status 1 ----------------


def test_binary_runs_csv_is_refused_naming_file_and_line_and_the_log_still_analysed(tmp_path):
    binary = tmp_path / "runs.csv"
    binary.write_bytes(b"gpus,status\n1,ok\n\x89PNG\r\n\x1a\n\x00\xff")
    result = analyze(binary, LOGS / "scalesweep_ok.log", "--out", tmp_path / "out")
    assert result.returncode == 1, result.stderr
    assert f"  {binary}:3: not a UTF-8 text CSV (byte 0x89: invalid start byte)" in result.stderr
    assert "Traceback" not in result.stderr and "codec" not in result.stderr
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    assert list(runs["status"]) == ["ok"]

    alone = analyze(binary, "--out", tmp_path / "out2")
    assert alone.returncode == 2
    assert f"{binary}:3: not a UTF-8" in alone.stderr and "no runs found" in alone.stderr
    assert "Traceback" not in alone.stderr


def test_malformed_runs_csv_names_the_file_and_line(tmp_path):
    ragged = tmp_path / "runs.csv"
    hand_made_runs().to_csv(ragged, index=False)
    ragged.write_text(ragged.read_text() + "1,2,3\n" + "4," * 40 + "\n")
    result = analyze(ragged, LOGS / "scalesweep_ok.log", "--out", tmp_path / "out")
    assert result.returncode == 1
    assert re.search(rf"{re.escape(str(ragged))}: cannot read the runs table: .*line 6", result.stderr)


def test_bad_value_in_a_generated_runs_csv_names_the_log_it_came_from(tmp_path):
    runs = hand_made_runs().astype({"gpus": object})
    runs.loc[1, "gpus"] = "two"
    runs.to_csv(tmp_path / "runs.csv", index=False)
    result = analyze(tmp_path / "runs.csv", "--out", tmp_path / "out")
    assert result.returncode == 2  # the only input
    assert (f"{tmp_path / 'runs.csv'} line 3: column 'gpus' holds 'two', not a number "
            "(the run of run2.log)") in result.stderr


def test_manifest_row_with_a_bad_count_leaves_that_log_out_only(tmp_path):
    folder = tmp_path / "ddp"
    folder.mkdir()
    for name in ("first.log", "second.log"):
        (folder / name).write_text((LOGS / "ddp_vit_4gpus.log").read_text())
    (folder / "manifest.csv").write_text("file,gpus\nfirst.log,four\nsecond.log,4\n")
    result = analyze(folder, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert (f"  {folder / 'manifest.csv'}:2: column 'gpus' must be a whole number >= 0, got 'four'; "
            f"{folder / 'first.log'} left out") in result.stderr
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    assert list(runs["log"]) == [str(folder / "second.log")] and runs.loc[0, "gpus"] == 4


def test_unreadable_manifest_leaves_its_folder_out(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.log").write_text((LOGS / "scalesweep_ok.log").read_text())
    (folder / "manifest.csv").write_bytes(b"file,gpus\na.log,\xff\n")
    result = analyze(folder, LOGS / "scalesweep_ok.log", "--out", tmp_path / "out")
    assert result.returncode == 1
    assert f"{folder / 'manifest.csv'}:2: not a UTF-8 text CSV" in result.stderr
    assert f"the logs of {folder} left out" in result.stderr
    assert len(pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")) == 1


def workflow_log_folders(root):
    """A sweep's own folders: logs/train with a failed attempt, the attempt that succeeded and
    the `<run>.log` link to it; results/runs with the successful run's copy."""
    attempts = root / "logs/train/pytorch/model~vit_tiny/dataset~synth-folder"
    attempts.mkdir(parents=True)
    (attempts / "gpus~2.attempt-1.log").write_text((LOGS / "scalesweep_truncated.log").read_text())
    (attempts / "gpus~2.attempt-2.log").write_text((LOGS / "scalesweep_ok.log").read_text())
    (attempts / "gpus~2.log").symlink_to("gpus~2.attempt-2.log")
    result = root / "results/runs/pytorch/model~vit_tiny/dataset~synth-folder/gpus~2"
    result.mkdir(parents=True)
    (result / "train.log").write_text((LOGS / "scalesweep_ok.log").read_text())
    return root / "logs/train", root / "results/runs"


@pytest.mark.parametrize("folder", ["logs/train", "results/runs"])
def test_analyze_reads_a_sweeps_folders_recursively_each_run_once_at_its_latest_attempt(tmp_path, folder):
    workflow_log_folders(tmp_path / "sweep")
    result = analyze(tmp_path / "sweep" / folder, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    runs = pd.read_csv(tmp_path / "out/tidy/runs.csv")
    assert runs.status.tolist() == ["ok"]
    assert Path(runs.log[0]).name in {"gpus~2.attempt-2.log", "train.log"}


def test_analyze_all_attempts_keeps_the_failed_attempt_but_never_a_link_twice(tmp_path):
    logs, _ = workflow_log_folders(tmp_path / "sweep")
    analyze(logs, "--out", tmp_path / "out", "--all-attempts")
    runs = pd.read_csv(tmp_path / "out/tidy/runs.csv")
    assert sorted(Path(log).name for log in runs.log) == ["gpus~2.attempt-1.log", "gpus~2.attempt-2.log"]
    assert sorted(runs.status) == ["failed", "ok"]


def test_out_that_is_a_file_or_under_a_file_is_one_line_naming_it(tmp_path):
    file = tmp_path / "taken"
    file.write_text("x")
    for out, problem in ((file, "is a file, not a folder"), (file / "sub", "cannot be made")):
        result = analyze(LOGS / "scalesweep_ok.log", "--out", out)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [f"scalesweep analyze: --out {out}: {problem}" + (
            ": Not a directory" if problem == "cannot be made" else "")]


@pytest.mark.parametrize("option", [("--efficiency-floor", "nan"), ("--efficiency-floor", "150"),
                                    ("--gpu-hour-budget", "inf"), ("--epoch-budget", "0")])
def test_numbers_that_would_switch_a_check_off_are_refused(tmp_path, option):
    result = analyze(LOGS / "scalesweep_ok.log", "--out", tmp_path / "out", *option)
    assert result.returncode == 2 and f"argument {option[0]}: {option[1]}: must be a finite number" in result.stderr


def compare(*args):
    return subprocess.run([sys.executable, "-m", "scalesweep", "compare", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True)


def test_the_regression_gate_fails_closed_when_it_cannot_judge(tmp_path):
    baseline, candidate = tmp_path / "baseline.csv", tmp_path / "candidate.csv"
    hand_made_runs().to_csv(baseline, index=False)
    failed = hand_made_runs().assign(status="failed", reason="RuntimeError: boom", steady_epoch_time_s=None,
                                     throughput_img_s=None, throughput_per_gpu_img_s=None, total_time_s=None)
    failed.to_csv(candidate, index=False)
    result = compare(baseline, candidate, "--out", tmp_path / "cmp", "--fail-above", "5")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "--fail-above cannot pass" in result.stderr and "have no verdict" in result.stderr
    nan_gate = compare(baseline, baseline, "--out", tmp_path / "cmp2", "--fail-above", "nan")
    assert nan_gate.returncode == 2 and "must be a finite number" in nan_gate.stderr


@pytest.mark.parametrize("given", ["folder", "files"])
def test_a_dangling_link_beside_a_valid_log_is_skipped_with_a_warning(tmp_path, given):
    """A `<run>.log` link whose attempt log was deleted holds no run: one warning naming it, and
    the valid log beside it is analysed (before: exit 2 for the files, a 'no log' row for the
    folder)."""
    folder = tmp_path / "logs"
    folder.mkdir()
    valid = folder / "scalesweep_ok.log"
    valid.write_bytes((LOGS / "scalesweep_ok.log").read_bytes())
    dangling = folder / "gone.log"
    dangling.symlink_to(tmp_path / "deleted.attempt-1.log")
    paths = [folder] if given == "folder" else [valid, dangling]
    result = analyze(*paths, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"scalesweep analyze: warning: {dangling}: dangling link (to {tmp_path / 'deleted.attempt-1.log'}), skipped"]
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    assert list(runs["log"]) == [str(valid)] and list(runs["status"]) == ["ok"]
    assert runs.loc[0, "throughput_img_s"] == pytest.approx(1024 / 9)  # images / median steady epoch


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"])
def test_a_utf16_log_is_refused_as_utf16_naming_the_file(tmp_path, encoding):
    """Saved by Windows PowerShell (`>`: UTF-16 with a byte order mark) or without one."""
    wide = tmp_path / "wide.log"
    wide.write_text((LOGS / "scalesweep_ok.log").read_text(), encoding=encoding)
    result = analyze(wide, LOGS / "scalesweep_ok.log", "--out", tmp_path / "out")
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[1] == (
        f"  {wide}: UTF-16 encoded (re-save as UTF-8, e.g. iconv -f UTF-16 -t UTF-8)")
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv")
    assert sorted(runs["status"]) == ["failed", "ok"]


@pytest.mark.parametrize("argv, status", [
    (["analyze", "no-such-logs", "--out", "out"], 2),  # refused input: FAILED_EXIT
    (["--version"], 0),  # argparse's own SystemExit
    (["no-such-command"], 2),
])
def test_python_m_scalesweep_keeps_its_exit_status_and_output_without_the_teardown(tmp_path, argv, status):
    """__main__ leaves without the interpreter's teardown (os._exit): the status is main's, and
    what was printed is all there, in a pipe too."""
    done = subprocess.run([sys.executable, "-m", "scalesweep", *argv], cwd=tmp_path, capture_output=True,
                          text=True)
    assert done.returncode == status, done.stderr
    assert (done.stdout + done.stderr).strip(), "nothing printed"
    if argv[0] == "analyze":
        assert "scalesweep analyze: no such file or folder: no-such-logs" in done.stderr


def test_python_m_scalesweep_runs_its_exit_handlers(tmp_path):
    """An exit handler a library registered (logging's flush, a multiprocessing finalizer) still
    runs before the process leaves."""
    program = ("import atexit, runpy, sys; atexit.register(lambda: print('handler ran', flush=True)); "
               "sys.argv = ['scalesweep', 'analyze', 'no-such-logs', '--out', 'out']; "
               "runpy.run_module('scalesweep', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip().endswith("handler ran")
