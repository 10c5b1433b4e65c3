"""The package as a wheel (pyproject.toml): built with `pip wheel --no-deps` from a copy of the
checkout, installed into a clean venv with its declared dependencies only, from the offline
bundle's wheelhouse (tests/test_bundle.py builds it once per session; Python 3.12, the bundle's),
then used from a folder outside the checkout. A dependency missing from pyproject.toml, the schema
left out of the wheel or a path into the checkout fails here, not on a user's machine."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bench_bundle import unpack
from test_bundle import bundle, python_bundle  # noqa: F401  (session fixtures: built once)

REPO = Path(__file__).resolve().parents[1]


def tracked_copy(into: Path) -> Path:
    """The checkout's tracked files (links kept as links) in `into`: the build writes build/ and
    *.egg-info beside the sources, which must not land in the repository."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for name in filter(None, names):
        source, target = REPO / name, into / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the working tree, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        else:
            target.write_bytes(source.read_bytes())
    return into


# A worktree's PYTHONPATH (or an active venv) would make the installed venv import the checkout.
CLEAN_ENV = {name: value for name, value in os.environ.items()
             if name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def run(argv, cwd, timeout=600, env=None):
    return subprocess.run([str(arg) for arg in argv], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, env=env or CLEAN_ENV)


def test_pyproject_declares_what_the_pins_need():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11" and project["license"] == "MIT"
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
    declared = {requirement.split(">=")[0].lower() for requirement in project["dependencies"]}
    assert {"pyyaml", "snakemake", "numpy", "pandas", "duckdb", "jsonschema"} <= declared


def test_the_version_names_the_package_and_the_code():
    done = run([sys.executable, "-m", "scalesweep", "--version"], REPO, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("scalesweep 0.1.0 (code ") and done.stdout.strip().endswith(")")


@pytest.mark.slow
def test_a_wheel_installed_into_a_clean_venv_works_outside_the_checkout(bundle, python_bundle, tmp_path):  # noqa: F811
    source = tracked_copy(tmp_path / "source")
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "-w", tmp_path / "dist", source], tmp_path)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("scalesweep-*.whl")

    wheelhouse = unpack(bundle, tmp_path / "bundle") / "wheelhouse"
    venv = tmp_path / "clean"
    assert run([python_bundle, "-m", "venv", venv], tmp_path).returncode == 0
    installed = run([venv / "bin" / "pip", "install", "--isolated", "--no-index", "--find-links", wheelhouse,
                     wheel], tmp_path)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    scalesweep = venv / "bin" / "scalesweep"
    version = run([scalesweep, "--version"], elsewhere)
    assert version.returncode == 0 and version.stdout.strip() == "scalesweep 0.1.0 (code 0.1.0)", version
    checked = run([scalesweep, "check-config", REPO / "config" / "config.yaml"], elsewhere)
    assert checked.returncode == 0, checked.stderr
    assert "12 configurations to run" in checked.stdout
    out = tmp_path / "analysed"
    analysed = run([scalesweep, "analyze", REPO / "tests" / "data" / "logs" / "tf_keras2_resnet50_1-2-4gpus.log",
                    "--out", out], elsewhere)
    assert analysed.returncode == 0, analysed.stdout[-2000:] + analysed.stderr[-3000:]
    assert (out / "tidy" / "runs.csv").read_text().count("\n") == 4  # the header and 3 runs
    assert (out / "tables" / "scaling.csv").exists() and list((out / "figures").glob("*.png"))
    assert (out / "findings.md").read_text().strip()
    # the installed package, not the checkout, answered
    where = run([venv / "bin" / "python", "-c", "import scalesweep; print(scalesweep.__file__)"], elsewhere)
    assert where.stdout.startswith(str(venv))
