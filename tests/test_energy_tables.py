"""Energy through the analysis: crafted logs -> runs.csv (energy_j, joules_per_image,
avg_power_w_per_gpu, energy_source) -> scaling.csv (energy efficiency, projected energy) -> the
sweet spot's `greenest` intent -> the energy-per-image figure, against hand-computed values."""

from dataclasses import replace
import json
import math

import pandas as pd
import pytest

from scalesweep.analysis import scaling, sweetspot, tables
from scalesweep.plan.analysis_settings import DEFAULTS
from scalesweep.report import figures, plotkit
from scalesweep.tidy import rows
from scalesweep.tidy.table import group_keys, read_runs

TRAIN_IMAGES = 100_000
PER_GPU_BATCH, WARMUP_STEPS, TIMED_STEPS = 100, 5, 10
# gpus -> (timed window seconds, watts per GPU, run energy J). Timed window images = 10 x 100 x N:
#   N=1: 1,000 images in 10 s = 100 img/s; 300 W x 10 s = 3,000 J -> 3.00 J/image
#   N=2: 2,000 images in 12.5 s = 160 img/s (efficiency 80 %); 2 x 300 W x 12.5 s = 7,500 J -> 3.75 J/image
#   N=4: 4,000 images in 20 s = 200 img/s (efficiency 50 %); 4 x 250 W x 20 s = 20,000 J -> 5.00 J/image
# energy efficiency = 3.00 / jpi(N): 100 %, 80 %, 60 %; projected energy of 1 epoch (100,000
# images) = 300, 375, 500 kJ; projected time of 1 epoch = 100,000 / thr = 1,000, 625, 500 s.
RUNS = {1: (10.0, 300.0, 4_000.0), 2: (12.5, 300.0, 9_000.0), 4: (20.0, 250.0, 25_000.0)}


def line(kind: str, **fields) -> str:
    return ":::SCALESWEEP " + json.dumps({"record": kind, "schema": 1, **fields})


def window(number: int, phase: str, steps: int, gpus: int, seconds: float, watts) -> str:
    images = steps * PER_GPU_BATCH * gpus
    per_rank = [None] * gpus if watts is None else [watts * seconds] * gpus
    known = watts is not None
    return line("epoch", epoch=number, images=images, seconds=seconds, throughput_img_s=images / seconds,
                steps=steps, phase=phase, energy_j=sum(per_rank) if known else None, energy_j_per_rank=per_rank,
                energy_source="nvml" if known else None,
                energy_note=None if known else "CPU run: no GPU energy counter", energy_read_s=2e-5)


def crafted_log(path, gpus: int, seconds: float, watts, run_energy) -> str:
    header = line("header", framework="pytorch", model="resnet50", dataset="synthetic", gpus=gpus,
                  device_kind="gpu", world_size=gpus, nodes=1, per_gpu_batch=PER_GPU_BATCH,
                  global_batch=PER_GPU_BATCH * gpus, protocol="steps", epochs=2, warmup_steps=WARMUP_STEPS,
                  timed_steps=TIMED_STEPS, images_per_epoch=TIMED_STEPS * PER_GPU_BATCH * gpus,
                  train_images=TRAIN_IMAGES)
    summary = line("summary", status="ok", reason=None, epochs=2, total_time_s=None, wall_time_s=60.0,
                   run_energy_j=run_energy, run_energy_j_per_rank=[None if run_energy is None else run_energy / gpus] * gpus,
                   energy_source="nvml" if run_energy else None, energy_note=None)
    path.write_text("\n".join([header, window(1, "warmup", WARMUP_STEPS, gpus, 3.0, watts),
                               window(2, "timed", TIMED_STEPS, gpus, seconds, watts), summary]) + "\n")
    return path


@pytest.fixture
def analysed(tmp_path):
    items = [(crafted_log(tmp_path / f"g{gpus}.log", gpus, seconds, watts, run), {})
             for gpus, (seconds, watts, run) in RUNS.items()]
    # 8 GPUs without a counter: its energy is unknown, its time the fastest (8,000 images in 20 s:
    # 400 img/s, efficiency 50 %, projected epoch 250 s).
    items.append((crafted_log(tmp_path / "g8.log", 8, 20.0, None, None), {}))
    rows.write_tidy_tables(items, tmp_path / "epochs.csv", tmp_path / "runs.csv")
    return tmp_path


def test_runs_csv_has_the_energy_of_the_timed_window(analysed):
    runs = pd.read_csv(analysed / "runs.csv").set_index("gpus")
    assert list(runs.loc[[1, 2, 4], "energy_j"]) == [3_000.0, 7_500.0, 20_000.0]
    assert list(runs.loc[[1, 2, 4], "joules_per_image"]) == [3.0, 3.75, 5.0]
    assert list(runs.loc[[1, 2, 4], "avg_power_w_per_gpu"]) == [300.0, 300.0, 250.0]
    assert list(runs.loc[[1, 2, 4], "energy_source"]) == ["nvml"] * 3
    assert list(runs.loc[[1, 2, 4], "run_energy_j"]) == [4_000.0, 9_000.0, 25_000.0]
    assert math.isnan(runs.loc[8, "energy_j"]) and math.isnan(runs.loc[8, "joules_per_image"])
    assert runs.loc[8, "energy_note"] == "CPU run: no GPU energy counter"
    # Energy columns are measurements, not configuration: one scaling group.
    assert "energy_source" not in group_keys(runs.reset_index())


def test_scaling_csv_has_energy_efficiency_and_projected_energy(analysed):
    outputs = tables.outputs_in(analysed / "tables")
    tables.write_tables(analysed / "runs.csv", outputs, replace(DEFAULTS, epoch_budget=2.0))
    table = pd.read_csv(outputs["scaling"]).set_index("gpus")
    assert list(table.loc[[1, 2, 4], "joules_per_image"]) == [3.0, 3.75, 5.0]
    assert list(table.loc[[1, 2, 4], "energy_efficiency_pct"]) == pytest.approx([100.0, 80.0, 60.0])
    assert list(table.loc[[1, 2, 4], "efficiency_pct"]) == pytest.approx([100.0, 80.0, 50.0])
    # 2 epochs x 100,000 images x J/image
    assert list(table.loc[[1, 2, 4], "projected_energy_j"]) == pytest.approx([600_000.0, 750_000.0, 1_000_000.0])
    assert math.isnan(table.loc[8, "energy_efficiency_pct"]) and math.isnan(table.loc[8, "projected_energy_j"])


@pytest.mark.parametrize("bound, gpus, energy", [
    (None, 1, 300_000.0),    # no bound: the least energy, however slow (1,000 s)
    (700.0, 2, 375_000.0),   # 1 GPU takes 1,000 s > 700 s; of 2 (625 s) and 4 (500 s), 2 uses less
    (550.0, 4, 500_000.0),   # only 4 GPUs (500 s) among the counts with an energy; 8 has none
])
def test_greenest_is_the_least_energy_within_the_time_bound(analysed, bound, gpus, energy):
    table = scaling.scaling_table(read_runs(analysed / "runs.csv"))
    spot = sweetspot.sweet_spot_table(table, replace(DEFAULTS, greenest_time_bound_s=bound)).set_index("intent")
    row = spot.loc["greenest"]
    assert (row["gpus"], row["projected_energy_j"], row["time_metric"]) == (gpus, energy, "projected_time_s")
    assert row["joules_per_image"] == {1: 3.0, 2: 3.75, 4: 5.0}[gpus]
    assert f"at {gpus} GPUs" in row["why"] and row["note"] == ""
    assert spot.loc["fastest", "gpus"] == 8  # the fastest is not the greenest


def test_greenest_without_a_fitting_count_says_why(analysed):
    table = scaling.scaling_table(read_runs(analysed / "runs.csv"))
    row = sweetspot.sweet_spot_table(table, replace(DEFAULTS, greenest_time_bound_s=100.0)).set_index("intent").loc["greenest"]
    assert math.isnan(row["gpus"])
    assert row["note"] == "no GPU count with a measured energy has a projected training time within 100 s"
    with pytest.raises(ValueError, match="greenest_time_bound_s must be > 0 seconds or None, got -1"):
        sweetspot.sweet_spot_table(table, replace(DEFAULTS, greenest_time_bound_s=-1))


@pytest.mark.slow
def test_the_figure_draws_joules_per_image_against_gpus(analysed):
    table = scaling.scaling_table(read_runs(analysed / "runs.csv"))
    figure = figures.build_figures(table)["energy_per_image"]
    drawn = figure.data.set_index("gpus")["value"]
    assert drawn.to_dict() == {1: 3.0, 2: 3.75, 4: 5.0}  # 8 GPUs has no energy: not drawn
    assert "energy_per_image" in figures.FIGURE_NAMES
    plotkit.plt.close("all")
