"""Train a Keras model on CIFAR-10 with tf.distribute.MirroredStrategy and log scaling records.

The reference TensorFlow experiment (ResNet50V2/101V2/152V2, SGD(0.01 x N), global batch = per-GPU
batch x N), with one change that matters at scale: CIFAR stays uint8 32 x 32 in host memory and
the resize to --resolution and the /255 happen inside the model, on the devices. The reference
resizes on the host and caches float32 (about 9.8 GB for 50k images at 128 px).

Where no GPU exists, --gpus N splits the CPU into N logical devices and mirrors over them, so a
laptop runs the same code path. --gpus 0 is the CPU-only baseline (default strategy).

Measurement: every training step is timed, its end waiting for the devices; the run's first
--warmup-steps steps are left out of the step statistics. --protocol epochs times whole epochs
(time to solution included); --protocol steps runs --warmup-steps then --timed-steps steps and
records them as two windows (epoch records 1 and 2), minutes of GPU time per sweep point.

Prints the reference's human header, Keras' epoch lines, and the `:::SCALESWEEP` records of
docs/records.md. Out of memory: summary status oom, exit 0; with --oom-policy halve the run first
retries with half the per-GPU batch (down to 1) and records the batch it used. Any other
failure: summary status failed, then the exception propagates (exit non-zero).
--find-max-batch searches the largest per-GPU batch that trains (a few steps per try) instead of
training. SCALESWEEP_FAIL_INJECT (scripts/runlog.py) injects failures at the first training step.

    python scripts/train_tf.py --model resnet50v2 --data data/cifar10 --resolution 128 \\
        --gpus 2 --per-gpu-batch 2048 --epochs 5 [--compile] [--protocol steps]
"""

import argparse
import itertools
import os
import sys
import time
from dataclasses import dataclass
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
# Measurement options shared with the PyTorch trainer (one command builder drives both).
from runlog import (  # noqa: E402
    DEFAULT_MAX_BATCH_LIMIT,
    DEFAULT_TIMED_STEPS,
    DEFAULT_WARMUP_STEPS,
    OOM_POLICIES,
    PROBE_STEPS,
    PROTOCOLS,
)
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


def images_to_keep(available: int, max_images: int) -> int:
    """How many of `available` images --max-train-images keeps (0 = all); more than exist is an
    error."""
    if max_images < 0:
        raise ValueError(f"--max-train-images must be 0 (all) or more, got {max_images}")
    if max_images > available:
        raise ValueError(f"--max-train-images {max_images} asked, but the data has only {available} training images")
    return max_images or available


def select_images(images, labels, max_images: int):
    """The first `max_images` images (0 = all); asking for more than exist is an error."""
    keep = images_to_keep(len(images), max_images)
    return images[:keep], labels[:keep]


def steps_per_epoch(num_images: int, global_batch: int) -> int:
    steps = num_images // global_batch
    if steps == 0:
        raise ValueError(f"{num_images} training images are fewer than one global batch of {global_batch}")
    return steps


# TF's CPU kernels assume tensor buffers aligned like its own allocator's (64 bytes); a tensor
# over a misaligned buffer aborts the process.
TENSOR_ALIGNMENT = 64


def load_training_data(path, max_images: int = 0):
    """The run's first `max_images` (0 = all) training images and labels as host tensors, uint8
    32 x 32 as the pickles hold them; nothing else of the data set stays in memory.

    The batch files are copied one by one into one aligned array, each file's rows freed once
    copied, and the tensor shares that array: TF's own conversion would copy the whole set
    twice, tripling the input path's peak host memory.
    """
    folder = cifar.batches_dir(path)
    parts = [cifar.read_batch(folder / name) for name in cifar.TRAIN_BATCHES]
    keep = images_to_keep(sum(len(labels) for _, labels in parts), max_images)
    images = aligned_empty((keep, cifar.SIDE, cifar.SIDE, cifar.CHANNELS), np.uint8)
    labels = np.empty(keep, np.int32)
    filled = 0
    while parts and filled < keep:
        part_images, part_labels = parts.pop(0)
        count = min(len(part_labels), keep - filled)
        images[filled : filled + count] = part_images[:count]
        labels[filled : filled + count] = part_labels[:count]
        filled += count
        del part_images, part_labels
    return host_tensors(images, labels)


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose buffer starts on a TENSOR_ALIGNMENT boundary."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buffer = np.empty(size + TENSOR_ALIGNMENT, np.uint8)
    offset = -buffer.ctypes.data % TENSOR_ALIGNMENT
    return buffer[offset : offset + size].view(dtype).reshape(shape)


def host_tensors(images, labels):
    """uint8 images and int32 labels as tensors in host memory, built once per run.

    Eagerly created tensors would otherwise land on GPU:0, and tf.data runs on the host. A
    contiguous, aligned uint8 array is shared with its tensor through DLPack instead of copied.
    """
    with tf.device("/cpu:0"):
        return _shared_or_copied(images, tf.uint8), tf.convert_to_tensor(np.asarray(labels, np.int32))


def _shared_or_copied(array, dtype):
    if isinstance(array, tf.Tensor):
        return array
    shareable = (isinstance(array, np.ndarray) and array.dtype == dtype.as_numpy_dtype
                 and array.flags.c_contiguous and array.ctypes.data % TENSOR_ALIGNMENT == 0)
    if shareable:
        try:
            return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
        except (AttributeError, TypeError, ValueError, tf.errors.OpError):
            pass  # numpy or TF too old for DLPack: copy instead
    return tf.convert_to_tensor(array, dtype=dtype)


# How make_dataset repeats the data set.
ONE_PASS = "one pass"  # a finite dataset: one shuffled pass
PASSES = "passes"  # endless, pass after pass, each reshuffled; a batch never spans two passes
STREAM = "stream"  # endless, batches drawn across passes: one batch may exceed the data set
REPEAT_MODES = (ONE_PASS, PASSES, STREAM)


def make_dataset(images, labels, global_batch: int, seed: int, repeat: str = ONE_PASS) -> tf.data.Dataset:
    """Shuffled uint8 batches of `global_batch`; each pass drops its remainder, so every epoch
    is equal.

    Shuffles indices and gathers whole batches: no per-image tf.data overhead and no float copy
    of the data set on the host (the device-side model input does the conversion); the gather is
    the pipeline's only map, run in parallel and prefetched. Training uses PASSES with
    `steps_per_epoch`: Keras then keeps one iterator for the whole fit instead of replacing it
    every epoch (see train_attempt); the maximum-batch probes use STREAM.
    """
    if repeat not in REPEAT_MODES:
        raise ValueError(f"repeat must be one of {REPEAT_MODES}, got {repeat!r}")
    images, labels = host_tensors(images, labels)
    count = int(images.shape[0])
    indices = tf.data.Dataset.range(count).shuffle(count, seed=seed, reshuffle_each_iteration=True)
    if repeat == STREAM:
        indices = indices.repeat()
    batches = indices.batch(global_batch, drop_remainder=True)
    if repeat == PASSES:
        batches = batches.repeat()
    dataset = (
        batches.map(lambda index: (tf.gather(images, index), tf.gather(labels, index)),
                    num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    return dataset.with_options(pipeline_options())


def pipeline_options() -> tf.data.Options:
    """No graph rewrites: tf.data's static optimizations and auto-sharding serialize the
    pipeline's graph, which embeds the captured image tensor as a constant, a second copy of the
    data set in host memory (measured: +30 MB for 10k images). This pipeline, one parallel map
    over whole batches, gains nothing from them, and a single-node MirroredStrategy has nothing
    to shard."""
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


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


class StepClock(keras.callbacks.Callback):
    """Begin and end time of every training step of the fit, 0-based.

    A step's end waits for the devices: GPUs run asynchronously, so without the wait the clock
    would stop when the step's kernels are queued, not done. Keras has already converted the
    step's logs to Python floats by then (a device-to-host copy of the loss, which depends on
    every replica); sync_devices() makes the wait explicit for every device of the run.
    """

    def __init__(self):
        super().__init__()
        self.begins = []
        self.ends = []

    @property
    def durations(self) -> list:
        return [end - begin for begin, end in zip(self.begins, self.ends)]

    def on_train_batch_begin(self, batch, logs=None):
        self.begins.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        runlog.inject_step_delay()
        tf.test.experimental.sync_devices()
        self.ends.append(time.perf_counter())


class EpochRecorder(keras.callbacks.Callback):
    """The epochs protocol: one `epoch` record per epoch, with its step statistics.

    Keras converts the epoch's logs to Python numbers before on_epoch_end runs, which waits for
    the devices: the clock is read after the work of the epoch is done.
    """

    def __init__(self, log: runlog.RunLog, clock: StepClock, global_batch: int, warmup_steps: int):
        super().__init__()
        self.log, self.clock = log, clock
        self.global_batch, self.warmup_steps = global_batch, warmup_steps
        self._started = self._first_step = None

    def on_epoch_begin(self, epoch, logs=None):
        self._first_step = len(self.clock.ends)
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started
        durations = self.clock.durations[self._first_step :]
        stats = runlog.step_statistics(durations, self._first_step, self.warmup_steps)
        logs = logs or {}
        images = len(durations) * self.global_batch
        self.log.epoch(runlog.epoch_record(
            epoch + 1, images, seconds, logs.get("loss"), logs.get("accuracy"), step_stats=stats))


class WindowRecorder(keras.callbacks.Callback):
    """The steps protocol: the warm-up window as epoch record 1, the timed window as record 2.

    The warm-up window runs from the begin of the first step to the synchronized end of step W;
    the timed window from right after that (once the metrics are reset, so each window's loss and
    accuracy are its own) to the synchronized end of step W + T. One fit, one data iterator: no
    pipeline restart falls into the timed window.
    """

    def __init__(self, log: runlog.RunLog, clock: StepClock, global_batch: int, warmup_steps: int, timed_steps: int):
        super().__init__()
        self.log, self.clock, self.global_batch = log, clock, global_batch
        self.warmup_steps, self.timed_steps = warmup_steps, timed_steps
        self._timed_started = None

    def on_train_batch_end(self, batch, logs=None):
        done = len(self.clock.ends)
        if done == self.warmup_steps:
            self._close_window(1, "warmup", 0, self.warmup_steps, None, logs)
            self.model.reset_metrics()
            self._timed_started = time.perf_counter()
        elif done == self.warmup_steps + self.timed_steps:
            self._close_window(2, "timed", self.warmup_steps, self.timed_steps, self._timed_started, logs)
            self.model.stop_training = True

    def _close_window(self, number: int, phase: str, first_step: int, steps: int, started, logs) -> None:
        timing = runlog.window_timing(self.clock.begins, self.clock.ends, first_step, steps, self.warmup_steps, started)
        stats = {key: timing[key] for key in ("steps", "step_time_median_s", "step_time_p90_s")}
        logs = logs or {}
        record = runlog.epoch_record(number, steps * self.global_batch, timing["seconds"], logs.get("loss"),
                                     logs.get("accuracy"), step_stats=stats, phase=phase)
        print(window_line(record), flush=True)
        self.log.epoch(record)


def window_line(record: dict) -> str:
    """The human line of a steps-protocol window."""
    line = f"{record['phase']} window: {record['steps']} steps, {record['seconds']:.2f} s"
    if record["phase"] == "warmup":
        return line + " (left out of the step statistics)"
    return (line + f", {record['throughput_img_s']:.1f} img/s, step median {record['step_time_median_s']:.4f} s, "
            f"p90 {record['step_time_p90_s']:.4f} s")


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
        **runlog.protocol_fields(args, global_batch, steps_per_epoch(setup.image_count, global_batch)),
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
    images, labels = load_training_data(args.data, args.max_train_images)
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


def train_attempt(args, setup: Setup, per_gpu_batch: int, attempt: int, log: runlog.RunLog) -> None:
    """One training run at `per_gpu_batch`; its records go to `log`."""
    start_attempt(args, setup)
    global_batch = per_gpu_batch * setup.replicas
    print(human_header(args.model, args.gpus, setup.device_kind, global_batch, setup.replicas), flush=True)
    # Pending before the model build: an out-of-memory error there still gets its header.
    log.expect(header_record(args, setup, per_gpu_batch, args.compile))
    steps = args.protocol == "steps"
    # One endless dataset and steps_per_epoch: Keras keeps its iterator across epochs. Given a
    # finite dataset it replaces the iterator every epoch, and tearing one down waits for
    # tf.data's autotuning thread to wake from its sleep, which doubles up to 60 s: measured
    # 9-60 s of idle time before every epoch after the first (ResNet50V2, 2 cores).
    dataset = make_dataset(setup.images, setup.labels, global_batch, args.seed, repeat=PASSES)
    model, jit = build_compiled_model(args, setup)
    log.header["compile"] = jit
    if args.oom_policy == "fail":
        log.open()
    clock = StepClock()
    callbacks = [*injected_failures(per_gpu_batch, attempt), clock]
    if steps:
        callbacks.append(WindowRecorder(log, clock, global_batch, args.warmup_steps, args.timed_steps))
        fit_options = dict(epochs=1, steps_per_epoch=args.warmup_steps + args.timed_steps)
    else:
        callbacks.append(EpochRecorder(log, clock, global_batch, args.warmup_steps))
        fit_options = dict(epochs=args.epochs, steps_per_epoch=steps_per_epoch(setup.image_count, global_batch))
    # shuffle=False: the dataset shuffles itself (Keras would only warn that it ignores it).
    model.fit(dataset, verbose=2, callbacks=callbacks, shuffle=False, **fit_options)


def train_with_oom_policy(args, setup: Setup, log: runlog.RunLog) -> None:
    """Train; with --oom-policy halve, an attempt that runs out of memory before its first epoch
    record is retried at half the per-GPU batch."""
    batch = args.per_gpu_batch
    for attempt in itertools.count(1):
        try:
            train_attempt(args, setup, batch, attempt, log)
            return
        except Exception as exc:
            if not (may_retry(args, log, batch) and is_out_of_memory(exc)):
                raise
            reason = error_reason(exc)
        # Retried outside the except block: the traceback, and the failed model with it, is gone.
        log.emit({"record": "oom_retry", "per_gpu_batch": batch, "next_per_gpu_batch": batch // 2, "reason": reason})
        print(f"Out of memory at per-GPU batch {batch}; retrying with {batch // 2} (--oom-policy halve)", flush=True)
        log.oom_retries += 1
        batch //= 2


def may_retry(args, log: runlog.RunLog, batch: int) -> bool:
    return args.oom_policy == "halve" and batch > 1 and not log.header_emitted


def probe_fits(args, setup: Setup, per_gpu_batch: int, attempt: int) -> bool:
    """Whether PROBE_STEPS training steps at `per_gpu_batch` run without running out of memory."""
    start_attempt(args, setup)
    try:
        dataset = make_dataset(setup.images, setup.labels, per_gpu_batch * setup.replicas, args.seed, repeat=STREAM)
        model, _ = build_compiled_model(args, setup)
        callbacks = injected_failures(per_gpu_batch, attempt)
        model.fit(dataset, epochs=1, steps_per_epoch=PROBE_STEPS, verbose=0, callbacks=callbacks, shuffle=False)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        print(f"max batch: per-GPU batch {per_gpu_batch} runs out of memory ({error_reason(exc)})", flush=True)
        return False
    print(f"max batch: per-GPU batch {per_gpu_batch} fits", flush=True)
    return True


def find_max_batch(args, setup: Setup, log: runlog.RunLog) -> dict:
    """Search the largest per-GPU batch that trains; emits the `max_batch` record."""
    start_attempt(args, setup)
    _, jit = build_compiled_model(args, setup)  # what XLA does for this model, for the header
    log.expect(header_record(args, setup, args.per_gpu_batch, jit))
    log.open()
    attempts = itertools.count(1)
    result = runlog.search_max_batch(
        lambda batch: probe_fits(args, setup, batch, next(attempts)), args.per_gpu_batch, args.max_batch_limit)
    log.emit({"record": "max_batch", **result, "max_batch_limit": args.max_batch_limit,
              "probe_steps": PROBE_STEPS, "resolution": args.resolution, "precision": args.precision,
              "compile": jit})
    limit_note = f" (the --max-batch-limit {args.max_batch_limit} was reached)" if result["limit_reached"] else ""
    print(f"max batch: largest per-GPU batch that trains: {result['per_gpu_batch']}{limit_note}", flush=True)
    return result


def run(args) -> int:
    """Train (or search the maximum batch) and always close the log with a summary record; the
    exit status of the run."""
    started = time.perf_counter()
    log = runlog.RunLog()
    runlog.raise_on_sigterm()

    def close(status, reason=None):
        # The steps protocol measures throughput, not time to solution.
        total = None if args.protocol == "steps" and not args.find_max_batch else time.perf_counter() - started
        log.close(status, total, reason, _peak_memory_or_none(args.gpus))

    try:
        setup = prepare(args)
        if args.find_max_batch:
            found = find_max_batch(args, setup, log)["per_gpu_batch"]
            if found is None:
                close("oom", f"no per-GPU batch fits, not even 1 ({args.resolution} px, {args.precision})")
                return 0
        else:
            train_with_oom_policy(args, setup, log)
    except BaseException as exc:
        if is_out_of_memory(exc):
            close("oom", oom_reason(args, log, exc))
            return 0
        close("failed", error_reason(exc))
        raise
    close("ok")
    return 0


def oom_reason(args, log: runlog.RunLog, exc: BaseException) -> str:
    batch = log.header["per_gpu_batch"] if log.header else args.per_gpu_batch
    halvings = f" after {log.oom_retries} halving(s) from {args.per_gpu_batch}" if log.oom_retries else ""
    return (f"out of memory at per-GPU batch {batch}{halvings} ({args.resolution} px, {args.precision}): "
            f"{error_reason(exc)}")


def _peak_memory_or_none(gpus: int):
    # The summary must get out even when the failure left the devices unusable.
    try:
        visible_gpus = len(tf.config.get_visible_devices("GPU"))
        return peak_device_memory_gb("gpu" if visible_gpus and gpus else "cpu", min(gpus, visible_gpus))
    except Exception:  # noqa: BLE001 - any error here would hide the run's own failure
        return None


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODEL_NAMES, help="catalog name")
    parser.add_argument("--data", help="cifar-10-batches-py/ or its parent")
    parser.add_argument("--dataset-name", default="cifar10", help="name written to the records")
    parser.add_argument("--resolution", type=int, default=128, help="training resolution in px")
    parser.add_argument("--gpus", type=int, default=1, help="replicas; 0 = CPU-only baseline")
    parser.add_argument("--per-gpu-batch", type=int, default=256)
    parser.add_argument("--base-lr", type=float, default=0.01, help="scaled by max(1, gpus)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs of the epochs protocol")
    parser.add_argument("--max-train-images", type=int, default=0, help="first M training images; 0 = all")
    parser.add_argument("--precision", choices=tuple(PRECISION_POLICIES), default="fp32")
    parser.add_argument("--compile", action="store_true", help="XLA: model.compile(jit_compile=True)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="epochs",
                        help="epochs: time whole epochs; steps: --warmup-steps then --timed-steps steps")
    parser.add_argument("--warmup-steps", type=int, default=DEFAULT_WARMUP_STEPS,
                        help="first steps of the run, left out of the step statistics "
                             f"(default {DEFAULT_WARMUP_STEPS})")
    parser.add_argument("--timed-steps", type=int, default=DEFAULT_TIMED_STEPS,
                        help=f"timed steps of the steps protocol (default {DEFAULT_TIMED_STEPS})")
    parser.add_argument("--oom-policy", choices=OOM_POLICIES, default="fail",
                        help="out of memory: fail (status oom) or halve the per-GPU batch and retry, down to 1")
    parser.add_argument("--find-max-batch", action="store_true",
                        help="search the largest per-GPU batch that trains, from --per-gpu-batch up")
    parser.add_argument("--max-batch-limit", type=int, default=DEFAULT_MAX_BATCH_LIMIT,
                        help=f"largest per-GPU batch the search tries (default {DEFAULT_MAX_BATCH_LIMIT})")
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
    for flag in ("resolution", "per_gpu_batch", "epochs", "timed_steps", "max_batch_limit"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.warmup_steps < 0:
        parser.error(f"--warmup-steps must be 0 or more, got {args.warmup_steps}")
    if args.protocol == "steps" and args.warmup_steps < 1:
        parser.error("--protocol steps needs --warmup-steps of at least 1: the first step holds graph tracing")
    if args.find_max_batch and args.max_batch_limit < args.per_gpu_batch:
        parser.error(f"--max-batch-limit {args.max_batch_limit} is below the starting "
                     f"--per-gpu-batch {args.per_gpu_batch}")
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
