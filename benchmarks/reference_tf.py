"""The reference TensorFlow experiment (docs/reference.md §1), re-implemented for benchmarks.

What the reference does, in its order: read the CIFAR-10 pickles as uint8 N x 3 x 32 x 32 channel
planes; build `tf.data` from the arrays; map every image (planes -> 32 x 32 x 3, `tf.image.resize`
to 128 x 128 bilinear, /255 in float32) in parallel; `.cache()` the float32 result in host
memory; `.repeat(1)`, `.batch(batch_size)` (the global batch, last batch partial), prefetch; a
test set built the same way (never used by fit); `MirroredStrategy` over the first N GPUs;
ResNet50V2(weights=None, include_top=True, input_shape=(128, 128, 3), classes=10), SGD(0.01 x N),
sparse categorical cross-entropy, accuracy, built and compiled in the strategy's scope; its banner;
`model.fit(train_ds, epochs=E, verbose=2)`.

Departures, each needed to run it here and none touching the training path:
- `--data` instead of the cluster path written into the script.
- Train batches of any size are concatenated; the original preallocates exactly 5 x 10,000.
- No GPU: `--n_gpus` logical CPU devices stand in, as in the TensorFlow trainer. They must exist
  before TF's runtime starts, so the devices are listed before the data is loaded (the reference
  lists them after; the order does not change what runs).
- `--resolution` (default 128, the reference's) to shrink a benchmark; the model's input follows.
- `--epoch-times` adds a callback printing each epoch's wall time and median step time, measured
  as the TensorFlow trainer measures them (Keras 3 prints whole seconds only). Off by default. Its
  per-step hook changes no behaviour: Keras' progress bar already hooks every step end, which
  keeps Keras from dispatching step-end callbacks asynchronously.

    python benchmarks/reference_tf.py --data data/cifar10 --epochs 5 --batch_size 4096 --n_gpus 2
"""

import argparse
import json
import os
import pickle
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REFERENCE_RESOLUTION = 128
EPOCH_TIME_PREFIX = ":::REFERENCE_EPOCH "
TRAIN_BATCHES = [f"data_batch_{index}" for index in range(1, 6)]


def load_batch(file):
    """(uint8 N x 3 x 32 x 32 channel planes, labels) of one pickled CIFAR-10 batch."""
    with open(file, "rb") as handle:
        content = pickle.load(handle, encoding="bytes")
    content = {key.decode("utf8"): value for key, value in content.items()}
    data = content["data"]
    return data.reshape(data.shape[0], 3, 32, 32), content["labels"]


def load_arrays(folder):
    """Train and test arrays as the reference holds them: uint8 planes, uint8 labels."""
    parts = [load_batch(Path(folder) / name) for name in TRAIN_BATCHES]
    train_images = np.concatenate([images for images, _ in parts])
    train_labels = np.concatenate([np.asarray(labels, dtype="uint8") for _, labels in parts])
    test_images, test_labels = load_batch(Path(folder) / "test_batch")
    return train_images, train_labels, test_images, test_labels


def make_preprocess(resolution: int = REFERENCE_RESOLUTION):
    """The reference's per-image map: planes -> HWC, bilinear resize, /255 in float32."""

    def preprocess(image, label):
        label = tf.cast(label, tf.int32)
        image = tf.transpose(tf.reshape(image, [3, 32, 32]), [1, 2, 0])
        image = tf.image.resize(image, [resolution, resolution])
        image = tf.math.divide(tf.cast(image, tf.float32), 255)
        return image, label

    return preprocess


def load_cifar(batch_size: int, folder, resolution: int = REFERENCE_RESOLUTION):
    """(train_ds, test_ds): the reference's input path, float32 train images cached in memory."""
    train_images, train_labels, test_images, test_labels = load_arrays(folder)
    preprocess = make_preprocess(resolution)
    train_ds = tf.data.Dataset.from_tensor_slices((train_images, train_labels))
    test_ds = tf.data.Dataset.from_tensor_slices((test_images, test_labels))
    train_ds = train_ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).cache().repeat(1)
    test_ds = test_ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).repeat()
    train_ds = train_ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    test_ds = test_ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    return train_ds, test_ds


def device_names(n_gpus: int) -> list[str]:
    """The first N GPUs, as the reference picks them; N logical CPU devices where none exist."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        return [device.name.split("e:")[1] for device in gpus][:n_gpus]
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n_gpus)
    return [f"/cpu:{index}" for index in range(n_gpus)]


class EpochTimes(tf.keras.callbacks.Callback):
    """Prints `:::REFERENCE_EPOCH {"epoch", "seconds", "steps", "step_time_median_s"}` per epoch
    (benchmark instrumentation). A step ends once Keras has read its logs, which waits for it."""

    def on_epoch_begin(self, epoch, logs=None):
        self._steps = []
        self._started = time.perf_counter()

    def on_train_batch_begin(self, batch, logs=None):
        self._step_started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._steps.append(time.perf_counter() - self._step_started)

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started
        record = {"epoch": epoch + 1, "seconds": seconds, "steps": len(self._steps),
                  "step_time_median_s": float(np.median(self._steps)) if self._steps else None}
        print(EPOCH_TIME_PREFIX + json.dumps(record), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=2048, help="global batch")
    parser.add_argument("--n_gpus", type=int, default=1)
    parser.add_argument("--data", required=True, help="the cifar-10-batches-py folder")
    parser.add_argument("--resolution", type=int, default=REFERENCE_RESOLUTION)
    parser.add_argument("--epoch-times", action="store_true", help="print each epoch's wall time")
    args = parser.parse_args(argv)

    devices = device_names(args.n_gpus)  # before any tensor exists: CPU devices are fixed then
    train_ds, _ = load_cifar(args.batch_size, args.data, args.resolution)
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    with strategy.scope():
        model = tf.keras.applications.resnet_v2.ResNet50V2(
            include_top=True, weights=None, input_shape=(args.resolution, args.resolution, 3), classes=10
        )
        optimizer = tf.keras.optimizers.SGD(0.01 * args.n_gpus)
        model.compile(loss="sparse_categorical_crossentropy", optimizer=optimizer, metrics=["accuracy"])

    print(f" Model ResNet50 {args.n_gpus} GPUs", "\n-----------------------")
    print("Batch_size:", args.batch_size)
    print("Num_replicas:", strategy.num_replicas_in_sync, "\n")
    callbacks = [EpochTimes()] if args.epoch_times else []
    model.fit(train_ds, epochs=args.epochs, verbose=2, callbacks=callbacks)


if __name__ == "__main__":
    main()
