"""Scaling metrics that are right for every protocol, checked by hand on crafted record logs.

Under the steps protocol a timed window is T steps of per_gpu_batch x N images, so its work grows
with N: the window's time ratio is no speedup. The steps logs below scale with a known serial
fraction p = 0.8 (Amdahl) in throughput, 50 timed steps of 32 images per GPU:

    N   step time   window   images   throughput   speedup   efficiency   Karp-Flatt
    1   0.100 s      5 s     1,600    320 img/s    1         100 %        -
    2   0.120 s      6 s     3,200    533.3        1.6667     83.33 %     0.2
    4   0.160 s      8 s     6,400    800          2.5        62.5 %      0.2

(Amdahl with p = 0.8: S(2) = 1/(0.2 + 0.4) = 1.6667, S(4) = 1/(0.2 + 0.2) = 2.5;
Karp-Flatt e = (1/S - 1/N) / (1 - 1/N) = (0.6 - 0.5)/0.5 = (0.4 - 0.25)/0.75 = 0.2.)
The time ratio would read 1.0, 0.833, 0.625: "no scaling at all".
"""

from dataclasses import replace
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scalesweep.analysis import fits, scaling, sweetspot
from scalesweep.plan.analysis_settings import DEFAULTS
from scalesweep.report import plotkit
from scalesweep.report.figures import build_figures
from scalesweep.tidy import rows

ROOT = Path(__file__).resolve().parents[1]
from scalesweep.train.common import runlog  # noqa: E402

STEP_TIMES = {1: 0.100, 2: 0.120, 4: 0.160}
TIMED_STEPS, PER_GPU_BATCH, TRAIN_IMAGES = 50, 32, 10_000
WALL_TIME_S = {1: 30.0, 2: 36.0, 4: 45.0}  # start-up + warm-up + window: what each run cost


def record_log(path, header, epochs, summary):
    lines = [runlog.format_record({"record": "header", **header})]
    lines += [runlog.format_record({"record": "epoch", **epoch}) for epoch in epochs]
    lines.append(runlog.format_record({"record": "summary", **summary}))
    path.write_text("\n".join(lines) + "\n")
    return path


def steps_log(tmp_path, gpus, step_time=None, ci_pct=0.5, name=None):
    """A steps-protocol run at `gpus` whose timed steps all take `step_time`."""
    step_time = STEP_TIMES[gpus] if step_time is None else step_time
    global_batch = PER_GPU_BATCH * gpus
    header = {"framework": "pytorch", "model": "vit_tiny", "dataset": "synth", "gpus": gpus,
              "world_size": gpus, "nodes": 1, "per_gpu_batch": PER_GPU_BATCH,
              "global_batch": global_batch, "protocol": "steps", "epochs": 2,
              "images_per_epoch": None, "warmup_steps": 5, "timed_steps": "auto",
              "train_images": TRAIN_IMAGES}
    warmup = runlog.epoch_record(1, 5 * global_batch, 2.0, phase="warmup")
    window = runlog.epoch_record(
        2, TIMED_STEPS * global_batch, TIMED_STEPS * step_time, phase="timed",
        step_stats={"steps": TIMED_STEPS, "step_time_median_s": step_time,
                    "step_time_p90_s": step_time, "step_time_mean_s": step_time,
                    "step_time_ci_pct": ci_pct})
    summary = {"status": "ok", "reason": None, "epochs": 2, "total_time_s": None,
               "timed_steps": TIMED_STEPS, "step_time_mean_s": step_time,
               "step_time_ci_pct": ci_pct, "wall_time_s": WALL_TIME_S.get(gpus, 40.0)}
    return record_log(tmp_path / (name or f"steps_g{gpus}.log"), header, [warmup, window], summary)


def epochs_log(tmp_path, gpus, epoch_seconds, name=None):
    header = {"framework": "pytorch", "model": "vit_tiny", "dataset": "synth", "gpus": gpus,
              "world_size": gpus, "nodes": 1, "per_gpu_batch": PER_GPU_BATCH,
              "global_batch": PER_GPU_BATCH * gpus, "protocol": "epochs", "epochs": 3,
              "images_per_epoch": 1024, "train_images": 1024}
    epochs = [runlog.epoch_record(e, 1024, seconds) for e, seconds in enumerate(epoch_seconds, 1)]
    summary = {"status": "ok", "reason": None, "epochs": 3, "total_time_s": sum(epoch_seconds) + 5}
    return record_log(tmp_path / (name or f"epochs_g{gpus}.log"), header, epochs, summary)


@pytest.fixture
def steps_runs(tmp_path):
    _, runs = rows.runs_table([(steps_log(tmp_path, n), {}) for n in (1, 2, 4)])
    return runs


def test_steps_protocol_scales_by_throughput_not_window_time(steps_runs):
    table = scaling.scaling_table(steps_runs).set_index("gpus")
    assert (table["scaling_basis"] == "throughput").all()
    assert table["throughput_img_s"].tolist() == pytest.approx([320.0, 1600 / 3, 800.0])
    assert table["speedup"].tolist() == pytest.approx([1.0, 5 / 3, 2.5])
    assert table["efficiency_pct"].tolist() == pytest.approx([100.0, 250 / 3, 62.5])
    assert table.loc[[2, 4], "karp_flatt"].tolist() == pytest.approx([0.2, 0.2])
    # The window-time ratio stays visible, under its own name, and is not what speedup shows.
    assert table["time_speedup"].tolist() == pytest.approx([1.0, 5 / 6, 0.625])


def test_steps_protocol_fit_recovers_p_with_r2_of_its_objective(steps_runs):
    table = fits.fit_table(steps_runs)
    amdahl = table[(table["law"] == "amdahl") & (table["target"] == "speedup")].iloc[0]
    assert amdahl["basis"] == "throughput"
    assert amdahl["p"] == pytest.approx(0.8, abs=1e-6)
    assert amdahl["r2"] == pytest.approx(1.0)
    assert "1/S^2" in amdahl["objective"]
    # no time to solution under steps: that fit says why instead of inventing one
    tts = table[(table["law"] == "amdahl") & (table["target"] == "time_to_solution")].iloc[0]
    assert math.isnan(tts["p"]) and "too few GPU counts" in tts["note"]


def test_steps_protocol_sweet_spot_by_hand(steps_runs):
    """Projected cost of 5 epochs of 10,000 images at the measured throughput:
    N=1: 50,000 / 320 = 156.25 s -> 1 x 156.25 / 3600 = 0.04340 GPU-h
    N=2: 50,000 / 533.3 = 93.75 s -> 2 x 93.75 / 3600 = 0.05208 GPU-h
    N=4: 50,000 / 800 = 62.5 s   -> 4 x 62.5 / 3600  = 0.06944 GPU-h
    """
    table = scaling.scaling_table(steps_runs)
    spots = sweetspot.sweet_spot_table(table, replace(DEFAULTS, efficiency_floor=80, gpu_hour_budget=0.06,
                                       epoch_budget=5)).set_index("intent")
    assert spots.loc["fastest", "gpus"] == 4
    assert spots.loc["fastest", "time_metric"] == "projected_time_s"
    assert spots.loc["fastest", "projected_time_s"] == pytest.approx(62.5)
    assert spots.loc["efficient", "gpus"] == 2  # 83.3 % >= 80 %; 62.5 % is not
    assert spots.loc["budget", "gpus"] == 2  # 0.0521 fits 0.06, 0.0694 does not
    assert spots.loc["budget", "gpu_hours"] == pytest.approx(2 * 93.75 / 3600)
    assert spots.loc["budget", "gpu_hours_basis"].startswith("projected: 5 epoch(s)")
    # what the measured run itself cost: 2 GPUs x 36 s of wall time
    assert spots.loc["budget", "run_gpu_hours"] == pytest.approx(2 * 36 / 3600)


def test_runs_table_prices_each_run_by_its_wall_time(steps_runs):
    runs = steps_runs.set_index("gpus")
    assert runs["gpu_hours"].tolist() == pytest.approx([30 / 3600, 72 / 3600, 180 / 3600])
    assert runs["train_images"].tolist() == [TRAIN_IMAGES] * 3
    assert runs["timed_steps"].tolist() == [TIMED_STEPS] * 3


def test_run_interval_from_its_own_step_times(tmp_path):
    """Mean step time known to +/- 2 %: throughput 320 / 1.02 .. 320 / 0.98."""
    _, runs = rows.runs_table([(steps_log(tmp_path, 1, ci_pct=2.0), {})])
    row = runs.iloc[0]
    assert row["step_time_ci_pct"] == 2.0
    assert (row["throughput_ci_low_img_s"], row["throughput_ci_high_img_s"]) == pytest.approx(
        (320 / 1.02, 320 / 0.98))
    table = scaling.scaling_table(runs)
    assert table["throughput_ci_source"].iloc[0] == "steps"
    assert table["throughput_ci_low_img_s"].iloc[0] == pytest.approx(320 / 1.02)


def test_repeats_give_a_t_interval_of_their_mean(tmp_path):
    """Three repeats at 1 GPU with step times giving 320, 400 and 200 img/s: mean 306.67,
    sd 100.66, t(0.975, 2) = 4.3027 -> half-width 4.3027 x 100.66 / sqrt(3) = 250.06."""
    items = [(steps_log(tmp_path, 1, step_time=32 / rate, name=f"r{i}.log"), {"repeat": i})
             for i, rate in enumerate((320.0, 400.0, 200.0))]
    _, runs = rows.runs_table(items)
    row = scaling.scaling_table(runs).iloc[0]
    mean, sd = np.mean([320, 400, 200]), np.std([320, 400, 200], ddof=1)
    half = 4.302653 * sd / math.sqrt(3)
    assert row["throughput_ci_source"] == "repeats"
    assert (row["throughput_ci_low_img_s"], row["throughput_ci_high_img_s"]) == pytest.approx(
        (mean - half, mean + half), rel=1e-5)


def test_epochs_protocol_with_a_fixed_dataset_keeps_the_time_ratio(tmp_path):
    """1,024 images per epoch at every N: T ratio = throughput ratio; steady = epochs 2, 3."""
    items = [(epochs_log(tmp_path, 1, [9.0, 4.0, 4.0]), {}), (epochs_log(tmp_path, 2, [9.0, 2.5, 2.5]), {})]
    table = scaling.scaling_table(rows.runs_table(items)[1]).set_index("gpus")
    assert (table["scaling_basis"] == "time").all()
    assert table.loc[2, "speedup"] == pytest.approx(4.0 / 2.5)
    assert table.loc[2, "time_speedup"] == pytest.approx(table.loc[2, "throughput_speedup"])


def test_a_group_mixing_protocols_gets_a_note_and_no_relative_metrics(tmp_path):
    items = [(epochs_log(tmp_path, 1, [9.0, 4.0, 4.0]), {}), (steps_log(tmp_path, 2), {}),
             (steps_log(tmp_path, 4), {})]
    table = scaling.scaling_table(rows.runs_table(items)[1])
    assert table["note"].str.contains("mixed protocols (epochs, steps)", regex=False).all()
    for column in ("speedup", "efficiency_pct", "karp_flatt", "throughput_speedup", "time_speedup"):
        assert table[column].isna().all(), column
    assert table["throughput_img_s"].notna().all()  # the measurements themselves stay
    fit_rows = fits.fit_table(rows.runs_table(items)[1])
    assert fit_rows["p"].isna().all()


@pytest.mark.slow
def test_speedup_figure_overlays_the_fit_of_the_series_it_draws(steps_runs):
    table = scaling.scaling_table(steps_runs)
    fit_table = fits.fit_table(steps_runs, scaling=table)
    figure = build_figures(table, fit_table)["speedup_by_model"]
    drawn = figure.data.sort_values("gpus")["value"].tolist()
    assert drawn == pytest.approx([1.0, 5 / 3, 2.5])  # the throughput ratio, not 1, 0.83, 0.63
    curve = figure.curves[figure.curves["kind"] == "prediction"]
    # p = 0.8 -> S(8) = 1/(0.2 + 0.1) = 3.333, S(16) = 1/(0.2 + 0.05) = 4
    assert curve.sort_values("gpus")["speedup"].tolist() == pytest.approx([10 / 3, 4.0], rel=1e-5)
    assert "thr(N)/thr(N_min)" in figure.grid.axes.flat[0].get_ylabel()
    plotkit.plt.close("all")


def test_fit_r2_is_that_of_the_relative_objective():
    """Points (1, 1), (2, 1.5), (4, 3.0): weighted R^2 with w = 1/S^2 by hand."""
    x, y = np.array([1.0, 2.0, 4.0]), np.array([1.0, 1.5, 3.0])
    fit = fits.fit_law("gustafson", x, y)
    predicted = fits.gustafson(x, fit.p)
    w = 1 / y**2
    centre = np.sum(w * y) / np.sum(w)
    expected = 1 - np.sum(w * (y - predicted) ** 2) / np.sum(w * (y - centre) ** 2)
    assert fit.r2 == pytest.approx(expected)
    assert fit.r2 != pytest.approx(fits.weighted_r_squared(y, predicted, np.ones_like(y)))  # not the unweighted one
