"""nccl-tests beside the network probe (rule probe_network): scalesweep/train/nccl_tests.py."""

from entry_point import run_module

run_module("scalesweep.train.nccl_tests")
