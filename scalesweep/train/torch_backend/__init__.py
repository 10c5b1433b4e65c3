"""The PyTorch backend (DistributedDataParallel under torchrun): `trainer.py` (the backend of
common/harness.py), `model.py`, `data.py`, `distributed.py` (the DDP world), `facts.py` (the
header's versions and devices), `probes.py` (the step breakdown's probes), `ddp_options.py`,
`flops.py`, `trace.py` (the profiler), and the network probe (`network_probe.py`). `python -m
scalesweep.train.torch_backend` trains (scripts/train_torch.py runs it so, under torchrun). This
file imports nothing."""
