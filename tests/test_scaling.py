"""Scaling tables on small hand-made runs tables; expected numbers worked out in comments."""

import math
import re

import numpy as np
import pandas as pd
import pytest

from scalesweep.analysis.scaling import (
    ACCELERATION_COLUMNS,
    SCALING_COLUMNS,
    acceleration_table,
    comparison_table,
    karp_flatt,
    marginal_gain,
    scaling_table,
)
from scalesweep.tidy.table import NON_KEY_COLUMNS, group_keys, read_runs, table_group_keys

# The columns of runs.csv as scalesweep/tidy/rows.py writes them (axes first, then the fixed columns).
RUN_DEFAULTS = {
    "framework": "tensorflow", "model": "resnet50v2", "dataset": "cifar10", "gpus": 1, "nodes": 1,
    "repeat": 0, "per_gpu_batch": 64, "requested_per_gpu_batch": None, "global_batch": 64,
    "world_size": 1, "status": "ok",
    "reason": None, "epochs": 5, "steady_epoch_time_s": math.nan, "throughput_img_s": math.nan,
    "throughput_per_gpu_img_s": math.nan, "total_time_s": math.nan, "memory_gb": math.nan,
    "peak_host_rss_gb": 2.0, "protocol": "epochs", "log_format": "scalesweep", "log": "logs/x.log",
}


def run(gpus, time=math.nan, throughput=math.nan, total=math.nan, status="ok", **axes):
    row = dict(RUN_DEFAULTS, gpus=gpus, steady_epoch_time_s=time, throughput_img_s=throughput,
               total_time_s=total, status=status, world_size=max(gpus, 1), **axes)
    row["global_batch"] = row["per_gpu_batch"] * row["world_size"]
    if row["requested_per_gpu_batch"] is None:  # asked as run, unless a test says otherwise
        row["requested_per_gpu_batch"] = row["per_gpu_batch"]
    if status != "ok":
        row["reason"] = {"oom": "CUDA out of memory", "timeout": "TIMEOUT"}.get(status, "crash")
    return row


def table(*rows):
    return pd.DataFrame(list(rows))


@pytest.fixture
def reference_runs():
    """1 GPU: three repeats; 2 and 4 GPUs: one run each; 8 GPUs: out of memory."""
    return table(
        run(1, 98.0, 490.0, 990.0, repeat=0),
        run(1, 100.0, 500.0, 1000.0, repeat=1),
        run(1, 104.0, 510.0, 1020.0, repeat=2),
        run(2, 50.0, 950.0, 560.0),
        run(4, 40.0, 1200.0, 400.0),
        run(8, status="oom"),
    )


def test_reference_table_by_hand(reference_runs):
    s = scaling_table(reference_runs).set_index("gpus")
    assert list(s.index) == [1, 2, 4, 8]
    # medians of the ok repeats at 1 GPU: time 100 (98/100/104), throughput 500, total 1000
    assert s.loc[1, ["time_s", "time_s_min", "time_s_max", "time_s_range"]].tolist() == [
        100.0, 98.0, 104.0, 6.0]
    assert s.loc[1, "throughput_img_s"] == 500.0 and s.loc[1, "total_time_s"] == 1000.0
    assert math.isnan(s.loc[2, "time_s_range"])  # one run: no spread, not a spread of 0
    assert s["n_ok"].tolist() == [3, 1, 1, 0]
    assert (s["baseline_gpus"] == 1).all()
    # speedup = T(1)/T(N) = 100/100, 100/50, 100/40; efficiency = S/N: 100, 100, 62.5 %
    assert s["speedup"].iloc[:3].tolist() == [1.0, 2.0, 2.5]
    assert s["efficiency_pct"].iloc[:3].tolist() == [100.0, 100.0, 62.5]
    # throughput speedup 950/500 = 1.9, 1200/500 = 2.4; per GPU 500, 475, 300
    assert s["throughput_speedup"].iloc[:3].tolist() == pytest.approx([1.0, 1.9, 2.4])
    assert s["throughput_per_gpu_img_s"].iloc[:3].tolist() == [500.0, 475.0, 300.0]
    # ideal = thr(1) x N = 500, 1000, 2000; none at the failed 8 GPUs
    assert s["ideal_throughput_img_s"].iloc[:3].tolist() == [500.0, 1000.0, 2000.0]
    # Karp-Flatt: N=2: (1/2 - 1/2)/(1 - 1/2) = 0; N=4: (1/2.5 - 1/4)/(1 - 1/4) = 0.15/0.75 = 0.2
    assert math.isnan(s.loc[1, "karp_flatt"])
    assert s.loc[2, "karp_flatt"] == pytest.approx(0.0)
    assert s.loc[4, "karp_flatt"] == pytest.approx(0.2)
    # marginal gain: N=2: 950-500 = 450 (90 % of 500); N=4: 1200-950 = 250 (250/950 = 26.32 %)
    assert math.isnan(s.loc[1, "marginal_gain_img_s"])
    assert s.loc[2, "marginal_gain_img_s"] == 450.0 and s.loc[2, "marginal_gain_pct"] == 90.0
    assert s.loc[4, "marginal_gain_img_s"] == 250.0
    assert s.loc[4, "marginal_gain_pct"] == pytest.approx(26.3158, abs=1e-4)
    # time to solution: 1000/560 = 1.7857, 1000/400 = 2.5; efficiency 89.29 %, 62.5 %
    assert s.loc[2, "tts_speedup"] == pytest.approx(1.785714, abs=1e-6)
    assert s.loc[4, "tts_efficiency_pct"] == pytest.approx(62.5)
    # saturation: vs previous (1000-560)/1000 = 44 %, (560-400)/560 = 28.57 %; vs 1 GPU 44, 60 %
    assert s.loc[2, "tts_gain_vs_prev_pct"] == pytest.approx(44.0)
    assert s.loc[4, "tts_gain_vs_prev_pct"] == pytest.approx(28.5714, abs=1e-4)
    assert s["tts_gain_vs_min_pct"].iloc[:3].tolist() == pytest.approx([0.0, 44.0, 60.0])


def test_failed_count_keeps_a_row_with_its_status_and_no_numbers(reference_runs):
    s = scaling_table(reference_runs).set_index("gpus")
    metrics = [c for c in SCALING_COLUMNS if c not in (
        "gpus", "nodes", "n_runs", "n_ok", "n_busy", "baseline_gpus", "scale_factor", "note",
            "scaling_basis", "throughput_ci_source", "breakdown_note", "flags")]  # labels, not numbers
    assert s.loc[8, metrics].isna().all()
    assert "no ok run (oom)" in s.loc[8, "note"] and "CUDA out of memory" in s.loc[8, "note"]
    assert s.loc[1, "note"] == ""


def test_failed_one_gpu_run_moves_the_baseline_to_two_and_says_so():
    runs = table(run(1, status="failed"), run(2, 60.0, 800.0), run(4, 40.0, 1200.0),
                 run(8, 25.0, 1920.0))
    s = scaling_table(runs).set_index("gpus")
    assert (s["baseline_gpus"] == 2).all()
    assert s["note"].str.contains("baseline is N=2, not 1").all()
    # relative to N=2: scale 2 at N=4, S = 60/40 = 1.5, E = 75 %; N=8: scale 4, S = 2.4, E = 60 %
    assert s.loc[4, ["scale_factor", "speedup", "efficiency_pct"]].tolist() == [2.0, 1.5, 75.0]
    assert s.loc[8, "efficiency_pct"] == pytest.approx(60.0)
    # ideal thr at N=8 = 800 x 4 = 3200; KF at N'=4: (1/2.4 - 1/4)/(3/4) = 0.2222
    assert s.loc[8, "ideal_throughput_img_s"] == 3200.0
    assert s.loc[8, "karp_flatt"] == pytest.approx((1 / 2.4 - 0.25) / 0.75)
    assert math.isnan(s.loc[1, "speedup"]) and "no ok run (failed)" in s.loc[1, "note"]


def test_single_gpu_count_is_noted_not_scaled():
    s = scaling_table(table(run(4, 10.0, 100.0)))
    assert len(s) == 1
    assert "single GPU count: no scaling" in s["note"].iloc[0]
    assert "baseline is N=4" in s["note"].iloc[0]
    assert s["speedup"].iloc[0] == 1.0 and math.isnan(s["karp_flatt"].iloc[0])


def test_zero_and_missing_times_give_nan_and_a_note():
    runs = table(run(1, 100.0, 500.0), run(2, 0.0, 0.0), run(4, math.nan, math.nan))
    s = scaling_table(runs).set_index("gpus")
    assert math.isnan(s.loc[2, "speedup"]) and math.isnan(s.loc[4, "speedup"])
    assert math.isnan(s.loc[2, "throughput_img_s"])
    assert "1 ok run(s) with zero steady epoch time: not used" in s.loc[2, "note"]
    assert "1 ok run(s) with missing steady epoch time: not used" in s.loc[4, "note"]
    assert s.loc[2, "n_ok"] == 1  # the run itself was ok; its numbers are unusable


def test_group_without_any_usable_run_has_no_baseline():
    s = scaling_table(table(run(1, status="timeout"), run(2, status="oom")))
    assert s["baseline_gpus"].isna().all() and s["speedup"].isna().all()
    assert s["note"].str.contains("no baseline").all()


def test_partly_failed_repeats_use_the_ok_ones():
    runs = table(run(1, 100.0, 500.0), run(2, 50.0, 1000.0, repeat=0),
                 run(2, 70.0, 700.0, repeat=1), run(2, status="timeout", repeat=2))
    s = scaling_table(runs).set_index("gpus")
    assert s.loc[2, "time_s"] == 60.0  # median of 50 and 70, the timeout left out
    assert s.loc[2, ["n_runs", "n_ok"]].tolist() == [3, 2]
    assert "2 of 3 runs ok (timeout)" in s.loc[2, "note"]


def test_a_count_names_its_failures_most_frequent_first_and_its_mixed_node_counts():
    runs = table(run(1, 100.0, 500.0), run(2, 50.0, 1000.0, repeat=0, nodes=1),
                 run(2, status="oom", repeat=1, nodes=2), run(2, status="timeout", repeat=2),
                 run(2, status="timeout", repeat=3), run(2, status="failed", repeat=4))
    note = scaling_table(runs).set_index("gpus").loc[2, "note"]
    # timeout twice first; oom and failed once each, in the order they were read
    assert "1 of 5 runs ok (timeout x2, oom, failed)" in note
    assert re.search(r"mixed node counts \[1(\.0)?, 2(\.0)?\]", note)  # runs.csv's nodes may read as floats


def test_groups_split_on_user_axes_and_leave_out_the_cpu_baseline():
    runs = table(
        run(0, 900.0, 55.0, precision="fp32"),
        run(1, 100.0, 500.0, precision="fp32"), run(2, 50.0, 1000.0, precision="fp32"),
        run(1, 60.0, 830.0, precision="bf16"), run(2, 40.0, 1250.0, precision="bf16"),
    )
    assert group_keys(runs) == ["framework", "model", "dataset", "requested_per_gpu_batch", "precision"]
    s = scaling_table(runs)
    assert set(s["gpus"]) == {1, 2}
    by_precision = s.set_index(["precision", "gpus"])["speedup"]
    assert by_precision[("fp32", 2)] == 2.0 and by_precision[("bf16", 2)] == 1.5


def test_the_requested_batch_is_a_group_key_and_missing_axis_values_form_a_group():
    runs = table(run(1, 100.0, 500.0, per_gpu_batch=64), run(2, 50.0, 1000.0, per_gpu_batch=64),
                 run(1, 80.0, 1250.0, per_gpu_batch=128), run(2, 48.0, 2080.0, per_gpu_batch=128),
                 run(1, 90.0, 560.0, per_gpu_batch=64, compile=True),
                 run(2, 60.0, 840.0, per_gpu_batch=64, compile=True))
    s = scaling_table(runs)
    # compile is NaN where a run did not set it: (64, NaN), (128, NaN), (64, True) x 2 counts
    assert len(s) == 6
    at_two = s[s["gpus"] == 2]
    speedups = {(batch, None if pd.isna(compiled) else compiled): value for batch, compiled, value
                in zip(at_two["requested_per_gpu_batch"], at_two["compile"], at_two["speedup"])}
    assert speedups == pytest.approx({(64, None): 100 / 50, (128, None): 80 / 48,
                                      (64, True): 90 / 60})


def test_non_key_columns_are_listed_once_and_never_become_keys():
    runs = table(run(1, 100.0, 500.0), run(2, 50.0, 1000.0))
    assert not set(group_keys(runs)) & NON_KEY_COLUMNS
    # world_size and global_batch change with N: as keys they would make one group per count
    assert len(scaling_table(runs)["baseline_gpus"].unique()) == 1


def test_every_result_column_of_runs_csv_but_the_asked_batch_is_no_key():
    """The keys of a full runs.csv row set are its configuration: the axes and the asked batch,
    plus any axis a sweep adds; every other column tidy writes (a new one too) is no key."""
    from scalesweep.tidy.table import AXIS_COLUMNS, RUN_RESULT_COLUMNS

    row = dict.fromkeys(AXIS_COLUMNS + RUN_RESULT_COLUMNS, 1)
    runs = pd.DataFrame([row, row]).assign(precision="bf16")
    assert group_keys(runs) == ["framework", "model", "dataset", "requested_per_gpu_batch", "precision"]


def test_scaling_csv_round_trip_keeps_the_group_keys(tmp_path, reference_runs):
    path = tmp_path / "scaling.csv"
    scaling_table(reference_runs.assign(precision="bf16")).to_csv(path, index=False)
    back = pd.read_csv(path)
    assert table_group_keys(back, SCALING_COLUMNS) == ["framework", "model", "dataset",
                                                                   "requested_per_gpu_batch", "precision"]


def test_read_runs_names_the_file_column_and_line(tmp_path, reference_runs):
    good = tmp_path / "runs.csv"
    reference_runs.to_csv(good, index=False)
    assert len(scaling_table(read_runs(good))) == 4

    bad = reference_runs.astype({"gpus": object})
    bad.loc[3, "gpus"] = "two"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"bad\.csv line 5: column 'gpus' holds 'two'"):
        read_runs(tmp_path / "bad.csv")

    reference_runs.assign(status=["ok"] * 5 + ["crashed"]).to_csv(tmp_path / "st.csv", index=False)
    with pytest.raises(ValueError, match=r"st\.csv line 7: column 'status' holds 'crashed'"):
        read_runs(tmp_path / "st.csv")

    reference_runs.drop(columns="throughput_img_s").to_csv(tmp_path / "col.csv", index=False)
    with pytest.raises(ValueError, match=r"col\.csv: missing column\(s\) 'throughput_img_s'"):
        read_runs(tmp_path / "col.csv")

    with pytest.raises(ValueError, match="whole number"):
        scaling_table(reference_runs.assign(gpus=[1, 1, 1, 2, 4, 1.5]))


def test_metric_helpers():
    # doublings only where N/2 was measured: 3 has no 1.5, 6 has 3
    gain, pct = marginal_gain([1, 2, 3, 6], [10.0, 18.0, 25.0, 40.0])
    assert np.isnan(gain[0]) and gain[1] == 8.0 and np.isnan(gain[2]) and gain[3] == 15.0
    assert pct[1] == 80.0 and pct[3] == 60.0
    # Karp-Flatt of a perfect speedup is 0, of no speedup at all is 1
    assert karp_flatt([1.0, 4.0, 1.0], [1.0, 4.0, 4.0]).tolist()[1:] == [0.0, 1.0]


def test_acceleration_cpu_baseline_against_one_gpu():
    runs = table(
        run(0, 1000.0, 50.0, 4000.0, per_gpu_batch=256),
        run(1, 100.0, 480.0, 800.0, per_gpu_batch=2048),
        run(2, 50.0, 960.0, 500.0, per_gpu_batch=2048),
    )
    a = acceleration_table(runs)
    assert len(a) == 1
    row = a.iloc[0]
    # 1000 s / 100 s = 10x on epoch time; 480/50 = 9.6x on throughput; 4000/800 = 5x end to end
    assert row["acceleration"] == 10.0 and row["throughput_acceleration"] == 9.6
    assert row["tts_acceleration"] == 5.0
    assert row["cpu_per_gpu_batch"] == 256 and row["per_gpu_batch"] == 2048
    assert "CPU per_gpu_batch 256 (the only CPU batch) vs 1-GPU per_gpu_batch 2048" in row["note"]


def test_acceleration_prefers_the_same_batch_and_reports_missing_one_gpu():
    runs = table(
        run(0, 1000.0, 50.0, per_gpu_batch=64), run(0, 800.0, 62.5, per_gpu_batch=128),
        run(1, 100.0, 500.0, per_gpu_batch=64), run(1, 50.0, 1000.0, per_gpu_batch=512),
        run(0, 700.0, 70.0, model="resnet152v2"),
    )
    a = acceleration_table(runs).set_index(["model", "per_gpu_batch"])
    assert a.loc[("resnet50v2", 64), "acceleration"] == 10.0  # its own batch: 1000/100
    assert a.loc[("resnet50v2", 64), "note"] == ""
    # no CPU run at 512: the fastest CPU batch (128, 800 s) -> 800/50 = 16x
    assert a.loc[("resnet50v2", 512), "acceleration"] == 16.0
    assert "fastest CPU batch" in a.loc[("resnet50v2", 512), "note"]
    other = acceleration_table(runs).query("model == 'resnet152v2'").iloc[0]
    assert math.isnan(other["acceleration"]) and "no 1-GPU run" in other["note"]


def test_acceleration_of_a_sweep_without_cpu_runs_is_an_empty_table_with_its_columns():
    runs = table(run(1, 100.0, 480.0, per_gpu_batch=2048), run(2, 50.0, 960.0, per_gpu_batch=2048))
    a = acceleration_table(runs)
    assert a.empty
    assert list(a.columns[-len(ACCELERATION_COLUMNS):]) == list(ACCELERATION_COLUMNS)
    assert "model" in a.columns and "gpus" not in a.columns


def test_comparison_puts_models_side_by_side_at_each_gpu_count():
    runs = table(
        run(1, 100.0, 500.0, per_gpu_batch=2048), run(2, 50.0, 1000.0, per_gpu_batch=2048),
        run(1, 300.0, 170.0, model="resnet152v2", per_gpu_batch=1024),
        run(2, 200.0, 255.0, model="resnet152v2", per_gpu_batch=1024),
    )
    wide = comparison_table(scaling_table(runs), by="model").set_index("gpus")
    assert list(wide.index) == [1, 2]  # one row per N although the batches differ per model
    assert wide.loc[2, "speedup:resnet50v2"] == 2.0 and wide.loc[2, "speedup:resnet152v2"] == 1.5
    assert wide.loc[2, "efficiency_pct:resnet152v2"] == 75.0
    assert wide.loc[1, "requested_per_gpu_batch:resnet152v2"] == 1024
    assert "framework" in wide.columns  # constant keys stay as plain columns
    with pytest.raises(ValueError, match="'precision' is not a group key"):
        comparison_table(scaling_table(runs), by="precision")


def test_comparison_by_dataset():
    runs = table(run(1, 100.0, 500.0), run(2, 50.0, 1000.0),
                 run(1, 10.0, 500.0, dataset="digits"), run(2, 8.0, 625.0, dataset="digits"))
    wide = comparison_table(scaling_table(runs), by="dataset").set_index("gpus")
    assert wide.loc[2, "speedup:cifar10"] == 2.0 and wide.loc[2, "speedup:digits"] == 1.25


def test_comparison_by_a_numeric_axis_read_back_from_csv(tmp_path):
    runs = table(run(1, 100.0, 500.0), run(2, 50.0, 1000.0),
                 run(1, 80.0, 1250.0, per_gpu_batch=128), run(2, 50.0, 2000.0, per_gpu_batch=128))
    scaling_table(runs).to_csv(tmp_path / "scaling.csv", index=False)
    wide = comparison_table(pd.read_csv(tmp_path / "scaling.csv"), by="requested_per_gpu_batch")
    # 64: 100/50 = 2; 128: 80/50 = 1.6
    assert wide.set_index("gpus").loc[2, ["speedup:64", "speedup:128"]].tolist() == [2.0, 1.6]


def test_dataset_names_that_read_as_equal_numbers_stay_two_groups(tmp_path):
    rows = [{"framework": "pytorch", "model": "m", "dataset": name, "gpus": gpus, "status": "ok",
             "steady_epoch_time_s": seconds, "throughput_img_s": 1000 / seconds, "epochs": 3}
            for name in ("2024.1", "2024.10") for gpus, seconds in ((1, 10.0), (2, 6.0))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs = read_runs(path)
    assert sorted(set(runs.dataset)) == ["2024.1", "2024.10"]
    table = scaling_table(runs)
    assert sorted(table.dataset.unique()) == ["2024.1", "2024.10"] and len(table) == 4
