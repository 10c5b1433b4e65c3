"""PyTorch's side of the step breakdown (scripts/stepparts.py): the probes and the injected delay.

- compute_probe: training steps at the run's per-GPU batch under DistributedDataParallel.no_sync()
  (forward, backward and optimizer without the gradient all-reduce), on one batch already on the
  device (no data wait in it), with the learning rate at 0 so the weights do not move and every
  rank's copy stays the same.
- allreduce_probe: the gradients' all-reduce alone, one DDP-bucket-sized buffer at a time, every
  rank starting together (a barrier), after warm-up.
- delayed_allreduce_hook: DDP's own all-reduce after a known delay, registered when
  faults.SYNC_DELAY_ENV is set (the fault-injection test of the breakdown).
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import faults
import stepparts


def gradient_bytes(module: torch.nn.Module) -> int:
    """Bytes of the gradients one step all-reduces (a gradient has its parameter's dtype)."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


@contextlib.contextmanager
def frozen_learning_rate(optimizer: torch.optim.Optimizer):
    """The optimizer's work without its effect: lr 0 leaves SGD's and AdamW's weights as they are."""
    saved = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    try:
        yield
    finally:
        for group, lr in zip(optimizer.param_groups, saved):
            group["lr"] = lr


def compute_probe(step, synchronize, ddp, optimizer, steps: int = stepparts.COMPUTE_PROBE_STEPS) -> list[float]:
    """Seconds of `steps` calls of `step()` (a full training step on a batch already on the device)
    without gradient synchronisation; one call first, untimed (no_sync may change the graph)."""
    no_sync = ddp.no_sync if ddp is not None else contextlib.nullcontext
    durations = []
    with frozen_learning_rate(optimizer), no_sync():
        for index in range(steps + 1):
            synchronize()
            began = time.perf_counter()
            step()
            synchronize()
            if index:
                durations.append(time.perf_counter() - began)
    return durations


def allreduce_probe(module: torch.nn.Module, device: torch.device, world_size: int) -> dict:
    """The all-reduce probe's part of breakdown_probes(): seconds per bucket-sized all-reduce."""
    grads = gradient_bytes(module)
    probe = {"allreduce": [], "ranks": world_size, "gradient_bytes": grads}
    if world_size < 2 or not grads:
        return probe
    element = next(p for p in module.parameters() if p.requires_grad).element_size()
    buffer = torch.ones(stepparts.bucket_elements(grads, element), device=device,
                        dtype=next(module.parameters()).dtype)
    for index in range(stepparts.ALLREDUCE_WARMUP + stepparts.ALLREDUCE_REPEATS):
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        dist.all_reduce(buffer)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index >= stepparts.ALLREDUCE_WARMUP:
            probe["allreduce"].append(time.perf_counter() - began)
    return probe


def delayed_allreduce_hook(delay_s: float, bucket):
    """DDP's default all-reduce of a gradient bucket, after `delay_s` of busy host time."""
    faults.busy_wait(delay_s)
    return default_hooks.allreduce_hook(None, bucket)


def register_injected_delay(ddp) -> None:
    """With faults.SYNC_DELAY_ENV set, every gradient bucket's all-reduce starts that much later."""
    delay = faults.injected_delay_s(faults.SYNC_DELAY_ENV)
    if delay and ddp is not None:
        ddp.register_comm_hook(delay, delayed_allreduce_hook)
