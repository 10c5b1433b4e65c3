"""The inter-node network probe (rule probe_network): scalesweep/train/torch_backend/network_probe.py."""

from entry_point import run_module

run_module("scalesweep.train.torch_backend.network_probe")
