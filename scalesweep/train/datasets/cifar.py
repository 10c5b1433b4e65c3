"""The CIFAR-10 "python version" format: the pickled batches of `cifar-10-batches-py/`.

numpy + standard library only, shared by the TensorFlow trainer and the synthetic generator.
Each batch is a pickle of a dict with bytes keys: b'data' (uint8, N x 3072, every row three
32 x 32 channel planes R, G, B, row-major) and b'labels' (N ints in 0..9); `batches.meta` holds
b'label_names'. keras.datasets and torchvision verify the original archive's checksum, so they
cannot read synthetic or re-packed copies: hence this loader.
"""

from __future__ import annotations

import copyreg
import pickle
from pathlib import Path

import numpy as np

BATCHES_DIR = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{index}" for index in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"

SIDE = 32
CHANNELS = 3
ROW_LENGTH = SIDE * SIDE * CHANNELS
NUM_CLASSES = 10
LABEL_NAMES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


PICKLE_PROTOCOL = 4


class CifarFormatError(ValueError):
    """A CIFAR-10 batch file exists but does not hold what the format says."""


def batches_dir(path) -> Path:
    """The `cifar-10-batches-py` folder, given it or its parent."""
    path = Path(path)
    if path.name != BATCHES_DIR and (path / BATCHES_DIR).is_dir():
        path = path / BATCHES_DIR
    if not path.is_dir():
        raise FileNotFoundError(f"CIFAR-10 folder not found: {path} (expected {BATCHES_DIR}/ or its parent)")
    return path


def rows_to_images(rows: np.ndarray) -> np.ndarray:
    """N x 3072 channel-plane rows -> N x 32 x 32 x 3 (height, width, channel) images."""
    return rows.reshape(-1, CHANNELS, SIDE, SIDE).transpose(0, 2, 3, 1)


def images_to_rows(images: np.ndarray) -> np.ndarray:
    """N x 32 x 32 x 3 images -> N x 3072 channel-plane rows, the inverse of rows_to_images."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(-1, ROW_LENGTH)


def _unpickle(file: Path) -> dict:
    if not file.is_file():
        raise FileNotFoundError(f"CIFAR-10 batch missing: {file}")
    try:
        with open(file, "rb") as handle:
            content = pickle.load(handle, encoding="bytes")
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError) as exc:
        raise CifarFormatError(f"{file}: not a readable CIFAR-10 pickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(content, dict):
        raise CifarFormatError(f"{file}: expected a pickled dict, found {type(content).__name__}")
    return content


def _require_key(content: dict, key: bytes, file: Path):
    if key not in content:
        found = ", ".join(repr(k) for k in content) or "none"
        raise CifarFormatError(f"{file}: key {key!r} missing (keys found: {found})")
    return content[key]


def read_batch(file) -> tuple[np.ndarray, np.ndarray]:
    """One batch file -> (uint8 N x 32 x 32 x 3 images, int64 labels of length N)."""
    file = Path(file)
    content = _unpickle(file)
    data = np.asarray(_require_key(content, b"data", file))
    labels = np.asarray(_require_key(content, b"labels", file))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != ROW_LENGTH:
        raise CifarFormatError(
            f"{file}: b'data' must be uint8 N x {ROW_LENGTH}, found {data.dtype} {data.shape}"
        )
    if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
        raise CifarFormatError(f"{file}: {labels.shape} labels for {data.shape[0]} images")
    if labels.size and (not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise CifarFormatError(f"{file}: b'labels' must be integers in 0..{NUM_CLASSES - 1}")
    return rows_to_images(data), labels.astype(np.int64)


def write_batch(file, images: np.ndarray, labels: np.ndarray, batch_label: str) -> None:
    """Write one batch with the original archive's dict layout (bytes keys, same value types).

    Protocol 4, not the original's Python 2 protocol 2: from Python 3, protocol 2 stores bytes
    as latin-1 text, 1.5x larger and 3x slower, and every `pickle.load(f, encoding="bytes")`
    reader sees the same dict either way. The array is pickled by `portable_array`, so that the
    trainers' containers read what the host wrote, whatever their numpy.
    """
    content = {
        b"batch_label": batch_label.encode(),
        b"labels": [int(label) for label in labels],
        b"data": images_to_rows(np.asarray(images, dtype=np.uint8)),
        b"filenames": [f"synthetic_{LABEL_NAMES[label]}_{index:06d}.png".encode() for index, label in enumerate(labels)],
    }
    _dump(content, file)


def write_meta(file, num_cases_per_batch: int) -> None:
    content = {
        b"num_cases_per_batch": num_cases_per_batch,
        b"label_names": [name.encode() for name in LABEL_NAMES],
        b"num_vis": ROW_LENGTH,
    }
    _dump(content, file)


def portable_array(array: np.ndarray):
    """A pickle reduction of an array that names only `numpy.ndarray` and builtins:
    `numpy.ndarray(shape, dtype string, bytearray)`, a writable array over its own bytes.

    numpy's own reduction names the private `numpy.core.multiarray._reconstruct`, which numpy
    2.0 moved to `numpy._core` (numpy/numpy#24634): pickles written under numpy 2 (the host's
    environment) fail to load under numpy 1.x releases without a `numpy._core` (both NGC
    containers' 1.23 and 1.24) with "No module named 'numpy._core'" (numpy/numpy#28340). The
    ndarray constructor with a buffer is public since numpy 1.0. Byte order is in the dtype
    string ('<i8'); data are written C-contiguous.
    """
    contiguous = np.ascontiguousarray(array)
    if contiguous.dtype.hasobject:
        raise TypeError(f"portable_array: {contiguous.dtype} arrays hold Python objects, not bytes")
    return np.ndarray, (contiguous.shape, contiguous.dtype.str, bytearray(contiguous.tobytes()))


def _dump(content, file) -> None:
    with open(file, "wb") as handle:
        pickler = pickle.Pickler(handle, protocol=PICKLE_PROTOCOL)
        pickler.dispatch_table = {**copyreg.dispatch_table, np.ndarray: portable_array}
        pickler.dump(content)
