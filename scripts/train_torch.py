"""Train with PyTorch DDP (one process per GPU under torchrun): the PyTorch backend, scalesweep/train/torch_backend/."""

from entry_point import run_module

run_module("scalesweep.train.torch_backend")
