"""A profiler trace of TensorFlow training steps (`--trace-dir`): TensorFlow's profiler
(`tf.profiler.experimental.start`/`stop`, in TensorFlow 2.11 and the pinned release alike) over a
few steady steps, into a TensorBoard log dir: `plugins/profile/<run>/<host>.xplane.pb`, which
TensorBoard's profile plugin (trace viewer, op profile) opens.

One process drives every replica (MirroredStrategy), so one trace holds them all. The harness
calls `step(steps_done)` after each step's end: the profiler starts after the run's first `first`
steps and stops after `steps` more.
"""

from __future__ import annotations

import tensorflow as tf


class TfTracer:
    def __init__(self, out_dir: str, first: int, steps: int):
        self.out_dir, self.first, self.last = out_dir, first, first + steps

    def step(self, steps_done: int) -> None:
        if steps_done == self.first:
            tf.profiler.experimental.start(self.out_dir)
        elif steps_done == self.last:
            tf.profiler.experimental.stop()
