"""CIFAR-10 pickle loader (scalesweep/train/datasets/cifar.py) and synthetic generator
(scalesweep/train/datasets/make_cifar.py).

numpy only: no framework is imported in this process.
"""

import pickle
import pickletools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scalesweep.train.datasets import cifar, make_cifar  # noqa: E402
from stacks import container_python  # noqa: E402



def read_split(path, names=cifar.TRAIN_BATCHES):
    """The images and labels of the batches `names` under `path` (the dataset folder or its parent),
    read the way the trainers read them, one batch at a time."""
    folder = cifar.batches_dir(path)
    parts = [cifar.read_batch(folder / name) for name in names]
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])


def read_label_names(path):
    file = cifar.batches_dir(path) / cifar.META
    with open(file, "rb") as handle:
        return [name.decode() for name in pickle.load(handle, encoding="bytes")[b"label_names"]]


def read_train_and_test(path):
    return (*read_split(path), *read_split(path, (cifar.TEST_BATCH,)))

@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("cifar")
    folder = make_cifar.generate(out, train_images=23, test_images=7, seed=3)
    return out, folder


def test_generated_set_has_the_original_layout(small_set):
    out, folder = small_set
    assert folder == out / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*cifar.TRAIN_BATCHES, cifar.TEST_BATCH, cifar.META]
    )
    with open(folder / "data_batch_1", "rb") as handle:
        raw = pickle.load(handle, encoding="bytes")
    assert set(raw) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert raw[b"data"].dtype == np.uint8 and raw[b"data"].shape == (5, 3072)
    assert isinstance(raw[b"labels"], list) and all(isinstance(label, int) for label in raw[b"labels"])
    with open(folder / "batches.meta", "rb") as handle:
        meta = pickle.load(handle, encoding="bytes")
    assert meta[b"num_cases_per_batch"] == 5
    assert meta[b"label_names"][0] == b"airplane"


def test_round_trip_shapes_counts_and_labels(small_set):
    out, folder = small_set
    x_train, y_train, x_test, y_test = read_train_and_test(out)
    assert x_train.shape == (23, 32, 32, 3) and x_train.dtype == np.uint8
    assert x_test.shape == (7, 32, 32, 3) and x_test.dtype == np.uint8
    assert y_train.shape == (23,) and y_test.shape == (7,)
    # 23 images over 10 classes: every class 2 or 3 times.
    assert set(np.bincount(y_train, minlength=10)) == {2, 3}
    # 23 split over five batches as 5, 5, 5, 4, 4, in order.
    sizes = [cifar.read_batch(folder / name)[0].shape[0] for name in cifar.TRAIN_BATCHES]
    assert sizes == [5, 5, 5, 4, 4]
    assert read_label_names(folder) == list(cifar.LABEL_NAMES)


def test_parent_and_batches_folder_load_the_same(small_set):
    out, folder = small_set
    from_parent = read_split(out)
    from_folder = read_split(folder)
    np.testing.assert_array_equal(from_parent[0], from_folder[0])
    np.testing.assert_array_equal(from_parent[1], from_folder[1])


def test_channel_planes_are_red_green_blue_row_major(tmp_path):
    image = np.zeros((1, 32, 32, 3), dtype=np.uint8)
    image[0, 0, 1, 0] = 11  # red, row 0, column 1
    image[0, 1, 0, 1] = 22  # green, row 1, column 0
    image[0, 31, 31, 2] = 33  # blue, last pixel
    cifar.write_batch(tmp_path / "batch", image, np.array([4]), "test")
    with open(tmp_path / "batch", "rb") as handle:
        row = pickle.load(handle, encoding="bytes")[b"data"][0]
    assert row[1] == 11 and row[1024 + 32] == 22 and row[3071] == 33
    assert np.count_nonzero(row) == 3
    images, labels = cifar.read_batch(tmp_path / "batch")
    np.testing.assert_array_equal(images, image)
    assert labels.tolist() == [4]


def pickled_globals(path) -> set:
    """The (module, name) pairs a pickle file imports when loaded (protocol 4: STACK_GLOBAL after
    two strings)."""
    strings, found = [], set()
    for opcode, argument, _ in pickletools.genops(Path(path).read_bytes()):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE"):
            strings.append(argument)
        elif opcode.name == "STACK_GLOBAL":
            found.add(tuple(strings[-2:]))
        elif opcode.name == "GLOBAL":
            found.add(tuple(argument.split(" ")))
    return found


def test_batches_name_no_private_numpy_module(tmp_path):
    # numpy 2 pickles arrays through numpy._core.multiarray._reconstruct, which the containers'
    # numpy 1.23 and 1.24 cannot import: our batches name the public constructor.
    images = np.arange(2 * 32 * 32 * 3, dtype=np.uint64).reshape(2, 32, 32, 3).astype(np.uint8)
    cifar.write_batch(tmp_path / "batch", images, np.array([9, 0]), "test")
    assert pickled_globals(tmp_path / "batch") == {("numpy", "ndarray"), ("builtins", "bytearray")}
    with open(tmp_path / "batch", "rb") as handle:
        data = pickle.load(handle, encoding="bytes")[b"data"]
    # Row 1 starts at image 1's first red value: 3072 % 256 = 0; red plane, pixel 1 = 3 % 256.
    assert data.shape == (2, 3072) and data.dtype == np.uint8 and data.flags.writeable
    assert (data[1, 0], data[0, 1], data[0, 1024]) == (0, 3, 1)
    cifar.write_meta(tmp_path / "meta", 5)
    assert pickled_globals(tmp_path / "meta") == set()


def test_portable_array_keeps_dtype_byte_order_and_layout():
    transposed = np.arange(6, dtype=">i4").reshape(2, 3).T  # big-endian, not C-contiguous
    constructor, arguments = cifar.portable_array(transposed)
    assert constructor is np.ndarray and arguments[:2] == ((3, 2), ">i4")
    rebuilt = constructor(*arguments)
    assert rebuilt.tolist() == [[0, 3], [1, 4], [2, 5]] and rebuilt.dtype.byteorder == ">"
    with pytest.raises(TypeError, match="object arrays hold Python objects"):
        cifar.portable_array(np.array([None, 1], dtype=object))


READ_IN_OTHER_PYTHON = """
import pickle, sys
import numpy
with open(sys.argv[1], "rb") as handle:
    data = pickle.load(handle, encoding="bytes")[b"data"]
print(numpy.__version__, data.shape[0], data.shape[1], int(data.sum()), data[1, 5])
"""


def test_batches_written_here_load_under_the_tensorflow_containers_numpy(tmp_path):
    other = container_python("tensorflow")  # NGC 23.03's numpy 1.23
    images = np.zeros((3, 32, 32, 3), np.uint8)
    images[1, 0, 5, 0] = 200  # red, row 0, column 5 of image 1: row 1, column 5
    images[2, 31, 31, 2] = 7
    cifar.write_batch(tmp_path / "batch", images, np.array([1, 2, 3]), "test")
    done = subprocess.run([other, "-c", READ_IN_OTHER_PYTHON, str(tmp_path / "batch")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    version, *read = done.stdout.split()
    assert read == ["3", "3072", "207", "200"], f"numpy {version}"


def test_missing_batch_is_named(small_set, tmp_path):
    _, folder = small_set
    copy = tmp_path / "cifar-10-batches-py"
    copy.mkdir()
    for source in folder.iterdir():
        if source.name != "data_batch_3":
            (copy / source.name).write_bytes(source.read_bytes())
    with pytest.raises(FileNotFoundError, match=r"data_batch_3"):
        read_train_and_test(tmp_path)


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere"):
        read_split(tmp_path / "nowhere")


def _pickle(path, content):
    with open(path, "wb") as handle:
        pickle.dump(content, handle)


@pytest.mark.parametrize(
    "content, message",
    [
        ({b"labels": [1]}, r"b'data' missing"),
        ({b"data": np.zeros((1, 3072), np.uint8)}, r"b'labels' missing"),
        ({b"data": np.zeros((1, 1024), np.uint8), b"labels": [1]}, r"uint8 N x 3072"),
        ({b"data": np.zeros((1, 3072), np.float32), b"labels": [1]}, r"uint8 N x 3072"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, r"labels for 2 images"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, r"integers in 0..9"),
        ([1, 2, 3], r"expected a pickled dict"),
    ],
)
def test_malformed_batch_is_rejected_naming_the_file(tmp_path, content, message):
    path = tmp_path / "data_batch_1"
    _pickle(path, content)
    with pytest.raises(cifar.CifarFormatError, match=message) as error:
        cifar.read_batch(path)
    assert str(path) in str(error.value)


def test_file_that_is_not_a_pickle_is_named(tmp_path):
    path = tmp_path / "test_batch"
    path.write_bytes(b"this is not a pickle")
    with pytest.raises(cifar.CifarFormatError, match=r"test_batch: not a readable CIFAR-10 pickle"):
        cifar.read_batch(path)


def test_same_seed_same_images_other_seed_other_images(tmp_path):
    first = read_split(make_cifar.generate(tmp_path / "a", 10, 1, seed=7))
    again = read_split(make_cifar.generate(tmp_path / "b", 10, 1, seed=7))
    other = read_split(make_cifar.generate(tmp_path / "c", 10, 1, seed=8))
    np.testing.assert_array_equal(first[0], again[0])
    assert not np.array_equal(first[0], other[0])


def test_images_are_learnable_not_noise(tmp_path):
    """A nearest-class-mean classifier fit on train must beat chance by far on test."""
    x_train, y_train, x_test, y_test = read_train_and_test(make_cifar.generate(tmp_path, 500, 200, seed=0))
    features = lambda x: x.reshape(len(x), -1, 3).mean(axis=1)  # noqa: E731 - mean colour
    means = np.stack([features(x_train[y_train == c]).mean(axis=0) for c in range(10)])
    distances = ((features(x_test)[:, None, :] - means[None]) ** 2).sum(axis=2)
    accuracy = (distances.argmin(axis=1) == y_test).mean()
    assert accuracy > 0.5
    assert x_train.std() > 20  # images vary: not flat colour fields


def test_existing_folder_is_kept_unless_forced(tmp_path):
    folder = make_cifar.generate(tmp_path, 5, 1, seed=0)
    before = (folder / "data_batch_1").read_bytes()
    with pytest.raises(FileExistsError, match="--force"):
        make_cifar.generate(tmp_path, 5, 1, seed=1)
    assert (folder / "data_batch_1").read_bytes() == before
    make_cifar.generate(tmp_path, 10, 1, seed=1, force=True)
    assert read_split(folder)[0].shape[0] == 10
    assert [p.name for p in tmp_path.iterdir()] == ["cifar-10-batches-py"]


def test_interrupted_generation_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    written = []

    def write_then_fail(folder, *args, **kwargs):
        cifar.write_meta(folder / cifar.META, 1)
        written.append(folder)
        raise KeyboardInterrupt  # what Ctrl-C mid-write looks like

    monkeypatch.setattr(make_cifar, "write_dataset", write_then_fail)
    with pytest.raises(KeyboardInterrupt):
        make_cifar.generate(tmp_path, 5, 1, seed=0)
    assert written and not written[0].exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["--train-images", "4"], ["--test-images", "0"]])
def test_cli_rejects_impossible_sizes(tmp_path, argv, capsys):
    assert make_cifar.main(["--out", str(tmp_path), *argv]) == 2
    assert "must be at least" in capsys.readouterr().err
    assert not (tmp_path / "cifar-10-batches-py").exists()


def test_cli_writes_the_set(tmp_path, capsys):
    assert make_cifar.main(["--out", str(tmp_path), "--train-images", "12", "--test-images", "3"]) == 0
    x_train, _, x_test, _ = read_train_and_test(tmp_path)
    assert (len(x_train), len(x_test)) == (12, 3)
