"""Train a Keras model on CIFAR-10 with tf.distribute.MirroredStrategy and log scaling records.

The reference TensorFlow experiment (ResNet50V2/101V2/152V2, SGD(0.01 x N), global batch = per-GPU
batch x N), with one change that matters at scale: CIFAR stays uint8 32 x 32 in host memory and
the resize to --resolution and the /255 happen inside the model, on the devices. The reference
resizes on the host and caches float32 (about 9.8 GB for 50k images at 128 px).

Where no GPU exists, --gpus N splits the CPU into N logical devices and mirrors over them, so a
laptop runs the same code path. --gpus 0 is the CPU-only baseline (default strategy).

This file is the TensorFlow backend of scalesweep/train/common/harness.py (docs/trainers.md): the
harness runs the life cycle, the measurement options shared with the PyTorch backend (--protocol,
--warmup-steps, --timed-steps, --oom-policy, --find-max-batch, ...), the out-of-memory policy, the
maximum-batch search and the protocols; this file supplies the devices, the model, the training
loop around Keras' model.train_step (every step timed, its data wait too) and the provenance,
data.py the data and probes.py the step breakdown's probes and the FLOPs (beside it in
scalesweep/train/tf_backend/). It prints the reference's human header, Keras' epoch lines and the
`:::SCALESWEEP` records of docs/records.md. Out of memory: summary status oom, exit 0; any other
failure: summary status failed, exit non-zero. SCALESWEEP_FAIL_INJECT
(scalesweep/train/common/faults.py) injects failures at the first training step.

    python scripts/train_tf.py --model resnet50v2 --data data/cifar10 --resolution 128 \\
        --gpus 2 --per-gpu-batch 2048 --epochs 5 [--compile] [--protocol steps]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# What a run costs starts here, before the framework import (seconds of a job's time, too).
STARTED = time.perf_counter()
from dataclasses import dataclass

# Before the import: TF's C++ start-up chatter would bury the Keras epoch lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from scalesweep.contract import frameworks  # noqa: E402
from scalesweep.train.common import (  # noqa: E402
    faults, harness, measure, node, runlog, stepclock, stepparts, trainer_args,
)
from scalesweep.train.tf_backend import compat, probes  # noqa: E402
from scalesweep.train.tf_backend.data import (  # noqa: E402
    PASSES,
    STREAM,
    load_training_data,
    make_dataset,
    steps_per_epoch,
    with_injected_delay,
)
from scalesweep.train.tf_backend.model import APPLICATIONS, build_model, compile_model  # noqa: E402

FRAMEWORK = frameworks.get("tensorflow")
MODEL_NAMES = FRAMEWORK.model_names
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
    strategy = tf.distribute.MirroredStrategy(devices=[f"/gpu:{index}" for index in range(gpus)],
                                              cross_device_ops=probes.cross_device_ops(cpu_replicas=False))
    names = [f"GPU:{index} {_gpu_model_name(device)}" for index, device in enumerate(used)]
    return strategy, "gpu", names


def _gpu_model_name(device) -> str:
    return tf.config.experimental.get_device_details(device).get("device_name", "unknown GPU")


def _cpu_replica_strategy(gpus: int):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(gpus)])
    devices = [f"/cpu:{index}" for index in range(gpus)]
    strategy = tf.distribute.MirroredStrategy(devices=devices,
                                              cross_device_ops=probes.cross_device_ops(cpu_replicas=True))
    return strategy, "cpu", [f"CPU:{index}" for index in range(gpus)]


def peak_device_memory_gb(device_kind: str, replicas: int):
    """Peak memory of the busiest GPU in GiB; None on CPU, where TF does not track it."""
    if device_kind != "gpu":
        return None
    peaks = [tf.config.experimental.get_memory_info(f"GPU:{index}")["peak"] for index in range(replicas)]
    return round(max(peaks) / _GIB, 3)


# ---------------------------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------------------------


def injected_error(per_gpu_batch: int, attempt: int) -> Exception | None:
    """The error SCALESWEEP_FAIL_INJECT asks the attempt to raise at its first training step."""
    setting = faults.fail_inject_mode()
    failure = faults.injected_failure(setting, per_gpu_batch, attempt)
    message = f"{faults.FAIL_INJECT_ENV}={setting}: injected failure at the first training step"
    if failure == "oom":
        return tf.errors.ResourceExhaustedError(None, None, message)
    return RuntimeError(message) if failure else None


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
        "python": node.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "cuda": build.get("cuda_version"),
        "cudnn": build.get("cudnn_version"),
        "nccl": node.nccl_version_from_env(),
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


def own_header_keys(setup: Setup, jit_compile: bool) -> dict:
    """The header keys only this backend knows (harness.header_record writes the rest)."""
    return {
        "device_kind": setup.device_kind,
        "nodes": 1,
        "compile": jit_compile,  # what XLA accepted, not only what was asked
        "flops_per_image": None,  # known once the attempt's step is traced (KerasAttempt)
        "versions": framework_versions(),
        "devices": setup.devices,
        **node.device_provenance(),
        **node.provenance(setup.started_wall),
        **node.thread_fields(intra_op_threads()),
    }


def intra_op_threads() -> int:
    """Threads of TensorFlow's intra-op pool: its setting, or where that is 0 (TensorFlow's choice)
    its default, one per CPU the process may run on (the affinity mask a scheduler set)."""
    return tf.config.threading.get_intra_op_parallelism_threads() or node.usable_cpu_count()


def set_precision(precision: str, device_kind: str) -> None:
    """Global Keras dtype policy; must be set before the model is built."""
    if device_kind == "cpu" and precision == "fp16":
        # Measured: ResNet50V2 at 32 px, 30 s per step of 32 images on 2 cores (fp32: 0.6 s).
        print("warning: CPUs have no float16 kernels; fp16 here is emulated and very slow", file=sys.stderr)
    if device_kind == "cpu" and precision == "bf16" and not compat.cpu_runs_bfloat16_batch_norm():
        raise DeviceError(
            f"--precision bf16 on CPU: TensorFlow {tf.__version__} here has no bfloat16 batch normalization "
            "kernel for this CPU (oneDNN is off without AVX512/AMX); use --precision fp32 on CPUs, bf16 on GPUs"
        )
    keras.mixed_precision.set_global_policy(PRECISION_POLICIES[precision])


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------


def prepare(args) -> Setup:
    """Devices and strategy, then the training images as host tensors (once per run)."""
    started_wall = time.time()
    strategy, device_kind, devices = configure_devices(args.gpus)
    check_xla_placement(args.compile, device_kind, strategy.num_replicas_in_sync)
    probes.check_sync_delay(args.compile)
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
        jit = compile_model(model, harness.scaled_learning_rate(args.base_lr, args.gpus), args.compile)
        # The metrics', loss's and optimizer's variables built here, as model.fit does before its
        # first step, not by the first trace inside strategy.run (tf_compat says why).
        compat.build_training_state(model, setup.images[:1], setup.labels[:1])
    return model, jit


class KerasAttempt:
    """One training attempt (harness.Backend.build's attempt): the model and one endless iterator
    over the distributed dataset at one per-GPU batch, trained by our loop around Keras' own
    model.train_step (probes.py says why not model.fit).

    Every step is timed on the clock from the fetch of its batch; data_ready() once the batch is
    on the devices; its end waits for them. Each window's loss and accuracy are Keras' metrics,
    reset at its start and read after its last step (the reads wait for the devices).
    """

    def __init__(self, model, strategy, dataset, global_batch: int, steps: int, jit: bool, failure=None):
        self.model, self.strategy, self.global_batch, self.steps, self.jit = model, strategy, global_batch, steps, jit
        self.failure = failure
        self.iterator = iter(strategy.experimental_distribute_dataset(dataset))
        self.batches = with_injected_delay(self.iterator)
        # The device wait of every step (compat.device_sync): TensorFlow 2.11 has no
        # sync_devices, there the wait reads back what the step last produced.
        self.sync = compat.device_sync(strategy)
        self.produced = None
        self.clock = stepclock.StepClock(lambda: self.sync(self.produced))
        self.train_step = probes.replicated(strategy, model.train_step, jit)
        self.header_updates = {"compile": jit}
        self.interleaved = probes.InterleavedProbe(model, strategy, jit, self.sync)
        self.batch = None
        self.interleaved_s = 0.0  # the probe steps' seconds, every window together
        self.steady_steps = 0

    def count_flops(self) -> None:
        """The header's flops_per_image, from the training step's graph, traced here instead of
        in the first step (the time to solution holds the trace either way; epoch 1 no more)."""
        self.header_updates["flops_per_image"] = probes.flops_per_image(
            self.train_step, self.iterator.element_spec, self.global_batch)

    def _step(self) -> None:
        if self.failure is not None and not self.clock.begins:
            raise self.failure
        self.clock.begin()
        self.produced = next(self.batches)
        self.clock.data_ready()
        self.batch = self.produced
        self.produced = self.train_step(self.produced)
        self.clock.end()

    def _run(self, window: measure.TimedWindow, probe_every: int = 0) -> tuple:
        """Steps until `window` is done; (the metrics since the last reset, seconds of the probe
        steps between them: after every `probe_every`-th steady step, counted across the steady
        windows; none with 0)."""
        first_step = self.clock.finished
        probed = 0.0
        while not window.done(self.clock.durations[first_step:]):
            self._step()
            self.steady_steps += bool(probe_every)
            if probe_every and stepparts.is_probe_step(self.steady_steps - 1, probe_every):
                probed += self.interleaved.probe(self.batch, self.clock.durations[-1] - self.clock.data_waits[-1])
        self.interleaved_s += probed
        # The metrics' read waits for the devices: the last probe step is inside the window.
        return {name: float(value) for name, value in self.model.get_metrics_result().items()}, probed

    def fit_epochs(self, meter: harness.WindowMeter, epochs: int) -> None:
        """The epochs protocol, with Keras' own epoch lines (its ProgbarLogger, verbose=2)."""
        progress = compat.progbar_logger()
        progress.set_params({"verbose": 2, "epochs": epochs, "steps": self.steps})
        every = stepparts.probe_every(self.steps * (epochs - runlog.FIRST_STEADY_EPOCH + 1),
                                       self.strategy.num_replicas_in_sync)
        for epoch in range(epochs):
            progress.on_epoch_begin(epoch)
            self.model.reset_metrics()
            meter.start(time.perf_counter())
            logs, probed = self._run(measure.TimedWindow(self.steps),
                                     every if epoch + 1 >= runlog.FIRST_STEADY_EPOCH else 0)
            # The window ends after the metrics' read (a device wait), so it holds every probe
            # step it leaves out, the one after its last step too.
            ended = time.perf_counter()
            progress.on_epoch_end(epoch, logs)
            meter.finish(epoch + 1, logs.get("loss"), logs.get("accuracy"), ended=ended, excluded_s=probed)

    def fit_steps(self, meter: harness.WindowMeter, windows: list) -> None:
        """The steps protocol's windows (harness.step_windows) from one iterator: the warm-up from
        the begin of its first step, each next window from right after the one before."""
        for index, (number, phase, window) in enumerate(windows):
            self.model.reset_metrics()
            meter.start(time.perf_counter() if index else None)
            every = stepparts.probe_every(None if window.auto else window.max_steps,
                                           self.strategy.num_replicas_in_sync)
            logs, probed = self._run(window, every if phase == "timed" else 0)
            meter.finish(number, logs.get("loss"), logs.get("accuracy"), phase=phase, window=window,
                         ended=time.perf_counter() if probed else None, excluded_s=probed)

    def probe(self, steps: int) -> None:
        """`steps` training steps (the maximum-batch search)."""
        self._run(measure.TimedWindow(steps))

    def breakdown_probes(self) -> dict:
        """The compute probes' seconds (taken between the steps) and the all-reduce probe of the
        step breakdown (probes.py)."""
        return {"compute": list(self.interleaved.seconds), "compute_paired": list(self.interleaved.paired),
                "interleaved_s": self.interleaved_s, **probes.allreduce_probe(self.model, self.strategy, self.sync)}


class KerasBackend(harness.Backend):
    """What the harness needs from TensorFlow/Keras (docs/trainers.md): one process drives every
    replica of a MirroredStrategy."""

    framework = FRAMEWORK.name

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
        setup = self.prepared
        return harness.header_record(
            self.args, self.framework, per_gpu_batch, setup.replicas,
            steps_per_epoch(setup.image_count, per_gpu_batch * setup.replicas), setup.image_count,
            own_header_keys(setup, self.jit))

    def attempt(self, per_gpu_batch: int, attempt: int, repeat: str) -> KerasAttempt:
        args, setup = self.args, self.prepared
        start_attempt(args, setup)
        global_batch = per_gpu_batch * setup.replicas
        dataset = make_dataset(setup.images, setup.labels, global_batch, args.seed, repeat=repeat)
        model, jit = build_compiled_model(args, setup)
        steps = steps_per_epoch(setup.image_count, global_batch) if repeat == PASSES else None
        return KerasAttempt(model, setup.strategy, dataset, global_batch, steps, jit,
                            injected_error(per_gpu_batch, attempt))

    def build(self, per_gpu_batch: int, attempt: int) -> KerasAttempt:
        setup = self.prepared
        global_batch = per_gpu_batch * setup.replicas
        print(human_header(self.args.model, self.args.gpus, setup.device_kind, global_batch, setup.replicas),
              flush=True)
        # One endless dataset, one iterator for the attempt, epochs of steps_per_epoch steps: a
        # finite dataset needs a new iterator every epoch, and tearing one down waits for
        # tf.data's autotuning thread to wake from its sleep, which doubles up to 60 s: measured
        # 9-60 s of idle time before every epoch after the first (ResNet50V2, 2 cores).
        training = self.attempt(per_gpu_batch, attempt, PASSES)
        training.count_flops()
        return training

    def probe(self, per_gpu_batch: int, attempt: int, steps: int) -> None:
        self.attempt(per_gpu_batch, attempt, STREAM).probe(steps)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return is_out_of_memory(error)

    def error_text(self, error: BaseException) -> str:
        return error_reason(error)

    def tracer(self, attempt, out_dir: str, first: int, steps: int, ranks: str):
        from scalesweep.train.tf_backend import trace  # one process, every replica: rank 0's trace holds them all

        return trace.TfTracer(out_dir, first, steps)

    def peak_memory_gb(self):
        visible_gpus = len(tf.config.get_visible_devices("GPU"))
        gpus = self.args.gpus
        return peak_device_memory_gb("gpu" if visible_gpus and gpus else "cpu", min(gpus, visible_gpus))

    def energy_devices(self):
        """Every replica's device: one process drives them all, so its counters are summed
        (on CPUs the fake NVML's devices 0..replicas-1)."""
        return self.prepared.device_kind == "gpu", list(range(self.prepared.replicas))


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = trainer_args.trainer_parser(__doc__.splitlines()[0], MODEL_NAMES, "cifar-10-batches-py/ or its parent",
                                    resolution=128, gpus=1, per_gpu_batch=256, dataset_name="cifar10")
    return trainer_args.parse_args(parser, argv, _check_own_args)


def _check_own_args(parser, args) -> None:
    if args.resolution < 32 and args.model != "cnn_small":
        parser.error(f"--resolution {args.resolution}: keras.applications models need at least 32 px")


def main(argv=None) -> int:
    return harness.main(argv, parse_args, MODEL_NAMES, KerasBackend, STARTED)
