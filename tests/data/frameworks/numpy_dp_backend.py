"""Train a softmax classifier on CIFAR-10 with numpy, data-parallel over processes.

Test data, not a trainer of the sweep: the third framework of tests/test_third_framework.py, added
to a copy of the repository by this one file (copied into scalesweep/train/, the module
scalesweep.train.numpy_dp_backend) and one registry entry (numpy_dp_entry.py beside it), to show
that nothing else has to change. It is a real backend of scalesweep/train/common/harness.py all the
same: --gpus N starts N processes (one per stand-in GPU; 0 is the CPU baseline, one process), each
trains on its own shard of every global batch, and the gradients are summed across the processes
before every update, through pipes to the first process and back (the simplest honest all-reduce).
The first process prints the `:::SCALESWEEP` records.

    python scripts/train.py numpy_dp --model softmax --data data/cifar10 --gpus 2 --epochs 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

# What a run costs starts here, before the framework import (seconds of a job's time, too).
STARTED = time.perf_counter()
import numpy as np  # noqa: E402

from scalesweep.contract import frameworks  # noqa: E402
from scalesweep.train.common import faults, harness, measure, node, runlog, stepclock, trainer_args  # noqa: E402
from scalesweep.train.datasets import cifar  # noqa: E402

FRAMEWORK = frameworks.get("numpy_dp")
MODELS = FRAMEWORK.model_names
FEATURES = cifar.SIDE * cifar.SIDE * cifar.CHANNELS


class World:
    """This process's rank among `size` and its pipes: the first process holds one to every other,
    each other one to the first."""

    def __init__(self, rank: int, size: int, pipes: list, workers: list = ()):
        self.rank, self.size, self.pipes, self.workers = rank, size, pipes, list(workers)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        """Every process's `values` summed, on every process (the first adds, then sends back)."""
        if self.size == 1:
            return values
        if self.rank > 0:
            self.pipes[0].send(values)
            return self.pipes[0].recv()
        total = values + sum(pipe.recv() for pipe in self.pipes)
        for pipe in self.pipes:
            pipe.send(total)
        return total

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.close()
        for worker in self.workers:
            worker.join(timeout=30)


def start_world(args: argparse.Namespace) -> World:
    """The first process forks one process per further stand-in GPU; each runs the harness itself."""
    size = max(1, args.gpus)
    pipes, workers = [], []
    context = multiprocessing.get_context("fork")
    for rank in range(1, size):
        own, theirs = context.Pipe()
        worker = context.Process(target=run_rank, args=(rank, size, theirs, args), daemon=True)
        worker.start()
        theirs.close()
        pipes.append(own)
        workers.append(worker)
    return World(0, size, pipes, workers)


def run_rank(rank: int, size: int, pipe, args: argparse.Namespace) -> None:
    backend = NumpyBackend(World(rank, size, [pipe]))
    sys.exit(harness.run(backend, args, STARTED))


def load_training_data(args: argparse.Namespace):
    """(images as N x 3072 floats in [0, 1], labels) of the run's training set or its subset."""
    folder = cifar.batches_dir(args.data)
    parts = [cifar.read_batch(folder / name) for name in cifar.TRAIN_BATCHES]
    images = np.concatenate([part for part, _ in parts]).reshape(-1, FEATURES)
    labels = np.concatenate([part for _, part in parts]).astype(np.int64)
    keep = np.asarray(measure.subset_indices(len(labels), args.max_train_images, args.seed))
    return images[keep].astype(np.float32) / 255.0, labels[keep]


class Attempt:
    """One attempt at a per-process batch: the model (weights of a softmax classifier), its clock,
    and the protocols' loops."""

    header_updates: dict = {}

    def __init__(self, backend: "NumpyBackend", per_gpu_batch: int, attempt: int):
        self.world, self.args = backend.world, backend.args
        self.images, self.labels = backend.images, backend.labels
        self.per_gpu_batch, self.global_batch = per_gpu_batch, per_gpu_batch * backend.world.size
        self.steps = len(self.labels) // self.global_batch
        self.lr = harness.scaled_learning_rate(self.args.base_lr, self.world.size)
        self.injected = faults.injected_failure(faults.fail_inject_mode(), per_gpu_batch, attempt)
        self.clock = stepclock.StepClock()
        generator = np.random.default_rng(self.args.seed)  # the same weights on every process
        self.weights = generator.normal(0, 0.01, (FEATURES + 1, cifar.NUM_CLASSES)).astype(np.float32)
        self.order = np.random.default_rng(self.args.seed + 1)

    def batches(self):
        """This process's share of each global batch, epoch after epoch, in a seeded order that
        every process draws alike."""
        while True:
            permutation = self.order.permutation(len(self.labels))
            for step in range(self.steps):
                start = step * self.global_batch + self.world.rank * self.per_gpu_batch
                yield permutation[start:start + self.per_gpu_batch]

    def step(self, rows: np.ndarray) -> np.ndarray:
        """One update on the rows' images; returns [loss sum, correct, images] of the batch."""
        if self.clock.finished == 0 and self.injected:
            raise MemoryError("injected out-of-memory error") if self.injected == "oom" else RuntimeError(
                "injected crash")
        inputs = np.hstack([self.images[rows], np.ones((len(rows), 1), np.float32)])
        self.clock.data_ready()
        logits = inputs @ self.weights
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        labels = self.labels[rows]
        picked = probabilities[np.arange(len(rows)), labels]
        probabilities[np.arange(len(rows)), labels] -= 1.0
        gradient = inputs.T @ probabilities / self.global_batch  # this process's part of the mean
        self.weights -= self.lr * self.world.all_reduce_sum(gradient)
        return np.array([-np.log(np.maximum(picked, 1e-12)).sum(), (logits.argmax(axis=1) == labels).sum(),
                         len(rows)], dtype=np.float64)

    def window_done(self, window: measure.TimedWindow, first_step: int) -> bool:
        """Whether every process's window is done: an adaptive window is judged on each process's
        own step times, so the processes agree or one would wait in the next all-reduce."""
        if not window.decides_at(self.clock.finished - first_step):
            return False
        done = window.done(self.clock.durations[first_step:])
        if not window.auto:
            return done
        return int(self.world.all_reduce_sum(np.array([float(done)]))[0]) == self.world.size

    def window(self, meter: harness.WindowMeter, number: int, window: measure.TimedWindow, batches,
               phase=None) -> None:
        """The steps of `window`, between two all-reduces so the first process's time covers all."""
        self.world.all_reduce_sum(np.zeros(1))
        meter.start(time.perf_counter())
        totals, first_step = np.zeros(3), self.clock.finished
        while not self.window_done(window, first_step):
            self.clock.begin()
            totals += self.step(next(batches))
            self.clock.end()
        self.world.all_reduce_sum(np.zeros(1))
        ended = time.perf_counter()
        loss_sum, correct, count = self.world.all_reduce_sum(totals)
        meter.finish(number, loss_sum / count, correct / count, phase=phase, window=window, ended=ended)

    def fit_epochs(self, meter: harness.WindowMeter, epochs: int) -> None:
        batches = self.batches()
        for epoch in range(1, epochs + 1):
            self.window(meter, epoch, measure.TimedWindow(self.steps), batches)

    def fit_steps(self, meter: harness.WindowMeter, windows: list) -> None:
        batches = self.batches()
        for number, phase, window in windows:
            self.window(meter, number, window, batches, phase)


class NumpyBackend(harness.Backend):
    """What the harness needs from numpy (docs/trainers.md); one per process, the first prints."""

    framework = FRAMEWORK.name

    def __init__(self, world: World | None = None):
        self.world = world

    def info(self, message: str) -> None:
        if self.world is None or self.world.rank == 0:
            print(message, flush=True)

    def emit(self, record: dict) -> None:
        if self.world is None or self.world.rank == 0:
            runlog.emit(record)

    def setup(self, args: argparse.Namespace) -> None:
        started = time.time()
        self.args = args
        if self.world is None:
            self.world = start_world(args)
        self.images, self.labels = load_training_data(args)
        if len(self.labels) < args.per_gpu_batch * self.world.size and not args.find_max_batch:
            raise ValueError(f"{len(self.labels)} training images in {args.data} give no full step of "
                             f"{args.per_gpu_batch} images on each of {self.world.size} processes")
        self.facts = {
            "versions": {"python": node.python_version(), "numpy": np.__version__},
            "devices": [f"CPU:{rank}" for rank in range(self.world.size)],
            **node.device_provenance(), **node.provenance(started), **node.thread_fields(None),
        }

    def header(self, per_gpu_batch: int) -> dict:
        images, size = len(self.labels), self.world.size
        own = {"device_kind": "cpu", "nodes": 1, "channels_last": False, "num_workers": 0, **self.facts}
        return harness.header_record(self.args, self.framework, per_gpu_batch, size,
                                     images // (per_gpu_batch * size), images, own)

    def build(self, per_gpu_batch: int, attempt: int) -> Attempt:
        return Attempt(self, per_gpu_batch, attempt)

    def probe(self, per_gpu_batch: int, attempt: int, steps: int) -> None:
        trial = Attempt(self, per_gpu_batch, attempt)
        batches = trial.batches()
        for _ in range(steps):
            trial.step(next(batches))

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, MemoryError)

    def teardown(self) -> None:
        if self.world is not None:
            self.world.close()


def parse_args(argv=None) -> argparse.Namespace:
    parser = trainer_args.trainer_parser(__doc__.split("\n\n")[0], MODELS, "CIFAR-10 folder (cifar-10-batches-py/)",
                                    resolution=cifar.SIDE, gpus=0, per_gpu_batch=16)
    return trainer_args.parse_args(parser, argv, _check_own_args)


def _check_own_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.resolution != cifar.SIDE:
        parser.error(f"--resolution {args.resolution}: this trainer reads the images as stored, {cifar.SIDE} px")
    if args.precision != "fp32" or args.compile:
        parser.error("this trainer computes in fp32 and compiles nothing")


def main(argv=None) -> int:
    return harness.main(argv, parse_args, MODELS, NumpyBackend, STARTED)


if __name__ == "__main__":
    sys.exit(main())
