"""What differs between two analyses of the same logs (issue 36, acceptance 2): every file but the
figures, byte for byte; a CSV that differs, column by column (the largest relative difference of a
numeric column, the rows of a text column), so a difference can be named and checked against the
test that shows the new value is right.

    .venv/bin/python benchmarks/outputs_diff.py BASE_OUT HEAD_OUT

Prints one line per differing file (and `equal N files` at the end); exits 0 either way: it
describes, it does not judge. bench_analysis.py calls `differences` on both sides' outputs.
"""

import sys
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pandas as pd

FIGURE_SUFFIXES = (".png", ".svg")  # drawn, not computed: the layout tests check them


def compared_files(folder: Path) -> List[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")
                  if path.is_file() and path.suffix not in FIGURE_SUFFIXES)


def csv_difference(base: Path, head: Path) -> str:
    """How two CSVs differ: columns added or removed, row counts, and per differing column its
    largest relative difference (numbers) or how many rows differ (text)."""
    old, new = pd.read_csv(base), pd.read_csv(head)
    parts = []
    added, removed = sorted(set(new) - set(old)), sorted(set(old) - set(new))
    if added:
        parts.append(f"columns added: {', '.join(added)}")
    if removed:
        parts.append(f"columns removed: {', '.join(removed)}")
    if len(old) != len(new):
        return "; ".join(parts + [f"{len(old)} rows before, {len(new)} now"])
    for column in (c for c in old if c in new):
        before, after = old[column], new[column]
        if before.dtype.kind in "fi" and after.dtype.kind in "fi":
            x, y = before.to_numpy(float), after.to_numpy(float)
            both = ~(np.isnan(x) & np.isnan(y))
            if np.array_equal(x[both], y[both]):
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                relative = np.abs(x[both] - y[both]) / np.maximum(np.abs(x[both]), np.finfo(float).tiny)
            parts.append(f"{column}: largest relative difference {np.nanmax(relative):.3g} "
                         f"({int((x[both] != y[both]).sum())} rows)")
        elif not before.astype(str).equals(after.astype(str)):
            parts.append(f"{column}: {int((before.astype(str) != after.astype(str)).sum())} rows differ")
    return "; ".join(parts) or "same values, other bytes (formatting)"


def differences(base: Path, head: Path) -> Tuple[List[str], List[Tuple[str, str]]]:
    """(the files equal byte for byte, [(file, how it differs)]) of two analysis folders."""
    base_files, head_files = compared_files(base), compared_files(head)
    equal, differing = [], []
    for name in sorted(set(base_files) | set(head_files)):
        if name not in head_files or name not in base_files:
            differing.append((name, "only in the base" if name in base_files else "new"))
        elif (base / name).read_bytes() == (head / name).read_bytes():
            equal.append(name)
        elif name.endswith(".csv"):
            differing.append((name, csv_difference(base / name, head / name)))
        else:
            differing.append((name, "differs"))
    return equal, differing


def main(argv=None) -> int:
    base, head = map(Path, (argv or sys.argv[1:])[:2])
    equal, differing = differences(base, head)
    for name, how in differing:
        print(f"{name}: {how}")
    print(f"equal {len(equal)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
