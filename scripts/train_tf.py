"""Train with TensorFlow (MirroredStrategy): the TensorFlow backend, scalesweep/train/tf_backend/."""

from entry_point import run_module

run_module("scalesweep.train.tf_backend")
