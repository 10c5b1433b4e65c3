"""Train with a framework that has no program of its own: `python scripts/train.py FRAMEWORK
OPTIONS...` runs the backend its registry entry names (scalesweep/contract/frameworks.py,
`backend`) with OPTIONS, as `python -m BACKEND OPTIONS...` would; the workflow's command for such a
framework (scalesweep/plan/launch.py, trainer_script). Exit status 2 for an unknown framework."""

import sys

from entry_point import run_module, use_repository

use_repository()
from scalesweep.contract import frameworks  # noqa: E402  (the repository is on the path now)

try:
    backend = frameworks.get(sys.argv.pop(1) if len(sys.argv) > 1 else None).backend
except frameworks.UnknownFramework as error:
    print(f"usage: {sys.argv[0]} FRAMEWORK OPTIONS...: {error}", file=sys.stderr)
    sys.exit(2)
run_module(backend)
