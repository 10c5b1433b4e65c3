"""Train a Keras model on CIFAR-10 with tf.distribute.MirroredStrategy and log scaling records.

The reference TensorFlow experiment (ResNet50V2/101V2/152V2, SGD(0.01 x N), global batch = per-GPU
batch x N), with one change that matters at scale: CIFAR stays uint8 32 x 32 in host memory and
the resize to --resolution and the /255 happen inside the model, on the devices. The reference
resizes on the host and caches float32 (about 9.8 GB for 50k images at 128 px).

Where no GPU exists, --gpus N splits the CPU into N logical devices and mirrors over them, so a
laptop runs the same code path. --gpus 0 is the CPU-only baseline (default strategy).

This file is the TensorFlow backend of scripts/harness.py (docs/trainers.md): the harness runs
the life cycle, the measurement options shared with scripts/train_torch.py (--protocol,
--warmup-steps, --timed-steps, --oom-policy, --find-max-batch, ...), the out-of-memory policy, the
maximum-batch search and the protocols; this file supplies the devices, the model, one Keras fit
per attempt (its callbacks time every step, its end waiting for the devices) and the provenance,
and scripts/tf_data.py the data. It prints the reference's human header, Keras' epoch lines and
the `:::SCALESWEEP` records of docs/records.md. Out of memory: summary status oom, exit 0; any
other failure: summary status failed, exit non-zero. SCALESWEEP_FAIL_INJECT (scripts/runlog.py)
injects failures at the first training step.

    python scripts/train_tf.py --model resnet50v2 --data data/cifar10 --resolution 128 \\
        --gpus 2 --per-gpu-batch 2048 --epochs 5 [--compile] [--protocol steps]
"""

import argparse
import os
import sys
import time

# What a run costs starts here, before the framework import (seconds of a job's time, too).
STARTED = time.perf_counter()
from dataclasses import dataclass
from pathlib import Path

# Before the import: TF's C++ start-up chatter would bury the Keras epoch lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cifar  # noqa: E402  (scripts/ is not a package: containers run these files directly)
import harness  # noqa: E402
import runlog  # noqa: E402
from tf_data import (  # noqa: E402, F401  (make_dataset, load_training_data: benchmarks/bench_trainer.py)
    PASSES,
    STREAM,
    load_training_data,
    make_dataset,
    steps_per_epoch,
)

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


def compile_model(model: keras.Model, learning_rate: float, jit_compile: bool = False) -> bool:
    """Compile for training; returns whether XLA is actually on (Keras turns it off, with a
    warning, for models with layers XLA cannot compile)."""
    # Never Keras' "auto": it picks XLA only for GPU runs without a strategy, which would make
    # the 0-GPU and N-GPU points of one sweep run different compilers.
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=jit_compile,
    )
    return bool(model.jit_compile)


# ---------------------------------------------------------------------------------------------
# Callbacks
# ---------------------------------------------------------------------------------------------


class ClockCallback(keras.callbacks.Callback):
    """Times every training step of the fit on a harness.StepClock.

    A step's end waits for the devices: GPUs run asynchronously, so without the wait the clock
    would stop when the step's kernels are queued, not done. Keras has already converted the
    step's logs to Python floats by then (a device-to-host copy of the loss, which depends on
    every replica); sync_devices() makes the wait explicit for every device of the run.
    """

    def __init__(self, clock: harness.StepClock):
        super().__init__()
        self.clock = clock

    def on_train_batch_begin(self, batch, logs=None):
        self.clock.begin()

    def on_train_batch_end(self, batch, logs=None):
        self.clock.end()


class EpochRecorder(keras.callbacks.Callback):
    """The epochs protocol: one `epoch` record per epoch.

    Keras converts the epoch's logs to Python numbers before on_epoch_end runs, which waits for
    the devices: the clock is read after the work of the epoch is done.
    """

    def __init__(self, meter: harness.WindowMeter):
        super().__init__()
        self.meter = meter

    def on_epoch_begin(self, epoch, logs=None):
        self.meter.start(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):
        ended = time.perf_counter()
        logs = logs or {}
        self.meter.finish(epoch + 1, logs.get("loss"), logs.get("accuracy"), ended=ended)


class WindowRecorder(keras.callbacks.Callback):
    """The steps protocol: its windows (harness.step_windows) as epoch records 1 and 2.

    The warm-up window runs from the begin of the first step to the synchronized end of its last
    step; the next window from right after that (once the metrics are reset, so each window's loss
    and accuracy are its own) to the synchronized end of the step at which it is done (a fixed
    count, or the adaptive rule). One fit, one data iterator: no pipeline restart falls into the
    timed window.
    """

    def __init__(self, meter: harness.WindowMeter, windows: list):
        super().__init__()
        self.meter, self.windows = meter, list(windows)

    def on_train_begin(self, logs=None):
        self.meter.start()

    def on_train_batch_end(self, batch, logs=None):
        number, phase, window = self.windows[0]
        if not window.done(self.meter.durations()):
            return
        logs = logs or {}
        self.meter.finish(number, logs.get("loss"), logs.get("accuracy"), phase=phase, window=window)
        self.windows.pop(0)
        if not self.windows:
            self.model.stop_training = True
            return
        self.model.reset_metrics()
        self.meter.start(time.perf_counter())


class FailureInjector(keras.callbacks.Callback):
    """Raises the failure SCALESWEEP_FAIL_INJECT asks for at the first training step."""

    def __init__(self, failure: str, setting: str):
        super().__init__()
        self.failure = failure
        self.message = f"{runlog.FAIL_INJECT_ENV}={setting}: injected failure at the first training step"

    def on_train_batch_begin(self, batch, logs=None):
        if self.failure == "oom":
            raise tf.errors.ResourceExhaustedError(None, None, self.message)
        raise RuntimeError(self.message)


def injected_failures(per_gpu_batch: int, attempt: int) -> list:
    """[FailureInjector] when SCALESWEEP_FAIL_INJECT asks for a failure in this attempt, else []."""
    setting = runlog.fail_inject_mode()
    failure = runlog.injected_failure(setting, per_gpu_batch, attempt)
    return [FailureInjector(failure, setting)] if failure else []


def is_out_of_memory(exc: BaseException) -> bool:
    """Device or host memory ran out (XLA and cuDNN report it inside other error types)."""
    if isinstance(exc, (tf.errors.ResourceExhaustedError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, tf.errors.OpError) and any(mark in text for mark in _OOM_MARKS)


_OOM_MARKS = ("out of memory", "oom when allocating", "resource_exhausted")
# Lines TF puts before the actual cause of a graph error (the Python frames where the node was
# defined among them).
_TF_ERROR_PREAMBLE = ("graph execution error", "detected at node", "<stack traces", "[[{{node", 'file "')


def error_reason(exc: BaseException) -> str:
    """`Type: first informative line` of an exception, for the summary's one-line reason."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    informative = [line for line in lines if not line.lower().startswith(_TF_ERROR_PREAMBLE)]
    text = (informative or lines or [repr(exc)])[0]
    return f"{type(exc).__name__}: {runlog.one_line(text)}"


# ---------------------------------------------------------------------------------------------
# Header
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
        "nccl": runlog.nccl_version_from_env(),
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


@dataclass
class Setup:
    """What outlives an attempt: the strategy over the devices, and the data in host memory."""

    strategy: object
    device_kind: str
    devices: list
    images: object  # uint8 tensor, N x 32 x 32 x 3, host memory
    labels: object
    started_wall: float

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def image_count(self) -> int:
        return int(self.images.shape[0])


def header_record(args, setup: Setup, per_gpu_batch: int, jit_compile: bool) -> dict:
    global_batch = per_gpu_batch * setup.replicas
    return {
        "record": "header",
        "framework": "tensorflow",
        "model": args.model,
        "dataset": args.dataset_name,
        "resolution": args.resolution,
        "gpus": args.gpus,
        "device_kind": setup.device_kind,
        "world_size": setup.replicas,
        "nodes": 1,
        "per_gpu_batch": per_gpu_batch,
        "global_batch": global_batch,
        "requested_per_gpu_batch": args.per_gpu_batch,
        "oom_policy": args.oom_policy,
        "learning_rate": scaled_learning_rate(args.base_lr, args.gpus),
        "precision": args.precision,
        "compile": jit_compile,
        **harness.protocol_fields(args, global_batch, steps_per_epoch(setup.image_count, global_batch),
                                 setup.image_count),
        "versions": framework_versions(),
        "devices": setup.devices,
        **runlog.device_provenance(),
        **runlog.provenance(setup.started_wall),
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


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------


def prepare(args) -> Setup:
    """Devices and strategy, then the training images as host tensors (once per run)."""
    started_wall = time.time()
    strategy, device_kind, devices = configure_devices(args.gpus)
    check_xla_placement(args.compile, device_kind, strategy.num_replicas_in_sync)
    images, labels = load_training_data(args.data, args.max_train_images, args.seed)
    if not args.find_max_batch:
        steps_per_epoch(int(images.shape[0]), args.per_gpu_batch * strategy.num_replicas_in_sync)
    return Setup(strategy, device_kind, devices, images, labels, started_wall)


def check_xla_placement(jit_compile: bool, device_kind: str, replicas: int) -> None:
    """XLA runs its clusters on CPU:0 and cannot reach the variables of other logical CPU devices
    (keras-team/keras#19005): --compile over several CPU replicas fails at the first step."""
    if jit_compile and device_kind == "cpu" and replicas > 1:
        raise DeviceError(
            f"--compile over {replicas} CPU replicas: XLA cannot reach variables on logical CPU devices "
            "other than CPU:0; on CPUs use --compile with --gpus 0 or 1 only"
        )


def start_attempt(args, setup: Setup) -> None:
    """A clean slate for a model: Keras state, seeds, dtype policy, device memory peaks."""
    keras.backend.clear_session()  # also resets the dtype policy: set it again below
    keras.utils.set_random_seed(args.seed)
    set_precision(args.precision, setup.device_kind)
    if setup.device_kind == "gpu":
        for index in range(setup.replicas):
            tf.config.experimental.reset_memory_stats(f"GPU:{index}")


def build_compiled_model(args, setup: Setup) -> tuple:
    """(model, XLA actually on), built and compiled in the strategy's scope."""
    with setup.strategy.scope():
        model = build_model(args.model, args.resolution)
        jit = compile_model(model, scaled_learning_rate(args.base_lr, args.gpus), args.compile)
    return model, jit


class KerasAttempt:
    """One training attempt (harness.Backend.build's attempt): the model and the endless dataset
    at one per-GPU batch, trained by one model.fit per protocol."""

    def __init__(self, model, dataset, global_batch: int, steps: int, jit: bool, injected: list):
        self.model, self.dataset, self.global_batch, self.steps = model, dataset, global_batch, steps
        self.injected = injected
        self.clock = harness.StepClock(tf.test.experimental.sync_devices)
        self.header_updates = {"compile": jit}

    def fit_epochs(self, meter: harness.WindowMeter, epochs: int) -> None:
        self._fit(EpochRecorder(meter), epochs=epochs, steps_per_epoch=self.steps)

    def fit_steps(self, meter: harness.WindowMeter, windows: list) -> None:
        steps = sum(window.max_steps for _, _, window in windows)
        self._fit(WindowRecorder(meter, windows), epochs=1, steps_per_epoch=steps)

    def _fit(self, recorder: keras.callbacks.Callback, **options) -> None:
        callbacks = [*self.injected, ClockCallback(self.clock), recorder]
        # shuffle=False: the dataset shuffles itself (Keras would only warn that it ignores it).
        self.model.fit(self.dataset, verbose=2, callbacks=callbacks, shuffle=False, **options)


class KerasBackend(harness.Backend):
    """What the harness needs from TensorFlow/Keras (docs/trainers.md): one process drives every
    replica of a MirroredStrategy."""

    framework = "tensorflow"

    def info(self, message: str) -> None:
        print(message, flush=True)

    def emit(self, record: dict) -> None:
        runlog.emit(record)

    def setup(self, args) -> None:
        self.args = args
        self.prepared = prepare(args)
        self.jit = args.compile
        if args.find_max_batch:  # what XLA does for this model, for the header
            start_attempt(args, self.prepared)
            _, self.jit = build_compiled_model(args, self.prepared)

    def header(self, per_gpu_batch: int) -> dict:
        return header_record(self.args, self.prepared, per_gpu_batch, self.jit)

    def build(self, per_gpu_batch: int, attempt: int) -> KerasAttempt:
        args, setup = self.args, self.prepared
        start_attempt(args, setup)
        global_batch = per_gpu_batch * setup.replicas
        print(human_header(args.model, args.gpus, setup.device_kind, global_batch, setup.replicas), flush=True)
        # One endless dataset and steps_per_epoch: Keras keeps its iterator across epochs. Given a
        # finite dataset it replaces the iterator every epoch, and tearing one down waits for
        # tf.data's autotuning thread to wake from its sleep, which doubles up to 60 s: measured
        # 9-60 s of idle time before every epoch after the first (ResNet50V2, 2 cores).
        dataset = make_dataset(setup.images, setup.labels, global_batch, args.seed, repeat=PASSES)
        model, jit = build_compiled_model(args, setup)
        return KerasAttempt(model, dataset, global_batch, steps_per_epoch(setup.image_count, global_batch), jit,
                            injected_failures(per_gpu_batch, attempt))

    def probe(self, per_gpu_batch: int, attempt: int, steps: int) -> None:
        args, setup = self.args, self.prepared
        start_attempt(args, setup)
        dataset = make_dataset(setup.images, setup.labels, per_gpu_batch * setup.replicas, args.seed, repeat=STREAM)
        model, _ = build_compiled_model(args, setup)
        callbacks = injected_failures(per_gpu_batch, attempt)
        model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=callbacks, shuffle=False)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return is_out_of_memory(error)

    def error_text(self, error: BaseException) -> str:
        return error_reason(error)

    def peak_memory_gb(self):
        visible_gpus = len(tf.config.get_visible_devices("GPU"))
        gpus = self.args.gpus
        return peak_device_memory_gb("gpu" if visible_gpus and gpus else "cpu", min(gpus, visible_gpus))


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = harness.trainer_parser(__doc__.splitlines()[0], MODEL_NAMES, "cifar-10-batches-py/ or its parent",
                                    resolution=128, gpus=1, per_gpu_batch=256, dataset_name="cifar10")
    return harness.parse_args(parser, argv, _check_own_args)


def _check_own_args(parser, args) -> None:
    if args.resolution < 32 and args.model != "cnn_small":
        parser.error(f"--resolution {args.resolution}: keras.applications models need at least 32 px")


def main(argv=None) -> int:
    return harness.main(argv, parse_args, MODEL_NAMES, KerasBackend, STARTED)


if __name__ == "__main__":
    sys.exit(main())
