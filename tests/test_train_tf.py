"""TensorFlow trainer (scripts/train_tf.py) and the record writer (scripts/runlog.py).

TensorFlow runs only in subprocesses: importing tensorflow here and torch later in the same pytest
process (another stage's tests) segfaults. Records are parsed with json directly, following
docs/records.md, so these tests do not depend on scalesweep's parser.
"""

import io
import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
TRAINER = SCRIPTS / "train_tf.py"
PREFIX = ":::SCALESWEEP "

sys.path.insert(0, str(SCRIPTS))
import make_cifar  # noqa: E402
import runlog  # noqa: E402


def parse_records(output: str) -> list[dict]:
    return [json.loads(line[line.index(PREFIX) + len(PREFIX) :]) for line in output.splitlines() if PREFIX in line]


def run_trainer(data, *args, inject=None, timeout=300) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != runlog.FAIL_INJECT_ENV}
    if inject:
        env[runlog.FAIL_INJECT_ENV] = inject
    command = [sys.executable, str(TRAINER), "--data", str(data), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def tf_probe(code: str) -> dict:
    """Run `code` (which prints one JSON object last) in a fresh interpreter with scripts/ on the path."""
    script = f"import sys\nsys.path.insert(0, {str(SCRIPTS)!r})\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cifar_256(tmp_path_factory):
    return make_cifar.generate(tmp_path_factory.mktemp("data"), train_images=256, test_images=10, seed=0).parent


def by_kind(records: list[dict]) -> dict:
    kinds = {}
    for record in records:
        assert record["schema"] == 1
        kinds.setdefault(record["record"], []).append(record)
    return kinds


# ---------------------------------------------------------------------------------------------
# runlog: stdlib only, tested in this process
# ---------------------------------------------------------------------------------------------


def test_emit_writes_one_prefixed_json_line_with_schema():
    stream = io.StringIO()
    runlog.emit({"record": "epoch", "loss": float("nan"), "nested": [float("inf"), 1.5]}, stream)
    line = stream.getvalue()
    assert line.startswith(PREFIX) and line.endswith("}\n") and line.count("\n") == 1
    record = json.loads(line[len(PREFIX) :])
    assert record == {"record": "epoch", "schema": 1, "loss": None, "nested": [None, 1.5]}


def test_emit_refuses_a_record_without_kind():
    with pytest.raises(ValueError, match="'record' kind"):
        runlog.format_record({"loss": 1.0})


def test_summarize_takes_medians_from_epoch_two_on():
    epochs = [runlog.epoch_record(i, 100, seconds) for i, seconds in [(1, 30.0), (2, 2.0), (3, 4.0), (4, 3.0)]]
    summary = runlog.summarize(epochs)
    assert summary["epochs"] == 4
    assert summary["train_time_s"] == pytest.approx(39.0)
    assert summary["steady_epoch_time_s"] == pytest.approx(3.0)
    assert summary["throughput_img_s"] == pytest.approx(100 / 3.0)


def test_summarize_has_no_steady_state_with_one_epoch():
    summary = runlog.summarize([runlog.epoch_record(1, 100, 5.0)])
    assert summary["steady_epoch_time_s"] is None and summary["throughput_img_s"] is None
    assert runlog.summarize([])["train_time_s"] == 0


def test_summary_record_needs_a_reason_unless_ok():
    with pytest.raises(ValueError, match="needs a reason"):
        runlog.summary_record("failed", [], 1.0)
    with pytest.raises(ValueError, match="ok, oom or failed"):
        runlog.summary_record("crashed", [], 1.0, reason="x")
    record = runlog.summary_record("oom", [], 1.0, reason="first line\nsecond line")
    assert record["reason"] == "first line" and record["peak_host_rss_gb"] > 0


def test_provenance_reads_slurm_variables():
    found = runlog.provenance(0.0, {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[1-2]"})
    assert (found["slurm_job_id"], found["slurm_nodelist"]) == ("42", "gpu[1-2]")
    assert found["start_time"] == "1970-01-01T00:00:00+00:00"
    assert runlog.provenance(environ={})["slurm_job_id"] is None


def test_fail_inject_mode_rejects_unknown_values():
    assert runlog.fail_inject_mode({}) is None
    assert runlog.fail_inject_mode({runlog.FAIL_INJECT_ENV: "OOM"}) == "oom"
    with pytest.raises(ValueError, match="SCALESWEEP_FAIL_INJECT='segfault'"):
        runlog.fail_inject_mode({runlog.FAIL_INJECT_ENV: "segfault"})


def test_sigterm_becomes_an_exception():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        runlog.raise_on_sigterm()
        with pytest.raises(runlog.Terminated, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------------------------------------
# Trainer pieces, in a TensorFlow subprocess
# ---------------------------------------------------------------------------------------------


def test_device_preprocessing_equals_the_reference_host_path():
    """Reference: tf.image.resize (bilinear) on the host, then /255 (REFERENCE.md section 1)."""
    result = tf_probe(
        """
        import json
        import keras, numpy as np, tensorflow as tf
        import train_tf
        images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
        out = {}
        for resolution in (32, 48, 128):
            reference = tf.image.resize(images, (resolution, resolution)) / 255.0
            alone = train_tf.preprocess(tf.constant(images), resolution)
            model = train_tf.build_model("cnn_small", resolution)
            in_model = keras.Model(model.input, model.get_layer("rescale").output)(images)
            out[resolution] = {
                "shape": list(in_model.shape), "dtype": in_model.dtype.name,
                "alone": float(tf.reduce_max(tf.abs(alone - reference))),
                "in_model": float(tf.reduce_max(tf.abs(in_model - reference))),
            }
        print(json.dumps(out))
        """
    )
    for resolution, found in result.items():
        assert found["shape"] == [3, int(resolution), int(resolution), 3]
        assert found["dtype"] == "float32"
        # One uint8 step is 1/255 = 0.0039: rounding anywhere in the path would show.
        assert found["alone"] < 1e-5 and found["in_model"] < 1e-5


def test_dataset_gives_whole_shuffled_uint8_batches():
    result = tf_probe(
        """
        import json
        import numpy as np
        import train_tf
        images = np.arange(70, dtype=np.uint8)[:, None, None, None] * np.ones((1, 32, 32, 3), np.uint8)
        labels = np.arange(70) % 10
        dataset = train_tf.make_dataset(images, labels, global_batch=16, seed=1)
        epochs = []
        for _ in range(2):
            batches = [(x.numpy(), y.numpy()) for x, y in dataset]
            epochs.append({
                "sizes": [len(x) for x, _ in batches],
                "dtype": str(batches[0][0].dtype),
                "ids": [int(v) for x, _ in batches for v in x[:, 0, 0, 0]],
                "labels_match": all(bool((x[:, 0, 0, 0] % 10 == y).all()) for x, y in batches),
            })
        print(json.dumps(epochs))
        """
    )
    first, second = result
    assert first["sizes"] == [16, 16, 16, 16] == second["sizes"]  # 70 // 16 batches, rest dropped
    assert first["dtype"] == "uint8" and first["labels_match"] and second["labels_match"]
    assert len(set(first["ids"])) == 64  # no image twice within an epoch
    assert first["ids"] != second["ids"]  # reshuffled every epoch
    assert first["ids"] != sorted(first["ids"])


def test_errors_are_classified_and_reasons_are_informative():
    """A real TF out-of-memory error (an impossible allocation) and a TF graph error text."""
    overcommit = Path("/proc/sys/vm/overcommit_memory")
    if not overcommit.exists() or overcommit.read_text().strip() == "1":
        pytest.skip("with overcommit=1 an impossible allocation is not refused up front")
    result = tf_probe(
        """
        import json
        import tensorflow as tf
        import train_tf
        try:
            tf.zeros([2**43])  # 32 TiB
        except Exception as exc:
            oom = exc
        graph_error = tf.errors.InvalidArgumentError(
            None, None, "Graph execution error:\\n\\nDetected at node foo\\n<stack traces unavailable>\\n"
            "Incompatible shapes: [2] vs. [3]\\n\\t [[{{node foo}}]]")
        print(json.dumps({
            "oom": train_tf.is_out_of_memory(oom), "oom_type": type(oom).__name__,
            "oom_reason": train_tf.error_reason(oom),
            "graph_is_oom": train_tf.is_out_of_memory(graph_error),
            "graph_reason": train_tf.error_reason(graph_error),
            "plain_is_oom": train_tf.is_out_of_memory(ValueError("bad")),
        }))
        """
    )
    assert result["oom"] and result["oom_type"] == "ResourceExhaustedError"
    assert "OOM when allocating" in result["oom_reason"]
    assert not result["graph_is_oom"] and not result["plain_is_oom"]
    assert result["graph_reason"] == "InvalidArgumentError: Incompatible shapes: [2] vs. [3]"


def test_model_list_matches_the_catalog():
    from scalesweep.catalog import MODELS

    done = subprocess.run([sys.executable, str(TRAINER), "--list-models"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert tuple(done.stdout.split()) == MODELS["tensorflow"]


def test_bad_arguments_exit_before_training(cifar_256):
    done = run_trainer(cifar_256, "--model", "cnn_small", "--gpus", "-1")
    assert done.returncode == 2 and "--gpus must be 0" in done.stderr
    assert parse_records(done.stdout) == []


# ---------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------


def assert_finished_run(records: list[dict], epochs: int):
    kinds = by_kind(records)
    assert [r["record"] for r in records] == ["header", *["epoch"] * epochs, "summary"]
    header, summary = kinds["header"][0], kinds["summary"][0]
    assert [r["epoch"] for r in kinds["epoch"]] == list(range(1, epochs + 1))
    for epoch in kinds["epoch"]:
        assert epoch["images"] == header["images_per_epoch"]
        assert epoch["seconds"] > 0
        assert epoch["throughput_img_s"] == pytest.approx(epoch["images"] / epoch["seconds"])
        assert 0 <= epoch["accuracy"] <= 1 and epoch["loss"] > 0
    steady = kinds["epoch"][1:]
    assert summary["status"] == "ok" and summary["reason"] is None
    assert summary["epochs"] == epochs
    assert summary["steady_epoch_time_s"] == pytest.approx(statistics.median(r["seconds"] for r in steady))
    assert summary["throughput_img_s"] == pytest.approx(statistics.median(r["throughput_img_s"] for r in steady))
    assert summary["train_time_s"] == pytest.approx(sum(r["seconds"] for r in kinds["epoch"]))
    assert summary["total_time_s"] >= summary["train_time_s"]
    assert summary["memory_gb"] is None  # CPU: TF does not track it
    assert summary["peak_host_rss_gb"] > 0
    return header, summary


@pytest.mark.slow
def test_two_cpu_replicas_train_and_log_every_record(cifar_256):
    done = run_trainer(
        cifar_256, "--model", "cnn_small", "--gpus", 2, "--resolution", 32, "--epochs", 3,
        "--per-gpu-batch", 32, "--dataset-name", "synthetic", "--base-lr", 0.05,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    header, _ = assert_finished_run(parse_records(done.stdout), epochs=3)
    assert header["framework"] == "tensorflow" and header["model"] == "cnn_small"
    assert header["dataset"] == "synthetic" and header["resolution"] == 32
    assert (header["gpus"], header["world_size"], header["nodes"]) == (2, 2, 1)
    assert header["device_kind"] == "cpu" and header["devices"] == ["CPU:0", "CPU:1"]
    assert (header["per_gpu_batch"], header["global_batch"]) == (32, 64)
    assert header["learning_rate"] == pytest.approx(0.1)
    assert header["images_per_epoch"] == 256 and header["protocol"] == "epochs"
    assert set(header["versions"]) >= {"python", "tensorflow", "keras", "numpy"}
    assert header["start_time"].endswith("+00:00")
    # The human lines users know from the reference and from Keras.
    assert " Model CNNSmall 2 GPUs (CPU replicas)\n" in done.stdout
    assert "Batch_size: 64\nNum_replicas: 2\n" in done.stdout
    assert "Epoch 3/3" in done.stdout


@pytest.mark.slow
def test_cpu_baseline_uses_one_device_and_a_subset(cifar_256):
    done = run_trainer(
        cifar_256, "--model", "cnn_small", "--gpus", 0, "--resolution", 40, "--epochs", 2,
        "--per-gpu-batch", 16, "--max-train-images", 100, "--precision", "bf16",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    header, _ = assert_finished_run(parse_records(done.stdout), epochs=2)
    assert (header["gpus"], header["world_size"], header["global_batch"]) == (0, 1, 16)
    assert header["devices"] == ["CPU:0"] and header["precision"] == "bf16"
    assert header["images_per_epoch"] == 96  # 100 images, whole batches of 16
    assert " Model CNNSmall CPU only\n" in done.stdout


@pytest.mark.slow
def test_injected_oom_is_a_measured_outcome_exit_zero(cifar_256):
    done = run_trainer(cifar_256, "--model", "cnn_small", "--gpus", 2, "--resolution", 32,
                       "--per-gpu-batch", 64, inject="oom")
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    assert [r["record"] for r in records] == ["header", "summary"]
    summary = records[-1]
    assert summary["status"] == "oom" and summary["epochs"] == 0
    assert summary["reason"].startswith("out of memory at per-GPU batch 64 (32 px, fp32): ResourceExhaustedError")


@pytest.mark.slow
def test_injected_crash_is_a_failure_exit_nonzero(cifar_256):
    done = run_trainer(cifar_256, "--model", "cnn_small", "--gpus", 1, "--resolution", 32, inject="crash")
    assert done.returncode != 0
    summary = parse_records(done.stdout)[-1]
    assert summary["record"] == "summary" and summary["status"] == "failed"
    assert "RuntimeError: SCALESWEEP_FAIL_INJECT=crash" in summary["reason"]


@pytest.mark.slow
def test_missing_data_fails_with_the_path_in_the_summary(tmp_path):
    done = run_trainer(tmp_path / "absent", "--model", "cnn_small", "--gpus", 1, "--resolution", 32)
    assert done.returncode != 0
    records = parse_records(done.stdout)
    assert [r["record"] for r in records] == ["summary"]
    assert records[0]["status"] == "failed" and "absent" in records[0]["reason"]


@pytest.mark.slow
def test_too_few_images_for_one_global_batch_is_a_clear_failure(cifar_256):
    done = run_trainer(cifar_256, "--model", "cnn_small", "--gpus", 2, "--per-gpu-batch", 200, "--resolution", 32)
    assert done.returncode != 0
    assert "256 training images are fewer than one global batch of 400" in parse_records(done.stdout)[-1]["reason"]


@pytest.mark.slow
def test_sigterm_mid_training_still_writes_a_failed_summary(cifar_256):
    """SLURM's time limit sends SIGTERM first: the log must say why it ends."""
    env = {key: value for key, value in os.environ.items() if key != runlog.FAIL_INJECT_ENV}
    command = [sys.executable, str(TRAINER), "--data", str(cifar_256), "--model", "cnn_small", "--gpus", "1",
               "--resolution", "32", "--per-gpu-batch", "32", "--epochs", "100000"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env) as trainer:
        lines = []
        for line in trainer.stdout:
            lines.append(line)
            if '"record": "epoch"' in line:
                break
        trainer.send_signal(signal.SIGTERM)
        rest, _ = trainer.communicate(timeout=120)
    records = parse_records("".join(lines) + rest)
    assert trainer.returncode != 0
    summary = records[-1]
    assert summary["record"] == "summary" and summary["status"] == "failed"
    assert summary["reason"].startswith("Terminated: terminated by SIGTERM")
    assert summary["epochs"] == sum(r["record"] == "epoch" for r in records) >= 1
