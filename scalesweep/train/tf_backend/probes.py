"""TensorFlow's side of the step breakdown (scalesweep/train/common/stepparts.py): the replicated
step functions, the probes, the injected delays and the model FLOPs.

The training loop (trainer.py's KerasAttempt) is ours, around Keras' own
`model.train_step`: Keras' fit() fetches each batch inside its tf.function, where no clock can
see how long the step waited for it. Ours takes the batch from the distributed dataset's iterator
in Python, waits for the devices (the batch is on them, copy included: the data wait ends), then
runs the step, `strategy.run(model.train_step)` in a tf.function (XLA with --compile), as fit's
own step function does.

- compute: with 2 or more replicas, a probe step after every stepparts.probe_every()-th timed
  step of a steady window (InterleavedProbe: beside the steps, under the same load, kept out of
  the window's seconds, paired with the step it followed): the training step itself,
  `strategy.run(model.train_step)` (XLA with --compile), but every replica applies its own
  gradients without the cross-replica all-reduce (compat.unreduced_gradients: the optimizer's
  all-reduce method shadowed while the probe's own tf.function runs), at learning rate 0, the
  model's non-trainable variables (batch-norm statistics), the optimizer's (its step count, loss
  scale) and the metrics' restored after each: the probes change neither weight nor the window's
  loss and accuracy.
- sync wait: the replicas run in one process, one step function, and enter the all-reduce from
  the same graph execution: no rank can be late by its own host work, and the skew between the
  replicas' devices is not measured. All exposed synchronisation is sync_comm_s; sync_wait_s is
  0 (docs/records.md).
- allreduce_probe: one DDP-bucket-sized buffer (stepparts.bucket_elements) in the gradients'
  dtype, all-reduced across the replicas with ReplicaContext.all_reduce inside strategy.run, the
  devices synchronized before (every replica starts together) and after, after warm-up.
- Delay injection: with faults.SYNC_DELAY_ENV set, the strategy's cross-device ops start every
  batch reduction (the gradients' all-reduce of a step is one) that many seconds after all its
  inputs are ready (cross_device_ops); the compute probe reduces nothing, so compute does not
  carry it. The data delay is tf_data.with_injected_delay.
- graph_flops: the FLOPs of the ops a traced graph runs (TensorFlow's registered per-op
  statistics, the ones tf.compat.v1.profiler sums), for the header's flops_per_image.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import tensorflow as tf

from scalesweep.train.common import faults, stepparts
from scalesweep.train.tf_backend import compat


def replicated(strategy, replica_fn, jit: bool = False):
    """A tf.function running `replica_fn(*args)` on every replica (strategy.run), XLA-compiled
    with `jit`: the shape of Keras' own step function (keras' TensorFlowTrainer._make_function)."""

    def step(*args):
        return strategy.run(replica_fn, args=args)

    return tf.function(step, jit_compile=jit, reduce_retracing=True)


# ---------------------------------------------------------------- compute probe


@contextlib.contextmanager
def frozen_training_state(model):
    """The training step's work without its effect: learning rate 0 (the weights stay), and the
    model's non-trainable variables (batch-norm statistics move in every training forward), the
    optimizer's variables (its step count) and the metrics' (the window's loss and accuracy so
    far) restored afterwards."""
    optimizer = model.optimizer
    variables = [*model.non_trainable_variables, *compat.optimizer_variables(optimizer),
                 *compat.metric_variables(model)]
    saved = [(variable, variable.numpy()) for variable in variables]
    learning_rate = float(optimizer.learning_rate.numpy())
    optimizer.learning_rate = 0.0
    try:
        yield
    finally:
        for variable, value in saved:
            variable.assign(value)
        optimizer.learning_rate = learning_rate


class InterleavedProbe:
    """The probe steps between the timed steps: the training step (Keras' model.train_step:
    forward, loss, backward, the optimizer's update, the loss and metric updates) on every
    replica, each applying its own gradients, without the cross-replica all-reduce
    (compat.unreduced_gradients), at learning rate 0 with the state it moves restored
    (frozen_training_state); seconds of each (probe()), and the seconds after the data wait of
    the step each followed (`paired`)."""

    def __init__(self, model, strategy, jit: bool, synchronize):
        self.model, self.synchronize = model, synchronize
        self.local_step = replicated(strategy, model.train_step, jit)
        self.seconds, self.paired = [], []
        self.traced = False

    def probe(self, batch, step_after: float) -> float:
        """One probe step on `batch` (on the devices), its seconds noted beside `step_after` (the
        seconds after the data wait of the step it follows); the first call is traced
        untimed first. Returns the seconds it all took (what the window leaves out)."""
        started = time.perf_counter()
        with frozen_training_state(self.model), compat.unreduced_gradients(self.model.optimizer):
            if not self.traced:
                self.synchronize(self.local_step(batch))
                self.traced = True
            self.synchronize(batch)
            began = time.perf_counter()
            self.synchronize(self.local_step(batch))
            seconds = time.perf_counter() - began
        self.seconds.append(seconds)
        self.paired.append(step_after)
        return time.perf_counter() - started


# ---------------------------------------------------------------- all-reduce probe


def gradient_bytes(model) -> int:
    """Bytes of the gradients one step all-reduces (a gradient has its variable's dtype)."""
    return sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in model.trainable_variables)


def allreduce_probe(model, strategy, synchronize) -> dict:
    """The all-reduce probe's part of breakdown_probes(): seconds per bucket-sized all-reduce."""
    ranks, grads = strategy.num_replicas_in_sync, gradient_bytes(model)
    probe = {"allreduce": [], "ranks": ranks, "gradient_bytes": grads}
    if ranks < 2 or not grads:
        return probe
    dtype = tf.as_dtype(model.trainable_variables[0].dtype)
    elements = stepparts.bucket_elements(grads, dtype.size)
    buffers = strategy.experimental_distribute_values_from_function(lambda _: tf.ones([elements], dtype))
    reduce = replicated(strategy, lambda buffer: tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, buffer))
    reduced = buffers
    for index in range(stepparts.ALLREDUCE_WARMUP + stepparts.ALLREDUCE_REPEATS):
        synchronize(reduced)
        began = time.perf_counter()
        reduced = reduce(buffers)
        synchronize(reduced)
        if index >= stepparts.ALLREDUCE_WARMUP:
            probe["allreduce"].append(time.perf_counter() - began)
    return probe


# ---------------------------------------------------------------- delay injection


def _spend_sync_delay():
    faults.inject_delay(faults.SYNC_DELAY_ENV)
    return np.float32(0)


class _DelayedBatchReduction:
    """Mixed into a tf.distribute.CrossDeviceOps: every batch reduction (MirroredStrategy
    all-reduces a step's gradients in one) starts faults.SYNC_DELAY_ENV seconds after all its
    inputs are ready. The busy wait is a host op; the reduction's ops depend on it."""

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        inputs = [tensor for value, _ in value_destination_pairs for tensor in getattr(value, "values", (value,))]
        with tf.control_dependencies(inputs), tf.device("/cpu:0"):
            waited = tf.py_function(_spend_sync_delay, [], tf.float32, name="injected_sync_delay")
        with tf.control_dependencies([waited]):
            return super().batch_reduce_implementation(reduce_op, value_destination_pairs, options)


class DelayedReductionToOneDevice(_DelayedBatchReduction, tf.distribute.ReductionToOneDevice):
    """ReductionToOneDevice (CPU replicas), each batch reduction delayed."""


class DelayedNcclAllReduce(_DelayedBatchReduction, tf.distribute.NcclAllReduce):
    """NcclAllReduce (MirroredStrategy's choice on GPUs), each batch reduction delayed."""


def cross_device_ops(cpu_replicas: bool):
    """The cross-device ops of the run's MirroredStrategy: ReductionToOneDevice over CPU replicas
    (NCCL is GPU-only), TensorFlow's own choice (None) on GPUs; their delayed variants when
    faults.SYNC_DELAY_ENV asks for a delay."""
    delayed = faults.injected_delay_s(faults.SYNC_DELAY_ENV) > 0
    if cpu_replicas:
        return DelayedReductionToOneDevice() if delayed else tf.distribute.ReductionToOneDevice()
    return DelayedNcclAllReduce() if delayed else None


def check_sync_delay(jit_compile: bool) -> None:
    """Under XLA, MirroredStrategy all-reduces with its collective ops instead of the cross-device
    ops the injected delay lives in (and XLA cannot compile the host op): refused, not ignored."""
    if jit_compile and faults.injected_delay_s(faults.SYNC_DELAY_ENV):
        raise ValueError(f"{faults.SYNC_DELAY_ENV} delays MirroredStrategy's cross-device ops, which XLA "
                         "(--compile) bypasses: inject the delay without --compile")


# ---------------------------------------------------------------- FLOPs


def executed_ops(graph) -> list:
    """The ops of `graph` its outputs and control outputs (the stateful updates) depend on: what
    the runtime runs. A gradient function builds some results nobody uses (the input gradient
    of the first layer), which the runtime prunes."""
    pending = [tensor.op for tensor in graph.outputs] + list(getattr(graph, "control_outputs", []))
    seen = {}
    while pending:
        op = pending.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        pending.extend(tensor.op for tensor in op.inputs)
        pending.extend(op.control_inputs)
    return list(seen.values())


def graph_flops(graph) -> float:
    """FLOPs of the ops `graph` runs, by TensorFlow's registered statistics (a multiply-add is 2
    FLOPs: Conv2D, its two backward ops and MatMul; elementwise ops 1 per element)."""
    # TensorFlow's private module, imported here: where it moved or went, flops_per_image is None.
    from tensorflow.python.framework import ops as framework_ops

    total = 0
    for op in executed_ops(graph):
        stats = framework_ops.get_stats_for_node_def(graph, op.node_def, "flops")
        total += stats.value or 0
    return float(total)


def flops_per_image(step, element_spec, global_batch: int) -> float | None:
    """FLOPs per trained image of the traced training step `step` (a tf.function of a global
    batch of `element_spec`): forward + backward of every replica; the optimizer's update, a few
    FLOPs per weight per step, is in it too (negligible per image). Traces the step (its first
    call would); None where the graph cannot be counted: provenance must never fail a run."""
    try:
        return graph_flops(step.get_concrete_function(element_spec).graph) / global_batch
    except Exception:  # noqa: BLE001
        return None
