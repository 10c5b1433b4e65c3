"""Write a synthetic image-folder dataset (the data rule): scalesweep/train/datasets/make_imagefolder.py."""

from entry_point import run_module

run_module("scalesweep.train.datasets.make_imagefolder")
