"""The TensorFlow backend (tf.distribute.MirroredStrategy, Keras 2 and 3): `trainer.py` (the
backend of common/harness.py), `model.py`, `data.py`, `probes.py` (the step breakdown's probes,
FLOPs), `compat.py` (Keras 2 / 3 differences), `trace.py` (the profiler). `python -m
scalesweep.train.tf_backend` trains (scripts/train_tf.py runs it so). This file imports nothing."""
