"""`python -m scalesweep.train.torch_backend OPTIONS...`: one training run (trainer.py)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from scalesweep.train.torch_backend.trainer import main

    sys.exit(main())
