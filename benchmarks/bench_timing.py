"""What timing every step costs: the PyTorch trainer's throughput with its step clock against
without one (issue 16).

Builds one PyTorch trainer (scalesweep/train/torch_backend/trainer.py's Trainer) (same model, batch
and synthetic images for every side) and runs its step loop (Trainer._run_steps) in windows of
--steps steps, one window per side per round, the sides' order rotating from round to round so each
round pairs them under the same conditions. A window's throughput is images / seconds between two
device waits around it. Sides:

- `none`: no instrumentation (a clock that records nothing); on CUDA the batches still come
  through the trainer's prefetcher, as in a timed run.
- `clock`: the trainer's own clock: host timers on the CPU (stepclock.StepClock), CUDA events read
  once per window on a GPU (stepclock.EventStepClock).
- `heartbeat`: the trainer's clock with its heartbeat (scalesweep/train/common/heartbeat.py) at
  the rule a run uses, the window taken as one epoch: a line every tenth of it (issue 29: what the
  progress lines cost).
- `synced` (CUDA only): the clock before issue 16, a device wait at each step's begin, data ready
  and end, and the batch copied on the compute stream (no prefetch).

Prints `name value unit` lines: per side the median images/s (min-max over --rounds), then
`timing_overhead_pct` = 100 x (1 - clock / none), median and min-max of the per-round ratios
(both sides of each ratio from the same round), `timing_overhead_heartbeat_pct` and on CUDA
`timing_overhead_synced_pct` alike,
and the event clock's median step time and data wait (a sanity check of the readings).

    .venv/bin/python benchmarks/bench_timing.py                       # CPU: vit_tiny, 32 px
    python benchmarks/bench_timing.py --gpus 1 --model resnet50 --resolution 224 --batch 256 \\
        --precision bf16 --channels-last --num-workers 8 --steps 60      # one GPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scalesweep.train.common import heartbeat, measure, stepclock  # noqa: E402
import torch  # noqa: E402
from scalesweep.train.torch_backend import trainer as train_torch  # noqa: E402
from scalesweep.train.torch_backend.data import TrainData  # noqa: E402
from scalesweep.train.torch_backend.distributed import Console, start_process, synchronize, teardown  # noqa: E402


class UntimedClock:
    """A step clock that records nothing but the count of steps (the `none` side)."""

    def __init__(self):
        self.finished = 0

    def begin(self) -> None:
        pass

    def data_ready(self) -> None:
        pass

    def host_waited(self, seconds: float) -> None:
        pass

    def end(self) -> None:
        self.finished += 1

    @property
    def durations(self) -> list:
        return [0.0] * self.finished  # a fixed window ends on the count alone


class SyntheticImages(torch.utils.data.Dataset):
    """`count` images of one random tensor each, labels cycling over `classes` classes: the
    loader's work is the collation (and pinning on CUDA), no decoding."""

    def __init__(self, count: int, resolution: int, classes: int):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randn(16, 3, resolution, resolution, generator=generator)
        self.count, self.classes = count, classes

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        return self.images[index % len(self.images)], index % self.classes


def overhead_pct(timed: float, untimed: float) -> float:
    """Throughput lost to the instrumentation, in % of the uninstrumented throughput."""
    return 100.0 * (1.0 - timed / untimed)


def figure(name: str, values: list, unit: str, note: str = "", digits: int = 2) -> str:
    """`name median unit (min .., max ..; note)`."""
    return (f"{name} {statistics.median(values):.{digits}f} {unit} "
            f"(min {min(values):.{digits}f}, max {max(values):.{digits}f}{'; ' + note if note else ''})")


class Sides:
    """The sides of one trainer, each a (clock, batches) maker."""

    def __init__(self, trainer: train_torch.Trainer, steps: int):
        self.trainer, self.steps = trainer, steps
        self.stream = iter(trainer.loader)  # one endless host stream shared by every side
        self.cuda = trainer.device.type == "cuda"
        self.device_stream = trainer._on_device(self.stream)

    def clock(self, side: str):
        device = self.trainer.device
        if side == "none":
            return UntimedClock()
        if side == "synced":
            return stepclock.StepClock(lambda: torch.cuda.synchronize(device), at_begin=True)
        clock = (stepclock.EventStepClock(lambda: torch.cuda.Event(enable_timing=True)) if self.cuda
                 else stepclock.StepClock())
        if side == "heartbeat":
            steps = self.steps
            clock.after_end = heartbeat.Heartbeat(self.trainer.console.info, steps, steps,
                                                  self.trainer.global_batch).tick
        return clock

    def batches(self, side: str):
        # The synced side is the old loop: host batches, copied on the compute stream in the step.
        return self.stream if side == "synced" else self.device_stream

    def window(self, side: str, steps: int) -> tuple[float, object]:
        """(images/s of `steps` steps of `side`, its clock)."""
        trainer = self.trainer
        trainer.clock = self.clock(side)
        synchronize(trainer.device)
        started = time.perf_counter()
        trainer._run_steps(self.batches(side), measure.TimedWindow(steps))
        synchronize(trainer.device)
        seconds = time.perf_counter() - started
        return steps * trainer.global_batch / seconds, trainer.clock


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--gpus", type=int, default=0, help="0: the CPU; 1: one GPU")
    add("--model", default="vit_tiny")
    add("--resolution", type=int, default=32)
    add("--batch", type=int, default=32)
    add("--precision", default="fp32")
    add("--channels-last", action="store_true")
    add("--num-workers", type=int, default=0)
    add("--steps", type=int, default=100, help="timed steps per window")
    add("--warmup-steps", type=int, default=10)
    add("--rounds", type=int, default=3)
    options = parser.parse_args(argv)

    argv_trainer = ["--model", options.model, "--data", "synthetic", "--gpus", str(options.gpus),
                    "--resolution", str(options.resolution), "--per-gpu-batch", str(options.batch),
                    "--precision", options.precision, "--num-workers", str(options.num_workers),
                    "--protocol", "steps"] + (["--channels-last"] if options.channels_last else [])
    args = train_torch.parse_args(argv_trainer)
    console = Console(0)
    world, device = start_process(args.gpus, console)
    if device.type == "cpu":
        # One thread: on a CPU shared with other work, threads that wait for each other make the
        # windows' throughput swing by 10x and more, far beyond what the clock could cost.
        torch.set_num_threads(1)
    images = (options.steps * (options.rounds * 4 + 1) + options.warmup_steps) * options.batch
    data = TrainData(SyntheticImages(images, options.resolution, 10), [str(n) for n in range(10)])
    try:
        trainer = train_torch.Trainer(args, world, device, console, data, options.batch, endless=True)
        sides = Sides(trainer, options.steps)
        names = ["none", "clock", "heartbeat"] + (["synced"] if sides.cuda else [])
        sides.window("clock", options.warmup_steps)  # allocations, cuDNN's choices, loader start
        trainer.guarding_oom = False  # the steady loop, as after a run's first epoch record
        throughput = {name: [] for name in names}
        steps_ms, waits_ms = [], []
        for round_number in range(options.rounds):
            order = names[round_number % len(names):] + names[:round_number % len(names)]
            for name in order:
                images_per_s, clock = sides.window(name, options.steps)
                throughput[name].append(images_per_s)
                if name == "clock":
                    steps_ms.append(1000 * statistics.median(clock.durations))
                    waits_ms.append(1000 * statistics.median(clock.data_waits))
    finally:
        teardown()
    where = f"{options.model}, batch {options.batch}, {options.resolution} px, {options.precision}, " \
            f"{'GPU ' + torch.cuda.get_device_name(device) if sides.cuda else 'CPU'}"
    for name in names:
        print(figure(f"timing_throughput_{name}", throughput[name], "img/s", where, 1))
    for name, key in (("clock", "timing_overhead_pct"), ("heartbeat", "timing_overhead_heartbeat_pct"),
                      ("synced", "timing_overhead_synced_pct")):
        if name in throughput:
            ratios = [overhead_pct(timed, untimed) for timed, untimed in zip(throughput[name], throughput["none"])]
            print(figure(key, ratios, "%", f"{options.rounds} paired rounds"))
    print(figure("timing_step_median_ms", steps_ms, "ms", "the clock's step times", 3))
    print(figure("timing_data_wait_median_ms", waits_ms, "ms", "the clock's data waits", 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
