"""PyTorch's side of the step breakdown (scripts/stepparts.py): the probes and the injected delay.

- probe_step: after every stepparts.probe_every()-th timed step of a steady window, one step's
  forward and backward on that step's batch (already on the device) under
  DistributedDataParallel.no_sync() (no gradient all-reduce), timed apart from the steps and
  left out of the window's seconds: compute is measured beside the steps, under the same load.
  It changes nothing that training keeps: its gradients are dropped (the next step sets them to
  None before its backward) and the model's buffers (batch-norm statistics) are put back.
- optimizer_probe: after training, the optimizer's step at learning rate 0 (weights unchanged)
  on the probe's gradients; compute = probe step + optimizer step.
- allreduce_probe: the gradients' all-reduce alone, one DDP-bucket-sized buffer at a time, every
  rank starting together (a barrier), after warm-up.
- SyncJoins + join_hook: DDP's own all-reduce (default_hooks.allreduce_hook) as a comm hook that
  notes when the step's last bucket is handed to it (the rank's backward is done: it joins the
  synchronisation), per step the seconds from there to the step's end (a CUDA event pair on
  GPUs, read after the window). With faults.SYNC_DELAY_ENV set the hook waits that long before
  the all-reduce (after the join: the delay is communication, the breakdown's fault injection).
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


def probe_step(forward_backward, synchronize, ddp, module: torch.nn.Module) -> tuple[float, float]:
    """(seconds of `forward_backward()`, a step's forward and backward on a batch already on the
    device, without gradient synchronisation; seconds it all took, the module's buffers restored
    after it: what the window leaves out)."""
    no_sync = ddp.no_sync if ddp is not None else contextlib.nullcontext
    started = time.perf_counter()
    saved = [buffer.detach().clone() for buffer in module.buffers()]
    synchronize()
    began = time.perf_counter()
    with no_sync():
        forward_backward()
    synchronize()
    seconds = time.perf_counter() - began
    with torch.no_grad():
        for buffer, value in zip(module.buffers(), saved):
            buffer.copy_(value)
    synchronize()
    return seconds, time.perf_counter() - started


def optimizer_probe(optimizer, synchronize, steps: int = stepparts.COMPUTE_PROBE_STEPS) -> list[float]:
    """Seconds of `steps` optimizer steps at learning rate 0 on the gradients there are (one
    untimed first: lazily created state)."""
    durations = []
    with frozen_learning_rate(optimizer):
        for index in range(steps + 1):
            synchronize()
            began = time.perf_counter()
            optimizer.step()
            synchronize()
            if index:
                durations.append(time.perf_counter() - began)
    return durations


class SyncJoins:
    """Per step, this rank's seconds from joining the gradient synchronisation (join(), from the
    comm hook at the step's last bucket) to the step's end (step_ended())."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.joined = None
        self.pending = []  # (joined, ended): perf_counter readings, or CUDA events until read

    def _now(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def join(self) -> None:
        self.joined = self._now()

    def step_ended(self) -> None:
        """A step without a join (no synchronisation: one process) records nothing."""
        if self.joined is not None:
            self.pending.append((self.joined, self._now()))
        self.joined = None

    def take(self) -> list[float]:
        """The seconds of the steps ended since the last take(); on GPUs after the devices were
        synchronized (the window's end)."""
        if self.cuda:
            seconds = [joined.elapsed_time(ended) / 1000.0 for joined, ended in self.pending]
        else:
            seconds = [ended - joined for joined, ended in self.pending]
        self.pending = []
        return seconds


def gather_joins(joins: list, device: torch.device, world_size: int) -> list[list[float]]:
    """Every rank's join seconds of a window (equally many steps on every rank), one all_gather."""
    mine = torch.tensor(joins, dtype=torch.float64, device=device)
    every = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(every, mine)
    return [tensor.tolist() for tensor in every]


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


def join_hook(state, bucket):
    """DDP's default all-reduce of a gradient bucket; at the step's last bucket the rank joins
    (state: (SyncJoins, injected delay in seconds, spent after the join))."""
    joins, delay_s = state
    if bucket.is_last():
        joins.join()
    if delay_s:
        faults.busy_wait(delay_s)
    return default_hooks.allreduce_hook(None, bucket)


def register_join_hook(ddp, device: torch.device) -> SyncJoins | None:
    """The SyncJoins of a DDP model's steps (None without DDP: nothing to synchronise)."""
    if ddp is None:
        return None
    joins = SyncJoins(device)
    ddp.register_comm_hook((joins, faults.injected_delay_s(faults.SYNC_DELAY_ENV)), join_hook)
    return joins
