"""PyTorch's side of the step breakdown (scalesweep/train/common/stepparts.py): the probes and the
injected delay.

- probe_step: with 2 or more processes, after every stepparts.probe_every()-th timed step of a
  steady window, one more training step on that step's batch (already on the device: the data
  wait is measured apart) doing everything a step does after its data wait (forward, zero_grad,
  the scaled backward, the scaler's and the optimizer's step, the loss and accuracy totals)
  under DistributedDataParallel.no_sync() (no gradient all-reduce), timed apart from the steps
  and left out of the window's seconds: compute is measured beside the steps, under the same
  load. It changes nothing that training keeps: the learning rate is 0 (SGD's and AdamW's
  weights stay as they are), the optimizer's state (momentum, moments, step count;
  OptimizerSnapshot), the grad scaler's and the model's buffers (batch-norm statistics) are put
  back, its gradients are dropped by the next step's zero_grad.
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

from scalesweep.train.common import faults, stepparts


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


class OptimizerSnapshot:
    """The optimizer's state as it was before a probe step's optimizer step (take(), its step
    pre-hook: after the backward, when the activations are freed, so the copy adds no peak
    memory of its own in a step whose activations fit), put back by restore(). `seconds`: what
    taking it cost, device-synchronized, for the probe to leave out of its step."""

    def __init__(self, optimizer: torch.optim.Optimizer, synchronize):
        self.optimizer, self.synchronize = optimizer, synchronize
        self.saved, self.seconds = None, 0.0

    def take(self, *_hook_args) -> None:
        self.synchronize()
        began = time.perf_counter()
        self.saved = {param: {key: value.clone() if torch.is_tensor(value) else value for key, value in state.items()}
                      for param, state in self.optimizer.state.items()}
        self.synchronize()
        self.seconds += time.perf_counter() - began

    def restore(self) -> None:
        """State the probe's step created goes; state it changed is copied back in place."""
        if self.saved is None:  # the step was skipped (fp16 gradients not finite): nothing moved
            return
        with torch.no_grad():
            for param in list(self.optimizer.state):
                if param not in self.saved:
                    del self.optimizer.state[param]
                    continue
                state = self.optimizer.state[param]
                for key, value in self.saved[param].items():
                    if torch.is_tensor(value) and torch.is_tensor(state.get(key)):
                        state[key].copy_(value)
                    else:
                        state[key] = value


def probe_step(train_step, synchronize, ddp, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
               scaler) -> tuple[float, float]:
    """(seconds of `train_step()`, a training step's work on a batch already on the device, without
    gradient synchronisation and without effect (the module's docstring); seconds it all took,
    the state put back: what the window leaves out)."""
    no_sync = ddp.no_sync if ddp is not None else contextlib.nullcontext
    started = time.perf_counter()
    buffers = [buffer.detach().clone() for buffer in module.buffers()]
    scaler_state = scaler.state_dict()  # {} when the scaler is off (no fp16)
    snapshot = OptimizerSnapshot(optimizer, synchronize)
    hook = optimizer.register_step_pre_hook(snapshot.take)
    try:
        with frozen_learning_rate(optimizer), no_sync():
            synchronize()
            began = time.perf_counter()
            train_step()
            synchronize()
            seconds = time.perf_counter() - began - snapshot.seconds
    finally:
        hook.remove()
    snapshot.restore()
    if scaler_state:
        scaler.load_state_dict(scaler_state)
    with torch.no_grad():
        for buffer, value in zip(module.buffers(), buffers):
            buffer.copy_(value)
    synchronize()
    return seconds, time.perf_counter() - started


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
    probe["allreduce"] = timed_allreduces(buffer, device, stepparts.ALLREDUCE_WARMUP, stepparts.ALLREDUCE_REPEATS)
    return probe


def timed_allreduces(buffer, device: torch.device, warmup: int, repeats: int) -> list:
    """Seconds of `repeats` all-reduces of `buffer` after `warmup` untimed ones, each started
    together on every rank (a barrier) and timed to its end on the device. `buffer`: a tensor,
    or a list of them all-reduced one after another per round (a step's buckets, as DDP sends
    them)."""
    pieces = buffer if isinstance(buffer, (list, tuple)) else [buffer]
    seconds = []
    for index in range(warmup + repeats):
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        for piece in pieces:
            dist.all_reduce(piece)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index >= warmup:
            seconds.append(time.perf_counter() - began)
    return seconds


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
