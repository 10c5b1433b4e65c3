"""A run read twice is one run (issue 28, point 3): `analyze` counts each run once by its run id,
wherever it was read from (a sweep's results/runs and logs/train together, a logs folder copied
with links followed, the same log named twice, a runs table beside its logs), and says how many
copies it left out."""

import shutil

import pandas as pd

from scalesweep.tidy.rows import runs_table
from test_cli import LOGS, analyze, workflow_log_folders


def scaling_runs(out):
    return pd.read_csv(out / "tables" / "scaling.csv")["n_runs"].tolist()


def test_a_sweeps_results_and_logs_analysed_together_count_each_run_once(tmp_path):
    logs, results = workflow_log_folders(tmp_path / "sweep")
    result = analyze(results, logs, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    runs = pd.read_csv(tmp_path / "out/tidy/runs.csv")
    assert runs["status"].tolist() == ["ok"] and runs["run_id"].is_unique
    assert scaling_runs(tmp_path / "out") == [1]
    # the epochs of the run once
    assert len(pd.read_csv(tmp_path / "out/tidy/epochs.csv")) == len(runs_table([(LOGS / "scalesweep_ok.log", {})])[0])
    lines = result.stdout.splitlines()
    assert lines[0] == ("scalesweep analyze: 1 duplicate copy of a run left out (a run read twice is "
                        "counted once, by run_id):")
    assert lines[1].startswith("  ") and "gpus~2.attempt-2.log: the same run as " in lines[1]
    assert lines[1].endswith("train.log (run_id " + runs["run_id"][0] + "): counted once")


def test_a_logs_folder_copied_with_links_followed_doubles_no_run(tmp_path):
    logs, _ = workflow_log_folders(tmp_path / "sweep")
    copied = tmp_path / "copied"
    shutil.copytree(logs, copied, symlinks=False)  # cp -rL, scp -r: the <run>.log link became a file
    assert not (copied / "pytorch/model~vit_tiny/dataset~synth-folder/gpus~2.log").is_symlink()
    result = analyze(logs, copied, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert scaling_runs(tmp_path / "out") == [1]
    assert "scalesweep analyze: 2 duplicate copies of runs left out" in result.stdout


def test_the_same_log_named_twice_and_a_runs_table_beside_its_logs_are_one_run(tmp_path):
    log = LOGS / "tf_keras2_resnet50_2gpus.log"
    first = analyze(log, log, "--out", tmp_path / "once")
    assert first.returncode == 0, first.stderr
    assert scaling_runs(tmp_path / "once") == [1]
    assert "1 duplicate copy of a run left out" in first.stdout
    # the runs table of that analysis with the log it came from: the table's row is the copy
    table = tmp_path / "once" / "tidy" / "runs.csv"
    again = analyze(log, table, "--out", tmp_path / "again")
    assert again.returncode == 0, again.stderr
    assert len(pd.read_csv(tmp_path / "again/tidy/runs.csv")) == 1
    assert f"  {table}:2: the same run as {log} (run_id " in again.stdout


def test_distinct_runs_are_never_taken_for_copies(tmp_path):
    logs = [LOGS / name for name in ("tf_keras2_resnet50_1gpus.log", "tf_keras2_resnet50_2gpus.log",
                                     "tf_keras2_resnet50_4gpus.log")]
    result = analyze(*logs, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "duplicate" not in result.stdout
    assert len(pd.read_csv(tmp_path / "out/tidy/runs.csv")) == 3


def test_a_runs_table_holding_a_run_twice_is_one_run_as_a_compare_side(tmp_path, recwarn):
    """A runs.csv written before copies were left out may hold a run twice; as a comparison side
    it is one run (two identical rows would pass for two repeats and a zero-width interval)."""
    from scalesweep.history.sides import load_side

    runs = runs_table([(LOGS / "scalesweep_ok.log", {})])[1]
    doubled = tmp_path / "runs.csv"
    pd.concat([runs, runs], ignore_index=True).to_csv(doubled, index=False)
    side = load_side(str(doubled))
    assert len(side.runs) == len(runs) == 1
    said = [str(w.message) for w in recwarn.list]
    assert said and said[0].startswith("1 duplicate copy of a run left out") and f"{doubled}:3" in said[0]
