"""The history lives where the workflow neither writes nor deletes (issue 28, point 2): a
history_dir inside a folder a rule owns (results/figures, which the figures rule deletes and
remakes; results/tables; logs/; resources/; .snakemake/), reached through a link or not, or one
whose archive names a rule's output would name, is refused before any job with the key and the
folder named; so is a history folder on a read-only file system. The default and a folder of
its own are accepted."""

import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from conftest import snakemake
from scalesweep.history import archive
from scalesweep.plan import history_place
from test_feasibility import edited
from test_history import sweep_runs

TINY_OUTPUTS = [  # a few of the workflow's own outputs, as its rules write them
    history_place.Output("figures", "results/figures", directory=True),
    history_place.Output("tables", "results/tables/scaling.csv"),
    history_place.Output("findings", "results/findings.md"),
    history_place.Output("train_pytorch", "results/runs/pytorch/model~{model}/gpus~{gpus}/train.log"),
    history_place.Output("train_pytorch", "logs/train/pytorch/model~{model}/gpus~{gpus}.log"),
    history_place.Output("tidy", "logs/tidy.log"),
    history_place.Output("images", "resources/containers/{image}.sif"),
]


def sweep_config(tmp_path, history_dir):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(edited(lambda c: c.update(history_dir=history_dir))))
    return config


@pytest.mark.parametrize(("history_dir", "folder", "why"), [
    ("results/figures", "results/figures/", "rule figures deletes and remakes results/figures"),
    ("linked-history", "results/figures/", "rule figures deletes and remakes results/figures"),
    ("logs/history", "logs/", "rule "),
])
def test_a_history_inside_a_folder_the_workflow_owns_is_refused_before_any_job(tmp_path, history_dir, folder, why):
    (tmp_path / "results" / "figures").mkdir(parents=True)
    os.symlink("results/figures", tmp_path / "linked-history")
    archived = archive.archive(sweep_runs(), tmp_path / "results" / "figures")  # an archive already there
    result = snakemake(tmp_path, "--cores", "1", configfile=sweep_config(tmp_path, history_dir))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    message = re.search(r"config key 'history_dir': .*", result.stdout + result.stderr).group(0)
    assert message.startswith(f"config key 'history_dir': '{history_dir}' ")
    assert f" {folder}, which the workflow owns ({why}" in message
    assert message.endswith(f"(config files: {tmp_path / 'c.yaml'})")
    # no job ran: nothing was written (Snakemake's own log aside), and the archive is where it was
    assert sorted(path.name for path in tmp_path.iterdir()) == [".snakemake", "c.yaml", "linked-history", "results"]
    assert [path.name for path in (tmp_path / "results").iterdir()] == ["figures"]
    assert archived.path.is_file()


@pytest.mark.parametrize(("history_dir", "refused"), [
    ("results/figures/old", "is inside results/figures/"),
    ("results/tables", "is results/tables/"),
    ("results/runs/history", "is inside results/runs/"),
    ("results", "is results/"),
    ("logs", "is logs/"),
    ("resources/history", "is inside resources/"),
    (".snakemake/history", "is inside .snakemake/"),
    ("results/tables/../figures", "is results/figures/"),
    ("results/history", None),  # the default
    ("results/archive", None),
    ("history", None),
    ("/gpfs/projects/shared/history", None),
])
def test_owned_folders_come_from_the_rules_outputs(tmp_path, history_dir, refused):
    problem = history_place.history_place_problem(history_dir, TINY_OUTPUTS, "results/history", tmp_path)
    if refused is None:
        assert problem is None
    else:
        assert problem.startswith(f"'{history_dir}' {refused}, which the workflow owns (")


def test_a_history_whose_archive_names_an_output_would_name_is_refused(tmp_path):
    matches = history_place.snakemake_matches
    outputs = [*TINY_OUTPUTS, history_place.Output("export", "results/{name}.parquet")]
    problem = history_place.history_place_problem("results/archive", outputs, "results/history", tmp_path, matches)
    assert problem == ("'results/archive': rule export writes results/{name}.parquet, which names the history's "
                       f"own files ({history_place.SAMPLE_ARCHIVE}): give the history a folder of its own")
    assert history_place.history_place_problem("results/archive", TINY_OUTPUTS, "results/history", tmp_path,
                                               matches) is None


@contextmanager
def tmpfs_at(folder, options):
    """A tmpfs mounted on `folder` (made) with mount's `options`, unmounted after; root only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only file system (a tmpfs mounted ro): even root cannot write there."""
    with tmpfs_at(tmp_path / "read-only", "size=1m,ro") as folder:
        yield folder


def test_a_history_on_a_read_only_file_system_is_refused_before_any_job(tmp_path, read_only_folder):
    result = snakemake(tmp_path, "--cores", "1", configfile=sweep_config(tmp_path, str(read_only_folder / "history")))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (f"config key 'history_dir': '{read_only_folder / 'history'}': {read_only_folder} cannot be written "
            "(read-only file system): the sweep archives its runs there") in result.stdout + result.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


def test_make_clean_keeps_the_sweep_history(tmp_path):
    """`make clean` removes what a sweep made and can make again, never the archived sweeps in
    the default history folder (results/history)."""
    shutil.copy(Path(__file__).resolve().parents[1] / "Makefile", tmp_path)
    made = ["results/tables/scaling.csv", "results/figures/speedup_all.png", "logs/tidy.log",
            "resources/datasets/x/y", ".snakemake/metadata/z"]
    for path in [*made, "results/history/sweep-20261126T000000Z-0123456789ab.parquet"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    subprocess.run(["make", "-s", "clean"], cwd=tmp_path, check=True)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["Makefile", "results/history/sweep-20261126T000000Z-0123456789ab.parquet"]
