"""Issue 38's classes of hostile input to the predictor: every number it reads (latency,
bandwidth, overhead, step time, gpus_per_node) is checked where it enters, refused naming the key
or file and the value: network.csv at its reading, the config before any job, runs.csv's numbers
per group (its prediction refused with the value, the other groups predicted). Through the real
CLI in temporary folders (docs/hostile-cases.md)."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, TINY
from scalesweep.analysis import predict
from test_predict_network import ACROSS, analyze, network_csv, predictions, runs

pytestmark = pytest.mark.command


def refused(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0, done.stdout[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("scalesweep analyze:")]
    assert len(lines) == 1, done.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("row, said", [
    ({"busbw_gb_s": 6.0, "latency_s": -3e-5}, "latency must be a time in [0, 0.01] s, got -3e-05 s"),
    ({"busbw_gb_s": 6.0, "latency_s": float("nan")}, "latency must be a time in [0, 0.01] s, got nan s"),
    ({"busbw_gb_s": float("inf"), "latency_s": 3e-5}, "busbw_gb_s must be a bus bandwidth in (0, 1800] GB/s, got inf"),
    ({"busbw_gb_s": 6e6, "latency_s": 3e-5}, "busbw_gb_s must be a bus bandwidth in (0, 1800] GB/s, got 6000000.0"),
])
def test_a_network_csv_with_a_value_no_network_has_is_refused_naming_file_and_value(tmp_path, row, said):
    path = tmp_path / "network.csv"
    pd.DataFrame([row]).to_csv(path, index=False)
    assert refused(analyze(tmp_path, runs(), "--network", path)) == f"scalesweep analyze: {path}: {said}"


@pytest.mark.parametrize("rows, count", [(0, 0), (2, 2)])
def test_a_network_csv_of_other_than_one_row_is_refused(tmp_path, rows, count):
    path = tmp_path / "network.csv"
    pd.DataFrame([{"busbw_gb_s": 6.0 + k, "latency_s": 3e-5} for k in range(rows)],
                 columns=["busbw_gb_s", "latency_s"]).to_csv(path, index=False)
    assert refused(analyze(tmp_path, runs(), "--network", path)) == (
        f"scalesweep analyze: {path}: the network probe writes one row, this file holds {count}")


def test_a_what_if_bandwidth_out_of_range_is_refused(tmp_path):
    assert refused(analyze(tmp_path, runs(), "--network-busbw", 5000)) == (
        "scalesweep analyze: network busbw_gb_s must be a bus bandwidth in (0, 1800] GB/s, got 5000.0")
    assert refused(analyze(tmp_path, runs(), "--network-latency-us", 30)) == (
        "scalesweep analyze: network latency given without a bus bandwidth (network busbw_gb_s)")


def test_gpu_counts_that_do_not_fill_nodes_are_refused(tmp_path):
    # Predicting 8 on nodes of 3: refused with the settings, before anything is read.
    assert refused(analyze(tmp_path, runs(), "--gpus-per-node", 3)) == (
        "scalesweep analyze: predict_gpus 8 spans nodes but is not a multiple of gpus_per_node=3")
    # Measured 1/2/4 on nodes of 3: 4 GPUs span two nodes, one of them partly.
    done = analyze(tmp_path, runs(), "--gpus-per-node", 3, "--predict", "12,24")
    assert refused(done).startswith("scalesweep analyze: runs.csv: 4 GPUs (framework=pytorch")
    assert refused(done).endswith("span nodes but are not a multiple of gpus_per_node=3")


def test_the_config_refuses_a_node_size_its_counts_do_not_fill_and_an_absurd_what_if(tmp_path):
    config = yaml.safe_load(TINY.read_text())
    for analysis, said in (
        ({"gpus_per_node": 3, "predict_gpus": [8]},
         "config key 'analysis.predict_gpus[0]': 8 GPUs span nodes but are not a multiple of the prediction's "
         "gpus_per_node=3 (analysis.gpus_per_node)"),
        ({"network": {"busbw_gb_s": 6, "latency_us": 50000}},
         "config key 'analysis.network.latency_us': latency must be a time in [0, 0.01] s, got 50000 us"),
        ({"network": {"busbw_gb_s": float("nan")}},  # NaN passes the schema's minimum: the finite check
         "config key 'analysis.network.busbw_gb_s': is nan (YAML's .nan): give a finite number"),
        ({"network": {"busbw_gb_s": 1e9}},
         "config key 'analysis.network.busbw_gb_s': busbw_gb_s must be a bus bandwidth in (0, 1800] GB/s, "
         "got 1000000000.0"),
    ):
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump({**config, "analysis": analysis}))
        check = subprocess.run([sys.executable, "-m", "scalesweep", "check-config", str(path)], cwd=REPO,
                               capture_output=True, text=True, timeout=120)
        assert check.returncode == 1, check.stdout
        assert said in check.stderr, check.stderr


@pytest.mark.parametrize("column, gpus, value, line", [("epoch_overhead_s", 2, -45.0, "-45.0"),
                                                       ("step_time_s", 4, -0.16, "-0.16")])
def test_a_runs_csv_with_a_negative_duration_is_refused_naming_line_column_and_value(tmp_path, column, gpus, value,
                                                                                      line):
    """A negative epoch overhead (which predicted 843.8 % and -120.5 % efficiency) or step time
    (labelled 'no step times' without its value): the runs table's reader refuses the file,
    naming where (tidy/table.py check_runs), before any table is written."""
    bad = runs().assign(dataset="bad")
    bad.loc[bad.gpus == gpus, column] = value
    done = analyze(tmp_path, pd.concat([runs(), bad]), "--network", network_csv(tmp_path / "n.csv"))
    assert done.returncode != 0
    assert f"runs.csv line " in done.stderr and f"column '{column}' holds {line}, not a duration" in done.stderr
    assert not (tmp_path / "out" / "tables" / "predictions.csv").exists()


def test_predictor_inputs_out_of_range_refuse_their_groups_prediction_naming_them():
    """Behind the reader, the predictor checks its own inputs where they enter (a table made by
    other code): a negative overhead or step time refuses that group's prediction, by name."""
    gpus = np.array([1.0, 2.0, 4.0])
    overhead = pd.DataFrame({"epoch_overhead_s": [1.0, -45.0, 1.0]})
    assert predict.out_of_range(overhead, gpus) == ("runs.csv: epoch_overhead_s = -45.0 at 2 GPUs is not a "
                                                    "duration >= 0 s: no prediction for this group")
    step = pd.DataFrame({"step_time_s": [0.16, 0.17, -0.16]})
    assert predict.out_of_range(step, gpus).startswith("runs.csv: step_time_s = -0.16 at 4 GPUs is not a step time > 0 s")
    assert predict.out_of_range(pd.DataFrame({"step_time_s": [0.16, float("nan"), 0.2]}), gpus) == ""


def test_one_measured_count_refuses_its_groups_prediction_and_the_sound_group_is_predicted(tmp_path):
    """One measured count (a zero-wide band that missed the truth) says why it has no prediction."""
    lonely = runs(counts=(1,), breakdown=False).assign(dataset="one-count")
    done = analyze(tmp_path, pd.concat([runs(), lonely]), "--network", network_csv(tmp_path / "n.csv"))
    assert done.returncode == 0, done.stderr[-3000:]
    table = pd.read_csv(tmp_path / "out" / "tables" / "predictions.csv")
    by = {dataset: rows.set_index("gpus") for dataset, rows in table.groupby("dataset")}
    assert by["imagenet-50k"].loc[8, "efficiency_pct"] == pytest.approx(37.0, abs=0.1)
    rows = by["one-count"]
    assert (rows["method"] == "none").all() and rows["efficiency_pct"].isna().all()
    assert rows["inputs"].str.startswith("one measured GPU count (1) and no network rule: no growth to continue, "
                                         "the band would be zero wide").all(), rows["inputs"].iloc[0]
