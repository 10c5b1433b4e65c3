"""The one launcher of the programs in this folder: each runs a module of the scalesweep package
as `python -m MODULE` from the repository's root would, whatever the working directory.

The workflow runs the programs by path (`python <repo>/scripts/train_tf.py`, torchrun's ranks
too, inside the containers, which bind the repository and install nothing of it), and Python puts
a program's own folder, this one, first on the import path; `python -m` from the root puts the
root there. So `run_module` swaps that entry for the root and runs the module as `__main__`
(runpy, `sys.argv[0]` its file). Programs import this file; the package never does.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import os
import runpy
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)


def use_repository() -> None:
    """The repository's root where Python put this folder (first on the path), so
    `import scalesweep` finds the repository's package, before any installed one."""
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == HERE:
        sys.path[0] = ROOT
    elif ROOT not in sys.path:
        sys.path.insert(0, ROOT)


def run_module(module: str) -> None:
    """`python -m module` with this program's arguments, from the repository's root."""
    use_repository()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
