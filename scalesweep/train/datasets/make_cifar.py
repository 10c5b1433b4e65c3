"""Write a synthetic CIFAR-10 in exactly the original `cifar-10-batches-py/` pickle format.

No CIFAR-10 ships offline and keras/torchvision reject re-packed copies, so laptops and CI train on
this. Images are learnable, not noise: each class has its own colour cast and grating orientation
and frequency; random phase, contrast, brightness and pixel noise vary every image, so accuracy
rises over epochs without being trivial.

The folder appears complete or not at all: everything is written into a hidden temporary folder
beside the target and renamed into place at the end, so a killed run leaves only `.partial-*`.

    python scripts/make_cifar.py --out data/synthetic --train-images 50000 --test-images 10000 --seed 0
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from scalesweep.train.datasets import cifar

# Fixed per-class looks (not seeded): every generated set has the same classes, only the images
# differ with the seed. Colours are RGB offsets in [-1, 1].
CLASS_COLOURS = np.array(
    [
        [0.9, -0.6, -0.6],
        [-0.6, 0.9, -0.6],
        [-0.6, -0.6, 0.9],
        [0.8, 0.8, -0.7],
        [0.8, -0.7, 0.8],
        [-0.7, 0.8, 0.8],
        [0.5, 0.0, -0.8],
        [-0.8, 0.5, 0.0],
        [0.0, -0.8, 0.5],
        [0.3, 0.3, 0.3],
    ],
    dtype=np.float32,
)
CLASS_ANGLES = np.arange(cifar.NUM_CLASSES, dtype=np.float32) * np.float32(np.pi / cifar.NUM_CLASSES)
CLASS_FREQUENCIES = np.array([1.5, 2.5, 3.5] * 4, dtype=np.float32)[: cifar.NUM_CLASSES]
CHUNK = 5000  # images synthesized at once: bounds the float32 working memory to ~60 MB


def balanced_labels(count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` labels, classes as equal as possible, in random order."""
    return rng.permutation(np.arange(count) % cifar.NUM_CLASSES).astype(np.int64)


def _synthesize_chunk(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    count = labels.shape[0]
    grid = np.arange(cifar.SIDE, dtype=np.float32) / cifar.SIDE
    rows, cols = np.meshgrid(grid, grid, indexing="ij")
    angle = CLASS_ANGLES[labels][:, None, None]
    frequency = CLASS_FREQUENCIES[labels][:, None, None]
    phase = rng.uniform(0, 2 * np.pi, (count, 1, 1)).astype(np.float32)
    grating = np.sin(2 * np.pi * frequency * (cols * np.cos(angle) + rows * np.sin(angle)) + phase)
    contrast = rng.uniform(35, 75, (count, 1, 1, 1)).astype(np.float32)
    brightness = rng.uniform(95, 160, (count, 1, 1, 1)).astype(np.float32)
    colour = CLASS_COLOURS[labels][:, None, None, :]
    image = brightness + 45 * colour + contrast * grating[..., None] * (0.6 + 0.4 * np.abs(colour))
    image += rng.normal(0, 20, image.shape).astype(np.float32)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def synthesize(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 N x 32 x 32 x 3 images drawn for `labels`."""
    chunks = [_synthesize_chunk(labels[start : start + CHUNK], rng) for start in range(0, len(labels), CHUNK)]
    if not chunks:
        return np.zeros((0, cifar.SIDE, cifar.SIDE, cifar.CHANNELS), dtype=np.uint8)
    return np.concatenate(chunks)


def write_dataset(folder: Path, train_images: int, test_images: int, seed: int) -> None:
    """Fill `folder` with the five training batches, test_batch and batches.meta."""
    rng = np.random.default_rng(seed)
    train_labels = balanced_labels(train_images, rng)
    sizes = [len(part) for part in np.array_split(np.arange(train_images), len(cifar.TRAIN_BATCHES))]
    start = 0
    for index, (name, size) in enumerate(zip(cifar.TRAIN_BATCHES, sizes), start=1):
        labels = train_labels[start : start + size]
        cifar.write_batch(folder / name, synthesize(labels, rng), labels, f"training batch {index} of 5")
        start += size
    test_labels = balanced_labels(test_images, rng)
    cifar.write_batch(folder / cifar.TEST_BATCH, synthesize(test_labels, rng), test_labels, "testing batch 1 of 1")
    cifar.write_meta(folder / cifar.META, num_cases_per_batch=max(sizes))


def generate(out, train_images: int, test_images: int, seed: int, force: bool = False) -> Path:
    """Write `out/cifar-10-batches-py/` atomically and return its path."""
    if train_images < len(cifar.TRAIN_BATCHES):
        raise ValueError(f"--train-images must be at least {len(cifar.TRAIN_BATCHES)} (one per batch), got {train_images}")
    if test_images < 1:
        raise ValueError(f"--test-images must be at least 1, got {test_images}")
    out = Path(out)
    target = out / cifar.BATCHES_DIR
    if target.exists() and not force:
        raise FileExistsError(f"{target} already exists; pass --force to replace it")
    out.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{cifar.BATCHES_DIR}.partial-", dir=out))
    partial.chmod(0o755)  # mkdtemp makes it private; the data is shared with cluster jobs
    try:
        write_dataset(partial, train_images, test_images, seed)
        _move_into_place(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _move_into_place(partial: Path, target: Path) -> None:
    if target.exists():
        # Renaming the old copy away first keeps a complete folder at `target` at every moment
        # except between the two renames.
        stale = target.with_name(f".{target.name}.stale-{os.getpid()}")
        os.rename(target, stale)
        os.rename(partial, target)
        shutil.rmtree(stale)
    else:
        os.rename(partial, target)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder that receives cifar-10-batches-py/")
    parser.add_argument("--train-images", type=int, default=50000, help="split over the five training batches")
    parser.add_argument("--test-images", type=int, default=10000, help="images in test_batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="replace an existing cifar-10-batches-py/")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        target = generate(args.out, args.train_images, args.test_images, args.seed, args.force)
    except (ValueError, FileExistsError) as exc:
        print(f"make_cifar: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {target} ({args.train_images} train, {args.test_images} test images, seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
