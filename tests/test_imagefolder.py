"""scalesweep/train/datasets/make_imagefolder.py (scripts/make_imagefolder.py): real JPEG image
folders in the reference layout, written atomically."""

import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image


from scalesweep.train.datasets import make_imagefolder  # noqa: E402


def files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def digest(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in files_under(root)
    }


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imagefolder") / "tiny"
    make_imagefolder.make_imagefolder(str(out), classes=3, train_per_class=5, val_per_class=2, size=24, seed=7)
    return out


def test_layout_has_train_and_val_with_one_folder_per_class(folder):
    assert sorted(os.listdir(folder)) == ["train", "val"]
    for split in ("train", "val"):
        assert sorted(os.listdir(folder / split)) == ["class_000", "class_001", "class_002"]


def test_counts_per_class_and_split(folder):
    for split, per_class in (("train", 5), ("val", 2)):
        for class_dir in (folder / split).iterdir():
            names = sorted(os.listdir(class_dir))
            assert len(names) == per_class
            assert all(name.startswith(class_dir.name + "_") and name.endswith(".jpeg") for name in names)


def test_files_are_real_jpegs_of_the_asked_size(folder):
    for path in files_under(folder):
        with Image.open(path) as image:
            assert image.format == "JPEG"
            assert image.mode == "RGB"
            assert image.size == (24, 24)
            image.load()


def test_no_staging_folder_left_beside_the_result(folder):
    assert os.listdir(folder.parent) == ["tiny"]


def test_same_seed_gives_identical_files_and_another_seed_differs(tmp_path):
    args = {"classes": 2, "train_per_class": 3, "val_per_class": 1, "size": 16}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        make_imagefolder.make_imagefolder(str(tmp_path / name), seed=seed, **args)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert digest(tmp_path / "a") != digest(tmp_path / "c")


def test_classes_are_learnable_by_a_nearest_centroid_on_pixels():
    # Learnable means the class decides the picture: a nearest-centroid classifier on raw pixels
    # must beat chance by far on fresh images, despite the random phase, brightness and noise.
    rng = np.random.default_rng(0)
    classes, size = 8, 16

    def features(class_index):
        image = make_imagefolder.render_image(class_index, size, rng).astype(np.float64)
        # Colour means plus the power spectrum: both survive the random stripe phase.
        spectrum = np.abs(np.fft.fft2(image.mean(axis=2)))
        return np.concatenate([image.mean(axis=(0, 1)), spectrum.ravel() / size])

    centroids = np.stack([np.mean([features(c) for _ in range(20)], axis=0) for c in range(classes)])
    tests = [(c, features(c)) for c in range(classes) for _ in range(10)]
    hits = sum(np.argmin(np.linalg.norm(centroids - feat, axis=1)) == c for c, feat in tests)
    assert hits / len(tests) > 0.9


def test_class_names_sort_in_index_order_beyond_a_thousand():
    names = make_imagefolder.class_names(1200)
    assert names == sorted(names)
    assert len(set(names)) == 1200


def test_existing_output_is_refused_and_left_untouched(folder):
    before = digest(folder)
    with pytest.raises(FileExistsError, match=str(folder)):
        make_imagefolder.make_imagefolder(
            str(folder), classes=2, train_per_class=1, val_per_class=1, size=8, seed=0
        )
    assert digest(folder) == before


def test_interrupted_generation_leaves_nothing_behind(tmp_path, monkeypatch):
    real_render = make_imagefolder.render_image
    calls = []

    def failing_render(class_index, size, rng):
        calls.append(class_index)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_render(class_index, size, rng)

    monkeypatch.setattr(make_imagefolder, "render_image", failing_render)
    with pytest.raises(KeyboardInterrupt):
        make_imagefolder.make_imagefolder(
            str(tmp_path / "ds"), classes=2, train_per_class=3, val_per_class=1, size=8, seed=0
        )
    assert len(calls) == 4
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("flag", "kwargs"),
    [
        ("--classes", {"classes": 0}),
        ("--train-per-class", {"train_per_class": 0}),
        ("--val-per-class", {"val_per_class": 0}),
        ("--size", {"size": 0}),
    ],
)
def test_invalid_sizes_name_the_flag(tmp_path, flag, kwargs):
    args = {"classes": 2, "train_per_class": 1, "val_per_class": 1, "size": 8, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=flag):
        make_imagefolder.make_imagefolder(str(tmp_path / "ds"), **args)
    assert not (tmp_path / "ds").exists()


def test_cli_writes_the_folder_and_reports_errors(tmp_path, capsys):
    argv = ["--out", str(tmp_path / "ds"), "--classes", "2", "--train-per-class", "2",
            "--val-per-class", "1", "--size", "8", "--seed", "3"]
    assert make_imagefolder.main(argv) == 0
    assert len(files_under(tmp_path / "ds")) == 6
    assert make_imagefolder.main(argv) == 2
    assert "already exists" in capsys.readouterr().err
