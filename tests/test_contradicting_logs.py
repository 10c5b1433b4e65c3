"""Hostile input, round 4 (issue 38): logs whose records contradict each other in ways the earlier
checks let through, a --world-size that contradicts itself or the log, and a runs table with
durations no run can have. Each is refused through the real command line, the message naming the
file, the key and the value (docs/hostile-cases.md, "Contradicting records (round 4)")."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from epoch_logs import record, write_epochs_log
from scalesweep.logs.discover import given_world_sizes

REPO = Path(__file__).resolve().parents[1]
# A 2-GPU run of 3 epochs of 1,024 images: 24 + 8 + 10 = 42 s of epochs, 4 steps each, so the
# steady epochs' step is 18 s / 8 steps = 2.25 s; the parts below add up to it.
SECONDS = (24.0, 8.0, 10.0)
STEP_S = 2.25
PARTS = {"data_wait_s": 0.25, "compute_s": 1.5, "sync_wait_s": 0.125, "sync_comm_s": 0.125, "other_s": 0.25}


def scalesweep(*args, cwd):
    return subprocess.run([sys.executable, "-m", "scalesweep", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def run_log(path, header=None, summary=None):
    """The clean run, its header and summary changed; the epoch records count 4 steps each."""
    fields = dict(framework="pytorch", model="resnet18", dataset="d", gpus=2, world_size=2, nodes=1,
                  per_gpu_batch=128, global_batch=256, epochs=3, images_per_epoch=1024, protocol="epochs",
                  device_kind="gpu")
    lines = [record("header", **{**fields, **(header or {})})]
    lines += [record("epoch", epoch=number, images=1024, seconds=seconds, throughput_img_s=1024 / seconds, steps=4)
              for number, seconds in enumerate(SECONDS, 1)]
    ok = dict(status="ok", epochs=3, train_time_s=42.0, total_time_s=50.0, wall_time_s=61.0, timed_steps=8,
              breakdown_step_s=STEP_S, **PARTS, breakdown_steps=8)
    lines.append(record("summary", **{**ok, **(summary or {})}))
    path.write_text("\n".join(lines) + "\n")
    return path


# name, header changes, summary changes, the reason after "<log>: "
CASES = [
    ("clean", {}, {}, None),
    # The parts add up to ten times the step, other_s left out: no sum to compare.
    ("parts_ten_times_without_other", {}, {"data_wait_s": 4.5, "compute_s": 9.0, "sync_wait_s": 4.5,
                                          "sync_comm_s": 4.5, "other_s": None},
     "summary record: the step breakdown gives 'breakdown_step_s', 'data_wait_s', 'compute_s', "
     "'sync_wait_s', 'sync_comm_s' but not 'other_s': its writer gives every part with the step, or none"),
    # The same in a log written before the synchronisation was split: sync_exposed_s is its part.
    ("parts_ten_times_unsplit", {}, {"sync_wait_s": None, "sync_comm_s": None, "data_wait_s": 4.5,
                                    "compute_s": 9.0, "sync_exposed_s": 9.0, "other_s": 0.0},
     "summary record: the parts data_wait_s + compute_s + sync_exposed_s + other_s add up to 22.5, "
     "not 'breakdown_step_s' 2.25"),
    ("parts_without_a_step", {}, {"breakdown_step_s": None, **{k: 10 * v for k, v in PARTS.items()}},
     "summary record: the step breakdown gives 'data_wait_s', 'compute_s', 'sync_wait_s', 'sync_comm_s', "
     "'other_s' but not 'breakdown_step_s': its writer gives every part with the step, or none"),
    # Four times the images every epoch trained: the tables' throughput from it would be 4 x too high.
    ("images_per_epoch_4x", {"images_per_epoch": 4096}, {},
     "header record: 'images_per_epoch' 4096 but no epoch record trained that many (their 'images': 1024)"),
    # 42 s of epochs in a 4.45 s time to solution: an efficiency of 943 %.
    ("total_time_shorter_than_epochs", {}, {"total_time_s": 4.45},
     "summary record: 'total_time_s' 4.45 is shorter than the epoch records' seconds, which it contains: "
     "they add up to 42.0"),
    ("wall_time_shorter_than_epochs", {}, {"wall_time_s": 40.0},
     "summary record: 'wall_time_s' 40.0 is shorter than the epoch records' seconds, which it contains: "
     "they add up to 42.0"),
]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """`python -m scalesweep parse` of every case's log at once: {name: (log, its one run)}."""
    folder = tmp_path_factory.mktemp("contradicting")
    logs = {name: run_log(folder / f"{name}.log", header, summary) for name, header, summary, _ in CASES}
    result = scalesweep("parse", *logs.values(), cwd=folder)
    runs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [run["source"] for run in runs] == [str(log) for log in logs.values()], result.stderr
    return {name: (logs[name], run) for name, run in zip(logs, runs)}


@pytest.mark.parametrize("name, reason", [(case[0], case[3]) for case in CASES], ids=[case[0] for case in CASES])
def test_each_contradiction_is_a_failed_run_naming_the_log_the_key_and_the_value(parsed, name, reason):
    log, run = parsed[name]
    if reason is None:
        assert (run["summary"]["status"], run["problems"]) == ("ok", [])
        return
    assert run["summary"]["status"] == "failed"
    assert run["summary"]["reason"] == f"{log}: {reason}"


def test_analyze_refuses_the_contradicting_log_and_keeps_the_clean_one(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    run_log(logs / "clean_2gpus.log")
    bad = run_log(logs / "inflated_2gpus.log", header={"images_per_epoch": 4096})
    tidy = tmp_path / "out"
    result = scalesweep("analyze", logs, "--out", tidy, cwd=tmp_path)
    assert result.returncode != 0  # inputs refused
    assert (f"  {bad}: header record: 'images_per_epoch' 4096 but no epoch record trained that many"
            in result.stderr), result.stderr
    runs = (tidy / "tidy" / "runs.csv").read_text().splitlines()
    assert len(runs) == 3 and sum(",ok," in line for line in runs) == 1


def test_one_file_given_two_world_sizes_is_an_error_before_anything_is_written(tmp_path):
    log = write_epochs_log(tmp_path / "run.log", 2, [30.0, 10.0, 12.0])
    result = scalesweep("analyze", log, "--world-size", f"{log}=2", "--world-size", f"./{log.name}=8",
                        "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip() == (f"scalesweep analyze: --world-size ./{log.name}: given twice, as 2 "
                                     f"({log}) and 8: one count per log")
    assert not (tmp_path / "out" / "tidy").exists()
    # The same count twice says one thing.
    assert given_world_sizes([(str(log), 2), (f"{tmp_path}/./run.log", 2)]) == {log.resolve(): 2}


def test_a_world_size_the_logs_header_contradicts_is_an_error(tmp_path):
    log = write_epochs_log(tmp_path / "run.log", 2, [30.0, 10.0, 12.0])
    result = scalesweep("analyze", log, "--world-size", f"{log}=8", "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip() == (f"scalesweep analyze: --world-size {log}=8: the log's header says "
                                     "'world_size' 2: leave out --world-size for a log that prints its own")
    assert not (tmp_path / "out" / "tidy").exists()


def test_parse_refuses_a_world_size_the_logs_header_contradicts_and_keeps_a_ddp_logs(tmp_path):
    log = write_epochs_log(tmp_path / "run.log", 2, [30.0, 10.0, 12.0])
    contradicted = scalesweep("parse", "--world-size", 8, log, cwd=tmp_path)
    assert contradicted.returncode == 1 and contradicted.stdout == ""
    assert contradicted.stderr.strip() == (f"error: {log}: --world-size 8: the log's header says 'world_size' 2: "
                                           "leave out --world-size for a log that prints its own")
    agreed = scalesweep("parse", "--world-size", 2, log, cwd=tmp_path)
    assert agreed.returncode == 0 and json.loads(agreed.stdout)["header"]["world_size"] == 2
    # A DDP reference log takes the count over its file name: what the option is for.
    ddp = scalesweep("parse", "--world-size", 8, REPO / "tests" / "data" / "logs" / "ddp_vit_4gpus.log", cwd=tmp_path)
    assert ddp.returncode == 0, ddp.stderr
    assert json.loads(ddp.stdout)["header"]["world_size"] == 8


RUNS_CSV = ("framework,model,dataset,gpus,nodes,repeat,status,steady_epoch_time_s,throughput_img_s,"
            "total_time_s,epoch_overhead_s,log\n"
            "pytorch,resnet18,d,1,1,0,ok,10.0,102.4,40.0,0.5,a.log\n"
            "pytorch,resnet18,d,2,1,0,ok,5.5,186.2,22.0,{overhead},b.log\n")


@pytest.mark.parametrize("overhead, shown", [("-4.0", "-4.0"), ("inf", "inf"), ("-inf", "-inf"), ("NaN", "'NaN'")])
def test_a_runs_table_with_a_duration_no_run_has_is_refused_by_name(tmp_path, overhead, shown):
    table = tmp_path / "runs.csv"
    table.write_text(RUNS_CSV.format(overhead=overhead))
    result = scalesweep("analyze", table, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode != 0
    assert (f"  {table} line 3: column 'epoch_overhead_s' holds {shown}, not a duration" in result.stderr), \
        result.stderr


def test_an_overhead_a_hair_below_zero_and_an_empty_one_are_durations(tmp_path):
    """Float sums may leave an epoch's overhead a hair below 0 (measure.epoch_overhead)."""
    from scalesweep.tidy.table import read_runs

    for overhead in ("-1e-9", ""):
        table = tmp_path / "runs.csv"
        table.write_text(RUNS_CSV.format(overhead=overhead))
        assert len(read_runs(table)) == 2
