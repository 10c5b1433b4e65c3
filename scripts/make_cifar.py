"""Write a synthetic CIFAR-10 (the data rule): scalesweep/train/datasets/make_cifar.py."""

from entry_point import run_module

run_module("scalesweep.train.datasets.make_cifar")
