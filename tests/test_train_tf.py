"""TensorFlow trainer (scripts/train_tf.py, the backend scalesweep/train/tf_backend/: trainer.py,
its data data.py); its record writer has tests/test_runlog.py, the contract both trainers share
tests/test_backends.py.

TensorFlow runs only in subprocesses: importing tensorflow here and torch later in the same pytest
process (another stage's tests) segfaults. Records are parsed with json directly, following
docs/records.md; one test feeds a log to scalesweep's parser, the records' reader.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
TRAINER = SCRIPTS / "train_tf.py"
PREFIX = ":::SCALESWEEP "

from scalesweep.train.common import faults, measure, stepparts  # noqa: E402
from scalesweep.train.datasets import make_cifar  # noqa: E402
from probe_interpreter import ProbeInterpreter  # noqa: E402
from stacks import container_python  # noqa: E402
from test_backends import assert_finished_run  # noqa: E402  (the epochs protocol's contract)


def parse_records(output: str) -> list[dict]:
    return [json.loads(line[line.index(PREFIX) + len(PREFIX) :]) for line in output.splitlines() if PREFIX in line]


def run_trainer(data, *args, timeout=300) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != faults.FAIL_INJECT_ENV}
    command = [sys.executable, str(TRAINER), "--data", str(data), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


# The probes on this interpreter share one TensorFlow process: its import is paid once.
SHARED_TF = ProbeInterpreter(sys.executable)


@pytest.fixture(scope="module", autouse=True)
def shared_tf():
    yield SHARED_TF
    SHARED_TF.close()


def tf_probe(code: str, python: str = sys.executable, own_process: bool = False) -> dict:
    """Run `code` (which prints one JSON object last) with the repository on the path: in the shared
    TensorFlow interpreter, or in a fresh one (another stack's; a probe that sets up devices)."""
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(code)
    if python == sys.executable and not own_process:
        return SHARED_TF.run(script)
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=300)
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
# Trainer pieces, in a TensorFlow subprocess
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_device_preprocessing_equals_the_reference_host_path():
    """Reference: tf.image.resize (bilinear) on the host, then /255 (docs/reference.md §1)."""
    result = tf_probe(
        """
        import json
        import keras, numpy as np, tensorflow as tf
        from scalesweep.train.tf_backend import model as tf_model
        images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
        out = {}
        for resolution in (32, 48, 128):
            reference = tf.image.resize(images, (resolution, resolution)) / 255.0
            alone = tf_model.preprocess(tf.constant(images), resolution)
            model = tf_model.build_model("cnn_small", resolution)
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


@pytest.mark.slow
def test_device_preprocessing_equals_the_reference_input_path(cifar_256):
    """Ours (pickles -> uint8 host tensors -> the model's resize layers) against the reference
    script's own pipeline (benchmarks/reference_tf.py: per-image resize on the host, /255,
    float32 cache), on the same pickles, image for image."""
    result = tf_probe(
        f"""
        import json
        import keras, numpy as np, tensorflow as tf
        sys.path.insert(0, {str(ROOT / "benchmarks")!r})
        import reference_tf
        from scalesweep.train.tf_backend import data as tf_data, model as tf_model
        out = {{}}
        for resolution in (64, 128):
            reference_ds, _ = reference_tf.load_cifar(16, {str(cifar_256)!r} + "/cifar-10-batches-py", resolution)
            reference_images, reference_labels = next(iter(reference_ds))
            images, labels = tf_data.load_training_data({str(cifar_256)!r})
            model = tf_model.build_model("cnn_small", resolution)
            ours = keras.Model(model.input, model.get_layer("rescale").output)(images[:16])
            out[resolution] = {{
                "shapes": [list(ours.shape), list(reference_images.shape)],
                "max_difference": float(tf.reduce_max(tf.abs(ours - reference_images))),
                "labels_equal": bool(tf.reduce_all(labels[:16] == reference_labels)),
                "host_dtype": images.dtype.name,
            }}
        print(json.dumps(out))
        """
    )
    for resolution, found in result.items():
        side = int(resolution)
        assert found["shapes"] == [[16, side, side, 3]] * 2
        assert found["labels_equal"] and found["host_dtype"] == "uint8"
        assert found["max_difference"] < 1e-5  # one uint8 step is 1/255 = 0.0039


@pytest.mark.slow
def test_dataset_gives_whole_shuffled_uint8_batches():
    result = tf_probe(
        """
        import json
        import numpy as np
        from scalesweep.train.tf_backend import data as tf_data
        images = np.arange(70, dtype=np.uint8)[:, None, None, None] * np.ones((1, 32, 32, 3), np.uint8)
        labels = np.arange(70) % 10
        dataset = tf_data.make_dataset(images, labels, global_batch=16, seed=1)
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


@pytest.mark.slow
def test_errors_are_classified_and_reasons_are_informative():
    """A real TF out-of-memory error (an impossible allocation) and a TF graph error text."""
    overcommit = Path("/proc/sys/vm/overcommit_memory")
    if not overcommit.exists() or overcommit.read_text().strip() == "1":
        pytest.skip("with overcommit=1 an impossible allocation is not refused up front")
    result = tf_probe(
        """
        import json
        import tensorflow as tf
        from scalesweep.train.tf_backend import trainer as train_tf
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


@pytest.mark.slow
def test_endless_datasets_pass_by_pass_and_as_a_stream():
    """Training draws endless passes (each a fresh permutation, remainder dropped); the
    maximum-batch probes draw a stream whose batches may exceed the data set."""
    result = tf_probe(
        """
        import json
        import numpy as np
        from scalesweep.train.tf_backend import data as tf_data
        images = np.arange(10, dtype=np.uint8)[:, None, None, None] * np.ones((1, 32, 32, 3), np.uint8)
        labels = np.arange(10) % 10
        def ids(repeat, global_batch, batches):
            dataset = tf_data.make_dataset(images, labels, global_batch, seed=0, repeat=repeat)
            return [x.numpy()[:, 0, 0, 0].tolist() for x, _ in dataset.take(batches)]
        print(json.dumps({"passes": ids(tf_data.PASSES, 4, 6), "stream": ids(tf_data.STREAM, 25, 4)}))
        """
    )
    passes, stream = result["passes"], result["stream"]
    assert [len(batch) for batch in passes] == [4] * 6  # 10 images: 2 whole batches per pass
    for first in range(0, 6, 2):
        pass_ids = passes[first] + passes[first + 1]
        assert len(set(pass_ids)) == 8  # no image twice within a pass
    assert passes[0] + passes[1] != passes[2] + passes[3]  # every pass reshuffled
    assert [len(batch) for batch in stream] == [25] * 4
    ids = [image for batch in stream for image in batch]
    assert [sorted(ids[start : start + 10]) for start in range(0, 100, 10)] == [list(range(10))] * 10


@pytest.mark.slow
def test_dataset_rejects_an_unknown_repeat_mode():
    result = tf_probe(
        """
        import json
        import numpy as np
        from scalesweep.train.tf_backend import data as tf_data
        try:
            tf_data.make_dataset(np.zeros((4, 32, 32, 3), np.uint8), np.zeros(4), 2, 0, repeat="forever")
        except ValueError as error:
            print(json.dumps({"error": str(error)}))
        """
    )
    assert "repeat must be one of" in result["error"] and "'forever'" in result["error"]


@pytest.mark.slow
def test_xla_over_several_cpu_replicas_is_refused_with_the_reason(cifar_256):
    done = run_trainer(cifar_256, "--model", "cnn_small", "--gpus", 2, "--resolution", 32, "--compile")
    assert done.returncode != 0
    assert [r["record"] for r in parse_records(done.stdout)] == ["summary"]
    summary = parse_records(done.stdout)[0]
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("DeviceError: --compile over 2 CPU replicas: XLA cannot reach variables")


@pytest.mark.slow
def test_a_sync_delay_under_xla_is_refused_not_ignored(cifar_256):
    env = {**os.environ, faults.SYNC_DELAY_ENV: "0.05"}
    command = [sys.executable, str(TRAINER), "--data", str(cifar_256), "--model", "cnn_small", "--gpus", "1",
               "--resolution", "32", "--compile"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    (summary,) = parse_records(done.stdout)
    assert summary["status"] == "failed"
    assert summary["reason"].startswith(f"ValueError: {faults.SYNC_DELAY_ENV} delays MirroredStrategy's cross-device ops")


# ---------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------


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
    assert (header["warmup_steps"], header["timed_steps"]) == (5, None)
    assert (header["compile"], header["oom_policy"], header["requested_per_gpu_batch"]) == (False, "fail", 32)
    assert set(header["versions"]) >= {"python", "tensorflow", "keras", "numpy", "cuda", "cudnn", "nccl"}
    assert header["start_time"].endswith("+00:00")
    assert header["gpu_models"] == [] and header["container_image"] is None  # no GPU, no container here
    # 4 steps per epoch, the run's first 5 steps warm-up: epoch 1 has no step statistics, epoch 2
    # leaves out its first step, epoch 3 none.
    epochs = by_kind(parse_records(done.stdout))["epoch"]
    assert [e["steps"] for e in epochs] == [4, 4, 4]
    assert epochs[0]["step_time_median_s"] is None and epochs[0]["step_time_p90_s"] is None
    assert epochs[1]["step_time_median_s"] is not None and epochs[2]["step_time_median_s"] is not None
    # The human lines users know from the reference and from Keras (its ProgbarLogger).
    assert " Model CNNSmall 2 GPUs (CPU replicas)\n" in done.stdout
    assert "Batch_size: 64\nNum_replicas: 2\n" in done.stdout
    # Heartbeat lines may fall between Keras' lines when a loaded machine makes a step last over
    # a second (docs/trainers.md, "The heartbeat"); Keras' own lines stay in their order.
    keras_lines = "".join(line for line in done.stdout.splitlines(keepends=True) if "[heartbeat]" not in line)
    assert "Epoch 3/3\n4/4 - " in keras_lines
    # The step breakdown over the steady epochs' 7 timed steps (epoch 2 leaves out the run's
    # 5th step), the all-reduce probe on cnn_small's 24,346 float32 weights.
    summary = parse_records(done.stdout)[-1]
    assert summary["breakdown_steps"] == 7
    assert summary["breakdown_step_s"] == pytest.approx((epochs[1]["seconds"] + epochs[2]["seconds"]) / 8)
    assert_parts_add_up(summary)
    assert summary["allreduce_bytes"] == CNN_SMALL_GRADIENT_BYTES and summary["allreduce_s"] > 0
    assert done.stdout.count("step breakdown: ") == 1


@pytest.mark.slow
def test_too_few_images_for_one_global_batch_is_a_clear_failure(cifar_256):
    done = run_trainer(cifar_256, "--model", "cnn_small", "--gpus", 2, "--per-gpu-batch", 200, "--resolution", 32)
    assert done.returncode != 0
    assert "256 training images are fewer than one global batch of 400" in parse_records(done.stdout)[-1]["reason"]


@pytest.mark.slow
def test_steps_protocol_with_xla_records_two_windows(cifar_256):
    from scalesweep.logs.read import parse_log
    from scalesweep.contract.records import FIRST_STEADY_EPOCH

    done = run_trainer(
        cifar_256, "--model", "cnn_small", "--gpus", 1, "--resolution", 32, "--per-gpu-batch", 16,
        "--protocol", "steps", "--warmup-steps", 3, "--timed-steps", 20, "--compile", "--epochs", 7,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    assert [r["record"] for r in records] == ["header", "epoch", "epoch", "summary"]
    header, warmup, timed, summary = records
    assert (header["protocol"], header["warmup_steps"], header["timed_steps"]) == ("steps", 3, 20)
    assert header["compile"] is True and header["epochs"] == 2 and header["images_per_epoch"] == 20 * 16
    assert (warmup["epoch"], warmup["phase"], warmup["steps"], warmup["images"]) == (1, "warmup", 3, 48)
    assert warmup["step_time_median_s"] is None  # every warm-up step is left out
    assert (timed["epoch"], timed["phase"], timed["steps"], timed["images"]) == (2, "timed", 20, 320)
    assert 0 < timed["step_time_median_s"] <= timed["step_time_p90_s"]
    # The window's wall time holds its 20 synchronized steps (and the host work between them).
    assert timed["seconds"] >= 20 * timed["step_time_median_s"] * 0.5
    assert summary["status"] == "ok" and summary["epochs"] == 2 and summary["total_time_s"] is None
    assert summary["throughput_img_s"] == pytest.approx(320 / timed["seconds"])
    assert summary["train_time_s"] == pytest.approx(warmup["seconds"] + timed["seconds"])
    assert "timed window: 20 steps" in done.stdout
    # The records' reader takes steady state = epochs >= 2: the timed window, unchanged.
    (run,) = parse_log(done.stdout)
    assert run.summary["status"] == "ok"
    assert [e for e in run.epochs if e["epoch"] >= FIRST_STEADY_EPOCH] == [
        {key: value for key, value in timed.items() if key not in ("record", "schema")}]


@pytest.mark.slow
def test_benchmark_input_path_figures(tmp_path):
    """benchmarks/bench_trainer.py's memory figure on 1,000 images: it runs both sides and the
    reference's float32 cache (1,000 x 128 x 128 x 3 x 4 B = 188 MiB) dwarfs our uint8 set."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_trainer.py"), "--only", "rss", "--rss-images", "1000",
         "--rss-batch", "100"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = {name: (float(value), unit) for name, value, unit in (line.split() for line in done.stdout.splitlines())}
    assert figures["float32_cache_size_mb"] == (pytest.approx(187.5), "MB")
    assert figures["host_rss_reference_mb"][0] > 150
    assert figures["host_rss_ratio"][1] == "x"
    assert figures["host_rss_ratio"][0] == pytest.approx(
        figures["host_rss_ours_mb"][0] / figures["host_rss_reference_mb"][0], rel=1e-3)
    assert figures["host_rss_ratio"][0] < 0.5


@pytest.mark.slow
def test_max_train_images_picks_the_shared_seeded_subset(cifar_256):
    """The same images the PyTorch trainer would pick for that seed (measure.subset_indices)."""
    picked = tf_probe(f"""
        import json, numpy as np
        from scalesweep.train.common import measure
        from scalesweep.train.datasets import cifar
        from scalesweep.train.tf_backend import data as tf_data
        images, labels = tf_data.load_training_data({str(cifar_256)!r}, 40, seed=7)
        parts = [cifar.read_batch(cifar.batches_dir({str(cifar_256)!r}) / name) for name in cifar.TRAIN_BATCHES]
        all_images, all_labels = np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])
        keep = measure.subset_indices(len(all_labels), 40, 7)
        print(json.dumps({{"images": bool(np.array_equal(images.numpy(), all_images[keep])),
                           "labels": bool(np.array_equal(labels.numpy(), all_labels[keep])),
                           "count": int(labels.shape[0]), "head": keep[:3]}}))
    """)
    assert picked["images"] and picked["labels"] and picked["count"] == 40
    assert picked["head"] != [0, 1, 2]  # a seeded pick, not the first 40


# ---------------------------------------------------------------------------------------------
# Step breakdown (scalesweep/train/tf_backend/probes.py) and FLOPs
# ---------------------------------------------------------------------------------------------

# cnn_small's trainable weights: convolutions 3x3x3x16, 3x3x16x32, 3x3x32x64 without bias, batch
# norm scale and offset of 16 + 32 + 64 channels, dense 64 x 10 + 10: 24,346 float32 = 97,384 B.
CNN_SMALL_GRADIENT_BYTES = 4 * (3 * 3 * 3 * 16 + 3 * 3 * 16 * 32 + 3 * 3 * 32 * 64 + 2 * (16 + 32 + 64) + 64 * 10 + 10)
# Its multiply-adds per image at 32 px: the convolutions at 32x32, 16x16 and 8x8 (after each
# block's pooling), the dense layer.
CNN_SMALL_CONV_MACS = (32 * 32 * 16 * 27, 16 * 16 * 32 * 144, 8 * 8 * 64 * 288)
CNN_SMALL_DENSE_MACS = 64 * 10
PARTS = ("data_wait_s", "compute_s", "sync_wait_s", "sync_comm_s", "other_s")


def assert_parts_add_up(summary: dict) -> None:
    """The summary's breakdown: every part measured, adding up to the wall time per step."""
    assert all(summary[key] is not None for key in ("breakdown_step_s", *PARTS))
    assert sum(summary[key] for key in PARTS) == pytest.approx(summary["breakdown_step_s"], abs=1e-12)
    assert summary["data_wait_s"] > 0 and summary["compute_s"] > 0 and summary["sync_exposed_s"] >= 0


TF_COMPAT_PROBE = """
import json
import keras, tensorflow as tf
from scalesweep.train.tf_backend import compat as tf_compat

# Zero weights: every image gets the softmax of zeros over 4 classes, 1/4 each.
inputs = keras.Input((3,))
outputs = keras.layers.Dense(4, kernel_initializer="zeros", activation="softmax")(inputs)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"], jit_compile=False)
images, labels = tf.ones([2, 3]), tf.constant([1, 2])
tf_compat.build_training_state(model, images, labels)
optimizer_variables = tf_compat.optimizer_variables(model.optimizer)
before = [v.name for v in optimizer_variables]
loss = float(tf_compat.compute_loss(model, images, labels, model(images)))
model.train_step((images, labels))
strategy = tf.distribute.get_strategy()
read = tf_compat.read_back(strategy, {"loss": tf.constant(1.0), "batch": (images, labels)})
try:
    tf_compat.read_back(strategy, None)
    refused = False
except ValueError:
    refused = True
print(json.dumps({
    "jit": tf_compat.jit_compile_on(model), "loss": loss,
    "scaled": float(tf_compat.scale_loss(model.optimizer, tf.constant(2.0))),
    "optimizer_variables_kept": [v.name for v in tf_compat.optimizer_variables(model.optimizer)] == before,
    "iterations": int(model.optimizer.iterations.numpy()),
    "iterations_listed": any(v is model.optimizer.iterations for v in optimizer_variables),
    "accuracy": float(model.get_metrics_result()["accuracy"]),
    "progbar_counts_steps": getattr(tf_compat.progbar_logger(), "use_steps", True),
    "applications": hasattr(tf_compat.applications(), "ResNet50V2"),
    "read_devices": read, "refused_none": refused,
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["this", "tensorflow"])
def test_tf_compat_behaves_alike_on_every_stack(stack):
    """tf_compat's functions on this interpreter and on the TensorFlow container stack's
    (tests/stacks.py: Keras 2.11)."""
    python = sys.executable if stack == "this" else container_python("tensorflow")
    found = tf_probe(TF_COMPAT_PROBE, python)
    assert found["jit"] is False and found["loss"] == pytest.approx(1.3862944, abs=1e-6)  # ln 4
    assert found["scaled"] == 2.0  # float32: no loss scaling
    assert found["optimizer_variables_kept"] and found["iterations_listed"] and found["iterations"] == 1
    # One step of SGD on zero weights, both labels' logits move up alike from the tie: the
    # accuracy is a number (0, 0.5 or 1 for two images), not an empty per-replica array.
    assert found["accuracy"] in (0.0, 0.5, 1.0)
    assert found["progbar_counts_steps"] is True and found["applications"] is True
    assert found["read_devices"] == 1 and found["refused_none"] is True


@pytest.mark.slow
def test_graph_flops_count_the_ops_the_graph_runs():
    """A convolution (8x8 output, 4 channels, 3x3x3 taps: 6,912 multiply-adds) and a 4x8 @ 8x16
    matmul (512) feed the output: 2 x 7,424 = 14,848 FLOPs. An unused 4x8 @ 8x32 matmul is
    built but never run, and not counted."""
    result = tf_probe(
        """
        import json
        import tensorflow as tf
        from scalesweep.train.tf_backend import probes as tf_probes
        kernel, w, unused_w = tf.ones([3, 3, 3, 4]), tf.ones([8, 16]), tf.ones([8, 32])
        @tf.function
        def f(image, x):
            unused = tf.matmul(x, unused_w)
            return tf.nn.conv2d(image, kernel, 1, "SAME"), tf.matmul(x, w)
        graph = f.get_concrete_function(tf.TensorSpec([1, 8, 8, 3]), tf.TensorSpec([4, 8])).graph
        ops = [op.type for op in graph.get_operations()]
        print(json.dumps({"flops": tf_probes.graph_flops(graph), "matmuls_built": ops.count("MatMul")}))
        """
    )
    assert result == {"flops": 2 * (8 * 8 * 4 * 27 + 4 * 8 * 16), "matmuls_built": 2}


@pytest.mark.slow
def test_resnet50_flops_match_the_published_count():
    """keras.applications.ResNet50 at 224 px. Reference: He et al. 2016, table 1, 3.8 x 10^9
    multiply-adds for ResNet-50; Keras' ResNet50 is that original model (stride 2 in the first
    1x1 convolution of a stage; torchvision's 4.1 G is "v1.5", stride in the 3x3). Counted by
    hand from its layers' shapes: 3.86 G. Forward = 2 x that (+ the elementwise ops, under 1 %);
    training = forward + backward, about 3 x forward."""
    result = tf_probe(
        """
        import json
        import keras, tensorflow as tf
        from scalesweep.train.tf_backend import probes as tf_probes
        model = keras.applications.ResNet50(weights=None)
        macs = 0
        for layer in model.layers:
            if isinstance(layer, keras.layers.Conv2D):
                macs += int(tf.reduce_prod(layer.kernel.shape)) * layer.output.shape[1] * layer.output.shape[2]
            elif isinstance(layer, keras.layers.Dense):
                macs += int(tf.reduce_prod(layer.kernel.shape))
        images, labels = tf.TensorSpec([2, 224, 224, 3]), tf.TensorSpec([2], tf.int32)
        forward = tf.function(lambda x, y: model(x, training=False))
        @tf.function
        def training(x, y):
            with tf.GradientTape() as tape:
                loss = keras.losses.sparse_categorical_crossentropy(y, model(x, training=True))
            return tape.gradient(loss, model.trainable_variables)
        count = lambda f: tf_probes.graph_flops(f.get_concrete_function(images, labels).graph) / 2
        print(json.dumps({"macs": macs, "forward": count(forward), "training": count(training)}))
        """
    )
    assert result["macs"] == pytest.approx(3.86e9, rel=0.005)
    assert result["forward"] == pytest.approx(2 * result["macs"], rel=0.02)
    assert result["forward"] == pytest.approx(2 * 3.8e9, rel=0.05)
    assert result["training"] / result["forward"] == pytest.approx(3.0, rel=0.05)


PROBES = 5  # interleaved probe steps the test runs by hand


@pytest.mark.slow
def test_breakdown_probes_leave_the_model_as_it_was(cifar_256):
    """After 3 training steps on 2 CPU replicas, 5 interleaved probe steps (whole training steps
    without the all-reduce, each noted beside the 0.01 s its step took after its data wait) and
    the all-reduce probe: their timings, and every variable of the model and of the optimizer and
    the metrics' loss and accuracy unchanged by them (learning rate 0, state restored)."""
    result = tf_probe(
        f"""
        import json
        import numpy as np
        from scalesweep.train.tf_backend import trainer as train_tf
        backend = train_tf.KerasBackend()
        backend.setup(train_tf.parse_args(["--data", {str(cifar_256)!r}, "--model", "cnn_small", "--gpus", "2",
                                           "--resolution", "32", "--per-gpu-batch", "16"]))
        attempt = backend.build(16, 1)
        attempt.probe(3)
        state = lambda: [v.numpy().copy() for v in [*attempt.model.variables, *attempt.model.optimizer.variables]]
        before, metrics = state(), {{k: float(v) for k, v in attempt.model.get_metrics_result().items()}}
        lr = float(attempt.model.optimizer.learning_rate.numpy())
        for _ in range({PROBES}):
            attempt.interleaved.probe(attempt.batch, 0.01)
        probes = attempt.breakdown_probes()
        after = state()
        metrics_after = {{k: float(v) for k, v in attempt.model.get_metrics_result().items()}}
        print(json.dumps({{**probes, "unchanged": all(np.array_equal(a, b) for a, b in zip(before, after)),
                          "metrics": [metrics, metrics_after],
                          "variables": len(before), "lr": [lr, float(attempt.model.optimizer.learning_rate.numpy())],
                          "flops": attempt.header_updates["flops_per_image"]}}))
        """,
        own_process=True,  # its two CPU replicas are set up before TensorFlow's first operation
    )
    # 3 kernels, 4 per batch norm (scale, offset, moving mean and variance) x 3, the dense layer's
    # 2; the optimizer's step count and learning rate.
    assert result["unchanged"] and result["variables"] == 3 + 4 * 3 + 2 + 2
    assert set(result["metrics"][0]) >= {"loss", "accuracy"} and result["metrics"][0] == result["metrics"][1]
    assert result["lr"] == pytest.approx([0.02, 0.02])  # 0.01 x 2 replicas, restored
    assert len(result["compute"]) == PROBES and all(seconds > 0 for seconds in result["compute"])
    assert result["compute_paired"] == [0.01] * PROBES
    assert len(result["allreduce"]) == stepparts.ALLREDUCE_REPEATS
    assert all(seconds > 0 for seconds in result["allreduce"])
    assert (result["ranks"], result["gradient_bytes"]) == (2, CNN_SMALL_GRADIENT_BYTES)
    assert_cnn_small_flops(result["flops"])


def assert_cnn_small_flops(flops: float) -> None:
    """cnn_small's FLOPs per trained image at 32 px: forward, the weights' gradients and the input
    gradients of every layer but the first (whose input needs none): 2 FLOPs per multiply-add,
    plus the elementwise ops (batch norm, ReLU, pooling, loss: a few %)."""
    conv1, conv2, conv3 = CNN_SMALL_CONV_MACS
    by_hand = 2 * (2 * (conv1 + conv2 + conv3) + (conv2 + conv3) + 3 * CNN_SMALL_DENSE_MACS)
    assert by_hand == 15_929_088
    assert by_hand < flops < 1.06 * by_hand


def steps_run(data, devices: int, env=None, *options) -> dict:
    """A steps-protocol run of cnn_small at 32 px; its summary, header and human output."""
    command = [sys.executable, str(TRAINER), "--data", str(data), "--model", "cnn_small", "--resolution", "32",
               "--gpus", str(devices), "--protocol", "steps", "--warmup-steps", "3", *map(str, options)]
    clean = {key: value for key, value in os.environ.items() if not key.startswith("SCALESWEEP_")}
    done = subprocess.run(command, capture_output=True, text=True, env={**clean, **(env or {})}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = parse_records(done.stdout)
    return {"header": records[0], "timed": records[2], "summary": records[-1], "stdout": done.stdout}


@pytest.mark.slow
def test_step_breakdown_at_one_replica_has_no_exposed_synchronisation(cifar_256):
    run = steps_run(cifar_256, 1, None, "--per-gpu-batch", 32, "--timed-steps", 30)
    summary, timed = run["summary"], run["timed"]
    assert_parts_add_up(summary)
    assert summary["breakdown_step_s"] == pytest.approx(timed["seconds"] / 30)
    assert summary["breakdown_steps"] == 30
    # One replica synchronises nothing: its step is data wait + compute, up to noise (other).
    assert summary["sync_exposed_s"] == 0.0 and abs(summary["other_s"]) <= 0.2 * summary["breakdown_step_s"]
    assert summary["allreduce_s"] is None and summary["allreduce_bytes"] is None  # nothing to all-reduce
    line = next(line for line in run["stdout"].splitlines() if line.startswith("step breakdown: "))
    assert " + other " in line and f"= data {1000 * summary['data_wait_s']:.2f} + " in line
    assert_cnn_small_flops(run["header"]["flops_per_image"])


# Large beside a CPU step's own jitter on a shared, busy machine (20 % of it is the tolerance).
INJECTED_DELAY_S = 0.3


@pytest.mark.slow
def test_injected_delays_land_in_their_part_of_the_step(cifar_256):
    """Runs alike but for an injected delay D per step, on 2 CPU replicas: a delayed gradient
    reduction moves D into exposed synchronisation, a slowed loader into data wait (each within
    20 %), and neither into the other parts. A busy machine beside the test slows compute between
    the runs by up to half of itself (0.09 s of the plain run's compute in a loaded CI run), so
    the other parts, and the step beyond D, may move by 20 % of D plus half the plain run's
    compute: a misplaced delay moves a whole D."""
    options = ("--per-gpu-batch", 16, "--timed-steps", 20)
    plain = steps_run(cifar_256, 2, None, *options)["summary"]
    runs = {part: steps_run(cifar_256, 2, {variable: str(INJECTED_DELAY_S)}, *options)["summary"]
            for part, variable in (("sync_exposed_s", faults.SYNC_DELAY_ENV), ("data_wait_s", faults.DATA_DELAY_ENV))}
    for part, run in runs.items():
        moved = {key: run[key] - plain[key]
                 for key in ("breakdown_step_s", "data_wait_s", "compute_s", "sync_exposed_s")}
        allowance = 0.2 * INJECTED_DELAY_S + 0.5 * plain["compute_s"]
        assert moved[part] == pytest.approx(INJECTED_DELAY_S, rel=0.2), (part, moved)
        assert abs(moved["breakdown_step_s"] - INJECTED_DELAY_S) < allowance, (part, moved, allowance)
        others = [key for key in ("data_wait_s", "compute_s", "sync_exposed_s") if key != part]
        assert all(abs(moved[key]) < allowance for key in others), (part, moved, allowance)
        assert allowance < 0.8 * INJECTED_DELAY_S, plain  # still tells a misplaced delay apart
