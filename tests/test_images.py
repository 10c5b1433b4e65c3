"""Container images (scalesweep/plan/containers.py): file-safe names, and the digest that tells two images
at one path apart in runs.csv and in a comparison's provenance diff."""

import hashlib
import json
import re

import pandas as pd
import pytest
import yaml

from conftest import snakemake
from scalesweep.history import compare
from scalesweep.plan import containers
from scalesweep.tidy import rows

HEADER = {
    "record": "header", "schema": 1, "framework": "pytorch", "model": "resnet50",
    "dataset": "tiny-224", "resolution": 224, "gpus": 4, "world_size": 4, "nodes": 1,
    "per_gpu_batch": 64, "global_batch": 256, "learning_rate": 0.4, "precision": "bf16",
    "epochs": 2, "protocol": "epochs", "hostname": "as01r1b01",
    "container_image": "/gpfs/images/pytorch.sif",
}  # fmt: skip


def test_image_names_are_file_safe_and_unique():
    assert containers.image_name("docker://nvcr.io/nvidia/pytorch:24.07-py3") == (
        "nvcr.io-nvidia-pytorch-24.07-py3-" + hashlib.sha256(b"docker://nvcr.io/nvidia/pytorch:24.07-py3").hexdigest()[:8])
    hostile = containers.image_name("docker://x/$(touch y); `z` 'q'")
    assert hostile.startswith("x-touch-y-z-q-") and set(hostile) <= set("abcdefghijklmnopqrstuvwxyz0123456789-.")
    # Readable parts that coincide still name two files.
    assert containers.image_name("docker://a/b:1") != containers.image_name("docker://a-b-1")


def test_only_remote_images_are_pulled_and_local_ones_run_as_they_are():
    assert containers.is_pulled("docker://nvcr.io/nvidia/pytorch:24.07-py3") and containers.is_pulled("oras://r/x:1")
    assert not containers.is_pulled("/gpfs/apps/MN5/ACC/SINGULARITY/SRC/images/nvidiaPytorch24.07")
    assert containers.image_file("/x/tf.sif") == "/x/tf.sif"
    assert containers.image_file("docker://a/b:1") == f"resources/containers/{containers.image_name('docker://a/b:1')}.sif"
    assert containers.digest_file("docker://a/b:1") == containers.image_file("docker://a/b:1") + ".sha256"
    assert containers.digest_file("/x/tf.sif").startswith("resources/containers/local/x-tf.sif-")
    assert containers.sweep_images({"runtime": "none", "images": {"pytorch": "p"}}, ["pytorch"]) == {}


def test_the_image_rules_match_the_names_of_their_images_and_messages_name_the_keys():
    pulled, local = "docker://a/b:1.0", "/x/tf.sif"
    images = {"pytorch": pulled, "tensorflow": local, "jax": pulled}
    pulled_name, local_name = containers.image_name(pulled), containers.image_name(local)
    # Rule `images` takes the pulled image's name alone, `image_digest` the local one's alone.
    for pulled_only, name, other in ((True, pulled_name, local_name), (False, local_name, pulled_name)):
        pattern = containers.name_pattern(images.values(), pulled=pulled_only)
        assert re.fullmatch(pattern, name) and not re.fullmatch(pattern, other)
        assert not re.fullmatch(pattern, name.replace(".", "x"))  # its dots escaped
    assert containers.name_pattern([local], pulled=True) == "(?!)"
    assert containers.image_keys(images, pulled_name) == "container.images.pytorch and container.images.jax"
    assert containers.image_keys(images, local_name) == "container.images.tensorflow"


def test_digest_files_read_back_and_a_sandbox_folder_has_none(tmp_path):
    image = tmp_path / "tf.sif"
    image.write_bytes(b"abc")
    containers.write_digest(image, tmp_path / "d" / "tf.sha256")
    # sha256("abc"), as sha256sum writes it (`sha256sum -c` reads the file).
    abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert (tmp_path / "d" / "tf.sha256").read_text() == f"{abc}  {image}\n"
    assert containers.read_digest(tmp_path / "d" / "tf.sha256") == f"sha256:{abc}"
    containers.write_digest(tmp_path, tmp_path / "sandbox.sha256")
    assert containers.read_digest(tmp_path / "sandbox.sha256") is None
    assert containers.read_digest(tmp_path / "absent.sha256") is None
    with pytest.raises(FileNotFoundError, match=r"container.images.pytorch: '.*missing.sif' does not exist"):
        containers.write_digest(tmp_path / "missing.sif", tmp_path / "m.sha256", "container.images.pytorch")


def test_file_identity_changes_when_the_image_is_rebuilt(tmp_path):
    image = tmp_path / "tf.sif"
    image.write_bytes(b"old")
    before = containers.file_identity(image)
    image.write_bytes(b"newer")
    assert containers.file_identity(image) != before and str(image) in before


def sweep_runs(tmp_path, name, content):
    """runs.csv of a sweep whose PyTorch image at one path held `content`."""
    image = tmp_path / "pytorch.sif"
    image.write_bytes(content)
    digest = tmp_path / f"{name}.sha256"
    containers.write_digest(image, digest)
    lines = [HEADER, {"record": "epoch", "schema": 1, "epoch": 1, "images": 256, "seconds": 2.0},
             {"record": "epoch", "schema": 1, "epoch": 2, "images": 256, "seconds": 1.0},
             {"record": "summary", "schema": 1, "status": "ok", "total_time_s": 3.5}]
    log = tmp_path / f"{name}.log"
    log.write_text("".join(f":::SCALESWEEP {json.dumps(line)}\n" for line in lines))
    out = tmp_path / name
    rows.write_tidy_tables([(log, {"framework": "pytorch", "gpus": 4})], out / "epochs.csv",
                           out / "runs.csv", digests={"pytorch": containers.read_digest(digest)})
    return pd.read_csv(out / "runs.csv")


def test_one_image_path_rebuilt_gives_another_digest_in_runs_and_the_provenance_diff(tmp_path):
    before, after = sweep_runs(tmp_path, "before", b"image v1"), sweep_runs(tmp_path, "after", b"image v2")
    assert list(before["container_image"]) == list(after["container_image"]) == ["/gpfs/images/pytorch.sif"]
    v1, v2 = (f"sha256:{hashlib.sha256(content).hexdigest()}" for content in (b"image v1", b"image v2"))
    assert list(before["container_digest"]) == [v1] and list(after["container_digest"]) == [v2]
    diff = compare.provenance_diff(before, after)
    assert list(diff) == ["container_digest"] and diff["container_digest"] == ((v1,), (v2,))


def test_runs_without_a_container_keep_an_empty_digest(tmp_path):
    runs = pd.DataFrame({"framework": ["pytorch", "tensorflow"], "container_digest": [None, None]})
    filled = rows.with_digests(runs, {"pytorch": "sha256:aa"})
    assert filled["container_digest"].tolist()[0] == "sha256:aa" and pd.isna(filled["container_digest"][1])
    assert rows.with_digests(runs.copy(), None)["container_digest"].isna().all()


def test_the_workflow_hashes_a_local_image_again_only_when_it_was_rebuilt(tmp_path):
    image = tmp_path / "images" / "tf.sif"
    image.parent.mkdir()
    image.write_bytes(b"image v1")
    config = {
        "matrix": {"framework": ["tensorflow"], "model": ["cnn_small"], "dataset": ["c"], "gpus": [1]},
        "datasets": {"c": {"format": "cifar10", "resolution": 32, "path": str(tmp_path)}},
        "container": {"runtime": "apptainer", "images": {"tensorflow": str(image)}},
    }
    configfile = tmp_path / "sweep.yaml"
    configfile.write_text(yaml.safe_dump(config))
    target = containers.digest_file(str(image))

    def digest_run():
        done = snakemake(tmp_path, "--cores", "1", target, configfile=configfile, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr, containers.read_digest(tmp_path / target)

    first_log, first = digest_run()
    assert "rule image_digest:" in first_log and first == f"sha256:{hashlib.sha256(b'image v1').hexdigest()}"
    unchanged_log, _ = digest_run()
    assert "rule image_digest:" not in unchanged_log and "Nothing to be done" in unchanged_log
    image.write_bytes(b"image v2, rebuilt")
    rebuilt_log, rebuilt = digest_run()
    assert "rule image_digest:" in rebuilt_log
    assert rebuilt == f"sha256:{hashlib.sha256(b'image v2, rebuilt').hexdigest()}"
