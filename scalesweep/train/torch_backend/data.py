"""The PyTorch trainer's data: an ImageFolder (`train/<class>/*.jpeg`, `val/<class>/*.jpeg`) read
once per run, sharded over the ranks by a DistributedSampler, and decoded by loader workers."""

from __future__ import annotations

import argparse
import itertools
import os
from dataclasses import dataclass
from typing import Iterator

import torch
from torch.utils.data import DataLoader, DistributedSampler, Sampler, Subset, default_collate
from torchvision import datasets, transforms

from scalesweep.train.common import faults, measure
from scalesweep.train.torch_backend.distributed import World

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Batches each loader worker decodes ahead of the training step (torch's own default, made
# explicit): with --num-workers W, 2W batches wait decoded while the device trains.
PREFETCH_BATCHES_PER_WORKER = 2


def build_transform(resolution: int, train: bool) -> transforms.Compose:
    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if train:
        steps = [transforms.RandomResizedCrop(resolution), transforms.RandomHorizontalFlip()]
    else:
        steps = [transforms.Resize(resolution), transforms.CenterCrop(resolution)]
    return transforms.Compose([*steps, transforms.ToTensor(), normalize])


def load_split(root: str, split: str, resolution: int) -> datasets.ImageFolder:
    """`root/split/<class>/*.jpeg` as an ImageFolder; JPEG decoding happens in the loader workers."""
    folder = os.path.join(root, split)
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"dataset folder {folder} does not exist (expected {split}/<class>/*.jpeg)"
        )
    transform = build_transform(resolution, train=split == "train")
    try:
        return datasets.ImageFolder(folder, transform=transform)
    except (FileNotFoundError, RuntimeError) as error:
        raise FileNotFoundError(f"dataset folder {folder}: {error}") from None


@dataclass(frozen=True)
class TrainData:
    """The training images of the run, read once: every attempt and probe samples from them."""

    train_set: object  # ImageFolder, or a Subset of it
    classes: list


def load_train_data(args: argparse.Namespace) -> TrainData:
    full = load_split(args.data, "train", args.resolution)
    indices = measure.subset_indices(len(full), args.max_train_images, args.seed)
    train_set = full if len(indices) == len(full) else Subset(full, indices)
    return TrainData(train_set, full.classes)


def make_train_sampler(dataset, world: World, seed: int) -> DistributedSampler:
    # drop_last=True: every rank and every epoch get the same number of images, none repeated
    # (without it the sampler pads the last rank's share with duplicates).
    return DistributedSampler(
        dataset, num_replicas=world.world_size, rank=world.rank, shuffle=True, seed=seed, drop_last=True
    )


def epoch_order(sampler: DistributedSampler, epoch: int) -> list[int]:
    """The dataset indices this rank visits in `epoch`, in order (set_epoch reshuffles per epoch)."""
    sampler.set_epoch(epoch)
    return list(iter(sampler))


class RepeatingSampler(Sampler):
    """The passes of a DistributedSampler one after another, endlessly, each under its own
    set_epoch (a new shuffle and shard): one loader iterator serves any number of steps, with
    batches that may span passes, so no pipeline restart falls between the steps protocol's
    windows and a probe's batch may exceed the data set."""

    def __init__(self, sampler: DistributedSampler):
        super().__init__()
        if len(sampler) == 0:
            raise ValueError("the sampler gives this rank no image: fewer images than processes")
        self.sampler = sampler

    def __iter__(self) -> Iterator[int]:
        for epoch in itertools.count(1):
            self.sampler.set_epoch(epoch)
            yield from self.sampler


def steps_per_epoch(num_images: int, world_size: int, per_gpu_batch: int) -> int:
    """Optimizer steps per epoch: the sampler drops the tail that does not split evenly over ranks,
    the loader drops each rank's last partial batch."""
    return (num_images // world_size) // per_gpu_batch


def collate_with_injected_delay(samples):
    """The default collation, after the delay faults.DATA_DELAY_ENV asks for (a slowed loader,
    for the test that the step breakdown puts it into data wait; none when unset)."""
    faults.inject_delay(faults.DATA_DELAY_ENV)
    return default_collate(samples)


def make_loader(dataset, batch_size: int, sampler, num_workers: int, device: torch.device, train: bool):
    """The loader of one split. ImageFolder reads and decodes a JPEG in __getitem__, so with
    workers the decoding and the transforms run in the worker processes, off the training loop."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        # Pinned host batches let the copy to the GPU run asynchronously (non_blocking=True).
        pin_memory=device.type == "cuda",
        drop_last=train,
        prefetch_factor=PREFETCH_BATCHES_PER_WORKER if num_workers > 0 else None,
        collate_fn=collate_with_injected_delay if train else None,
        # Validation runs once; keeping its workers alive would only hold memory.
        persistent_workers=train and num_workers > 0,
    )


class DevicePrefetcher:
    """The (images, labels) of `batches` on a CUDA device, each copied by `copy(images, labels)`
    on a stream of its own one batch ahead of its use: while a step computes, the next batch's
    host-to-device copy (from pinned memory, non_blocking) runs beside it. Taking a batch makes
    the current stream wait for that batch's copy alone, then starts the next one's; at the end
    of `batches` it stops (StopIteration) once the last prefetched batch was taken."""

    def __init__(self, batches, copy, device: torch.device):
        self.batches, self.copy, self.device = iter(batches), copy, device
        self.stream = torch.cuda.Stream(device)
        self.pending = None
        self.started = False

    def __iter__(self):
        return self

    def _fetch(self):
        """The next host batch's copy, started; None when `batches` ran out."""
        try:
            images, labels = next(self.batches)
        except StopIteration:
            return None
        with torch.cuda.stream(self.stream):
            images, labels = self.copy(images, labels)
            copied = torch.cuda.Event()
            copied.record(self.stream)
        return images, labels, copied

    def __next__(self):
        if not self.started:
            self.pending, self.started = self._fetch(), True
        if self.pending is None:
            raise StopIteration
        images, labels, copied = self.pending
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(copied)
        # Allocated on the copy stream, used on this one: not to be reused before this one is done.
        images.record_stream(stream)
        labels.record_stream(stream)
        self.pending = self._fetch()
        return images, labels
