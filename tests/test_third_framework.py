"""A third framework is one backend module in scalesweep/train/ and one entry in the framework
registry (issue 27; docs/trainers.md, "A new framework, file by file"): in a copy of the
repository, the numpy data-parallel backend of tests/data/frameworks/ is added that way, git shows
that nothing else changed, and the real workflow previews, trains at 1 and 2 stand-in GPUs (through
scripts/train.py, the program of a framework without one of its own), tidies, and writes the
tables, figures and findings for it.
"""

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import LOCAL_ENV, REPO, SNAKEMAKE

pytestmark = pytest.mark.slow

THIRD = REPO / "tests" / "data" / "frameworks"
BACKEND = "numpy_dp_backend.py"
# Where the backend goes: the entry names it as the module scalesweep.train.numpy_dp_backend.
BACKEND_PLACE = Path("scalesweep/train") / BACKEND
NAME = "numpy_dp"
REGISTRY = Path("scalesweep/contract/frameworks.py")


def copy_tracked_files(source: Path, target: Path) -> None:
    """The repository's tracked files as they are in the work tree (links stay links)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=source, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        origin, copy = source / name, target / name
        if not origin.exists() and not origin.is_symlink():
            continue  # deleted in the work tree, not yet committed
        copy.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_symlink():
            copy.symlink_to(os.readlink(origin))
        else:
            shutil.copy2(origin, copy)


def with_entry(registry: str, entry: str) -> str:
    """The registry's source with `entry` appended to its FRAMEWORKS tuple."""
    start = registry.index("FRAMEWORKS = (\n")
    end = registry.index("\n)\n", start)
    return registry[:end + 1] + entry + registry[end + 1:]


def git(repo: Path, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A committed copy of the repository, then the backend file and the registry entry added."""
    repo = tmp_path_factory.mktemp("third") / "repo"
    copy_tracked_files(REPO, repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-qm", "as it is")
    shutil.copy2(THIRD / BACKEND, repo / BACKEND_PLACE)
    registry = repo / REGISTRY
    registry.write_text(with_entry(registry.read_text(), (THIRD / "numpy_dp_entry.py").read_text()))
    return repo


def snakemake_in(repo: Path, workdir: Path, *args):
    config = workdir / "config.yaml"
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(repo / "Snakefile"), "--configfile", str(config),
         "--replace-workflow-config", *args],
        cwd=workdir, capture_output=True, text=True, timeout=600,
        env={**os.environ, **LOCAL_ENV, "PYTHONPATH": str(repo)},
    )


def sweep_config() -> dict:
    return {
        "matrix": {"framework": [NAME], "model": ["softmax"], "dataset": ["synth-cifar"], "gpus": [1, 2]},
        "training": {"epochs": 3, "precision": "fp32", "seed": 0},
        "datasets": {"synth-cifar": {"format": "cifar10", "resolution": 32,
                                     "synthetic": {"train_images": 640, "test_images": 32}}},
    }


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_new_framework_is_one_backend_file_and_one_registry_entry(repo):
    changed = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(changed) == [f" M {REGISTRY.as_posix()}", f"?? {BACKEND_PLACE.as_posix()}"]
    assert git(repo, "diff", "--numstat").split()[:2] == [str(len((THIRD / "numpy_dp_entry.py").read_text()
                                                                  .splitlines())), "0"]


def test_the_new_framework_runs_through_every_stage_of_the_workflow(repo, tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(sweep_config()))

    preview = snakemake_in(repo, tmp_path, "-n", "-p")
    assert preview.returncode == 0, preview.stderr[-4000:]
    assert f"train_{NAME}" in preview.stdout and "2 configurations to run" in preview.stderr
    # Its jobs run the generic program with the framework's name: no program of its own.
    assert f"{repo}/scripts/train.py {NAME} --model softmax" in preview.stdout + preview.stderr

    done = snakemake_in(repo, tmp_path, "--cores", "2")
    assert done.returncode == 0, done.stderr[-4000:]

    runs = read_csv(tmp_path / "results/tidy/runs.csv")
    assert [(run["framework"], run["gpus"], run["status"]) for run in runs] == [(NAME, "1", "ok"), (NAME, "2", "ok")]
    assert all(float(run["throughput_img_s"]) > 0 for run in runs)
    log = tmp_path / f"results/runs/{NAME}/model~softmax/dataset~synth-cifar/gpus~2/train.log"
    header = next(json.loads(line.split(" ", 1)[1]) for line in log.read_text().splitlines()
                  if line.startswith(":::SCALESWEEP") and '"header"' in line)
    assert (header["framework"], header["world_size"], header["global_batch"]) == (NAME, 2, 32)
    assert header["versions"]["numpy"]

    scaling = read_csv(tmp_path / "results/tables/scaling.csv")
    assert sorted((row["framework"], row["gpus"]) for row in scaling) == [(NAME, "1"), (NAME, "2")]
    assert float(next(row for row in scaling if row["gpus"] == "2")["speedup"]) > 0
    figures = {path.name for path in (tmp_path / "results/figures").glob("*.png")}
    assert {"speedup_by_model.png", "efficiency_by_model.png", "throughput_all.png"} <= figures
    assert NAME in (tmp_path / "results/findings.md").read_text()
