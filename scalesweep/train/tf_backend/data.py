"""The TensorFlow trainer's data: CIFAR-10 as uint8 32 x 32 host tensors, read once per run, and
tf.data pipelines that gather whole shuffled batches from them (the resize and /255 run in the
model, on the devices: trainer.py)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from scalesweep.train.common import faults, measure
from scalesweep.train.datasets import cifar


def steps_per_epoch(num_images: int, global_batch: int) -> int:
    steps = num_images // global_batch
    if steps == 0:
        raise ValueError(f"{num_images} training images are fewer than one global batch of {global_batch}")
    return steps


# TF's CPU kernels assume tensor buffers aligned like its own allocator's (64 bytes); a tensor
# over a misaligned buffer aborts the process.
TENSOR_ALIGNMENT = 64


def load_training_data(path, max_images: int = 0, seed: int = 0):
    """The run's training images and labels as host tensors, uint8 32 x 32 as the pickles hold
    them: all, or the seeded subset of `max_images` that measure.subset_indices picks (the same
    images the PyTorch trainer would pick); nothing else of the data set stays in memory.

    The batch files are copied one by one into one aligned array, each file's rows freed once
    copied, and the tensor shares that array: TF's own conversion would copy the whole set
    twice, tripling the input path's peak host memory.
    """
    folder = cifar.batches_dir(path)
    parts = [cifar.read_batch(folder / name) for name in cifar.TRAIN_BATCHES]
    keep = np.asarray(measure.subset_indices(sum(len(labels) for _, labels in parts), max_images, seed))
    images = aligned_empty((len(keep), cifar.SIDE, cifar.SIDE, cifar.CHANNELS), np.uint8)
    labels = np.empty(len(keep), np.int32)
    offset = filled = 0
    while parts:
        part_images, part_labels = parts.pop(0)
        rows = keep[(keep >= offset) & (keep < offset + len(part_labels))] - offset
        images[filled : filled + len(rows)] = part_images[rows]
        labels[filled : filled + len(rows)] = part_labels[rows]
        filled, offset = filled + len(rows), offset + len(part_labels)
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


def with_injected_delay(batches):
    """The batches of the iterator `batches`, each handed over faults.DATA_DELAY_ENV seconds late
    (a busy wait in the fetching thread: a slowed loader the training loop waits for, as the
    PyTorch loader's collate with --num-workers 0); `batches` itself when no delay is asked."""
    delay = faults.injected_delay_s(faults.DATA_DELAY_ENV)
    if not delay:
        return batches
    return _delayed(batches, delay)


def _delayed(batches, delay: float):
    for batch in batches:
        faults.busy_wait(delay)
        yield batch


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
