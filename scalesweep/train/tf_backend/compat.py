"""What differs between the TensorFlow/Keras stacks the TensorFlow trainer runs on, in one place.

Keras 3 (TensorFlow 2.16+, the pinned environment) and Keras 2 (TensorFlow <= 2.15; the NGC
TensorFlow 23.03 container has TensorFlow 2.11 with Keras 2.11) differ in the private and public
APIs the trainer uses. Each function detects the feature (hasattr, the signature, an import),
never a version number, so a stack in between takes whichever path it supports. The list, with
how each is detected, is in docs/trainers.md ("Supported stacks").
"""

from __future__ import annotations

import contextlib
import importlib
import inspect

import keras
import tensorflow as tf


def applications():
    """keras.applications: Keras 2's `import keras` does not load the submodule."""
    return importlib.import_module("keras.applications")


def cast(tensor, dtype: str):
    """Cast a symbolic tensor of the functional model (Keras 3: `keras.ops`, as TensorFlow ops
    refuse its KerasTensors; Keras 2 has no `keras.ops` and wraps TensorFlow ops in layers)."""
    if hasattr(keras, "ops"):
        return keras.ops.cast(tensor, dtype)
    return tf.cast(tensor, dtype)


def jit_compile_on(model) -> bool:
    """Whether the compiled model runs under XLA, as Keras actually set it (Keras 3:
    `model.jit_compile`; Keras 2 keeps it in `model._jit_compile`)."""
    if hasattr(model, "jit_compile"):
        return bool(model.jit_compile)
    return bool(getattr(model, "_jit_compile", False))


def cpu_runs_bfloat16_batch_norm() -> bool:
    """Whether this build's CPU kernels take bfloat16 into batch normalization, the one layer of
    our models Keras' mixed_bfloat16 policy sends bfloat16 to. TF 2.11 registers that kernel
    only where oneDNN is on, which it is by default only on CPUs with AVX512/AMX (TF 2.9 release
    notes); newer builds have it everywhere. Asked of the kernel itself, as the other features here."""
    ones = tf.ones((1, 1, 1, 1), tf.bfloat16)
    scale = tf.ones((1,), tf.float32)
    try:
        with tf.device("/cpu:0"):
            tf.raw_ops.FusedBatchNormV3(x=ones, scale=scale, offset=scale * 0, mean=scale * 0, variance=scale,
                                        is_training=False)
    except tf.errors.InvalidArgumentError:
        return False
    return True


def build_training_state(model, images, labels) -> None:
    """Create the variables of the loss tracker, the metrics and the optimizer now, in the
    strategy's scope (cross-replica context), not at the first trace inside strategy.run: Keras
    3 would then create the metrics per replica (`accuracy` reads as an empty array), and a
    traced function that creates variables can be traced only once.

    Keras 3: what fit does before its first step, the private `model._symbolic_build`. Keras 2:
    one untimed forward on the batch, then the containers' and the optimizer's own build."""
    if hasattr(model, "_symbolic_build"):
        model._symbolic_build(data_batch=(images, labels))
        return
    predictions = model(images, training=False)
    model.compiled_loss.build(predictions)
    model.compiled_metrics.build(predictions, labels)
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)  # under a loss-scale wrapper
    # Keras 2's `keras.optimizers` are its legacy OptimizerV2 (no `build`; it creates its step
    # count, hyperparameters and slots in `_create_all_weights`); its newer optimizers build.
    build = getattr(optimizer, "build", None) or optimizer._create_all_weights
    build(model.trainable_variables)


def compute_loss(model, images, labels, predictions):
    """model.compute_loss of a training forward (Keras 3 takes `training=`; Keras 2 has no such
    argument and always computes the training loss)."""
    if "training" in inspect.signature(model.compute_loss).parameters:
        return model.compute_loss(x=images, y=labels, y_pred=predictions, training=True)
    return model.compute_loss(x=images, y=labels, y_pred=predictions)


def scale_loss(optimizer, loss):
    """The loss as the optimizer's train step scales it: mixed float16 scales it, or its
    gradients underflow (Keras 3: `optimizer.scale_loss` on every optimizer; Keras 2: only its
    LossScaleOptimizer has `get_scaled_loss`; any other optimizer does not scale)."""
    if hasattr(optimizer, "scale_loss"):
        return optimizer.scale_loss(loss)
    if hasattr(optimizer, "get_scaled_loss"):
        return optimizer.get_scaled_loss(loss)
    return loss


def optimizer_variables(optimizer) -> list:
    """The optimizer's variables (its step count, slots, loss scale): a property in Keras 3, a
    method in Keras 2's optimizers; a loss-scale wrapper's own and its inner optimizer's."""
    found = []
    for each in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        if each is None:
            continue
        variables = each.variables
        found += [v for v in (variables() if callable(variables) else variables) if all(v is not f for f in found)]
    return found


# The optimizer method that all-reduces the gradients inside apply_gradients: Keras 3's
# TensorFlow optimizer (`_all_reduce_sum_gradients`, in `_backend_update_step`), Keras 2's
# OptimizerV2 (`_aggregate_gradients`; keras.optimizers.SGD of Keras 2.11) and its experimental
# optimizer (`aggregate_gradients`).
GRADIENT_ALL_REDUCE_METHODS = ("_all_reduce_sum_gradients", "_aggregate_gradients", "aggregate_gradients")


@contextlib.contextmanager
def unreduced_gradients(optimizer):
    """Inside: the optimizer (and a loss-scale wrapper's inner one) applies each replica's own
    gradients, without the cross-replica all-reduce, for the step functions traced here. An
    instance attribute shadows the class's method; deleting it brings the method back."""
    patched = []
    for each in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        name = next((name for name in GRADIENT_ALL_REDUCE_METHODS if hasattr(each, name)), None) if each else None
        if name is None:
            continue
        object.__setattr__(each, name, _unreduced)
        patched.append((each, name))
    if not patched:
        raise RuntimeError(f"{type(optimizer).__name__} has none of {GRADIENT_ALL_REDUCE_METHODS}: "
                           "cannot step without the gradient all-reduce")
    try:
        yield
    finally:
        for each, name in patched:
            object.__delattr__(each, name)


def _unreduced(grads_and_vars):
    return list(grads_and_vars)


def metric_variables(model) -> list:
    """The variables of the model's metrics and loss tracker (the window's loss and accuracy)."""
    found = []
    for metric in model.metrics:
        found += [v for v in metric.variables if all(v is not f for f in found)]
    return found


def progbar_logger():
    """Keras' epoch-line printer counting steps (Keras 2's ProgbarLogger counts samples unless
    told, and its `steps` then overflow: `cannot convert float infinity to integer`)."""
    if "count_mode" in inspect.signature(keras.callbacks.ProgbarLogger).parameters:
        return keras.callbacks.ProgbarLogger(count_mode="steps")
    return keras.callbacks.ProgbarLogger()


def device_sync(strategy):
    """A function `sync(produced)` that returns once the devices finished the work queued so far.

    TensorFlow 2.12+: `tf.test.experimental.sync_devices` (`produced` is not needed). TensorFlow
    2.11 has no such function: there `sync` reads back to the host one element of a tensor of
    `produced` (the batch, or what a step function returned) on every device of the strategy.
    A device's kernels run in order on its compute stream and a device-to-host copy waits for
    everything enqueued there before it; a step function's call returns once all its ops are
    enqueued, so the copy returns when the step's whole work on that device is done, and reading
    the batch's images waits for their host-to-device copy. A few microseconds per device on top
    of the wait itself; a real wait, never a no-op: a step timed without one would end when its
    work is queued, not done.
    """
    sync_devices = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
    if sync_devices is not None:
        return lambda produced=None: sync_devices()
    return lambda produced=None: read_back(strategy, produced)


def read_back(strategy, produced) -> int:
    """Copy one element of the first tensor of `produced` on each device to the host
    (device_sync); returns how many devices it read from."""
    if produced is None:
        raise ValueError("read_back needs a value the step produced: without it there is nothing to wait for")
    first_on_device = {}
    for value in tf.nest.flatten(produced):
        for tensor in strategy.experimental_local_results(value):
            if isinstance(tensor, tf.Tensor) and tf.size(tensor) > 0:
                first_on_device.setdefault(tensor.device, tensor)
    for device, tensor in first_on_device.items():
        with tf.device(device):
            element = tf.reshape(tensor, [-1])[:1]
        element.numpy()
    return len(first_on_device)
