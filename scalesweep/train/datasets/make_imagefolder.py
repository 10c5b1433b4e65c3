"""Write a learnable image-folder dataset of real JPEG files: DIR/{train,val}/<class>/*.jpeg.

The layout is the one of the reference's Tiny-ImageNet folders (docs/reference.md §2), so the PyTorch
trainer reads it with torchvision's ImageFolder exactly as it reads the real data. Each class has
its own colour, stripe orientation and stripe frequency; every image adds a random phase, a random
brightness and pixel noise, so a model must learn the class pattern rather than memorise files.

    python scripts/make_imagefolder.py --out DIR --classes 10 --train-per-class 64 \
        --val-per-class 16 --size 32 --seed 0
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile

import numpy as np
from PIL import Image

SPLITS = ("train", "val")
JPEG_QUALITY = 90
# Golden angle: consecutive classes get stripe orientations that stay far apart for any count.
_GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))


def class_names(count: int) -> list[str]:
    """Folder names in an order that sorts the same way ImageFolder sorts them."""
    if count < 1:
        raise ValueError(f"--classes must be >= 1, got {count}")
    width = max(3, len(str(count - 1)))
    return [f"class_{index:0{width}d}" for index in range(count)]


def class_style(class_index: int) -> tuple[np.ndarray, float, float]:
    """(RGB colour in [0, 1], stripe angle in radians, stripes per image) of one class."""
    hue = (class_index * 0.618034) % 1.0
    colour = 0.5 + 0.45 * np.cos(2.0 * math.pi * (hue + np.array([0.0, 1.0 / 3.0, 2.0 / 3.0])))
    angle = (class_index * _GOLDEN_ANGLE) % math.pi
    stripes = 1.5 + (class_index % 5)
    return colour, angle, stripes


def render_image(class_index: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """One size x size x 3 uint8 image of the class, with per-image phase, brightness and noise."""
    colour, angle, stripes = class_style(class_index)
    coords = np.linspace(0.0, 1.0, size, endpoint=False)
    ys, xs = np.meshgrid(coords, coords, indexing="ij")
    along = xs * math.cos(angle) + ys * math.sin(angle)
    phase = rng.uniform(0.0, 2.0 * math.pi)
    wave = 0.5 + 0.5 * np.sin(2.0 * math.pi * stripes * along + phase)
    brightness = rng.uniform(0.7, 1.0)
    image = wave[..., None] * colour[None, None, :] * brightness
    image = image + rng.normal(0.0, 0.08, size=image.shape)
    return (np.clip(image, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def write_split(
    split_dir: str, names: list[str], per_class: int, size: int, rng: np.random.Generator
) -> int:
    """Write per_class JPEGs for every class under split_dir; returns the number of files."""
    for class_index, name in enumerate(names):
        class_dir = os.path.join(split_dir, name)
        os.makedirs(class_dir)
        for image_index in range(per_class):
            pixels = render_image(class_index, size, rng)
            path = os.path.join(class_dir, f"{name}_{image_index}.jpeg")
            Image.fromarray(pixels).save(path, format="JPEG", quality=JPEG_QUALITY)
    return len(names) * per_class


def make_imagefolder(
    out: str, classes: int, train_per_class: int, val_per_class: int, size: int, seed: int
) -> dict[str, int]:
    """Build the dataset in a temporary sibling folder, then rename it to `out`.

    The rename makes the result all-or-nothing: an interrupted run never leaves a half-written
    folder that a later step would take for a dataset. Returns the file count per split.
    """
    for flag, value, least in (
        ("--train-per-class", train_per_class, 1),
        ("--val-per-class", val_per_class, 1),
        ("--size", size, 1),
    ):
        if value < least:
            raise ValueError(f"{flag} must be >= {least}, got {value}")
    names = class_names(classes)
    out = os.path.abspath(out)
    if os.path.exists(out):
        raise FileExistsError(f"{out} already exists; remove it first (the generator never overwrites)")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.tmp-", dir=parent)
    try:
        counts = {}
        for index, (split, per_class) in enumerate(zip(SPLITS, (train_per_class, val_per_class))):
            # One seeded stream per split: the val images stay the same when the train count changes.
            rng = np.random.default_rng([seed, index])
            counts[split] = write_split(os.path.join(staging, split), names, per_class, size, rng)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return counts


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="dataset folder to create (must not exist)")
    parser.add_argument("--classes", type=int, required=True, help="number of classes")
    parser.add_argument("--train-per-class", type=int, required=True, help="train images per class")
    parser.add_argument("--val-per-class", type=int, required=True, help="validation images per class")
    parser.add_argument("--size", type=int, required=True, help="image side in px")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        counts = make_imagefolder(
            args.out, args.classes, args.train_per_class, args.val_per_class, args.size, args.seed
        )
    except (ValueError, FileExistsError) as error:
        print(f"make_imagefolder: {error}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.out}: {args.classes} classes, {counts['train']} train / {counts['val']} val "
        f"JPEG images at {args.size} px"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
