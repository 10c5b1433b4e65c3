"""Shared fixtures: the tiny sweep run once through Snakemake for every test that needs results."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TINY = REPO / "tests" / "configs" / "tiny.yaml"


def snakemake(workdir, *args, configfile=TINY, timeout=900):
    """Snakemake on the project's Snakefile from `workdir`, with only `configfile` as config."""
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--configfile", str(configfile),
         "--replace-workflow-config", *args],
        cwd=workdir, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory):
    """A working directory where tests/configs/tiny.yaml ran to completion with the real trainers."""
    workdir = tmp_path_factory.mktemp("sweep")
    result = snakemake(workdir, "--cores", "2")
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir
