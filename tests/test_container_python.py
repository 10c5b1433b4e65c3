"""The trainers (scalesweep/train/), the programs that run them (scripts/) and the contract they
import (scalesweep/contract/) run inside the training containers, the oldest on Python 3.8 (NGC
TensorFlow 23.03; docs/trainers.md, "Supported stacks"): a cheap guard that every file compiles
there, that the standard-library-only modules import there without site-packages, and that a
program finds the package from any working directory there.

The interpreter: SCALESWEEP_PY38, pyenv's 3.8.18 or python3.8 on the PATH (tests/stacks.py).
Without one the tests skip, saying how to get it; under CI (the variable CI set) they fail.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stacks import PY38_HOW_TO_GET, python38

ROOT = Path(__file__).resolve().parents[1]
# The trainers import scalesweep.contract (the package's __init__ runs first).
CONTRACT = [ROOT / "scalesweep" / "__init__.py", *sorted((ROOT / "scalesweep" / "contract").glob("*.py"))]
TRAINERS = sorted((ROOT / "scalesweep" / "train").rglob("*.py"))
CONTAINER_FILES = sorted((ROOT / "scripts").glob("*.py")) + TRAINERS + CONTRACT
# The modules docs/trainers.md promises need nothing beyond the standard library: the trainers'
# harness (common/), the attempt runner, the packages' __init__ files, the contract.
COMMON = sorted((ROOT / "scalesweep" / "train" / "common").glob("*.py"))
STANDARD_LIBRARY_ONLY = ("scalesweep.train", "scalesweep.train.attempt", "scalesweep.train.datasets",
                         "scalesweep.train.tf_backend", "scalesweep.train.torch_backend",
                         "scalesweep.train.torch_backend.ddp_options",
                         *(f"scalesweep.train.common.{path.stem}" for path in COMMON if path.stem != "__init__"),
                         *(f"scalesweep.contract.{path.stem}" for path in CONTRACT if path.stem != "__init__"))

# Compiles each file in memory (no __pycache__ written into the repository); prints the failures.
COMPILE_ALL = """
import json, sys
failures = {}
for path in json.loads(sys.argv[1]):
    try:
        with open(path, encoding="utf-8") as handle:
            compile(handle.read(), path, "exec")
    except SyntaxError as error:
        failures[path] = f"line {error.lineno}: {error.msg}"
print(json.dumps(failures))
"""


@pytest.fixture(scope="module")
def py38() -> str:
    found = python38()
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(PY38_HOW_TO_GET)
    pytest.skip(PY38_HOW_TO_GET)


def run38(py38: str, *arguments: str) -> subprocess.CompletedProcess:
    # -I: no PYTHONPATH, user site or working directory on the path; -B: no bytecode written.
    return subprocess.run([py38, "-I", "-B", *arguments], capture_output=True, text=True, timeout=120)


def test_the_interpreter_is_python_3_8(py38):
    done = run38(py38, "-c", "import sys; print(sys.version_info[:2])")
    assert done.stdout.strip() == "(3, 8)", done.stdout + done.stderr


def test_every_container_file_compiles_on_python_3_8(py38):
    assert len(TRAINERS) > 30 and len(COMMON) > 10 and (ROOT / "scripts" / "entry_point.py") in CONTAINER_FILES
    done = run38(py38, "-c", COMPILE_ALL, json.dumps([str(path) for path in CONTAINER_FILES]))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {}


def test_standard_library_only_modules_import_on_python_3_8_without_site_packages(py38):
    # -S: no site-packages, so an import of numpy (or anything else) fails here as in a bare
    # interpreter; importing also evaluates what compiling does not (decorators, defaults,
    # class bodies, and annotations where `from __future__ import annotations` is missing).
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); " + "; ".join(f"import {name}" for name in STANDARD_LIBRARY_ONLY)
    done = run38(py38, "-S", "-c", code)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_program_runs_its_module_from_any_working_directory_on_python_3_8(py38, tmp_path):
    """scripts/run_attempt.py (standard library only) by path, elsewhere: entry_point puts the
    repository where Python put scripts/, and the module runs as __main__. Not -I: isolated mode
    leaves the program's own folder off the path, which a program run by path always has."""
    for program, status, said in (("run_attempt.py", 0, "--log LOG"), ("train.py", 2, "unknown framework 'jax'")):
        done = subprocess.run([py38, "-E", "-s", "-S", "-B", str(ROOT / "scripts" / program), *(["jax"] if status else
                               ["--help"])], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == status and said in done.stdout + done.stderr, done.stderr[-2000:]


def test_a_python_3_9_annotation_fails_the_guard(py38, tmp_path):
    """What the guard catches: `list[int]` evaluated at import on 3.8, unless postponed."""
    (tmp_path / "eager.py").write_text("def f() -> list[int]:\n    return []\n")
    (tmp_path / "postponed.py").write_text("from __future__ import annotations\n\ndef f() -> list[int]:\n    return []\n")
    for module, fails in (("eager", True), ("postponed", False)):
        done = run38(py38, "-S", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import {module}")
        assert (done.returncode != 0) == fails, done.stderr
        assert ("'type' object is not subscriptable" in done.stderr) == fails
