"""The course book's DDP job names (`--job-name=ddp_tiny_<K>nodes_<G>gpus`, `--output=R-%x.%j.out`)
give K x G GPUs on K nodes; a name with two counts is refused, and `analyze --world-size FILE=N`
gives the count where the name cannot (issue 28.2)."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalesweep.logs.run import AmbiguousName, shape_from_filename

REPO = Path(__file__).resolve().parents[1]
DDP_LOG = REPO / "tests" / "data" / "logs" / "ddp_vit_4gpus.log"  # batch_size 64, 25,000 images


def analyze(*args):
    return subprocess.run([sys.executable, "-m", "scalesweep", "analyze", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True)


@pytest.mark.parametrize("name, shape", [
    ("R-ddp_tiny_2nodes_4gpus.31337.out", (8, 2)),
    ("results/R-ddp_tiny_1nodes_4gpus.31336.out", (4, 1)),
    ("R-ddp_tiny_4nodes_4gpus.31338.out", (16, 4)),
    ("R-ddp_tiny_1node_2gpus.7.out", (2, 1)),
    ("vit_4gpus.log", (4, None)),
    ("ddp-n2-g8.out", (8, None)),
    ("R-ddp_tiny_2nodes.31337.out", (None, 2)),
])
def test_the_books_names_give_gpus_and_nodes(name, shape):
    assert shape_from_filename(name) == shape


@pytest.mark.parametrize("name", ["R-ddp_4gpus_8gpus.1.out", "ddp_1nodes_2nodes_4gpus.out", "vit_4gpus_g8.log"])
def test_a_name_with_two_counts_is_ambiguous(name):
    with pytest.raises(AmbiguousName, match=r"--world-size FILE=N"):
        shape_from_filename(name)


def copy_as(folder, name):
    path = folder / name
    path.write_text(DDP_LOG.read_text())
    return path


def test_analyze_reads_the_books_name_as_8_gpus_on_2_nodes_and_takes_the_users_count(tmp_path):
    logs = tmp_path / "results"
    logs.mkdir()
    one = copy_as(logs, "R-ddp_tiny_1nodes_4gpus.31336.out")
    two = copy_as(logs, "R-ddp_tiny_2nodes_4gpus.31337.out")
    result = analyze(one, two, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    runs = pd.read_csv(tmp_path / "out" / "tidy" / "runs.csv").sort_values("gpus")
    assert list(zip(runs.gpus, runs.nodes, runs.global_batch)) == [(4, 1, 256), (8, 2, 512)]

    ambiguous = copy_as(logs, "R-ddp_4gpus_8gpus.31339.out")
    refused = analyze(ambiguous, "--out", tmp_path / "refused")
    assert refused.returncode != 0
    assert f"{ambiguous}: the name gives 2 GPU counts (4, 8)" in refused.stderr
    assert "--world-size FILE=N" in refused.stderr

    given = analyze(ambiguous, "--world-size", f"{ambiguous}=16", "--out", tmp_path / "given")
    assert given.returncode == 0, given.stderr
    runs = pd.read_csv(tmp_path / "given" / "tidy" / "runs.csv")
    assert (runs.loc[0, "gpus"], runs.loc[0, "world_size"], runs.loc[0, "global_batch"]) == (16, 16, 1024)


def test_a_world_size_for_a_file_not_read_is_an_error(tmp_path):
    log = copy_as(tmp_path, "R-ddp_tiny_2nodes_4gpus.31337.out")
    result = analyze(log, "--world-size", f"{tmp_path / 'other.out'}=8", "--out", tmp_path / "out")
    assert result.returncode != 0
    assert "other.out: not among the logs read" in result.stderr
    bad = analyze(log, "--world-size", "8", "--out", tmp_path / "out")
    assert bad.returncode != 0 and "expected FILE=N" in bad.stderr
