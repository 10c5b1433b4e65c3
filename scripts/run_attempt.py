"""One attempt of a training job, the train rules' shell: scalesweep/train/attempt.py."""

from entry_point import run_module

run_module("scalesweep.train.attempt")
