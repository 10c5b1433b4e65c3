"""Train a Keras model on CIFAR-10 with tf.distribute.MirroredStrategy and log scaling records.

The reference TensorFlow experiment (ResNet50V2/101V2/152V2, SGD(0.01 x N), global batch = per-GPU
batch x N), with one change that matters at scale: CIFAR stays uint8 32 x 32 in host memory and
the resize to --resolution and the /255 happen inside the model, on the devices. The reference
resizes on the host and caches float32 (about 9.8 GB for 50k images at 128 px).

Where no GPU exists, --gpus N splits the CPU into N logical devices and mirrors over them, so a
laptop runs the same code path. --gpus 0 is the CPU-only baseline (default strategy).

Prints the reference's human header, Keras' epoch lines, and the `:::SCALESWEEP` records of
docs/records.md. Out of memory: summary status oom, exit 0. Any other failure: summary status
failed, then the exception propagates (exit non-zero). SCALESWEEP_FAIL_INJECT=oom|crash raises
the matching failure at the first training step (see scripts/runlog.py).

    python scripts/train_tf.py --model resnet50v2 --data data/cifar10 --resolution 128 \\
        --gpus 2 --per-gpu-batch 2048 --epochs 5
"""

import argparse
import os
import sys
import time
from pathlib import Path

# Before the import: TF's C++ start-up chatter would bury the Keras epoch lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cifar  # noqa: E402  (scripts/ is not a package: containers run these files directly)
import runlog  # noqa: E402

# keras.applications constructors by catalog name (scalesweep/catalog.py MODELS["tensorflow"]).
APPLICATIONS = {
    "resnet50v2": "ResNet50V2",
    "resnet101v2": "ResNet101V2",
    "resnet152v2": "ResNet152V2",
    "mobilenetv3small": "MobileNetV3Small",
}
MODEL_NAMES = (*APPLICATIONS, "cnn_small")
DISPLAY_NAMES = {**APPLICATIONS, "cnn_small": "CNNSmall"}

PRECISION_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
_GIB = 1024**3


class DeviceError(RuntimeError):
    """The devices asked for do not exist here."""


# ---------------------------------------------------------------------------------------------
# Devices and strategy
# ---------------------------------------------------------------------------------------------


def configure_devices(gpus: int):
    """(strategy, device_kind, device names) for --gpus; must run before TF touches a device."""
    physical_gpus = tf.config.list_physical_devices("GPU")
    if gpus == 0:
        tf.config.set_visible_devices([], "GPU")
        return tf.distribute.get_strategy(), "cpu", ["CPU:0"]
    if physical_gpus:
        return _gpu_strategy(physical_gpus, gpus)
    return _cpu_replica_strategy(gpus)


def _gpu_strategy(physical_gpus, gpus: int):
    if gpus > len(physical_gpus):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        raise DeviceError(
            f"--gpus {gpus} asked, but only {len(physical_gpus)} GPU(s) are visible (CUDA_VISIBLE_DEVICES={visible})"
        )
    used = physical_gpus[:gpus]
    # Hiding the rest keeps TF from reserving memory on GPUs this run does not use.
    tf.config.set_visible_devices(used, "GPU")
    strategy = tf.distribute.MirroredStrategy(devices=[f"/gpu:{index}" for index in range(gpus)])
    names = [f"GPU:{index} {_gpu_model_name(device)}" for index, device in enumerate(used)]
    return strategy, "gpu", names


def _gpu_model_name(device) -> str:
    return tf.config.experimental.get_device_details(device).get("device_name", "unknown GPU")


def _cpu_replica_strategy(gpus: int):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(gpus)])
    devices = [f"/cpu:{index}" for index in range(gpus)]
    # NCCL all-reduce is GPU-only; reducing on one device is what works across CPU replicas.
    strategy = tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    return strategy, "cpu", [f"CPU:{index}" for index in range(gpus)]


def peak_device_memory_gb(device_kind: str, replicas: int):
    """Peak memory of the busiest GPU in GiB; None on CPU, where TF does not track it."""
    if device_kind != "gpu":
        return None
    peaks = [tf.config.experimental.get_memory_info(f"GPU:{index}")["peak"] for index in range(replicas)]
    return round(max(peaks) / _GIB, 3)


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def select_images(images: np.ndarray, labels: np.ndarray, max_images: int):
    """The first `max_images` images (0 = all); asking for more than exist is an error."""
    if max_images < 0:
        raise ValueError(f"--max-train-images must be 0 (all) or more, got {max_images}")
    if max_images > len(images):
        raise ValueError(f"--max-train-images {max_images} asked, but the data has only {len(images)} training images")
    if max_images:
        return images[:max_images], labels[:max_images]
    return images, labels


def steps_per_epoch(num_images: int, global_batch: int) -> int:
    steps = num_images // global_batch
    if steps == 0:
        raise ValueError(f"{num_images} training images are fewer than one global batch of {global_batch}")
    return steps


def make_dataset(images: np.ndarray, labels: np.ndarray, global_batch: int, seed: int) -> tf.data.Dataset:
    """Shuffled uint8 batches of `global_batch`; the remainder is dropped so every epoch is equal.

    Shuffles indices and gathers whole batches: no per-image tf.data overhead and no float copy
    of the data set on the host (the device-side model input does the conversion).
    """
    # Pinned to host memory: eagerly created tensors would otherwise land on GPU:0, and tf.data
    # runs on the host.
    with tf.device("/cpu:0"):
        images = tf.constant(images, dtype=tf.uint8)
        labels = tf.constant(labels, dtype=tf.int32)
    count = int(images.shape[0])
    return (
        tf.data.Dataset.range(count)
        .shuffle(count, seed=seed, reshuffle_each_iteration=True)
        .batch(global_batch, drop_remainder=True)
        .map(lambda index: (tf.gather(images, index), tf.gather(labels, index)), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


def preprocess(images, resolution: int):
    """uint8 32 x 32 images -> float32 resolution x resolution in [0, 1], run on the device.

    The reference host path's operations in its order: bilinear tf.image.resize, then /255.
    Cast first: Keras' Resizing rounds integer input back to uint8. float32 even under mixed
    precision: resizing in bfloat16 would lose 8-bit detail.
    """
    images = keras.ops.cast(images, "float32")
    images = keras.layers.Resizing(resolution, resolution, interpolation="bilinear", dtype="float32", name="resize")(images)
    return keras.layers.Rescaling(1.0 / 255, dtype="float32", name="rescale")(images)


def cnn_small(resolution: int, classes: int) -> keras.Model:
    """Three conv blocks, ~25k parameters: trains in seconds on a laptop CPU."""
    inputs = keras.Input((resolution, resolution, cifar.CHANNELS))
    x = inputs
    for filters in (16, 32, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x), name="cnn_small")


def backbone(model_name: str, resolution: int, classes: int) -> keras.Model:
    """The catalog model, random weights, returning logits."""
    if model_name == "cnn_small":
        return cnn_small(resolution, classes)
    constructor = getattr(keras.applications, APPLICATIONS[model_name])
    options = dict(weights=None, include_top=True, input_shape=(resolution, resolution, 3), classes=classes)
    if model_name == "mobilenetv3small":
        options["include_preprocessing"] = False  # its own rescaling to [-1, 1] would rescale twice
    return constructor(classifier_activation=None, **options)


def build_model(model_name: str, resolution: int, classes: int = cifar.NUM_CLASSES) -> keras.Model:
    """uint8 32 x 32 input -> device-side preprocessing -> backbone -> float32 softmax."""
    inputs = keras.Input((cifar.SIDE, cifar.SIDE, cifar.CHANNELS), dtype="uint8", name="images")
    logits = backbone(model_name, resolution, classes)(preprocess(inputs, resolution))
    # Softmax and loss in float32 under mixed precision, as the Keras mixed-precision guide asks.
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name=model_name)


def compile_model(model: keras.Model, learning_rate: float) -> None:
    # jit_compile=False: Keras' "auto" picks XLA only for GPU runs without a strategy, which
    # would make the 0-GPU and N-GPU points of one sweep run different compilers.
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=False,
    )


# ---------------------------------------------------------------------------------------------
# Callbacks
# ---------------------------------------------------------------------------------------------


class EpochRecorder(keras.callbacks.Callback):
    """Times each epoch and emits its `epoch` record.

    Keras converts the epoch's logs to Python numbers before on_epoch_end runs, which waits for
    the devices: the clock is read after the work of the epoch is done.
    """

    def __init__(self, emit=runlog.emit):
        super().__init__()
        self.images_per_epoch = None  # known once the data is loaded
        self.emit = emit
        self.records = []
        self._started = None

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started
        logs = logs or {}
        record = runlog.epoch_record(epoch + 1, self.images_per_epoch, seconds, logs.get("loss"), logs.get("accuracy"))
        self.records.append(record)
        self.emit(record)


class FailureInjector(keras.callbacks.Callback):
    """Raises the failure SCALESWEEP_FAIL_INJECT asks for at the first training step."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def on_train_batch_begin(self, batch, logs=None):
        message = f"{runlog.FAIL_INJECT_ENV}={self.mode}: injected failure at the first training step"
        if self.mode == "oom":
            raise tf.errors.ResourceExhaustedError(None, None, message)
        raise RuntimeError(message)


def is_out_of_memory(exc: BaseException) -> bool:
    """Device or host memory ran out (XLA and cuDNN report it inside other error types)."""
    if isinstance(exc, (tf.errors.ResourceExhaustedError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, tf.errors.OpError) and any(mark in text for mark in _OOM_MARKS)


_OOM_MARKS = ("out of memory", "oom when allocating", "resource_exhausted")
# Lines TF puts before the actual cause of a graph error.
_TF_ERROR_PREAMBLE = ("graph execution error", "detected at node", "<stack traces", "[[{{node")


def error_reason(exc: BaseException) -> str:
    """`Type: first informative line` of an exception, for the summary's one-line reason."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    informative = [line for line in lines if not line.lower().startswith(_TF_ERROR_PREAMBLE)]
    text = (informative or lines or [repr(exc)])[0]
    return f"{type(exc).__name__}: {runlog.one_line(text)}"


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------


def framework_versions() -> dict:
    build = tf.sysconfig.get_build_info()
    return {
        "python": runlog.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "cuda": build.get("cuda_version"),
        "cudnn": build.get("cudnn_version"),
    }


def human_header(model_name: str, gpus: int, device_kind: str, global_batch: int, replicas: int) -> str:
    """The reference script's banner, so its users recognise the logs."""
    if gpus == 0:
        where = "CPU only"
    elif device_kind == "gpu":
        where = f"{gpus} GPUs"
    else:
        where = f"{gpus} GPUs (CPU replicas)"
    title = f" Model {DISPLAY_NAMES[model_name]} {where}"
    return f"{title}\n{'-' * (len(title) + 1)}\nBatch_size: {global_batch}\nNum_replicas: {replicas}"


def header_record(args, device_kind: str, devices: list, replicas: int, images_per_epoch: int, started: float) -> dict:
    return {
        "record": "header",
        "framework": "tensorflow",
        "model": args.model,
        "dataset": args.dataset_name,
        "resolution": args.resolution,
        "gpus": args.gpus,
        "device_kind": device_kind,
        "world_size": replicas,
        "nodes": 1,
        "per_gpu_batch": args.per_gpu_batch,
        "global_batch": args.per_gpu_batch * replicas,
        "learning_rate": scaled_learning_rate(args.base_lr, args.gpus),
        "precision": args.precision,
        "epochs": args.epochs,
        "images_per_epoch": images_per_epoch,
        "protocol": "epochs",
        "versions": framework_versions(),
        "devices": devices,
        **runlog.provenance(started),
    }


def scaled_learning_rate(base_lr: float, gpus: int) -> float:
    """The reference's linear scaling: base_lr x N (the CPU baseline counts as one)."""
    return base_lr * max(1, gpus)


def set_precision(precision: str, device_kind: str) -> None:
    """Global Keras dtype policy; must be set before the model is built."""
    if device_kind == "cpu" and precision == "fp16":
        # Measured: ResNet50V2 at 32 px, 30 s per step of 32 images on 2 cores (fp32: 0.6 s).
        print("warning: CPUs have no float16 kernels; fp16 here is emulated and very slow", file=sys.stderr)
    keras.mixed_precision.set_global_policy(PRECISION_POLICIES[precision])


def training_callbacks(recorder: EpochRecorder) -> list:
    inject = runlog.fail_inject_mode()
    return [FailureInjector(inject), recorder] if inject else [recorder]


def train(args, recorder: EpochRecorder) -> None:
    """Load the data, build the model in the strategy's scope, fit with `recorder` timing epochs."""
    started_wall = time.time()
    keras.utils.set_random_seed(args.seed)
    strategy, device_kind, devices = configure_devices(args.gpus)
    replicas = strategy.num_replicas_in_sync
    global_batch = args.per_gpu_batch * replicas
    images, labels = select_images(*cifar.load_train(args.data), args.max_train_images)
    recorder.images_per_epoch = steps_per_epoch(len(images), global_batch) * global_batch
    print(human_header(args.model, args.gpus, device_kind, global_batch, replicas), flush=True)
    runlog.emit(header_record(args, device_kind, devices, replicas, recorder.images_per_epoch, started_wall))
    set_precision(args.precision, device_kind)
    dataset = make_dataset(images, labels, global_batch, args.seed)
    with strategy.scope():
        model = build_model(args.model, args.resolution)
        compile_model(model, scaled_learning_rate(args.base_lr, args.gpus))
    # shuffle=False: the dataset shuffles itself (Keras would only warn that it ignores it).
    model.fit(dataset, epochs=args.epochs, verbose=2, callbacks=training_callbacks(recorder), shuffle=False)


def run(args) -> int:
    """Train and always close the log with a summary record; the exit status of the run."""
    started = time.perf_counter()
    recorder = EpochRecorder()  # outlives train(): a failure still reports the finished epochs
    runlog.raise_on_sigterm()

    def summary(status, reason=None):
        memory = _peak_memory_or_none(args.gpus)
        runlog.emit(runlog.summary_record(status, recorder.records, time.perf_counter() - started, reason, memory))

    try:
        train(args, recorder)
    except BaseException as exc:
        if is_out_of_memory(exc):
            summary("oom", f"out of memory at per-GPU batch {args.per_gpu_batch} "
                    f"({args.resolution} px, {args.precision}): {error_reason(exc)}")
            return 0
        summary("failed", error_reason(exc))
        raise
    summary("ok")
    return 0


def _peak_memory_or_none(gpus: int):
    # The summary must get out even when the failure left the devices unusable.
    try:
        visible_gpus = len(tf.config.get_visible_devices("GPU"))
        return peak_device_memory_gb("gpu" if visible_gpus and gpus else "cpu", min(gpus, visible_gpus))
    except Exception:  # noqa: BLE001 - any error here would hide the run's own failure
        return None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODEL_NAMES, help="catalog name")
    parser.add_argument("--data", help="cifar-10-batches-py/ or its parent")
    parser.add_argument("--dataset-name", default="cifar10", help="name written to the records")
    parser.add_argument("--resolution", type=int, default=128, help="training resolution in px")
    parser.add_argument("--gpus", type=int, default=1, help="replicas; 0 = CPU-only baseline")
    parser.add_argument("--per-gpu-batch", type=int, default=256)
    parser.add_argument("--base-lr", type=float, default=0.01, help="scaled by max(1, gpus)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--max-train-images", type=int, default=0, help="first M training images; 0 = all")
    parser.add_argument("--precision", choices=tuple(PRECISION_POLICIES), default="fp32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list-models", action="store_true", help="print the model names and exit")
    args = parser.parse_args(argv)
    if not args.list_models:
        _check_args(parser, args)
    return args


def _check_args(parser, args) -> None:
    if not args.model or not args.data:
        parser.error("--model and --data are required")
    if args.gpus < 0:
        parser.error(f"--gpus must be 0 (CPU baseline) or more, got {args.gpus}")
    for flag in ("resolution", "per_gpu_batch", "epochs"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.resolution < 32 and args.model != "cnn_small":
        parser.error(f"--resolution {args.resolution}: keras.applications models need at least 32 px")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list_models:
        print("\n".join(MODEL_NAMES))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
