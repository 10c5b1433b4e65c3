"""A profiler trace of PyTorch training steps (`--trace-dir`): torch.profiler over a few steady
steps, exported as Kineto's Chrome-trace JSON, one file per traced rank
(`rank<R>.pt.trace.json`), which Perfetto, TensorBoard and HTA read.

The harness calls `step(steps_done)` after each step's end (the step clock's `after_end`): the
profiler starts after the run's first `first` steps and stops after `steps` more, so start-up
(allocations, the loader's first fill, DDP's first bucket rebuild) stays out. While it runs, the
model's forward is marked `forward` (a record_function entered and left by module hooks, added
only to a traced run: a measured run's steps have none); the backward shows as autograd's own
`autograd::engine::evaluate_function: ...Backward` events, the gradient all-reduce as the c10d
and backend events (`gloo:all_reduce`, `nccl:all_reduce`). With a GPU, CUDA activities (kernels,
memcpy) are traced too.
"""

from __future__ import annotations

import os

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def trace_file(out_dir: str, rank: int) -> str:
    return os.path.join(out_dir, f"rank{rank}.pt.trace.json")


class ForwardMarks:
    """`forward` around the model's forward pass, through module hooks (removed by `remove`)."""

    def __init__(self, module: torch.nn.Module):
        self.open = []
        self.handles = [module.register_forward_pre_hook(self._enter),
                        module.register_forward_hook(self._leave)]

    def _enter(self, module, inputs):
        mark = record_function("forward")
        mark.__enter__()
        self.open.append(mark)

    def _leave(self, module, inputs, output):
        if self.open:
            self.open.pop().__exit__(None, None, None)

    def remove(self):
        for handle in self.handles:
            handle.remove()


class TorchTracer:
    """torch.profiler over steps first+1 .. first+steps of the attempt, on this rank."""

    def __init__(self, module: torch.nn.Module, device: torch.device, out_dir: str, rank: int, first: int,
                 steps: int):
        self.module, self.out_dir, self.rank = module, out_dir, rank
        self.first, self.last = first, first + steps
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        self.profiler = profile(activities=activities, record_shapes=True, with_stack=False)
        self.marks = None

    def step(self, steps_done: int) -> None:
        if steps_done == self.first:
            self.marks = ForwardMarks(self.module)
            self.profiler.start()
        elif self.first < steps_done <= self.last:
            self.profiler.step()
            if steps_done == self.last:
                self.stop()

    def stop(self) -> None:
        self.profiler.stop()
        self.marks.remove()
        os.makedirs(self.out_dir, exist_ok=True)
        self.profiler.export_chrome_trace(trace_file(self.out_dir, self.rank))
