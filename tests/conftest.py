"""Shared fixtures: the tiny sweep run once through Snakemake for every test that needs results."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TINY = REPO / "tests" / "configs" / "tiny.yaml"
# The container-stack stand-in each framework's trainer also runs in (envs/stack-*.txt, built
# into .stacks/ by `make stacks`).
STACKS = {"tensorflow": "ngc-tensorflow-23.03", "pytorch": "ngc-pytorch-24.07"}


def stack_python(name):
    """The interpreter of stack `name`; a stack that is not built skips the test, except under CI
    (CI set), where the tier must run: it fails with how to build it."""
    stack = REPO / ".stacks" / name
    if (stack / ".installed").exists():
        return stack / "bin" / "python"
    message = (f"stack {name} is not built: `make stacks` builds it from envs/stack-{name}.txt "
               "(it needs the Python version named on that file's first line)")
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


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
