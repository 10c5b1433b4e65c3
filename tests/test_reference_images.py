"""Images per epoch of Keras logs (issue 16, item 1): a pass over one dataset is the same work at
every GPU count, so the scaling tables of the reference TF logs read at step-time precision.

Keras counts steps, and its last batch is partial: steps x global batch (51,200 / 53,248 / 57,344
for CIFAR-10 at 2048 per GPU) is an estimate that differs between GPU counts. The dataset's size
is the count; an estimate never switches the scaling basis to throughput.
"""

from pathlib import Path

import pytest

from scalesweep import cli
from scalesweep.analysis import scaling
from scalesweep.logs.read import parse_file
from scalesweep.logs.run import LogFormatError
from scalesweep.tidy import rows
from scalesweep.tidy.table import read_runs

LOGS = Path(__file__).parent / "data" / "logs"
# Keras 2 output of the reference script as the book's runs printed it: ResNet50V2 (2048 per GPU)
# and ResNet152V2 (1024 per GPU) at 1/2/4 GPUs, 5 epochs, steady step times 544/623/768 ms and
# 668/718/773 ms (the median of each run's epochs 2-5), whole-second `s/epoch` fields 14/8/5 s and
# 33/18/10 s: the book's table (1.75 and 2.8; 1.833 and 3.3) came from those.
BOOK_LOG = LOGS / "tf_keras2_book_resnet50-152_1-2-4gpus.log"
# Real Keras 3 output (TensorFlow 2.21 on this CPU): the reference script's header and
# `model.fit(verbose=2)`, MirroredStrategy over 1/2/4 logical CPU devices, 64 images per replica,
# 1,100 random images, 3 epochs: 18 / 9 / 5 steps, the last one partial (1,152 / 1,152 / 1,280).
KERAS3_LOG = LOGS / "tf_keras3_cpu_1-2-4replicas.log"


def table_of(log, images_per_epoch=None):
    _, runs = rows.runs_table([(str(log), {})], images_per_epoch)
    return runs, scaling.scaling_table(runs)


def row(table, model, gpus):
    return table[(table["model"] == model) & (table["gpus"] == gpus)].iloc[0]


def test_book_logs_scale_at_step_time_precision():
    runs, table = table_of(BOOK_LOG)
    # Every run counts the CIFAR-10 training set (the steps agree with it: 25/13/7 of 2048 x N).
    assert set(runs["images_per_epoch"]) == {50_000}
    assert set(runs["images_per_epoch_source"]) == {"dataset"}
    assert set(table["scaling_basis"]) == {"time"}
    t1, t2, t4 = 25 * 0.544, 13 * 0.623, 7 * 0.768  # 13.6 s, 8.099 s, 5.376 s
    r50_2, r50_4 = row(table, "resnet50v2", 2), row(table, "resnet50v2", 4)
    assert r50_2["time_s"] == pytest.approx(t2)
    assert r50_2["speedup"] == pytest.approx(t1 / t2) and round(r50_2["speedup"], 3) == 1.679
    assert round(r50_2["efficiency_pct"], 1) == 84.0
    assert r50_4["speedup"] == pytest.approx(t1 / t4) and round(r50_4["speedup"], 3) == 2.530
    assert round(r50_4["efficiency_pct"], 1) == 63.2
    # Throughput of a fixed dataset: the same ratio, never the 70.8 % of 57,344 / 51,200 images.
    assert r50_4["throughput_img_s"] == pytest.approx(50_000 / t4)
    assert r50_4["throughput_speedup"] == pytest.approx(t1 / t4)
    s1, s2, s4 = 49 * 0.668, 25 * 0.718, 13 * 0.773
    r152_2, r152_4 = row(table, "resnet152v2", 2), row(table, "resnet152v2", 4)
    assert (round(r152_2["speedup"], 3), round(r152_2["efficiency_pct"], 1)) == (1.824, 91.2)
    assert (round(r152_4["speedup"], 3), round(r152_4["efficiency_pct"], 1)) == (3.257, 81.4)
    assert r152_4["speedup"] == pytest.approx(s1 / s4)
    assert not table["note"].str.contains("estimated").any()


def test_keras3_estimates_keep_the_time_basis():
    runs, table = table_of(KERAS3_LOG)
    assert list(runs["images_per_epoch"]) == [18 * 64, 9 * 128, 5 * 256]  # 1,152 / 1,152 / 1,280
    assert set(runs["images_per_epoch_source"]) == {"estimate"}
    # Steady time: median of epochs 2 and 3, each steps x the printed step time where that is
    # finer than the whole-second elapsed field (4 GPUs, epoch 2: `10s - 2s/step` -> 10 s).
    t1 = (18 * 0.018 + 18 * 0.014) / 2  # 0.288 s
    t2 = (9 * 0.063 + 9 * 0.125) / 2  # 0.846 s
    t4 = (10.0 + 5 * 0.124) / 2  # 5.31 s
    assert list(table["time_s"]) == pytest.approx([t1, t2, t4])
    assert set(table["scaling_basis"]) == {"time"}
    assert list(table["speedup"]) == pytest.approx([1.0, t1 / t2, t1 / t4])  # 0.340, 0.0542
    # The estimated throughput (images per epoch / the steady time) is beside it, with a note.
    thr1, thr4 = 1152 / t1, 1280 / t4
    assert table["throughput_speedup"].iloc[2] == pytest.approx(thr4 / thr1)  # 0.060
    assert table["note"].str.contains("images per epoch estimated").all()


def test_keras3_with_the_dataset_size_counts_it():
    runs, table = table_of(KERAS3_LOG, images_per_epoch=1100)
    assert set(runs["images_per_epoch"]) == {1100}
    assert set(runs["images_per_epoch_source"]) == {"dataset"}
    t1, t4 = 0.288, 5.31
    # The images of an epoch over the median steady epoch time (docs/metrics.md)
    assert table["throughput_img_s"].iloc[0] == pytest.approx(1100 / t1)
    assert table["speedup"].iloc[2] == pytest.approx(t1 / t4)
    assert not table["note"].str.contains("estimated").any()


def test_a_dataset_size_the_steps_contradict_is_refused_naming_the_log():
    with pytest.raises(LogFormatError, match=r"tf_keras3_cpu_1-2-4replicas.log: images per epoch "
                       r"1000 give 16 steps of global batch 64, the log shows \[18\]"):
        parse_file(KERAS3_LOG, images_per_epoch=1000)


@pytest.mark.slow
def test_analyze_takes_images_per_epoch(tmp_path, capsys):
    assert cli.main(["analyze", str(KERAS3_LOG), "--out", str(tmp_path), "--images-per-epoch", "1100"]) == 0
    runs = read_runs(tmp_path / "tidy" / "runs.csv")
    assert set(runs["images_per_epoch"]) == {1100}
    with pytest.raises(SystemExit):
        cli.main(["analyze", str(KERAS3_LOG), "--out", str(tmp_path), "--images-per-epoch", "0"])
    assert "--images-per-epoch: must be a whole number >= 1, got '0'" in capsys.readouterr().err
