"""Puts the repository on the import path of the trainers: scalesweep's standard-library-only
modules (records.py: the record contract and vocabularies; frameworks.py: the framework registry, its models) are the
trainers' too, and the repository is on every container's bind list. scripts/ imports this module
before any `from scalesweep...`, so no trainer module depends on another having done it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
