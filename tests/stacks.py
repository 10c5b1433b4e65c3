"""The Python interpreters the trainers' tests run scripts/ with.

scripts/ runs inside the training containers (docs/trainers.md, "Supported stacks"), whose
Python, numpy and framework are older than this environment's. The tests run the trainers with
this interpreter unless SCALESWEEP_TRAINER_PYTHON_<FRAMEWORK> names another, e.g. a virtual
environment holding a container's stack:

    SCALESWEEP_TRAINER_PYTHON_TENSORFLOW=/path/to/py38-tf211/bin/python \\
    SCALESWEEP_TRAINER_PYTHON_PYTORCH=/path/to/py310-torch24/bin/python pytest tests/test_backends.py
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The container-stack stand-in each framework's trainer also runs in (envs/stack-<name>.txt,
# built into .stacks/ by `make stacks`, which `make test` runs).
STACKS = {"tensorflow": "ngc-tensorflow-23.03", "pytorch": "ngc-pytorch-24.07"}

TRAINER_PYTHON_ENV = "SCALESWEEP_TRAINER_PYTHON_{}"
# The oldest Python of a supported stack (NGC TensorFlow 23.03), for the static guard.
PY38_ENV = "SCALESWEEP_PY38"
PY38_VERSION = "3.8.18"
PY38_HOW_TO_GET = (f"no Python 3.8 found: set {PY38_ENV}=/path/to/python3.8, or `pyenv install {PY38_VERSION}` "
                   "(found through `pyenv prefix`)")


def trainer_python(framework: str) -> str:
    """The interpreter that runs `framework`'s trainer: SCALESWEEP_TRAINER_PYTHON_<FRAMEWORK>, or
    this one. A set variable that names no interpreter is an error, not a silent fallback."""
    variable = TRAINER_PYTHON_ENV.format(framework.upper())
    chosen = os.environ.get(variable)
    if not chosen:
        return sys.executable
    if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
        raise FileNotFoundError(f"{variable}={chosen}: no executable interpreter there")
    return chosen


def python38():
    """A Python 3.8 interpreter: SCALESWEEP_PY38, else pyenv's 3.8.18, else python3.8 on the
    PATH; None when there is none."""
    if os.environ.get(PY38_ENV):
        return os.environ[PY38_ENV]
    pyenv = shutil.which("pyenv")
    if pyenv:
        found = subprocess.run([pyenv, "prefix", PY38_VERSION], capture_output=True, text=True)
        candidate = os.path.join(found.stdout.strip(), "bin", "python3.8")
        if found.returncode == 0 and os.path.isfile(candidate):
            return candidate
    return shutil.which("python3.8")


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


def container_python(framework: str) -> str:
    """The interpreter of `framework`'s container stack: SCALESWEEP_TRAINER_PYTHON_<FRAMEWORK>
    where set, else the stand-in under .stacks/."""
    chosen = trainer_python(framework)
    return chosen if chosen != sys.executable else str(stack_python(STACKS[framework]))
