"""Tidy tables: steady medians recomputed from epochs, failures as NaN rows with reasons, atomic CSVs."""

import json
import math
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.logs.run import whole_number
from scalesweep.tidy import rows
from scalesweep.tidy.rows import runs_table, write_tidy
from scalesweep.tidy.table import AXIS_COLUMNS, EPOCH_RESULT_COLUMNS, METRIC_COLUMNS, RUN_RESULT_COLUMNS

RUN_COLUMNS = AXIS_COLUMNS + RUN_RESULT_COLUMNS
EPOCH_COLUMNS = AXIS_COLUMNS + EPOCH_RESULT_COLUMNS

LOGS = Path(__file__).parent / "data" / "logs"


def record(kind, **fields):
    return ":::SCALESWEEP " + json.dumps({"record": kind, "schema": 1, **fields})


def one_row(path, config=None):
    epochs, runs = runs_table([(path, config or {})])
    assert len(runs) == 1
    return epochs, runs.iloc[0]


def assert_failed_row(row, status):
    assert row["status"] == status
    assert isinstance(row["reason"], str) and row["reason"]
    for column in METRIC_COLUMNS:
        assert math.isnan(row[column]), column


def test_scalesweep_ok_row_hand_checked():
    epochs, row = one_row(LOGS / "scalesweep_ok.log")
    # Epochs: 24 s, 8 s, 10 s for 1,024 images each; steady = epochs 2 and 3.
    assert row["status"] == "ok"
    assert pd.isna(row["reason"])
    assert row["steady_epoch_time_s"] == 9.0
    # images per epoch / the median steady epoch time (docs/metrics.md), not the mean of 128 and 102.4
    assert row["throughput_img_s"] == pytest.approx(1024 / 9)
    assert row["throughput_per_gpu_img_s"] == pytest.approx(1024 / 9 / 2)
    assert (row["total_time_s"], row["peak_host_rss_gb"]) == (55.5, 3.2)
    assert math.isnan(row["memory_gb"])
    assert (row["framework"], row["model"], row["dataset"], row["gpus"], row["nodes"], row["repeat"]) == (
        "tensorflow",
        "resnet50v2",
        "synth-cifar",
        2,
        1,
        0,
    )
    assert (row["epochs"], row["log_format"], row["protocol"]) == (3, "scalesweep", "epochs")
    assert list(epochs["steady"]) == [False, True, True]
    assert list(epochs["seconds"]) == [24.0, 8.0, 10.0]


def test_steady_metrics_come_from_epochs_not_from_the_summary(tmp_path):
    log = tmp_path / "run.log"
    epochs = [
        record("epoch", epoch=n, images=100, seconds=s, throughput_img_s=100 / s)
        for n, s in [(1, 9), (2, 4), (3, 5), (4, 2)]
    ]
    header = record("header", framework="pytorch", model="resnet18", world_size=4, epochs=4)
    summary = record("summary", status="ok", steady_epoch_time_s=1.0, throughput_img_s=999.0, total_time_s=30.0)
    log.write_text("\n".join([header, *epochs, summary]))
    _, row = one_row(log)
    assert row["steady_epoch_time_s"] == 4.0  # median of 4, 5, 2 (the mean would be 3.67)
    assert row["throughput_img_s"] == 25.0  # median of 25, 20, 50
    assert row["throughput_per_gpu_img_s"] == 25.0 / 4
    assert row["total_time_s"] == 30.0
    assert row["gpus"] == 4  # neither config nor header says: the world size


def test_single_epoch_run_stays_ok_with_nan_and_a_reason(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(
        "\n".join(
            [
                record("header", framework="tensorflow", model="cnn_small", world_size=1, epochs=1),
                record("epoch", epoch=1, images=64, seconds=3.0, throughput_img_s=64 / 3),
                record("summary", status="ok", total_time_s=9.0),
            ]
        )
    )
    _, row = one_row(log)
    assert row["status"] == "ok"
    assert math.isnan(row["steady_epoch_time_s"]) and math.isnan(row["throughput_img_s"])
    assert "epoch >= 2" in row["reason"]


@pytest.mark.parametrize(
    "name, status",
    [
        ("scalesweep_oom.log", "oom"),
        ("scalesweep_truncated.log", "failed"),
        ("scalesweep_timeout.log", "timeout"),
        ("ddp_vit-n2-g8-truncated.out", "failed"),
    ],
)
def test_unfinished_runs_have_nan_metrics_and_no_epoch_rows(name, status):
    epochs, row = one_row(LOGS / name)
    # The oom summary carries total_time_s 41.2 and memory 63.1: still no numbers in the row.
    assert_failed_row(row, status)
    assert epochs.empty


def test_missing_log_and_none_are_failed_rows_with_config_axes(tmp_path):
    config = {"framework": "pytorch", "model": "resnet18", "dataset": "synth-folder", "gpus": 2, "nodes": 1}
    _, runs = runs_table([(None, config), (tmp_path / "nope.log", {**config, "gpus": 4})])
    for _, row in runs.iterrows():
        assert_failed_row(row, "failed")
        assert row["reason"] == "no log"
    assert list(runs["gpus"]) == [2, 4]
    assert list(runs["repeat"]) == [0, 0]


def test_unreadable_log_is_a_failed_row_naming_the_line(tmp_path):
    log = tmp_path / "bad.log"
    log.write_text(record("header", framework="tensorflow") + "\n:::SCALESWEEP {oops\n")
    _, row = one_row(log, {"gpus": 1})
    assert_failed_row(row, "failed")
    assert f"{log}:2: corrupt" in row["reason"]


def test_file_with_three_keras_runs_gives_three_rows_from_the_log_alone():
    epochs, runs = runs_table([(LOGS / "tf_keras2_resnet50_1-2-4gpus.log", {})])
    assert list(runs["gpus"]) == [1, 2, 4]
    assert set(runs["framework"]) == {"tensorflow"} and set(runs["model"]) == {"resnet50v2"}
    one = runs.iloc[0]
    assert one["steady_epoch_time_s"] == 20.5  # median of 20, 21, 20, 22
    # CIFAR-10's 50,000 images, not 25 steps x 2048 = 51,200 (the last batch is partial)
    assert one["throughput_img_s"] == pytest.approx(50000 / 20.5)
    assert one["images_per_epoch_source"] == "dataset"
    four = runs.iloc[2]
    steady_seconds = [7 * 0.871, 7 * 0.857, 7 * 0.866, 7 * 0.880]
    assert four["steady_epoch_time_s"] == pytest.approx(statistics.median(steady_seconds))
    expected = 50000 / statistics.median(steady_seconds)
    assert four["throughput_img_s"] == pytest.approx(expected)
    assert four["throughput_per_gpu_img_s"] == pytest.approx(expected / 4)
    assert math.isnan(four["total_time_s"])  # the reference prints no time to solution
    assert len(epochs) == 15
    assert list(epochs.groupby("gpus")["epoch"].max()) == [5, 5, 5]


def test_keras3_median_of_odd_steady_count():
    _, row = one_row(LOGS / "tf_keras3_resnet50_2gpus.log")
    assert row["steady_epoch_time_s"] == 34.0  # epochs 2-4: 34, 33, 36 s
    assert row["throughput_img_s"] == pytest.approx(1024 / 34)
    assert row["throughput_per_gpu_img_s"] == pytest.approx(1024 / 34 / 2)


def test_ddp_world_size_comes_from_the_config_when_the_name_lacks_it(tmp_path):
    log = tmp_path / "train.log"
    shutil.copy(LOGS / "ddp_vit_4gpus.log", log)
    config = {"framework": "pytorch", "model": "vit_h_14", "dataset": "tiny-224", "gpus": 4, "nodes": 1}
    epochs, row = one_row(log, config)
    assert row["world_size"] == 4
    # 25,000 images over the median of the epochs' times at 1250, 1280, 1240, 1265 imgs/s
    expected = 25000 / statistics.median(25000 / rate for rate in (1250, 1280, 1240, 1265))
    assert row["throughput_img_s"] == pytest.approx(expected)
    assert row["throughput_per_gpu_img_s"] == pytest.approx(expected / 4)
    assert row["steady_epoch_time_s"] == pytest.approx((100000 / 1250 + 100000 / 1265) / 2)
    assert (row["total_time_s"], row["memory_gb"]) == (552.0, 61.0)
    assert list(epochs["images"]) == [25000 * 4] * 5


def test_ddp_without_any_world_size_is_a_failed_row(tmp_path):
    log = tmp_path / "train.log"
    shutil.copy(LOGS / "ddp_vit_4gpus.log", log)
    _, row = one_row(log, {})
    assert_failed_row(row, "failed")
    assert "world size" in row["reason"]


def test_config_axes_override_the_log_and_extra_axes_are_sorted_after_the_core():
    config = {
        "framework": "tensorflow",
        "model": "resnet50v2",
        "dataset": "cifar10-128",
        "gpus": 2,
        "nodes": 1,
        "repeat": 1,
        "precision": "fp32",
        "per_gpu_batch": 2048,
    }
    epochs, runs = runs_table([(LOGS / "tf_keras2_resnet50_2gpus.log", config)])
    row = runs.iloc[0]
    assert (row["dataset"], row["repeat"], row["precision"]) == ("cifar10-128", 1, "fp32")
    expected_axes = ["framework", "model", "dataset", "gpus", "nodes", "repeat", "per_gpu_batch", "precision"]
    assert list(runs.columns[:8]) == expected_axes
    assert list(runs.columns[8:11]) == ["requested_per_gpu_batch", "global_batch", "world_size"]
    assert list(runs.columns).count("per_gpu_batch") == 1
    epoch_columns = ["epoch", "images", "seconds", "throughput_img_s", "loss", "accuracy", "steady"]
    assert list(epochs.columns) == expected_axes + epoch_columns
    assert set(epochs["dataset"]) == {"cifar10-128"}


def test_epochs_axis_fills_the_epochs_column_once():
    epochs, runs = runs_table([(LOGS / "tf_keras3_resnet50_2gpus.log", {"gpus": 2, "epochs": 4})])
    assert list(runs.columns).count("epochs") == 1
    assert runs.iloc[0]["epochs"] == 4


def test_config_key_that_would_overwrite_a_result_is_refused():
    with pytest.raises(ValueError, match="status"):
        runs_table([(None, {"gpus": 1, "status": "ok"})])


def test_result_columns_start_with_the_contract_order():
    _, runs = runs_table([(LOGS / "scalesweep_ok.log", {})])
    contract = [
        "framework", "model", "dataset", "gpus", "nodes", "repeat", "per_gpu_batch",
        "requested_per_gpu_batch", "global_batch", "world_size", "status", "reason", "epochs", "steady_epoch_time_s", "throughput_img_s",
        "throughput_per_gpu_img_s", "total_time_s", "memory_gb", "peak_host_rss_gb", "protocol",
        "log_format", "log",
    ]  # fmt: skip
    assert list(runs.columns[: len(contract)]) == contract
    assert list(runs.columns) == RUN_COLUMNS


def test_no_items_gives_empty_tables_with_columns():
    epochs, runs = runs_table([])
    assert (list(epochs.columns), list(runs.columns)) == (EPOCH_COLUMNS, RUN_COLUMNS)
    assert epochs.empty and runs.empty


def test_write_tidy_round_trip(tmp_path):
    epochs, runs = runs_table([(LOGS / "scalesweep_ok.log", {}), (None, {"gpus": 8})])
    epochs_path, runs_path = write_tidy(epochs, runs, tmp_path / "tidy")
    back = pd.read_csv(runs_path)
    assert list(back.columns) == list(runs.columns)
    assert list(back["status"]) == ["ok", "failed"]
    assert back.loc[0, "throughput_img_s"] == pytest.approx(1024 / 9)
    assert open(runs_path).readline().strip().split(",")[3] == "gpus"
    assert "2,1,0,256,256,512,2,ok" in runs_path.read_text()  # counts stay integers
    assert len(pd.read_csv(epochs_path)) == 3
    assert sorted(p.name for p in (tmp_path / "tidy").iterdir()) == ["epochs.csv", "runs.csv"]


def test_write_tidy_killed_mid_write_keeps_the_previous_table(tmp_path, monkeypatch):
    epochs, runs = runs_table([(LOGS / "scalesweep_ok.log", {})])
    write_tidy(epochs, runs, tmp_path)
    before = (tmp_path / "runs.csv").read_text()

    def half_write_then_die(self, target, **kwargs):
        Path(target).write_text("framework,model\ntensorflow,")
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_write_then_die)
    with pytest.raises(KeyboardInterrupt):
        write_tidy(epochs, runs, tmp_path)
    assert (tmp_path / "runs.csv").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epochs.csv", "runs.csv"]


def test_tidy_stage_writes_both_tables(tmp_path):
    # The workflow's rule `tidy` (and the one CLI, `python -m scalesweep analyze`) call this.
    line = rows.write_tidy_tables([(LOGS / "tf_keras3_resnet50_2gpus.log", {})], tmp_path / "e.csv",
                                  tmp_path / "r.csv")
    assert len(pd.read_csv(tmp_path / "r.csv")) == 1 and len(pd.read_csv(tmp_path / "e.csv")) == 4  # 4 epochs
    assert line == "1 runs: 1 ok"


# --- broken input: refused logs, crash cases of bad values ---------------------------------------


def test_tidy_tables_lists_refused_logs_but_not_failed_runs(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text(record("header", framework="pytorch", model="resnet18", world_size="4", epochs=1))
    result = rows.tidy_tables([(bad, {}), (LOGS / "empty.log", {}), (LOGS / "scalesweep_oom.log", {}),
                               (LOGS / "scalesweep_ok.log", {})])
    assert list(result.runs["status"]) == ["failed", "failed", "oom", "ok"]
    assert result.refused == [f"{bad}:1: header record: 'world_size' must be a whole number from 1 to 2**53, got '4'"]
    assert result.runs.iloc[0]["reason"] == result.refused[0]
    assert runs_table([(bad, {})])[1].iloc[0]["reason"] == result.refused[0]


def test_global_batch_is_per_gpu_batch_times_world_size_when_the_log_leaves_it_out(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("\n".join([
        record("header", framework="pytorch", model="resnet18", world_size=4, per_gpu_batch=16, epochs=1),
        record("epoch", epoch=1, images=64, seconds=2.0),
        record("summary", status="ok"),
    ]))
    _, row = one_row(log)
    assert (row["per_gpu_batch"], row["world_size"], row["global_batch"]) == (16, 4, 64)
    # What ran is the header's: an axis asking for another batch is the requested batch only.
    _, row = one_row(log, {"per_gpu_batch": "32"})
    assert (row["per_gpu_batch"], row["requested_per_gpu_batch"], row["global_batch"]) == (16, 32, 64)


@pytest.mark.parametrize(
    "value, number",
    [(4, 4), ("4", 4), (4.0, 4), (2.5, None), ("four", None), (True, None), (None, None),
     (float("nan"), None), (2**53, 2**53), (2**53 + 1, None), (10**400, None), ([1], None)],
)
def test_whole_number_reads_config_values_without_raising(value, number):
    assert whole_number(value) == number


def test_config_values_that_are_no_count_do_not_crash_the_table():
    """`gpus: four` or 2**70 from a config used to end in ValueError / TypeError (Int64 cast)."""
    _, runs = runs_table([(LOGS / "ddp_vit_4gpus.log", {"gpus": "four"}), (None, {"gpus": 2**70})])
    assert runs.iloc[0]["world_size"] == 4  # from the file name, not from `four`
    assert list(runs["status"]) == ["ok", "failed"]


def test_ok_run_without_any_gpu_count_is_refused_not_an_ok_row_without_gpus(tmp_path):
    log = tmp_path / "keras.log"
    log.write_text("Epoch 1/2\n4/4 - 9s - 2s/step - loss: 2.3\nEpoch 2/2\n4/4 - 8s - 2s/step - loss: 2.1\n")
    result = rows.tidy_tables([(log, {})])
    row = result.runs.iloc[0]
    assert_failed_row(row, "failed")
    assert row["reason"] == f"{log}: GPU count unknown: the log gives no 'world_size' or 'gpus', nor do the run's axes"
    assert result.refused == [row["reason"]] and result.epochs.empty
    # With the count from the sweep's axes it is a measurement.
    _, row = one_row(log, {"gpus": 1})
    assert (row["status"], row["steady_epoch_time_s"]) == ("ok", 8.0)


def test_unreadable_log_file_is_a_refused_row(tmp_path):
    folder = tmp_path / "run.log"
    folder.mkdir()
    result = rows.tidy_tables([(folder, {"gpus": 1})])
    assert result.runs.iloc[0]["reason"] == "no log"  # a folder is no log file
    # A file that exists and cannot be read, even by root: reading it fails with EIO.
    unreadable = Path("/proc/self/mem")
    if not unreadable.is_file():
        pytest.skip("needs Linux /proc")
    result = rows.tidy_tables([(unreadable, {"gpus": 1})])
    assert result.refused == [result.runs.iloc[0]["reason"]]
    assert result.refused[0].startswith(f"{unreadable}: cannot read: ")


def test_a_runs_table_from_before_the_requested_batch_keeps_its_groups():
    from scalesweep.tidy.table import with_requested_batch

    old = pd.DataFrame({"gpus": [1, 2, 1], "per_gpu_batch": [64, 64, 128]})
    assert with_requested_batch(old)["requested_per_gpu_batch"].tolist() == [64, 64, 128]
    # The history reads an older sweep beside a newer one: the older rows' asked batch is empty.
    both = old.assign(requested_per_gpu_batch=[None, 256, None])
    assert with_requested_batch(both)["requested_per_gpu_batch"].tolist() == [64, 256, 128]
