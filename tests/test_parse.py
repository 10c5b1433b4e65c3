"""Log parsers: every format to one ParsedRun structure, unfinished runs as failures, bad input named."""

import json
from pathlib import Path

import pytest

from scalesweep.logs.read import parse_file, parse_log
from scalesweep.logs.run import EmptyLogError, LogFormatError, gpus_from_filename, parse_duration

LOGS = Path(__file__).parent / "data" / "logs"


def only_run(path, **kwargs):
    runs = parse_file(LOGS / path, **kwargs)
    assert len(runs) == 1
    return runs[0]


def record(kind, **fields):
    return ":::SCALESWEEP " + json.dumps({"record": kind, "schema": 1, **fields})


HEADER = record("header", framework="tensorflow", model="cnn_small", world_size=2, gpus=2, epochs=3)


# --- scalesweep records ----------------------------------------------------------------------


def test_scalesweep_ok_reads_records_and_ignores_keras_lines_beside_them():
    run = only_run("scalesweep_ok.log")
    assert run.format == "scalesweep"
    assert run.header["model"] == "resnet50v2"
    assert run.header["world_size"] == 2
    assert run.header["global_batch"] == 512
    assert [e["epoch"] for e in run.epochs] == [1, 2, 3]
    # The epoch 2 record carries an srun `0: ` label in front of the prefix.
    assert run.epochs[1]["seconds"] == 8.0
    assert run.epochs[1]["throughput_img_s"] == 128.0
    assert run.summary["status"] == "ok"
    assert run.summary["total_time_s"] == 55.5


def test_scalesweep_oom_summary_is_kept():
    run = only_run("scalesweep_oom.log")
    assert run.summary["status"] == "oom"
    assert run.summary["reason"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert run.epochs == []


def test_scalesweep_truncated_is_a_failed_run_with_its_epochs():
    run = only_run("scalesweep_truncated.log")
    assert run.summary["status"] == "failed"
    assert "log ends before the summary record" in run.summary["reason"]
    assert [e["epoch"] for e in run.epochs] == [1, 2]


def test_scalesweep_slurm_time_limit_tail_is_a_timeout():
    run = only_run("scalesweep_timeout.log")
    assert run.summary["status"] == "timeout"
    assert "DUE TO TIME LIMIT" in run.summary["reason"]
    assert "\n" not in run.summary["reason"]
    assert len(run.epochs) == 1


def test_corrupt_record_names_the_line():
    text = "\n".join([HEADER, "human line", ':::SCALESWEEP {"record": "epoch", "epoch": 1,'])
    with pytest.raises(LogFormatError, match=r"^run\.log:3: corrupt"):
        parse_log(text, source="run.log")


@pytest.mark.parametrize(
    "line, message",
    [
        (record("epoch", epoch=1), r"x\.log:1: epoch record before any header"),
        (':::SCALESWEEP {"record": "header", "schema": 2}', r"x\.log:1: record schema 2"),
        (':::SCALESWEEP ["header"]', r"x\.log:1: .*not an object"),
    ],
)
def test_malformed_records_name_file_and_line(line, message):
    with pytest.raises(LogFormatError, match=message):
        parse_log(line, source="x.log")


def test_unknown_summary_status_and_duplicate_epoch_are_errors():
    with pytest.raises(LogFormatError, match=r":2: summary status 'done'"):
        parse_log("\n".join([HEADER, record("summary", status="done")]), source="x.log")
    with pytest.raises(LogFormatError, match=r":3: epoch 1 recorded twice"):
        parse_log("\n".join([HEADER, record("epoch", epoch=1), record("epoch", epoch=1)]), source="x.log")


def test_summary_ok_with_missing_epochs_is_not_trusted():
    text = "\n".join([HEADER, record("epoch", epoch=1, images=64, seconds=2.0), record("summary", status="ok")])
    (run,) = parse_log(text)
    assert run.summary["status"] == "failed"
    assert "1 of 3" in run.summary["reason"]


def test_crash_without_summary_reports_the_last_exception():
    text = "\n".join(
        [
            HEADER,
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "train_torch.py", line 10, in <module>',
            "[rank0]:     main()",
            "[rank0]: RuntimeError: NCCL communicator was aborted",
        ]
    )
    (run,) = parse_log(text)
    assert run.summary["status"] == "failed"
    # The exception is the reason: the early end of the log is only its consequence.
    assert run.summary["reason"] == "RuntimeError: NCCL communicator was aborted"


def test_several_header_records_give_several_runs():
    text = "\n".join([HEADER, record("summary", status="failed", reason="boom"), HEADER])
    first, second = parse_log(text)
    assert first.summary == {"status": "failed", "reason": "boom"}
    assert second.summary["status"] == "failed"
    assert "log ends before the summary record" in second.summary["reason"]


# --- empty and unknown -------------------------------------------------------------------------


def test_empty_log_is_an_error():
    with pytest.raises(LogFormatError, match=r"empty\.log: empty log"):
        parse_file(LOGS / "empty.log")
    with pytest.raises(LogFormatError, match="empty log"):
        parse_log("  \n\n")


@pytest.mark.parametrize("text", ["hello\nworld\n", "copying 3/4 - 2s - eta\n"])
def test_unrecognisable_log_is_an_error(text):
    with pytest.raises(LogFormatError, match=r"^y\.log: no known format"):
        parse_log(text, source="y.log")


def test_log_with_only_a_slurm_kill_is_a_run_that_failed_before_printing():
    (run,) = parse_log(
        "+ singularity exec --nv tf.sif python ResNet50.py\n"
        "slurmstepd: error: *** JOB 77 ON node1 CANCELLED AT 2025-11-14T11:17:02 DUE TO NODE FAILURE ***\n"
    )
    assert run.format == "unknown"
    assert run.summary["status"] == "failed"
    assert run.summary["reason"].startswith("NODE_FAIL: slurmstepd: error: *** JOB 77")


# --- TensorFlow reference, Keras 2 -------------------------------------------------------------


def test_keras2_two_gpus_header_and_step_precise_seconds():
    run = only_run("tf_keras2_resnet50_2gpus.log")
    assert run.format == "tf-reference-keras2"
    assert run.header["model"] == "resnet50v2"
    assert (run.header["world_size"], run.header["global_batch"], run.header["per_gpu_batch"]) == (2, 4096, 2048)
    assert run.header["epochs"] == 5
    second = run.epochs[1]
    # `13/13 - 11s - ... - 11s/epoch - 846ms/step`: 13 steps x 846 ms beats the whole second.
    assert second["seconds"] == pytest.approx(13 * 0.846)
    # 13 steps of 4096 are CIFAR-10's 50,000 training images (the last batch partial).
    assert second["images"] == 50_000 and run.images_source == "dataset"
    assert second["throughput_img_s"] == pytest.approx(50_000 / (13 * 0.846))
    assert (second["loss"], second["accuracy"]) == (2.0912, 0.2307)
    # Epoch 1 prints `2s/step`: +-6.5 s over 13 steps, so the epoch field (26 s) wins.
    assert run.epochs[0]["seconds"] == 26.0
    assert run.summary["status"] == "ok"


@pytest.mark.parametrize("gpus, steps, batch", [(1, 25, 2048), (2, 13, 4096), (4, 7, 8192)])
def test_keras2_one_file_per_gpu_count(gpus, steps, batch):
    run = only_run(f"tf_keras2_resnet50_{gpus}gpus.log")
    assert run.header["world_size"] == gpus
    # steps x batch (51,200 / 53,248 / 57,344) only bounds CIFAR-10's 50,000 from above
    assert (steps - 1) * batch < 50_000 <= steps * batch
    assert run.header["images_per_epoch"] == 50_000
    assert [e["epoch"] for e in run.epochs] == [1, 2, 3, 4, 5]


def test_keras2_file_with_three_runs_equals_the_three_single_files():
    runs = parse_file(LOGS / "tf_keras2_resnet50_1-2-4gpus.log")
    assert [run.header["world_size"] for run in runs] == [1, 2, 4]
    for run, gpus in zip(runs, (1, 2, 4)):
        single = only_run(f"tf_keras2_resnet50_{gpus}gpus.log")
        assert run.epochs == single.epochs
        assert run.summary["status"] == "ok"


def test_keras_run_cut_by_time_limit_after_two_complete_runs():
    text = (LOGS / "tf_keras2_resnet50_1-2-4gpus.log").read_text()
    cut = text[: text.index("Epoch 3/5", text.index(" Model ResNet50 4 GPUs"))]
    cut += "Epoch 3/5\nslurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2025-11-14T11:17:02 DUE TO TIME LIMIT ***\n"
    first, second, third = parse_log(cut)
    assert (first.summary["status"], second.summary["status"]) == ("ok", "ok")
    assert third.summary["status"] == "timeout"
    assert len(third.epochs) == 2


def test_keras_truncated_without_signature_says_how_far_it_got():
    (run,) = parse_log(" Model ResNet152 1 GPUs\nBatch_size: 1024\nNum_replicas: 1\nEpoch 1/5\n")
    assert run.header["model"] == "resnet152v2"
    assert run.summary["status"] == "failed"
    assert "after 0 of 5 epochs" in run.summary["reason"]


def test_keras_resource_exhausted_is_oom_but_tf_allocator_warning_is_not():
    head = " Model ResNet50 4 GPUs\nBatch_size: 32768\nNum_replicas: 4\nEpoch 1/5\n"
    warning = (
        "W tensorflow/core/common_runtime/bfc_allocator.cc:296] Allocator (GPU_0_bfc) ran out of memory "
        "trying to allocate 2.3GiB with freed_by_count=0. The caller indicates that this is not a failure\n"
    )
    (run,) = parse_log(head + warning)
    assert run.summary["status"] == "failed"
    error = "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor\n"
    (run,) = parse_log(head + warning + error)
    assert run.summary["status"] == "oom"
    assert run.summary["reason"].startswith("tensorflow.python.framework.errors_impl.ResourceExhaustedError")


def test_keras_evaluate_lines_after_training_are_not_epochs():
    evaluate = "3/3 - 1s - loss: 1.7 - accuracy: 0.4 - 1s/epoch - 300ms/step\n"
    (run,) = parse_log((LOGS / "tf_keras2_resnet50_2gpus.log").read_text() + evaluate)
    assert len(run.epochs) == 5


# --- TensorFlow, Keras 3 -----------------------------------------------------------------------


def test_keras3_whole_seconds_and_swapped_metric_order():
    run = only_run("tf_keras3_resnet50_2gpus.log")
    assert run.format == "tf-keras3"
    assert [e["seconds"] for e in run.epochs] == [61.0, 34.0, 33.0, 36.0]
    assert run.epochs[1]["images"] == 8 * 128 and run.images_source == "estimate"
    assert run.epochs[1]["throughput_img_s"] == pytest.approx(1024 / 34)
    assert (run.epochs[1]["loss"], run.epochs[1]["accuracy"]) == (2.5278, 0.1348)
    assert run.header["per_gpu_batch"] == 64


def test_keras3_single_epoch_fit_prints_no_epoch_line():
    header = " Model ResNet50 1 GPUs\nBatch_size: 64\nNum_replicas: 1\n"
    (run,) = parse_log(header + "4/4 - 9s - 2s/step - accuracy: 0.1 - loss: 2.3\n")
    assert run.format == "tf-keras3"
    assert [e["epoch"] for e in run.epochs] == [1]
    assert run.epochs[0]["images"] == 256
    assert run.summary["status"] == "ok"


# --- PyTorch DDP reference ---------------------------------------------------------------------


def test_ddp_complete_images_are_samples_per_rank_times_world_size():
    run = only_run("ddp_vit_4gpus.log")  # world size 4 from the file name
    assert run.format == "ddp-reference"
    header = run.header
    assert (header["model"], header["world_size"], header["per_gpu_batch"], header["global_batch"]) == (
        "vit_h_14",
        4,
        64,
        256,
    )
    assert (header["precision"], header["epochs"], header["parameters"]) == ("bf16", 5, 631021000)
    assert header["images_per_epoch"] == 25000 * 4
    second = run.epochs[1]  # `[EPOCH:2] Training throughput:1250.000 imgs/s`, no spaces
    assert second["images"] == 100000
    assert second["seconds"] == pytest.approx(100000 / 1250)
    assert run.epochs[4]["val_accuracy"] == 0.031
    assert run.summary == {
        "status": "ok",
        "reason": None,
        "epochs": 5,
        "train_time_s": pytest.approx(sum(100000 / t for t in (520, 1250, 1280, 1240, 1265))),
        "total_time_s": 552.0,
        "throughput_img_s": 1258.0,
        "memory_gb": 61.0,
    }


def test_ddp_world_size_argument_wins_over_the_file_name():
    run = only_run("ddp_vit_4gpus.log", world_size=2)
    assert run.epochs[0]["images"] == 25000 * 2


def test_ddp_without_world_size_is_an_error_that_says_how_to_give_it():
    text = (LOGS / "ddp_vit_4gpus.log").read_text()
    with pytest.raises(LogFormatError, match=r"^results/train\.log: ddp-reference logs do not state the world size"):
        parse_log(text, source="results/train.log")


def test_ddp_truncated_is_failed_and_keeps_the_epochs_it_finished():
    run = only_run("ddp_vit-n2-g8-truncated.out")
    assert run.header["world_size"] == 8
    assert run.epochs[1]["images"] == 12500 * 8
    assert run.summary["status"] == "failed"
    assert "2 of 5 epochs" in run.summary["reason"]


def test_ddp_cuda_oom_traceback_is_oom():
    text = (
        "[11/14/2025 10:02:11 AM] INFO - ### model_name: vit\n"
        "[11/14/2025 10:02:11 AM] INFO - ### batch_size: 512\n"
        "[11/14/2025 10:02:40 AM] INFO - [EPOCH: 1] Starting training loop...\n"
        "[rank0]: Traceback (most recent call last):\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB.\n"
    )
    (run,) = parse_log(text, world_size=4)
    assert run.summary["status"] == "oom"
    assert run.summary["reason"] == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB."


def test_ddp_duplicate_epoch_is_an_error():
    text = "### model_name: vit\n[EPOCH: 1] Training throughput: 5 imgs/s\n[EPOCH: 1] Training throughput: 6 imgs/s\n"
    with pytest.raises(LogFormatError, match=r"z\.log:3: epoch 1 reports its training throughput twice"):
        parse_log(text, source="z.log", world_size=1)


# --- file names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, gpus",
    [
        ("vit_4gpus.log", 4),
        ("ddp-n2-g8.out", 8),
        ("sweep_g8_repeat1.log", 8),
        ("resnet_8gpu.txt", 8),
        ("results/runs/pytorch/model~vit_tiny/dataset~synth/gpus~2/train.log", 2),
        ("vit_h_14.log", None),
        ("train.log", None),
        ("log8.txt", None),
        ("/scratch/g4/train.log", None),
    ],
)
def test_gpus_from_filename(name, gpus):
    assert gpus_from_filename(name) == gpus


@pytest.mark.parametrize(
    "text, seconds",
    [("702 s", 702), ("702.5s", 702.5), ("11m 42s", 702), ("1h 2m 3s", 3723), ("0:11:42", 702), ("712ms", 0.712)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


# --- the record contract on read (scalesweep/contract/records.py) ---------------------------------------


def test_empty_log_is_its_own_error_type():
    """tidy tells a job that printed nothing (a failed run) from a log it cannot read."""
    with pytest.raises(EmptyLogError):
        parse_log("\n")
    assert issubclass(EmptyLogError, LogFormatError)


def test_bad_header_value_fails_the_run_names_line_and_key_and_is_left_out():
    header = record("header", framework="tensorflow", model="cnn_small", world_size="4", gpus=2, epochs=1)
    text = "\n".join(["human line", header, record("epoch", epoch=1, images=64, seconds=2.0),
                      record("summary", status="ok")])
    (run,) = parse_log(text, source="x.log")
    assert run.summary == {
        "status": "failed",
        "reason": "x.log:2: header record: 'world_size' must be a whole number from 1 to 2**53, got '4'",
        "epochs": 1,
    }
    assert run.problems == [run.summary["reason"]]
    assert "world_size" not in run.header and run.header["gpus"] == 2


def test_every_problem_is_kept_and_the_reason_counts_the_others():
    epochs = [record("epoch", epoch=1, images=-64, seconds=0), record("epoch", epoch=2, images=64, seconds=2.0)]
    (run,) = parse_log("\n".join([HEADER, *epochs, record("summary", status="ok", memory_gb=-1)]), source="x.log")
    assert run.problems == [
        "x.log:2: epoch 1 record: 'images' must be a whole number from 1 to 2**53, got -64",
        "x.log:2: epoch 1 record: 'seconds' must be a finite number > 0 and <= 1e+15, got 0",
        "x.log:4: summary record: 'memory_gb' must be a finite number >= 0 or null, got -1",
    ]
    assert run.summary["reason"] == run.problems[0] + " (and 2 more problems)"
    assert run.epochs[0] == {"epoch": 1}  # the bad keys are gone: nothing computes with them


def test_duplicate_json_key_is_a_corrupt_record_even_in_a_nested_object():
    line = ':::SCALESWEEP {"record": "header", "schema": 1, "versions": {"torch": "2", "torch": "3"}}'
    with pytest.raises(LogFormatError, match=r"^x\.log:1: corrupt .*key 'torch' appears twice"):
        parse_log(line, source="x.log")


def test_world_size_hint_fills_a_header_without_one_but_not_with_a_bad_value():
    header = record("header", framework="pytorch", model="resnet18", epochs=1)
    text = "\n".join([header, record("epoch", epoch=1, images=64, seconds=2.0), record("summary", status="ok")])
    (run,) = parse_log(text, world_size=8)
    assert run.header["world_size"] == 8 and run.summary["status"] == "ok"
    (run,) = parse_log(text, source="x.log", world_size=0)
    assert run.summary["reason"] == "x.log:1: header record: 'world_size' is required, got nothing"


def test_keras_uneven_split_has_no_per_gpu_batch_and_nan_loss_no_metric():
    head = " Model ResNet50 3 GPUs\nBatch_size: 1000\nNum_replicas: 3\n"
    (run,) = parse_log(head + "4/4 - 9s - 2s/step - accuracy: 0.1 - loss: nan\n")
    assert run.header["global_batch"] == 1000 and "per_gpu_batch" not in run.header
    assert run.epochs[0]["loss"] is None and run.summary["status"] == "ok"


def test_keras_digit_runs_too_long_for_a_count_are_not_read_as_one():
    """Python refuses int() of over 4,300 digits; a count past 15 digits is no count anyway."""
    head = " Model ResNet50 1 GPUs\nBatch_size: " + "9" * 5000 + "\n"
    (run,) = parse_log(head + "Epoch 1/1\n4/4 - 9s - 2s/step - loss: 2.3\n")
    assert "global_batch" not in run.header and run.epochs[0]["images"] is None


def test_keras_cpu_baseline_without_num_replicas_has_no_world_size_of_zero():
    (run,) = parse_log(" Model ResNet50 0 GPUs\nBatch_size: 64\n4/4 - 9s - 2s/step - loss: 2.3\n")
    assert run.header["gpus"] == 0 and "world_size" not in run.header
    assert run.summary["status"] == "ok"


def test_ddp_unreadable_numbers_are_no_crash():
    text = (
        "### model_name: vit\n### batch_size: 64\n### num_epochs: 1\n"
        "### Total training samples (batches): 100 (2)\n"
        "[EPOCH: 1] Training throughput: 50 imgs/s | Loss: nan\nTraining finished!\n"
        "Training throughput: 1.2.3 imgs/s\nGPU memory reserved: 1.2.3 GB\n"
    )
    (run,) = parse_log(text, world_size=2)
    assert run.summary["status"] == "ok"
    assert (run.summary["throughput_img_s"], run.summary["memory_gb"]) == (None, None)
    assert run.epochs[0]["loss"] is None and run.epochs[0]["seconds"] == 200 / 50


def test_ddp_negative_throughput_fails_the_run_naming_the_epoch_and_key():
    text = "### model_name: vit\n### Total training samples (batches): 100 (2)\n[EPOCH: 1] Training throughput: -50 imgs/s\n"
    (run,) = parse_log(text + "Training finished!\n", source="d.log", world_size=2)
    assert run.summary["status"] == "failed"
    assert run.summary["reason"].startswith("d.log: epoch 1: 'throughput_img_s' must be a finite number > 0")
