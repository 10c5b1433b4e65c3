"""One steady-state estimate per run (scalesweep/contract/steady.py, docs/metrics.md): under the
epochs protocol throughput = images per epoch / the median steady epoch time, so with a fixed
dataset the time speedup and the throughput speedup are the same number."""

import pandas as pd
import pytest

from epoch_logs import write_epochs_log
from scalesweep import pipeline
from scalesweep.analysis import tables
from scalesweep.contract.steady import steady_metrics
from scalesweep.plan.analysis_settings import AnalysisSettings


def test_epochs_protocol_throughput_is_images_over_the_median_steady_time():
    epochs = [{"epoch": 1, "images": 1000, "seconds": 30.0}, {"epoch": 2, "images": 1000, "seconds": 10.0},
              {"epoch": 3, "images": 1000, "seconds": 20.0}, {"epoch": 4, "images": 1000, "seconds": 11.0}]
    metrics = steady_metrics(epochs, 2)
    assert metrics["steady_epoch_time_s"] == 11.0
    assert metrics["throughput_img_s"] == pytest.approx(1000 / 11)
    assert metrics["throughput_per_gpu_img_s"] == pytest.approx(1000 / 11 / 2)
    # with two steady epochs the median of their rates is their mean, not images / median time
    two = steady_metrics(epochs[:3], 1)
    assert two["throughput_img_s"] == pytest.approx(1000 / 15)
    assert two["throughput_img_s"] != pytest.approx((100 + 50) / 2)


def test_steps_protocol_throughput_is_the_windows_images_over_their_time():
    windows = [{"epoch": 1, "images": 64, "seconds": 9.0}, {"epoch": 2, "images": 640, "seconds": 8.0},
               {"epoch": 3, "images": 320, "seconds": 2.0}]
    metrics = steady_metrics(windows, 1, protocol="steps")
    assert metrics["throughput_img_s"] == pytest.approx(960 / 10)


def test_time_and_throughput_speedups_agree_exactly_on_noisy_epochs(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    # 1 GPU: steady epochs 10 s and 14 s -> median 12 s; 2 GPUs: 4 s and 8 s -> median 6 s.
    write_epochs_log(logs / "g1.log", 1, [24.0, 10.0, 14.0])
    write_epochs_log(logs / "g2.log", 2, [12.0, 4.0, 8.0])
    runs_csv, refused, _ = pipeline.collect_runs([logs], tmp_path / "tidy")
    assert refused == []
    runs = pd.read_csv(runs_csv).sort_values("gpus")
    assert list(runs.steady_epoch_time_s) == [12.0, 6.0]
    assert list(runs.throughput_img_s) == pytest.approx([1024 / 12, 1024 / 6])

    outputs = tables.outputs_in(tmp_path / "tables")
    pipeline.write_tables(runs_csv, outputs, AnalysisSettings.from_config({}))
    scaling = pd.read_csv(outputs["scaling"]).set_index("gpus")
    assert scaling.loc[2, "time_speedup"] == pytest.approx(2.0)
    assert scaling.loc[2, "throughput_speedup"] == pytest.approx(2.0)
    assert scaling.loc[2, "speedup"] == pytest.approx(2.0)
    assert scaling.loc[2, "efficiency_pct"] == pytest.approx(100.0)
