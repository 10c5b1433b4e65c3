"""PyTorch DDP image-classification trainer of the scaling sweep (reference experiment B).

Launched by torchrun, one process per GPU (options after the script path belong to the script):

    torchrun --standalone --nproc-per-node 2 scripts/train_torch.py --model vit_tiny \
        --data DATASET --gpus 2 --resolution 32 --epochs 3 --per-gpu-batch 16 [--protocol steps]

Without torchrun: one process, no process group (the `--gpus 0` CPU baseline). Without CUDA,
gloo processes on the CPU stand in for GPUs. Rank 0 prints the reference's human log lines and
the `:::SCALESWEEP` records of docs/records.md.

The PyTorch backend of scalesweep/train/common/harness.py (docs/trainers.md): the harness runs the
life cycle, the shared options, the out-of-memory policy, the maximum-batch search and the
protocols; this file supplies the data, the model, the training step and provenance (beside it in
scalesweep/train/torch_backend/: distributed.py, the DDP world; probes.py, the step breakdown's
probes). A step is timed from the fetch of its
batch to its device-synchronized end.

Out of memory under DDP: until the run's first epoch record (the steps in which the halve
policy may still retry, whatever the policy), every step runs in three parts: the batch's copy to
the device, the forward pass, and backward with the optimizer step. After each part the ranks
all-reduce an out-of-memory flag, so all stop together and take the same way out (retry, or
status oom written by rank 0), whichever rank ran out. The three small all-reduces (each a host
synchronization) are paid in epoch 1 or the warm-up window only, both outside the steady state.
A rank-local out-of-memory error inside backward's gradient all-reduce, or after the first epoch
record, leaves the other ranks waiting in a collective the failed rank never joins: that run ends
when the process group's timeout or torchrun's teardown ends it (status failed, or a log without
a summary; a rerun repeats it). Identical ranks run out at the same allocation, so in practice the
agreement covers it.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

# What a run costs starts here, before the framework import (seconds of a job's time, too).
STARTED = time.perf_counter()
from typing import Callable, Iterator  # noqa: E402

# OpenMP threads that spin while they wait make a CPU run 10-30x slower as soon as anything else
# wants the same cores (measured: a laptop's 2 cores shared with data loader workers or another
# rank). Passive waiting cost nothing measurable on an idle CPU; GPU runs, whose heavy work runs on
# the device, should not notice. It must be set before torch loads its OpenMP runtime; an explicit
# setting in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import Subset  # noqa: E402

from scalesweep.contract import frameworks  # noqa: E402
from scalesweep.train.common import faults, harness, measure, runlog, stepclock, stepparts, trainer_args  # noqa: E402
from scalesweep.train.torch_backend import ddp_options, flops, probes  # noqa: E402
from scalesweep.train.torch_backend.data import (  # noqa: E402
    DevicePrefetcher, RepeatingSampler, TrainData, load_split, load_train_data, make_loader, make_train_sampler,
    steps_per_epoch,
)
from scalesweep.train.torch_backend.distributed import (  # noqa: E402
    OUT_OF_MEMORY, Console, World, agree_on_oom, all_reduce_sum, energy_slots, is_primary, rank_hint, start_process,
    synchronize, teardown,
)
from scalesweep.train.torch_backend.facts import run_facts  # noqa: E402
from scalesweep.train.torch_backend.model import (  # noqa: E402
    MODELS, OPTIMIZERS, autocast_dtype, build_model, build_optimizer, count_parameters,
)

FRAMEWORK = frameworks.get("pytorch")


# ---------------------------------------------------------------- failures and memory


def inject_failure(mode: str | None, setting: str | None = None) -> None:
    """Raise what the SCALESWEEP_FAIL_INJECT hook resolved to ("oom", "crash" or None); `setting`
    is the variable's value ("oom-once", "oom-above:64"), for the message."""
    source = f"{faults.FAIL_INJECT_ENV}={setting or mode}"
    if mode == "oom":
        raise torch.OutOfMemoryError(f"injected out-of-memory error ({source})")
    if mode == "crash":
        raise RuntimeError(f"injected crash ({source})")


def device_memory_gb(device: torch.device) -> float | None:
    """Peak device memory the caching allocator reserved since the attempt began, in GiB."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_reserved(device) / 2**30, 3)


def release_memory(device: torch.device, compiled: bool) -> None:
    """Give a failed attempt's or a finished probe's memory back before the next one."""
    # Model, optimizer, DDP reducer and loader workers hang together in reference cycles.
    gc.collect()
    if compiled:
        torch._dynamo.reset()  # compiled graphs hold on to the old model's parameters
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- training


class Trainer:
    """One attempt: the loader and the model at one per-GPU batch (harness.Backend.build's
    attempt). fit_epochs() and fit_steps() run the protocols, probe() one probe of the
    maximum-batch search, evaluate() validates."""

    header_updates: dict = {}

    def __init__(self, args: argparse.Namespace, world: World, device: torch.device, console: Console,
                 data: TrainData, per_gpu_batch: int, attempt: int = 1, endless: bool = False):
        self.args, self.world, self.device, self.console = args, world, device, console
        self.classes = data.classes
        self.per_gpu_batch = per_gpu_batch
        # "oom-above:N" depends on the per-GPU batch, "oom-once" on the attempt (1-based).
        self.inject_setting = faults.fail_inject_mode()
        self.injected = faults.injected_failure(self.inject_setting, per_gpu_batch, attempt)
        self.memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.dtype = autocast_dtype(args.precision)
        self.global_batch = per_gpu_batch * world.world_size
        self.lr = harness.scaled_learning_rate(args.base_lr, world.world_size)
        # Steps are timed per rank, with no barrier (that would serialize the ranks each step);
        # DDP's gradient all-reduce already makes a step wait for the slowest rank. On CUDA by
        # events on the stream, read once per window: a wait per step would keep the next
        # batch's copy from overlapping this step's compute (docs/metrics.md).
        cuda = device.type == "cuda"
        self.clock = (stepclock.EventStepClock(lambda: torch.cuda.Event(enable_timing=True)) if cuda
                      else stepclock.StepClock())
        # Until the run's first epoch record every step agrees on out-of-memory across the ranks
        # (the module's docstring says why, and what it costs).
        self.guarding_oom = True
        # The step breakdown's measurements beside the timed steps (probes.py).
        self.probe_seconds, self.probe_pairs, self.interleaved_s, self.sync_waits = [], [], 0.0, []
        self.steady_steps = 0  # of every steady window so far: the probe steps' count runs across them
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)  # the summary reports the attempt used
        self._build_data(data.train_set, endless)
        self._build_model()

    def _build_data(self, train_set, endless: bool) -> None:
        """The epochs protocol's loader runs epoch by epoch; the endless one (steps protocol,
        probes) runs one iterator across passes."""
        self.train_set = train_set
        self.steps = steps_per_epoch(len(train_set), self.world.world_size, self.per_gpu_batch)
        if self.steps == 0 and not self.args.find_max_batch:
            raise ValueError(
                f"{len(train_set)} training images in {self.args.data} give no full step of "
                f"{self.per_gpu_batch} images on each of {self.world.world_size} processes: "
                "lower --per-gpu-batch or use more images"
            )
        self.sampler = make_train_sampler(train_set, self.world, self.args.seed)
        sampler = RepeatingSampler(self.sampler) if endless else self.sampler
        self.loader = make_loader(
            train_set, self.per_gpu_batch, sampler, self.args.num_workers, self.device, train=True
        )

    def _build_model(self) -> None:
        # Same seed on every rank; DDP also broadcasts rank 0's weights when it wraps the model.
        torch.manual_seed(self.args.seed)
        model = build_model(self.args.model, len(self.classes), self.args.resolution)
        # Agreed before DDP's constructor: its broadcast would wait for a rank that failed here.
        self.module = agree_on_oom(
            lambda: model.to(self.device, memory_format=self.memory_format), self.device
        )
        self.num_parameters = count_parameters(self.module)
        self.ddp = None
        wrapped = self.module
        if self.world.distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = self.ddp = DistributedDataParallel(self.module, device_ids=device_ids,
                                                         **ddp_options.asked(self.args))
            self.header_updates = ddp_options.built_with(self.ddp)
        self.joins = probes.register_join_hook(self.ddp, self.device)
        self.model = torch.compile(wrapped) if self.args.compile else wrapped
        self.optimizer = build_optimizer(self.args.optimizer, self.model.parameters(), self.lr)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.args.precision == "fp16")
        self.criterion = nn.CrossEntropyLoss()

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None)

    def _to_device(self, images: torch.Tensor, labels: torch.Tensor):
        images = images.to(self.device, non_blocking=True, memory_format=self.memory_format)
        return images, labels.to(self.device, non_blocking=True)

    def _forward(self, images: torch.Tensor, labels: torch.Tensor):
        """(logits, loss) of one batch already on the device."""
        if self.clock.finished == 0:
            inject_failure(self.injected, self.inject_setting)
        with self._autocast():
            logits = self.model(images)
            loss = self.criterion(logits, labels)
        return logits, loss

    def _update(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def _train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns [loss sum, correct, images] of the batch, still on device."""
        if self.guarding_oom:
            # Three agreed parts: DDP's forward begins with a broadcast of the model's buffers, its
            # backward all-reduces gradients; a rank out of memory in the part before must not
            # leave the others waiting there.
            images, labels = agree_on_oom(lambda: self._to_device(images, labels), self.device)
            self.clock.data_ready()
            logits, loss = agree_on_oom(lambda: self._forward(images, labels), self.device)
            agree_on_oom(lambda: self._update(loss), self.device)
            totals = self._totals(logits, loss, labels)
        else:
            images, labels = self._to_device(images, labels)
            self.clock.data_ready()
            # A slowed rank (fault injection): the others wait for it in the all-reduce.
            faults.inject_rank_delay(self.world.rank)
            totals = self._compute(images, labels)
        self.batch = (images, labels)  # the interleaved probe step's batch
        return totals

    def _compute(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """A step's work after its data wait (the interleaved probe step repeats it): forward,
        update, the [loss sum, correct, images] totals."""
        logits, loss = self._forward(images, labels)
        self._update(loss)
        return self._totals(logits, loss, labels)

    def _totals(self, logits, loss, labels) -> torch.Tensor:
        correct = (logits.argmax(dim=1) == labels).sum()
        count = labels.new_tensor(labels.numel())
        return torch.stack([loss.detach().double() * labels.numel(), correct.double(), count.double()])

    def _on_device(self, batches: Iterator) -> Iterator:
        """`batches` as the steps take them: on CUDA copied one batch ahead on a stream of their
        own (torch_data.DevicePrefetcher); on the CPU as the loader gives them."""
        if self.device.type != "cuda":
            return batches
        return DevicePrefetcher(batches, self._to_device, self.device)

    def _next_batch(self, batches: Iterator):
        if not isinstance(batches, DevicePrefetcher):
            return next(batches)
        waited = time.perf_counter()
        # The prefetcher copies the next batch here: the first agreed part of the step.
        batch = agree_on_oom(lambda: next(batches), self.device) if self.guarding_oom else next(batches)
        self.clock.host_waited(time.perf_counter() - waited)
        return batch

    def _run_steps(self, batches: Iterator, window: measure.TimedWindow, probe_every: int = 0) -> tuple:
        """Timed steps until `window` is done, each from the fetch of its batch to its end on the
        device; ([loss sum, correct, images] over them, on the device; seconds of the probe steps
        between them: after every `probe_every`-th steady step, none with 0)."""
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        first_step = self.clock.finished
        probed = 0.0
        while not self._window_done(window, first_step):
            self.clock.begin()
            images, labels = self._next_batch(batches)
            totals += self._train_step(images, labels)
            self.clock.end()
            if self.joins is not None:
                self.joins.step_ended()
            self.steady_steps += bool(probe_every)
            if probe_every and stepparts.is_probe_step(self.steady_steps - 1, probe_every):
                seconds, spent = probes.probe_step(lambda: self._compute(*self.batch),
                                                   lambda: synchronize(self.device), self.ddp, self.module,
                                                   self.optimizer, self.scaler)
                self.probe_seconds.append(seconds)
                self.probe_pairs.append(self.clock.durations[-1] - self.clock.data_waits[-1])
                probed += spent
        return totals, probed

    def _window_done(self, window: measure.TimedWindow, first_step: int) -> bool:
        """Whether every rank's window is done. An adaptive window is judged on each rank's own
        steps, so the ranks agree (all-reduce) or one would wait forever in the next all-reduce;
        a fixed one ends at the same step everywhere without a collective. The step times are
        read only where the window may end (an event clock waits for the device to read them)."""
        if not window.decides_at(self.clock.finished - first_step):
            return False
        done = window.done(self.clock.durations[first_step:])
        if not window.auto or not self.world.distributed:
            return done
        flags = all_reduce_sum(torch.tensor([float(done)], dtype=torch.float64, device=self.device))
        return int(flags.item()) == self.world.world_size

    def _window(self, meter: harness.WindowMeter, number: int, window: measure.TimedWindow,
                open_batches: Callable[[], Iterator], phase=None, probe_every: int = 0) -> None:
        """The steps `window` takes, recorded by `meter`. Its seconds run between two barriers
        after the device work, so rank 0's time covers every rank. A steady window (one the
        summary's statistics are over: `probe_every` > 0) carries the breakdown's probe steps
        and join times (a one-process run has neither)."""
        steady = probe_every > 0
        self.model.train()
        synchronize(self.device)
        meter.start(time.perf_counter())
        totals, probed = self._run_steps(open_batches(), window, probe_every)
        synchronize(self.device)
        ended = time.perf_counter()
        own, _ = meter.energy_used()  # this rank's GPU energy, read before any collective
        self.interleaved_s += probed
        if self.joins is not None:
            joins = self.joins.take()
            if steady:
                every = probes.gather_joins(joins, self.device, self.world.world_size)
                waits = stepparts.own_waits(every, self.world.rank)
                self.sync_waits += measure.timed_durations(waits, meter.first_step, meter.warmup_steps)
        # Loss, accuracy and every rank's energy (its own slot) in the one reduction after the clock.
        reduced = all_reduce_sum(torch.cat([totals, energy_slots(own, self.world, self.device)])).tolist()
        (loss_sum, correct, count), energy_by_rank = reduced[:3], reduced[3:]
        meter.finish(number, loss_sum / count, correct / count, phase=phase, window=window, ended=ended,
                     energy_by_rank=energy_by_rank, excluded_s=probed)
        # The run is now committed to this batch: no retry, so no agreement is needed any more.
        self.guarding_oom = False

    def epoch_batches(self, epoch: int):
        """The epoch's batches. set_epoch first, or every epoch repeats the first one's order
        (the reference forgot it)."""
        self.sampler.set_epoch(epoch)
        return iter(self.loader)

    def fit_epochs(self, meter: harness.WindowMeter, epochs: int) -> None:
        """The epochs protocol: one epoch record per epoch."""
        every = stepparts.probe_every(self.steps * (epochs - runlog.FIRST_STEADY_EPOCH + 1), self.world.world_size)
        for epoch in range(1, epochs + 1):
            self.console.info(f"[EPOCH: {epoch}] Starting training loop...")
            self._window(meter, epoch, measure.TimedWindow(self.steps),
                         lambda: self._on_device(self.epoch_batches(epoch)),
                         probe_every=every if epoch >= runlog.FIRST_STEADY_EPOCH else 0)

    def fit_steps(self, meter: harness.WindowMeter, windows: list) -> None:
        """The steps protocol's windows from one loader iterator (no pipeline restart between or
        inside them)."""
        stream = self._on_device(iter(self.loader))
        for number, phase, window in windows:
            every = stepparts.probe_every(None if window.auto else window.max_steps, self.world.world_size)
            self._window(meter, number, window, lambda: stream, phase, every if phase == "timed" else 0)

    def breakdown_probes(self) -> dict:
        """The step breakdown's measurements (probes.py): the probe steps between
        the timed steps, the join waits, the all-reduce probe."""
        if not self.probe_seconds:  # no steady window: nothing to break down
            return {"compute": [], "allreduce": [], "ranks": self.world.world_size, "gradient_bytes": 0}
        return {"compute": list(self.probe_seconds), "compute_paired": list(self.probe_pairs),
                "interleaved_s": self.interleaved_s, "sync_waits": self.sync_waits,
                **probes.allreduce_probe(self.module, self.device, self.world.world_size)}

    def probe(self, steps: int) -> None:
        """`steps` training steps, agreed on out-of-memory: torch.OutOfMemoryError on every rank
        when any rank ran out."""
        self.model.train()
        self._run_steps(self._on_device(iter(self.loader)), measure.TimedWindow(steps))
        synchronize(self.device)

    def evaluate(self, epoch: int) -> dict:
        """Accuracy on the val split, each rank on its own interleaved shard, without padding.

        The unwrapped module runs it: no DDP collectives, so shards of unequal length cannot hang.
        """
        val_set = load_split(self.args.data, "val", self.args.resolution)
        if val_set.classes != self.classes:
            raise ValueError(f"{self.args.data}: val classes differ from train classes")
        shard = Subset(val_set, range(self.world.rank, len(val_set), self.world.world_size))
        loader = make_loader(shard, self.args.eval_batch_size, None, self.args.num_workers, self.device, train=False)
        self.module.eval()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        synchronize(self.device)
        start = time.perf_counter()
        with torch.inference_mode(), self._autocast():
            for images, labels in loader:
                images, labels = self._to_device(images, labels)
                logits = self.module(images)
                loss = nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
                correct = (logits.argmax(dim=1) == labels).sum()
                totals += torch.stack([loss.double(), correct.double(), totals.new_tensor(labels.numel())])
        synchronize(self.device)
        seconds = time.perf_counter() - start
        loss_sum, correct, count = all_reduce_sum(totals).tolist()
        return runlog.eval_record(epoch, int(count), seconds, loss_sum / count, correct / count)


# ---------------------------------------------------------------- records


def own_header_keys(args: argparse.Namespace, world: World, device: torch.device, facts: dict) -> dict:
    """The header keys only this backend knows (harness.header_record writes the rest)."""
    return {
        "device_kind": "gpu" if device.type == "cuda" else "cpu",
        "nodes": args.nodes or max(1, world.world_size // world.local_world_size),
        "channels_last": args.channels_last,
        "num_workers": args.num_workers,
        **ddp_options.asked(args),
        **facts,
    }


def announce(console: Console, args: argparse.Namespace, trainer: Trainer) -> None:
    """The reference's `###` lines; `Total training samples (batches)` is per rank, as there."""
    console.info(f"### model_name: {args.model}")
    console.info(f"### batch_size: {trainer.per_gpu_batch}")
    console.info(f"### global_batch_size: {trainer.global_batch}")
    console.info(f"### world_size: {trainer.world.world_size}")
    console.info(f"### learning_rate: {trainer.lr}")
    console.info(f"### mixed_precision: {args.precision}")
    console.info(f"### Total number of parameters {trainer.num_parameters}")
    console.info(f"### Total training samples (batches): {len(trainer.sampler)} ({trainer.steps})")


# ---------------------------------------------------------------- the backend


class TorchBackend(harness.Backend):
    """What the harness needs from PyTorch (docs/trainers.md); one per process, every rank runs
    the same calls, rank 0 alone prints."""

    framework = FRAMEWORK.name

    def __init__(self):
        self.console = Console(rank_hint())
        self.device = None

    def info(self, message: str) -> None:
        self.console.info(message)

    def emit(self, record: dict) -> None:
        self.console.record(record)

    def setup(self, args: argparse.Namespace) -> None:
        start_timestamp = time.time()
        self.args = args
        self.world, self.device = start_process(args.gpus, self.console)
        self.data = load_train_data(args)
        self.facts = run_facts(self.world, self.device, start_timestamp)
        if is_primary(self.world.rank):
            build = lambda: build_model(args.model, len(self.data.classes), args.resolution)  # noqa: E731
            self.facts["flops_per_image"] = flops.count_flops_or_none(build, args.resolution)

    def header(self, per_gpu_batch: int) -> dict:
        images, world_size = len(self.data.train_set), self.world.world_size
        return harness.header_record(
            self.args, self.framework, per_gpu_batch, world_size,
            steps_per_epoch(images, world_size, per_gpu_batch), images,
            own_header_keys(self.args, self.world, self.device, self.facts))

    def trainer(self, per_gpu_batch: int, attempt: int, endless: bool) -> Trainer:
        return Trainer(self.args, self.world, self.device, self.console, self.data, per_gpu_batch, attempt, endless)

    def build(self, per_gpu_batch: int, attempt: int) -> Trainer:
        trainer = self.trainer(per_gpu_batch, attempt, endless=self.args.protocol == "steps")
        announce(self.console, self.args, trainer)
        return trainer

    def probe(self, per_gpu_batch: int, attempt: int, steps: int) -> None:
        # Its model and loader go with this frame, before the next probe builds its own.
        self.trainer(per_gpu_batch, attempt, endless=True).probe(steps)

    def after_training(self, trainer: Trainer, log: runlog.RunLog) -> None:
        if not self.args.eval:
            return
        result = trainer.evaluate(len(log.epochs))
        log.emit(result)
        self.info(f"[EPOCH: {result['epoch']}] Accuracy: {result['accuracy']:.3f} | "
                  f"Validation throughput: {result['throughput_img_s']:.3f} imgs/s")

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, OUT_OF_MEMORY)

    def tracer(self, trainer: Trainer, out_dir: str, first: int, steps: int, ranks: str):
        if not harness.traces_rank(ranks, self.world.rank):
            return None
        from scalesweep.train.torch_backend import trace

        return trace.TorchTracer(trainer.module, self.device, out_dir, self.world.rank, first, steps)

    def release_memory(self) -> None:
        release_memory(self.device, self.args.compile)

    def peak_memory_gb(self) -> float | None:
        return device_memory_gb(self.device) if self.device is not None else None

    def teardown(self) -> None:
        teardown()

    def energy_devices(self):  # this rank's cuda:<local rank> (CPU: the fake NVML's <local rank>)
        return self.device.type == "cuda", [self.world.local_rank]

    def energy_per_rank(self, joules: list) -> list:
        return all_reduce_sum(energy_slots(joules, self.world, self.device)).tolist()


# ---------------------------------------------------------------- command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = trainer_args.trainer_parser(
        __doc__.split("\n\n")[0], MODELS, "dataset folder with train/<class>/*.jpeg and val/<class>/*.jpeg",
        resolution=224, gpus=0, per_gpu_batch=64)
    add = parser.add_argument
    add("--nodes", type=int, help="nodes of the run (default: WORLD_SIZE / LOCAL_WORLD_SIZE)")
    add("--eval-batch-size", type=int, default=128, help="images per process per eval step")
    add("--channels-last", action="store_true", help="channels-last memory format")
    add("--num-workers", type=int, default=0,
        help="loader worker processes per rank; 0 loads in the training process (default %(default)s)")
    add("--optimizer", choices=OPTIMIZERS, default="sgd", help="sgd (momentum 0.9) or adamw")
    add("--eval", action="store_true", help="run validation after the last epoch")
    ddp_options.add_ddp_options(parser)
    return trainer_args.parse_args(parser, argv, _check_own_args)


def _check_own_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for flag, value, least in (("--eval-batch-size", args.eval_batch_size, 1),
                               ("--num-workers", args.num_workers, 0), ("--nodes", args.nodes, 1)):
        if value is not None and value < least:
            parser.error(f"{flag} must be {'0 or more' if least == 0 else f'>= {least}'}, got {value}")
    if args.find_max_batch and args.eval:
        parser.error("--eval does not go with --find-max-batch: the search trains no model to validate")
    ddp_options.check_ddp_options(parser, args)


def main(argv=None) -> int:
    return harness.main(argv, parse_args, MODELS, TorchBackend, STARTED)
